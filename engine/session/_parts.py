"""What a session is made of, below the session itself: its options, the frontend a person
uses, and the parts of a session one run of it reads (`SessionParts`)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Literal, Protocol

from engine.agent import AgentRunner
from engine.approval import Approver
from engine.backend import Backend
from engine.capability import Registry
from engine.errors import PlanValidationError
from engine.events import EventBus
from engine.journal import Journal
from engine.llm import LLMClient
from engine.model import Plan
from engine.planning import Planner, PlanOutcome, PlanReview
from engine.recording import Tape

__all__ = ["Attached", "Frontend", "SessionOptions", "SessionParts"]


@dataclass(frozen=True)
class SessionOptions:
    """How a session runs (the run flags of `planloom run`, `plan` and `replay`).

    Attributes:
        dry_run: read-only actions run; side effects are reported, not made.
        model: the model name (else `PLANLOOM_MODEL`, else the recipe's).
        base_url: an OpenAI-compatible endpoint (else `OPENAI_BASE_URL`, else OpenAI).
        llm_timeout: seconds to wait for one model answer (else `PLANLOOM_LLM_TIMEOUT`,
            else the recipe's `llm: timeout`).
        llm_max_tokens: the longest model answer, in tokens (else
            `PLANLOOM_LLM_MAX_TOKENS`, else the recipe's `llm: max_tokens`).
        llm_context: the model's context window, in tokens (else `PLANLOOM_LLM_CONTEXT`,
            else the recipe's `llm: context_window`).
        preflight: the check of the endpoint before anything runs: `models` (`GET
            /models`) or `chat` (also a one-token chat request).
        stream: read a goal's plan as the model streams it: read-only steps start as
            they arrive, the rest waits for the whole plan (`engine.session._early`).
    """

    dry_run: bool = False
    model: str | None = None
    base_url: str | None = None
    llm_timeout: float | None = None
    llm_max_tokens: int | None = None
    llm_context: int | None = None
    preflight: Literal["models", "chat"] = "models"
    stream: bool = False


@dataclass
class Attached:
    """What a frontend puts on one plan's run: the approver of its gates and questions, and
    what it shows while the run lasts (entered around it)."""

    approver: Approver
    showing: AbstractContextManager[object]


class Frontend(PlanReview, Protocol):
    """What a person sees and answers during a session."""

    def say(self, text: str) -> None:
        """One progress line (`planning: ...`, `replanning ...`)."""
        ...

    async def show_plan(self, outcome: PlanOutcome) -> None:
        """Show a model-written plan (and save it, if the person asked for that)."""
        ...

    def invalid_plan(self, text: str, error: PlanValidationError) -> None:
        """An edited plan is not valid: say where and why."""
        ...

    def attach(self, plan: Plan, events: EventBus) -> Attached:
        """Subscribe to a run's events; the approver for its gates."""
        ...

    def watch(self, events: EventBus) -> None:
        """Subscribe to a goal session's own events: its planning and replanning
        (`session.*`, `plan.*`, and the planner's `llm.*`); its runs are `attach`ed."""
        ...


class SessionParts(Protocol):
    """What one run of a session reads of it (`engine.session.Session` has them)."""

    registry: Registry
    options: SessionOptions
    planner: Callable[[LLMClient], Planner] | None
    agent: Callable[[LLMClient], AgentRunner] | None
    tape: Tape | None
    journal: Journal | None
    backend: Backend | None

    @property
    def offline(self) -> bool:
        """Whether model answers come from a recording only (nothing is live)."""
        ...
