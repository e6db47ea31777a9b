"""Stored runs for the commands that read them (`runs`, `show`, `resume`, `report`): the
store a command means, a run found by id, and a run's result as at its end."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from pydantic import ValidationError

from engine._support.scope import step_of
from engine.app.launch import store_path
from engine.app.sqlite_store import SqliteStore, is_alive, open_store
from engine.journal.resume import Resumed, plan_steps, resumed_from
from engine.redaction import Secrets
from engine.results import RunResult, StepResult
from engine.store import INTERRUPTED, Entry, RunRecord

__all__ = [
    "INTERRUPTED",
    "Found",
    "find_run",
    "open_for_reading",
    "read_run",
    "result_of",
    "shown_status",
]


def open_for_reading(store: str | None) -> SqliteStore:
    """The store a command reads: `--store`, `$PLANLOOM_HOME/runs.db` or `.planloom/runs.db`
    here (a store is never created by reading it).

    Raises:
        ConfigurationError: there is no store there.
    """
    return open_store(store_path(store, Path.cwd()), create=False)


class Found:
    """A stored run: its record and its journal, read (with `secrets` redacted from every
    entry, when given)."""

    def __init__(
        self, store: SqliteStore, record: RunRecord, *, secrets: Secrets | None = None
    ) -> None:
        self.store = store
        self.record = record
        entries = store.journal(record.id)
        if secrets is not None:
            entries = [replace(e, data=secrets.redact_value(e.data)) for e in entries]
        self.entries: list[Entry] = entries
        self.journal: Resumed = resumed_from(self.entries)


def read_run(store: str | None, run_id: str) -> Found | None:
    """The run `run_id`, read whole from the store a command means (`open_for_reading`),
    which is closed again, to be shown (`show`, `report`); None (said on stderr) if there is
    no such run.

    What is shown is redacted again with the secrets of this environment (and credentials
    by their shape): a run's journal holds none, but a store written by an older planloom
    may.
    """
    opened = open_for_reading(store)
    try:
        return find_run(opened, run_id, secrets=Secrets.from_environ())
    finally:
        opened.close()


def find_run(store: SqliteStore, run_id: str, *, secrets: Secrets | None = None) -> Found | None:
    """The run `run_id` of `store` (`secrets` redacted from it, if given); None (said on
    stderr, with how to find one) if unknown."""
    record = store.get(run_id)
    if record is None:
        sys.stderr.write(
            f"planloom: error: no run {run_id!r} in {store.path}; list the runs with: "
            f"planloom runs --store {store.path}\n"
        )
        return None
    return Found(store, record, secrets=secrets)


def shown_status(record: RunRecord) -> str:
    """The run's status, with `interrupted` for a run whose process is gone."""
    if record.status == "running" and not is_alive(record):
        return INTERRUPTED
    return record.status


def result_of(found: Found) -> tuple[RunResult, str]:
    """The run's result as at its end (rebuilt from its steps when it never ended), and
    the status to show."""
    status = shown_status(found.record)
    ended = found.journal.result
    unstarted = ended.get("steps") if ended is not None else None
    unstarted = unstarted if isinstance(unstarted, dict) else None
    steps = {step_id: StepResult() for step_id in plan_steps(found.journal.plan)}
    for step_id, data in [*found.journal.steps.items(), *dict(unstarted or {}).items()]:
        try:
            steps[step_id] = StepResult.model_validate(
                data.get("result") or {} if step_id in found.journal.steps else data
            )
        except (ValidationError, AttributeError, TypeError):
            continue
    if ended is not None and status != "running":
        try:
            return RunResult.model_validate({**ended, "steps": steps}), status
        except ValidationError:
            pass  # written by another planloom version: rebuilt from the steps below
    in_flight = {step_of(key[0]) for key in found.journal.doubts}
    for step_id in in_flight:
        if step_id is not None and steps.get(step_id, StepResult()).status == "pending":
            steps[step_id] = StepResult(
                status="pending", error="in flight when the run stopped: a call may have happened"
            )
    result = RunResult(
        run_id=found.record.id,
        status="cancelled" if status == INTERRUPTED else "failed",
        steps=steps,
    )
    return result, status
