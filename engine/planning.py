"""What a planner is: it turns a goal into a validated plan (`planners.llm` is one)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engine.diagnostics import Diagnostic
from engine.model import Plan, Step

__all__ = ["PlanOutcome", "PlanReview", "Planner"]


@dataclass
class PlanOutcome:
    """What planning produced.

    Attributes:
        plan: the validated plan (maybe the ReAct fallback).
        shown: the plan as a YAML recipe, or what writes it when it is first wanted
            (`text`): a plan nobody shows, saves or reviews is never written out.
        repairs: how many times the model was asked to fix its plan.
        fell_back: whether the planner gave up and returned one ReAct agent step.
        problems: the diagnostics of every rejected attempt, in order.
        repeated: the planner fell back before its last repair: the model had answered a
            repair with the plan it was asked to repair, at temperature 0.
        early: the read-only steps that started while the plan streamed, and how each
            stands as the plan is shown (a status once ended, else `running`).
    """

    plan: Plan
    shown: str | Callable[[], str] = field(repr=False)
    repairs: int = 0
    fell_back: bool = False
    problems: list[list[Diagnostic]] = field(default_factory=list)
    repeated: bool = False
    early: dict[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The plan as a YAML recipe (what `-o` saves; `planloom run` accepts it)."""
        if not isinstance(self.shown, str):
            self.shown = self.shown()
        return self.shown


class Planner(Protocol):
    """Plans a goal within a base recipe (its capabilities, limits, inputs, llm)."""

    async def plan(
        self,
        goal: str,
        *,
        base: dict[str, Any],
        base_dir: Path,
        context: str | None = None,
        keep: list[dict[str, Any]] | None = None,
        on_step: Callable[[Plan, Step], None] | None = None,
    ) -> PlanOutcome:
        """A valid plan for `goal`.

        `context` tells the planner what happened before (after a failure: what ran,
        what it gave, what failed); `keep` holds steps that already succeeded, which the
        new plan keeps as they are. `on_step`, if given, is told of each step as soon as
        the planner has it, valid among the steps so far, with the plan of those steps
        (a planner that streams its answer; one that does not may never call it).

        Raises:
            StepError: the model failed (budget, timeout, endpoint errors).
            ConfigurationError: the endpoint refused the key.
        """
        ...


class PlanReview(Protocol):
    """The decision on a model-written plan that has side effects."""

    async def review(self, outcome: PlanOutcome) -> tuple[bool, str | None]:
        """Whether the plan may run, and the edited plan YAML if the reviewer changed it
        (it is validated again before it runs)."""
        ...
