"""What completion reads from the run store: run ids, and a run's steps and inputs.

The store is the one the command on the line would read: its `--store`, else
`$PLANLOOM_HOME/runs.db`, else `.planloom/runs.db` in the current folder (as `planloom
runs`, `show`, `report` and `resume` find it). It is read through
`engine.app.sqlite_store.peek`, which writes nothing.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from engine.app.completion._recipes import Recipe, read_recipe
from engine.app.sqlite_store import is_alive
from engine.app.sqlite_store.peek import last_plan, recent_runs, run_record, unfinished
from engine.store import RunRecord, default_store_path

__all__ = ["run_ids", "run_recipe", "store_of"]

_RUN_ID = re.compile(r"[A-Za-z0-9_-]+")  # what planloom makes (12 hex digits); safe to type


def store_of(store: str | None) -> Path:
    """The store a reading command means: `--store`, else the default here."""
    return Path(store) if store else default_store_path(Path.cwd())


def run_ids(store: Path, prefix: str, *, resumable: bool) -> dict[str, str]:
    """The ids of the store's newest runs starting with `prefix` (of those a resume takes,
    if `resumable`), each with its recipe's name, status and start."""
    shown: dict[str, str] = {}
    for record in recent_runs(store, prefix):
        if not _RUN_ID.fullmatch(record.id) or (resumable and not unfinished(record)):
            continue
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.started))
        shown[record.id] = f"{_printable(record.name)}, {_status(record)}, {started}"
    return shown


def run_recipe(store: Path, run_id: str) -> Recipe:
    """The steps and inputs of the run `run_id`: its recipe's, read again (as a resume
    does), or a goal's plan's, as journaled. Nothing for an unknown run.

    Raises:
        OSError, ValueError, sqlite3.Error: the recipe or the store cannot be read.
    """
    record = run_record(store, run_id)
    if record is None:
        return Recipe()
    if record.recipe is not None:
        return read_recipe(Path(record.recipe))
    plan = last_plan(store, run_id)
    return Recipe(steps=Recipe.of(plan).steps)  # a goal's plan has no inputs to give again


def _status(record: RunRecord) -> str:
    return "interrupted" if record.status == "running" and not is_alive(record) else record.status


def _printable(text: str) -> str:
    return "".join(c for c in text if c.isprintable())[:60]
