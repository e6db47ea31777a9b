"""What the steps of a graph that did not end are, once it stopped: those in flight were
cancelled (by Ctrl-C or by `limits.max_duration`), the others never started."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Literal

from engine.executor._scheduler import Scheduler
from engine.model import Step
from engine.results import StepResult

__all__ = ["unended"]


def unended(
    steps: list[Step],
    scheduler: Scheduler[StepResult],
    before: Collection[str],
    stop_reason: Literal["interrupted", "max_duration"] | None,
    max_duration: float,
) -> Iterator[tuple[str, StepResult]]:
    """Each of `steps` that neither ran before the run (`before`) nor ended, with its
    result: `cancelled` if it was running, else `pending` with why it never started."""
    if scheduler.ended:
        return
    for step in steps:
        if step.id in before:
            continue
        if step.id in scheduler.running:
            why = {
                "interrupted": "cancelled: the run was interrupted",
                "max_duration": "cancelled: the run exceeded limits.max_duration "
                f"({max_duration:g} s)",
            }.get(stop_reason or "", "cancelled")
            yield step.id, StepResult(status="cancelled", error=why)
        elif step.id not in scheduler.outcomes:
            blocker = scheduler.stopped_by
            why = (
                f"not started: step '{blocker}' failed (on_failure: stop)"
                if blocker
                else "not started: the run ended first"
            )
            yield step.id, StepResult(status="pending", error=why)
