"""Recording and replaying a run: the `Tape` between the run and the world.

A `Tape` wraps the places a run meets the world: `tape.answers` is the model client's
`Answers`, `tape.results` the sandbox's `Results`, `tape.listings` the registry's
`Listings` (the tools MCP servers list), and `TapeApprover` wraps the approver
(`tape.decisions`, which also reviews model-written plans). In a replay it serves every
recorded entry from the cassette (`engine.cassette`) and never calls a model or makes a side
effect; a request with no recording raises `ReplayMismatch`, which names the step and shows
the nearest recorded request with a field-level diff. Modes are vcrpy's: `none` (replay
only), `once` (replay if the cassette exists, else record), `new_episodes` (replay what is
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
from collections import Counter
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from engine._mismatch import HOW, field_diff, where
from engine._scope import PLAN_REVIEW, PLANNER, current_scope, enter_scope
from engine._secrets import Secrets
from engine._tape_answers import TapeAnswers
from engine._tape_decisions import TapeDecisions
from engine._tape_listings import TapeListings
from engine._tape_results import TapeResults
from engine.approval import Approver, GateRequest
from engine.cassette import (
    RECORD_MODES,
    RECORDED,
    Cassette,
    RecordMode,
    json_data,
    request_key,
)
from engine.errors import ConfigurationError, ReplayMismatch
from engine.questions import Question
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


class Tape:
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
        if mode not in RECORD_MODES:
            raise ConfigurationError(
                f"record mode {mode!r} is not one of: {', '.join(RECORD_MODES)}"
            )
        self.path = Path(path)
        self.requested_mode = mode
        exists = self.path.exists()
        if mode == "once":
            mode = "none" if exists else "all"
        if mode in ("none", "new_episodes") and not exists:
            raise ConfigurationError(
                f"cassette {path} does not exist; record it first with --record {path} "
                "(or run with --record-mode once, which records when it is missing)"
            )
        self.mode: RecordMode = mode
        self.secrets = secrets if secrets is not None else Secrets.from_environ()
        self.live_tools = live_tools
        self.how = how
        self.recorded = Cassette.load(self.path) if exists else Cassette()
        self.cassette = Cassette(note=self.recorded.note)  # what this run writes
        self.mismatches: list[str] = []
        self.used: set[int] = set()  # ids of the recorded entries served
        self.ordinals: Counter[tuple[Any, ...]] = Counter()
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

    @property
    def replaying(self) -> bool:
        """Recorded entries are served (`none`, `new_episodes`, `once` with a cassette)."""
        return self.mode in ("none", "new_episodes")

    @property
    def recording(self) -> bool:
        """Live calls are made and written (`all`, `new_episodes`, `once` without one)."""
        return self.mode in ("all", "new_episodes")

    def redact(self, value: Any) -> Any:
        return self.secrets.redact_value(json_data(value))

    def next_ordinal(self, *key: Any) -> int:
        """How many requests with this key came before this one (0 for the first)."""
        ordinal = self.ordinals[key]
        self.ordinals[key] += 1
        return ordinal

    def take(self, table: dict[Any, E], key: Any) -> E | None:
        """The recorded entry under `key`, marked as used."""
        entry = table.get(key)
        if entry is not None:
            self.used.add(id(entry))
        return entry

    def fail(self, message: str, step_id: str | None) -> ReplayMismatch:
        """A mismatch, kept for the replay report, with how to record again."""
        message = f"{message}\n{self.how}"
        self.mismatches.append(message)
        return ReplayMismatch(message, step_id=step_id)

    # -- the end -----------------------------------------------------------------------

    def unused(self) -> list[str]:
        """Recorded entries this replay never asked for, one line each."""
        if not self.replaying:
            return []
        lines: list[str] = []
        for entry in self.recorded.llm:
            if id(entry) not in self.used:
                lines.append(
                    f"model request of {where(entry.step)} #{entry.ordinal} (key {entry.key})"
                )
        for tool in self.recorded.tools:
            if id(tool) not in self.used:
                lines.append(
                    f"tool call of {where(tool.step)} attempt {tool.attempt}: {tool.action} "
                    f"#{tool.ordinal} (params hash {tool.params_hash})"
                )
        for approval in self.recorded.approvals:
            if id(approval) not in self.used:
                what = "the plan" if approval.step == PLAN_REVIEW else approval.action
                lines.append(f"decision on {what} in {where(approval.step)} #{approval.ordinal}")
        for answer in self.recorded.answers:
            if id(answer) not in self.used:
                lines.append(f"answer to {answer.question!r} in {where(answer.step)}")
        return lines

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
