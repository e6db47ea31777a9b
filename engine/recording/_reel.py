"""A tape's state, which the parts of a `Tape` (its answers, results, decisions and
listings) share: the cassette recorded and the one being written, the mode, the secrets to
redact, and the bookkeeping of what was served."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from engine._support.scope import PLAN_REVIEW
from engine.errors import ConfigurationError, ReplayMismatch
from engine.recording._mismatch import HOW, where
from engine.recording.cassette import RECORD_MODES, Cassette, RecordMode, json_data
from engine.redaction import Secrets

E = TypeVar("E", bound=BaseModel)


class Reel:
    """What a `Tape` records into and replays from (see `engine.recording.Tape`)."""

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
