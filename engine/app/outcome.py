"""What a session's end prints: its result (JSON on stdout, the summary table on stderr),
the calls a dry run would make, the replay report; and the exit code of its status."""

from __future__ import annotations

import json
import sys

from engine.app.console import print_summary
from engine.app.output import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_REJECTED, print_json
from engine.redaction import Secrets
from engine.results import ReplayReport, RunResult
from engine.sanitize import neutralize

__all__ = ["print_result"]


def print_result(result: RunResult, secrets: Secrets | None, *, as_json: bool) -> int:
    """Print a session's result (outputs redacted at this sink); its exit code."""
    if as_json:
        # Outputs are the steps' raw data: redact at this sink, as at every other.
        data = result.model_dump(mode="json")
        print_json(secrets.redact_value(data) if secrets is not None else data)
    if result.status == "rejected":
        sys.stderr.write("plan rejected: nothing ran\n")
    else:
        shown = result
        if secrets is not None:  # outputs and reasons are raw data: redacted at this sink too
            shown = result.model_copy(
                update={
                    "outputs": secrets.redact_value(result.outputs),
                    "approvals": [
                        d.model_copy(update={"reason": secrets.redact(d.reason)}) if d.reason else d
                        for d in result.approvals
                    ],
                }
            )
        print_summary(shown, sys.stderr)
    for call in result.dry_run or []:
        params = json.dumps(call["params"], ensure_ascii=False, default=repr)
        sys.stderr.write(f"would run: {call['step_id']}: {call['action']} {neutralize(params)}\n")
    if result.replay is not None:
        _print_replay(result.replay)
    return {
        "succeeded": EXIT_OK,
        "failed": EXIT_FAILED,
        "rejected": EXIT_REJECTED,
        "cancelled": EXIT_INTERRUPTED,
    }[result.status]


def _print_replay(report: ReplayReport) -> None:
    for mismatch in report.mismatches:
        sys.stderr.write(f"\n{neutralize(mismatch)}\n")
    if report.unused:
        sys.stderr.write(
            f"\n{len(report.unused)} recording(s) in {report.cassette} were not used:\n"
        )
        for line in report.unused:
            sys.stderr.write(f"  unused: {neutralize(line)}\n")
    if report.written:
        sys.stderr.write(f"cassette written: {report.cassette}\n")
