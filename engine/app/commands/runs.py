"""`planloom runs`: the runs in a run store, newest first."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

from engine.app.launch import store_path
from engine.app.output import EXIT_INVALID, EXIT_OK, print_json
from engine.app.stored import INTERRUPTED, open_for_reading, shown_status
from engine.capability import Registry
from engine.errors import ConfigurationError
from engine.journal.resume import resumed_from
from engine.sanitize import neutralize


def main(args: argparse.Namespace, registry: Registry) -> int:
    if args.limit < 1:
        sys.stderr.write("planloom: error: --limit must be at least 1\n")
        return EXIT_INVALID
    path = store_path(args.store, Path.cwd())
    if not path.exists():  # nothing was run here yet: an empty list, not an error
        return _empty(args, str(path))
    store = open_for_reading(args.store)
    try:
        records = store.runs(args.limit)
        for record in records:
            if shown_status(record) == INTERRUPTED:  # counted at the end, which never came
                with contextlib.suppress(ConfigurationError):  # `show` says what is wrong
                    record.done = len(resumed_from(store.journal(record.id)).kept)
    finally:
        store.close()
    rows: list[dict[str, Any]] = [
        {
            "id": r.id,
            "name": r.name,
            "recipe": r.recipe,
            "status": shown_status(r),
            "started": r.started,
            "duration": r.duration,
            "steps": r.steps,
            "done": r.done,
            "usage": r.usage,
            "resumes": r.segments - 1,
        }
        for r in records
    ]
    if not rows:
        return _empty(args, store.path)
    if args.json:
        print_json(rows)
        return EXIT_OK
    sys.stdout.write(
        f"{'id':<12}  {'status':<11}  {'started':<19}  {'time':>8}  {'steps':>9}  "
        f"{'tools':>5}  {'model':>5}  recipe\n"
    )
    for row in rows:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["started"]))
        took = f"{row['duration']:.1f}s" if row["duration"] is not None else "-"
        usage = row["usage"]
        where = neutralize(row["recipe"] or f"(goal) {row['name']}")
        sys.stdout.write(
            f"{neutralize(row['id']):<12}  {neutralize(row['status']):<11}  {started:<19}  "
            f"{took:>8}  "
            f"{row['done']:>4}/{row['steps']:<4}  {usage.get('tool_calls', 0):>5}  "
            f"{usage.get('llm_calls', 0):>5}  {where}\n"
        )
    return EXIT_OK


def _empty(args: argparse.Namespace, where: str) -> int:
    if args.json:
        print_json([])
    else:
        sys.stdout.write(f"no runs in {neutralize(where)}\n")
    return EXIT_OK
