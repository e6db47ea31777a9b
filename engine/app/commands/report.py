"""`planloom report RUN_ID`: write a stored run's report as one self-contained HTML file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.app.output import EXIT_INVALID, EXIT_OK
from engine.app.report import render_report
from engine.app.stored import read_run
from engine.capability import Registry


def main(args: argparse.Namespace, registry: Registry) -> int:
    found = read_run(args.store, args.run_id)
    if found is None:
        return EXIT_INVALID
    page = render_report(found.record, found.entries)
    target = Path(args.output) if args.output else Path(f"report-{found.record.id}.html")
    try:
        target.write_text(page, encoding="utf-8")
    except OSError as exc:
        sys.stderr.write(
            f"planloom: error: cannot write the report to {target}: {exc.strerror or exc}; "
            "choose another file with -o FILE.html\n"
        )
        return EXIT_INVALID
    sys.stderr.write(f"report of run {found.record.id} written to {target}\n")
    return EXIT_OK
