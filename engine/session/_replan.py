"""What a replan tells the person and the model of the failed run: what failed and why,
what ran and what it gave; redacted, and bounded however large the plan or its errors."""

from __future__ import annotations

import json

from engine.redaction import Secrets
from engine.results import RunResult
from engine.sanitize import cap, neutralize

__all__ = ["replan_context", "replan_notice"]

_LINE = 300  # characters of one error or output
_FAILURES_SHOWN = 5  # failures the person is shown
_FAILURES_TOLD = 20  # failures the planner is told
_STEPS_TOLD = 100  # steps whose status the planner is told


def replan_notice(result: RunResult, secrets: Secrets, kept: int) -> str:
    """The line the person is shown: replanning, how many steps are kept, what failed."""
    failures = _failures(result, secrets)
    shown = [f"\n  {neutralize(line)}" for line in failures[:_FAILURES_SHOWN]]
    if len(failures) > _FAILURES_SHOWN:
        shown.append(f"\n  (and {len(failures) - _FAILURES_SHOWN} more)")
    steps = f"{kept} step{'' if kept == 1 else 's'}"
    return f"replanning after the failure ({steps} kept):{''.join(shown)}"


def _failures(result: RunResult, secrets: Secrets) -> list[str]:
    """What made a run fail, a line each, redacted and bounded: each step that ended
    `failed` or `denied`, with its error, then the run's own errors (an output that could
    not be made, the run's time running out)."""
    lines = [
        f"step '{step_id}' {step.status}: {_bounded(step.error or '(no error message)', secrets)}"
        for step_id, step in result.steps.items()
        if step.status in ("failed", "denied")
    ]
    return lines + [_bounded(error, secrets) for error in result.errors]


def _bounded(text: str, secrets: Secrets) -> str:
    """`text` redacted, on one line, then cut (after redacting: a secret cut in two would
    no longer be found)."""
    return cap(" ".join(secrets.redact(text).splitlines()), _LINE)[0]


def replan_context(result: RunResult, secrets: Secrets) -> str:
    """What the planner is told after a failure: what failed, then what ran and what it
    gave; redacted, and bounded however large the plan."""
    failures = _failures(result, secrets)
    lines = [
        "The previous plan failed:",
        *(f"- {line}" for line in failures[:_FAILURES_TOLD]),
        *(
            [f"- (and {len(failures) - _FAILURES_TOLD} more)"]
            if len(failures) > _FAILURES_TOLD
            else []
        ),
        "Steps marked succeeded keep their outputs and must not be repeated (read them as "
        "${{ steps.ID.output }}); plan the rest again. The steps of the previous plan:",
    ]
    for number, (step_id, step) in enumerate(result.steps.items()):
        if number == _STEPS_TOLD:
            lines.append(f"- (and {len(result.steps) - _STEPS_TOLD} more steps)")
            break
        line = f"- {step_id}: {step.status}"
        if step.status in ("succeeded", "fallback"):
            line += f"; output: {_bounded(json.dumps(step.output, default=repr), secrets)}"
        elif step.error and step.status not in ("failed", "denied"):  # those are above
            line += f"; error: {_bounded(step.error, secrets)}"
        lines.append(line)
    return "\n".join(lines)
