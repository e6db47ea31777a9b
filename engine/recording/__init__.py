"""Recording and replaying a run: the `Tape` between the run and the world.

A `Tape` wraps the places a run meets the world: `tape.answers` is the model client's
`Answers`, `tape.results` the sandbox's `Results`, `tape.listings` the registry's `Listings`
(the tools MCP servers list), and `TapeApprover` wraps the approver (`tape.decisions`, which
also reviews model-written plans). In a replay it serves every recorded entry from the
cassette (`engine.recording.cassette`) and never calls a model or makes a side effect; a
request with no recording raises `ReplayMismatch`, which names the step and shows the
nearest recorded request with a field-level diff. Modes are vcrpy's: `none` (replay only),
`once` (replay if the cassette exists, else record), `new_episodes` (replay what is
recorded, record what is new) and `all` (record everything again). Secrets are redacted
before anything is hashed or written.

A recorded decision answers only a call whose result is served from the cassette too
(`Results.serves`, asked before the gate): a call that will run live is always decided by the
live approver (terminal, `--yes`, `--no`, policy, or fail closed), whatever the cassette's
`approvals:` say, so an entry added by hand cannot approve a side effect. Decisions served
from a cassette say `by: recorded`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from engine._support.scope import PLAN_REVIEW, PLANNER, current_scope, enter_scope
from engine.approval import Approver, GateRequest
from engine.approval.questions import Question
from engine.errors import ReplayMismatch
from engine.recording._answers import TapeAnswers
from engine.recording._decisions import TapeDecisions
from engine.recording._listings import TapeListings
from engine.recording._mismatch import HOW, field_diff
from engine.recording._reel import Reel
from engine.recording._results import TapeResults
from engine.recording.cassette import (
    RECORD_MODES,
    RECORDED,
    Cassette,
    RecordMode,
    request_key,
)
from engine.redaction import Secrets
from engine.results import Decision

__all__ = [
    "PLANNER",
    "PLAN_REVIEW",
    "RECORDED",
    "RECORD_MODES",
    "Cassette",
    "OfflineModel",
    "RecordMode",
    "Tape",
    "TapeApprover",
    "current_scope",
    "enter_scope",
    "field_diff",
    "request_key",
]

E = TypeVar("E", bound=BaseModel)


class Tape(Reel):
    """Records a run into a cassette, replays one, or both (`new_episodes`).

    Args:
        path: the cassette file.
        mode: `none`, `once`, `new_episodes` or `all` (see the module docstring).
        secrets: redacted from everything before it is hashed or stored.
        live_tools: in a replay, read-only tools run for real instead of being served.
        how: how to record again, said after each mismatch: the CLI's flags by default
            (the pytest plugin names its own option).
    """

    def __init__(
        self,
        path: str | Path,
        mode: RecordMode = "none",
        *,
        secrets: Secrets | None = None,
        live_tools: bool = False,
        how: str = HOW,
    ) -> None:
        super().__init__(path, mode, secrets=secrets, live_tools=live_tools, how=how)
        self.answers = TapeAnswers(self)
        self.results = TapeResults(self)
        self.decisions = TapeDecisions(self)
        self.listings = TapeListings(self)

    @property
    def run_id(self) -> str | None:
        """The id a pure replay reports, made from the cassette's bytes (a cassette holds
        no run id: re-recording a run gives the same bytes), so two replays of one cassette
        report the same run; None when recording."""
        if self.recording or not self.replaying:
            return None
        return "replay-" + hashlib.sha256(self.path.read_bytes()).hexdigest()[:12]

    def save(
        self,
        *,
        plan: dict[str, Any] | None,
        goal: str | None,
        base: dict[str, Any] | None,
        model: str | None,
        inputs: dict[str, Any],
    ) -> bool:
        """Write what was recorded (with what was replayed, for `new_episodes`); False when
        this mode writes nothing."""
        if not self.recording:
            return False
        cassette = self.cassette
        if self.mode == "new_episodes":
            # A live decision replaces a recorded one for the same gate: the recorded one
            # answered nothing (its call ran live), and a cassette holds one per gate.
            decided = {(e.step, e.action, e.params_hash, e.ordinal) for e in cassette.approvals}
            asked = {(e.family, e.grant) for e in cassette.listings}  # listed live again
            kept = [
                e
                for e in self.recorded.approvals
                if (e.step, e.action, e.params_hash, e.ordinal) not in decided
            ]
            cassette = cassette.model_copy(
                update={
                    "llm": [*self.recorded.llm, *cassette.llm],
                    "tools": [*self.recorded.tools, *cassette.tools],
                    "approvals": [*kept, *cassette.approvals],
                    "answers": [*self.recorded.answers, *cassette.answers],
                    "listings": [
                        *(e for e in self.recorded.listings if (e.family, e.grant) not in asked),
                        *cassette.listings,
                    ],
                }
            )
        cassette = cassette.model_copy(
            update={
                "plan": self.redact(plan) if plan is not None else None,
                "goal": self.secrets.redact(goal) if goal is not None else None,
                "base": self.redact(base) if base is not None else None,
                "model": model,
                "inputs": self.redact(inputs),
            }
        )
        cassette.save(self.path)
        return True


class OfflineModel:
    """Stands in for the `openai` client in a replay: a live call is refused, loudly.

    The tape serves every answer in a replay, so this is never reached; it is here so
    that no path can reach the network by mistake.
    """

    @property
    def chat(self) -> OfflineModel:
        return self

    @property
    def completions(self) -> OfflineModel:
        return self

    @property
    def models(self) -> OfflineModel:
        return self

    async def create(self, **_: Any) -> Any:
        raise ReplayMismatch("replay: a live model call was attempted; replays are offline")

    async def list(self) -> Any:
        return []

    async def close(self) -> None:
        return None


class TapeApprover:
    """An approver whose decisions and answers go through a tape: a recorded decision
    answers a call served from the cassette (`GateRequest.replayed`); every other call is
    asked of `inner` (and recorded, when recording). Answers are replayed when recorded."""

    def __init__(self, tape: Tape, inner: Approver) -> None:
        self.tape = tape
        self.inner = inner

    async def decide(self, request: GateRequest) -> Decision:
        return await self.tape.decisions.decide(request, self.inner.decide)

    async def answer(self, step_id: str, question: Question) -> Any:
        return await self.tape.decisions.answer(
            step_id, question, lambda: self.inner.answer(step_id, question)
        )
