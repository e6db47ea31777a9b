"""`planloom resume RUN_ID`: continue a stored run that was interrupted, crashed or failed.

Steps that ended well are kept; the rest run, served from the journal where their calls
already happened (see `engine.journal`). The recipe is read again and must be the one the
run started from: a changed step is refused by name (changing only how its calls are made,
`idempotent`, `confirm`, `timeout` or `retry`, is not a change). `--redo STEP` / `--skip
STEP` decide STEP's call in doubt without a terminal (`engine.approval.InDoubtDecisions`);
each must name a step with one.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from engine.app.launch import Resume, RunSettings, launch
from engine.app.loading import load
from engine.app.output import EXIT_INVALID
from engine.app.sqlite_store import SqliteStore, process_start
from engine.app.stored import find_run, open_for_reading, shown_status
from engine.capability import Registry
from engine.errors import PlanValidationError
from engine.inputs import input_text
from engine.journal import Journal
from engine.journal.resume import Resumed, changed_steps, kept_steps, steps_in_doubt
from engine.model import Plan
from engine.recording.cassette import json_data
from engine.redaction import REDACTED, Secrets
from engine.sanitize import neutralize
from engine.store import RunRecord
from engine.validation import validate_plan
from engine.yaml import read_recipe_data
from planners.llm import model_written, plan_to_yaml


def main(args: argparse.Namespace, registry: Registry) -> int:
    settings = RunSettings.from_args(args)
    if settings.record or settings.replay or settings.record_mode or settings.live_tools:
        return _refuse(
            "resume takes no cassette flags: part of a resumed run is served from its "
            "journal, so a cassette of it would not be a recording of one run"
        )
    if settings.dry_run:
        return _refuse("resume cannot be a dry run: the run it continues made its calls")
    both = sorted(set(settings.redo) & set(settings.skip))
    if both:
        return _refuse(f"--redo and --skip both name step '{both[0]}': decide one or the other")
    store = open_for_reading(settings.store)
    try:
        ready = _prepare(store, args.run_id, settings, registry)
    except BaseException:
        store.close()
        raise
    if isinstance(ready, int):
        store.close()
        return ready
    plan, record, resume = ready
    recipe = Path(record.recipe) if record.recipe is not None else None
    base_dir = Path(record.base_dir)
    return launch(settings, registry, plan, plan.to_data(), base_dir, recipe=recipe, resume=resume)


def _prepare(
    store: SqliteStore, run_id: str, settings: RunSettings, registry: Registry
) -> tuple[Plan, RunRecord, Resume] | int:
    """The run, checked and claimed for this process: its plan and what the resume keeps
    and serves; or the exit code of a refusal (said on stderr)."""
    found = find_run(store, run_id)
    if found is None:
        return EXIT_INVALID
    record, journal = found.record, found.journal
    status = shown_status(record)
    if status in ("succeeded", "rejected"):
        what = "succeeded" if status == "succeeded" else "had its plan rejected (nothing ran)"
        return _refuse(f"run {record.id} {what}: there is nothing to resume")
    if status == "running":
        return _refuse(f"run {record.id} is still running (process {record.pid})")
    if journal.plan is None:
        return _refuse(
            f"run {record.id} stopped before it had a plan, so nothing ran: run it again"
        )
    given = {text.split("=", 1)[0] for text in settings.inputs}
    hidden = [k for k, v in journal.inputs.items() if REDACTED in input_text(v) and k not in given]
    if hidden:
        names = ", ".join(f"-i {k}=..." for k in sorted(hidden))
        return _refuse(
            f"run {record.id} was given a secret as input, which its journal does not keep: "
            f"give it again with {names}"
        )
    base_dir = Path(record.base_dir)
    plan = _plan(record.recipe, journal.plan, registry, base_dir, as_json=settings.json)
    if isinstance(plan, int):
        return plan
    journal.kept = kept_steps(plan, journal.kept)
    refused = _decided(journal, plan, registry, redo=settings.redo, skip=settings.skip)
    if refused is not None:
        return _refuse(refused)
    seen = found.entries[-1].seq if found.entries else -1
    claimed = store.claim(record.id, os.getpid(), process_start(os.getpid()), seen=seen)
    store.append(
        record.id, "start", None, {"segment": claimed.segments, "pid": os.getpid()}, durable=True
    )
    kept, doubts = len(journal.kept), len(journal.doubts)
    sys.stderr.write(
        f"resuming run {neutralize(record.id)}: {kept} step{'s' if kept != 1 else ''} kept, "
        f"{doubts} call{'s' if doubts != 1 else ''} in doubt\n"
    )
    resume = Resume(
        journal=Journal(store, record.id, resumed=journal),
        kept=journal.kept,
        inputs={k: input_text(v) for k, v in journal.inputs.items()},
    )
    return plan, record, resume


def _decided(
    journal: Resumed,
    plan: Plan,
    registry: Registry,
    *,
    redo: tuple[str, ...],
    skip: tuple[str, ...],
) -> str | None:
    """Why `--redo`/`--skip` cannot be taken as given (None: they can): each must name a
    step whose call in doubt only a person may make again."""
    asked, unasked = steps_in_doubt(journal, plan, journal.kept, registry)
    for flag, names in (("--redo", redo), ("--skip", skip)):
        for name in names:
            if name in asked:
                continue
            if name in unasked:
                why = f"step '{name}' is idempotent: its call in doubt is made again unasked"
            else:
                why = f"step '{name}' has no call in doubt"
            these = ", ".join(asked)
            return f"{flag} {name}: {why}; " + (
                f"the steps with a call in doubt are: {these}"
                if asked
                else "no call of this run is in doubt"
            )
    return None


def _plan(
    recipe: str | None,
    journaled: dict[str, Any],
    registry: Registry,
    base_dir: Path,
    *,
    as_json: bool,
) -> Plan | int:
    """The plan to resume: the recipe read again (refused if it changed since the run), or
    the journaled plan of a goal run."""
    if recipe is None:
        # A goal's plan was written by a model: read from the journal (a file anyone with
        # access may edit), it gets no more than the planner allows a model.
        journaled = {
            **journaled,
            **{
                section: [model_written(step) for step in journaled[section]]
                for section in ("steps", "finally")
                if isinstance(journaled.get(section), list)
            },
        }
        try:
            data, source = read_recipe_data(journaled, "journal#plan", plan_to_yaml)
            return validate_plan(data, source, registry, base_dir=base_dir)
        except PlanValidationError as exc:
            problems = "; ".join(d.message for d in exc.diagnostics[:5])
            return _refuse(f"the run's plan is no longer valid here: {problems}")
    if not Path(recipe).is_file():
        return _refuse(f"the run's recipe {recipe} is gone; a resume reads it again")
    loaded = load(recipe, registry, as_json=as_json, wrap=True)
    if isinstance(loaded, int):
        return loaded
    now = json_data(Secrets.from_environ().redact_value(loaded.to_data()))
    changes = changed_steps(journaled, now)
    if changes:
        return _refuse(
            f"the recipe {recipe} changed since the run: {'; '.join(changes)}. A resumed run "
            "must be the run that started; run the recipe anew with: planloom run "
            f"{recipe}"
        )
    return loaded


def _refuse(message: str) -> int:
    sys.stderr.write(f"planloom: error: {neutralize(message)}\n")
    return EXIT_INVALID
