"""A run store read without writing to it: what shell completion offers (run ids, and the
steps of a run's plan), read in the moment of a TAB.

`SqliteStore` opens a store to use it: it makes the folder and the file if they are
missing, sets WAL mode and the schema. Completing must leave a folder as it found it, so
here the file is opened read-only, and in the mode that creates nothing beside it: through
the writer's `-wal` and `-shm` files when both are there (a run going on, or killed before
it closed the store: what it committed is in the `-wal`), else as an immutable file (a
read-only connection would make a `-wal` and a `-shm` of its own and leave them there).
The journal's chain is not checked: nothing read here is run or shown as the run's record,
only offered to be typed.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from engine.app.sqlite_store._rows import FIELDS, is_alive, record_of
from engine.store import RunRecord

__all__ = ["last_plan", "recent_runs", "run_record", "unfinished"]

_WAIT = 0.2  # seconds a read waits for a writer's lock: a TAB does not hang on a busy store


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[sqlite3.Connection | None]:
    """A read-only connection to the store at `path`; None if there is no store there."""
    if not path.is_file():
        yield None
        return
    beside = [Path(f"{path}-{end}").exists() for end in ("wal", "shm")]
    mode = "mode=ro" if all(beside) else "immutable=1"
    db = sqlite3.connect(f"file:{quote(str(path.resolve()))}?{mode}", uri=True, timeout=_WAIT)
    try:
        db.execute("PRAGMA query_only=ON")
        yield db
    finally:
        db.close()


def recent_runs(path: Path, prefix: str = "", limit: int = 100) -> list[RunRecord]:
    """The newest `limit` runs in the store at `path` whose id starts with `prefix`, newest
    first; none if there is no store there.

    Raises:
        sqlite3.Error: the file is not a store this planloom reads.
    """
    with _reading(path) as db:
        if db is None:
            return []
        rows = db.execute(
            f"SELECT {', '.join(FIELDS)} FROM runs WHERE substr(id, 1, ?) = ? "
            "ORDER BY started DESC LIMIT ?",
            (len(prefix), prefix, limit),
        ).fetchall()
    return [record_of(row) for row in rows]


def run_record(path: Path, run_id: str) -> RunRecord | None:
    """The run `run_id` of the store at `path`; None if there is no such run or store.

    Raises:
        sqlite3.Error: the file is not a store this planloom reads.
    """
    with _reading(path) as db:
        if db is None:
            return None
        row = db.execute(f"SELECT {', '.join(FIELDS)} FROM runs WHERE id=?", (run_id,)).fetchone()
    return record_of(row) if row is not None else None


def last_plan(path: Path, run_id: str) -> dict[str, Any] | None:
    """The plan the run `run_id` ran last (a replan journals another), as planloom journaled
    it; None if there is none, or it is not an object.

    Raises:
        sqlite3.Error: the file is not a store this planloom reads.
        ValueError: the entry is not JSON.
    """
    with _reading(path) as db:
        if db is None:
            return None
        # A plan is journaled durable: a row of its own, never inside a batch.
        row = db.execute(
            "SELECT data FROM journal WHERE run_id=? AND kind='plan' ORDER BY seq DESC LIMIT 1",
            (run_id,),
        ).fetchone()
    data = json.loads(row[0]) if row is not None and isinstance(row[0], str) else None
    plan = data.get("plan") if isinstance(data, dict) else None
    return plan if isinstance(plan, dict) else None


def unfinished(record: RunRecord) -> bool:
    """Whether the run could be resumed: it did not succeed, was not rejected, and no live
    process is running it."""
    return record.status not in ("succeeded", "rejected") and not is_alive(record)
