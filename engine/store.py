"""The run store: where every run's journal is kept, so a run can be listed, shown, reported
and resumed after a crash.

`RunStore` is the protocol a backend implements; `engine.app.sqlite_store.SqliteStore` (stdlib
`sqlite3`, WAL) is the embedded default, at `.planloom/runs.db` beside the recipe,
`$PLANLOOM_HOME/runs.db`, or a path given with `--store`. A run is a `RunRecord` (its
summary) and a journal of `Entry`s in order. The journal's data model is the cassette's
(`engine.recording.cassette`): a tool call is a `ToolResult` (written with no output before the call
starts, its *intent*, and again with its output or error after), a model exchange an
`LLMExchange`, a gate decision an `Approval`, a person's answer an `Answer`; plus the plan,
each step's result and timeline, and a mark for each time the run was (re)started. Every
value is redacted before it is written (`engine.journal.Journal`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

__all__ = [
    "INTERRUPTED",
    "STORE_DIR",
    "Entry",
    "EntryKind",
    "JSONText",
    "RunRecord",
    "RunStore",
    "default_store_path",
]

INTERRUPTED = "interrupted"
"""The status shown for a run whose process stopped (killed, crashed) before it ended."""
STORE_DIR = ".planloom"
"""The folder beside a recipe that holds its store (`runs.db`)."""

EntryKind = Literal["start", "plan", "step", "intent", "tool", "llm", "approval", "answer", "end"]
"""What a journal entry is: `start` (the run started or was resumed: a new segment), `plan`
(the plan run from here on), `step` (a step ended: its result and timeline), `intent` (a
tool call about to start), `tool` (its result or error), `llm` (a model exchange),
`approval` (a gate decision, or the review of a model-written plan), `answer` (a person's
answer to `human.ask`), `end` (the run's result, as `--json` prints it)."""


class JSONText(str):
    """Entry data given already encoded as JSON text (a large plan, redacted as text)."""

    __slots__ = ()


@dataclass(frozen=True)
class Entry:
    """One journal entry: its place (`seq`), when, what, the step scope it belongs to
    (`step[3]` for a `for_each` item; none for run-level entries) and its JSON data."""

    seq: int
    at: float
    kind: EntryKind
    scope: str | None
    data: dict[str, Any]


@dataclass
class RunRecord:
    """A run's summary, as `planloom runs` lists it.

    Attributes:
        id: the run id (`RunResult.run_id`).
        name: the plan's name.
        recipe: the recipe file the run came from (absolute), or None (a goal's plan).
        base_dir: where the run's relative paths start.
        status: `running` while a process runs it (or it crashed: `alive` says which), then
            the run's status (`succeeded`, `failed`, `rejected`, `cancelled`).
        started, finished: epoch seconds (finished: None until it ends).
        steps: how many steps the plan has; `done`: how many ended as a resume keeps them.
        usage: the run's usage (`Usage` as JSON), once it ended.
        pid, pid_start: the process running it, and that process's start time (so a
            recycled pid is not taken for the run).
        segments: how many times it was started (1 + resumes).
    """

    id: str
    name: str
    recipe: str | None
    base_dir: str
    status: str = "running"
    started: float = 0.0
    finished: float | None = None
    steps: int = 0
    done: int = 0
    usage: dict[str, Any] = field(default_factory=dict)
    pid: int | None = None
    pid_start: str | None = None
    segments: int = 1

    @property
    def duration(self) -> float | None:
        return None if self.finished is None else self.finished - self.started


class RunStore(Protocol):
    """A backend for run journals. Writes are ordered; `durable=True` means the entry is
    on disk before `append` returns (a side-effect call's intent, its result), else it may
    wait in a batch until the next durable write, `flush` or `finish` (entries whose loss
    costs only a repeat of something harmless)."""

    path: str

    def begin(self, record: RunRecord) -> None:
        """Add a new run (status `running`)."""
        ...

    def claim(
        self, run_id: str, pid: int, pid_start: str | None, *, seen: int | None = None
    ) -> RunRecord:
        """Mark a stopped run as running again in this process, for a resume. `seen`: the
        last journal entry the resume read; the claim fails if there is a later one.

        Raises:
            ConfigurationError: unknown id, another live process is running it, or its
                journal grew since it was read.
        """
        ...

    def append(
        self, run_id: str, kind: EntryKind, scope: str | None, data: Any, *, durable: bool
    ) -> None:
        """Add an entry: JSON data, or `JSONText`."""
        ...

    def update(self, run_id: str, **fields: Any) -> None:
        """Change summary fields of a run (`done`, `steps`, `usage`...)."""
        ...

    def flush(self) -> None: ...

    def finish(
        self, run_id: str, status: str, usage: Mapping[str, Any], done: int, end: Any
    ) -> None:
        """The run ended (or stopped, for a `cancelled` one): its `end` entry, status and
        usage, written in one transaction (a run is never seen ended without its end)."""
        ...

    def get(self, run_id: str) -> RunRecord | None: ...

    def runs(self, limit: int = 50) -> list[RunRecord]:
        """The newest runs first."""
        ...

    def journal(self, run_id: str) -> list[Entry]:
        """A run's journal, in order, checked whole.

        Raises:
            ConfigurationError: an entry cannot be read, or the journal is not the one
                planloom wrote (an entry deleted, inserted, moved or edited by hand): the
                message names the run and the entry.
        """
        ...

    def close(self) -> None: ...


def default_store_path(base_dir: Path, environ: Mapping[str, str] | None = None) -> Path:
    """`$PLANLOOM_HOME/runs.db` if set, else `.planloom/runs.db` in `base_dir`."""
    env = os.environ if environ is None else environ
    home = env.get("PLANLOOM_HOME")
    if home:
        return Path(home) / "runs.db"
    return base_dir / STORE_DIR / "runs.db"
