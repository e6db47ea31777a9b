"""What a command prints: JSON on stdout, results, problems and replay reports on stderr."""

from __future__ import annotations

import json
import sys
from typing import Any

from engine._sanitize import neutralize
from engine._secrets import Secrets
from engine._yaml import read_recipe
from engine.app.console import print_summary
from engine.capability import Registry
from engine.diagnostics import render_diagnostics
from engine.errors import PlanValidationError
from engine.model import Plan
from engine.results import ReplayReport, RunResult

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_INVALID",
    "EXIT_OK",
    "EXIT_REJECTED",
    "invalid",
    "load",
    "print_json",
    "print_result",
]

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_REJECTED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=repr) + "\n")
    sys.stdout.flush()


def invalid(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """A run-shaped JSON object for a run that never started."""
    return {"run_id": None, "status": "invalid", "steps": {}, "outputs": {}, "errors": errors}


def load(path: str, registry: Registry, *, as_json: bool, wrap: bool = False) -> Plan | int:
    """Load and validate; on problems print them (JSON on stdout or text on stderr) and
    return the exit code. With `wrap`, JSON problems are printed inside a run-shaped object
    (for `run --json`)."""
    from planners.recipe import load_recipe

    try:
        plan, _ = load_recipe(path, registry)
    except PlanValidationError as exc:
        if as_json:
            problems = [d.model_dump() for d in exc.diagnostics]
            print_json(invalid(problems) if wrap else problems)
        else:
            try:
                _, source = read_recipe(path)
            except PlanValidationError:
                source = None
            sys.stderr.write(render_diagnostics(exc.diagnostics, source) + "\n")
            count = len(exc.diagnostics)
            sys.stderr.write(f"{path}: {count} problem{'s' if count != 1 else ''}\n")
        return EXIT_INVALID
    return plan


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
        print_summary(shown, sys.stderr, color=sys.stderr.isatty())
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
