"""`planloom show RUN_ID`: a stored run's summary, as at the end of the run."""

from __future__ import annotations

import argparse
import sys

from engine.app.console import print_summary
from engine.app.output import EXIT_INVALID, EXIT_OK, print_json
from engine.app.stored import INTERRUPTED, read_run, result_of
from engine.capability import Registry
from engine.sanitize import neutralize


def main(args: argparse.Namespace, registry: Registry) -> int:
    found = read_run(args.store, args.run_id)
    if found is None:
        return EXIT_INVALID
    result, status = result_of(found)
    if args.json:
        print_json({**result.model_dump(mode="json"), "status": status})
        return EXIT_OK
    # What the store holds is text anyone with the file may have edited: shown neutralized.
    result.run_id = neutralize(result.run_id)
    print_summary(result, sys.stdout)
    if status in (INTERRUPTED, "running"):
        why = "is still running" if status == "running" else "stopped before it ended"
        sys.stdout.write(f"run {result.run_id} {why}")
        if status == INTERRUPTED and found.journal.plan is None:  # nothing to resume
            sys.stdout.write(", before it had a plan, so nothing ran: run it again")
        elif status == INTERRUPTED:
            sys.stdout.write(f"; continue it with: planloom resume {result.run_id}")
        sys.stdout.write("\n")
    return EXIT_OK
