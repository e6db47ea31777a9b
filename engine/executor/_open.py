"""A plan that grows while it runs (`planloom plan --stream`): which of the steps that
started early a whole plan keeps.

While the model writes its plan, its read-only steps join the run as they arrive
(`Executor.admit`). Once the whole plan has arrived, been validated and approved
(`Executor.settle`), an early step is kept, running or ended, when the plan has the same
step (same id, and the same definition of what it runs) and keeps every step it reads;
any other early step is thrown away, and the plan's own version of it runs instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from engine._graph import step_dependencies
from engine.executor._scheduler import Scheduler
from engine.model import Plan, Step
from engine.results import StepResult

__all__ = ["Growth", "joined_deps", "kept_early"]

# What does not change what a step runs: a different description keeps an early step.
_NOT_RUN = frozenset({"description"})


class Growth:
    """The open graph of a plan that grows while it runs, and the steps that joined it.

    `steps` is the executor's own map of its steps (shared, not copied); `before` the
    results of steps that ran before the run (a replan's kept steps).
    """

    def __init__(
        self,
        scheduler: Scheduler[StepResult],
        steps: dict[str, Step],
        before: Mapping[str, StepResult],
    ) -> None:
        self.scheduler = scheduler
        self.steps = steps
        self.before = before

    def admit(self, step: Step) -> bool:
        """`step` joins, to start once the steps it reads have ended; not when it reads a
        step that has not joined, nor when its id joined already or ran before."""
        if step.id in self.steps or step.id in self.before:
            return False
        deps = joined_deps(step, self.steps, self.before)
        if deps is None:
            return False
        self.steps[step.id] = step
        self.scheduler.add(step.id, deps)
        return True

    async def prune(self, plan: Plan) -> tuple[set[str], set[str]]:
        """The early steps `plan` keeps, and the others, which leave the graph (the
        running ones cancelled, and waited for)."""
        kept = kept_early(self.steps, plan)
        dropped = set(self.steps) - kept
        cancelled = self.scheduler.drop(dropped)
        if cancelled:
            await asyncio.wait(cancelled)
        return kept, dropped

    def grow(self, plan: Plan, kept: set[str]) -> None:
        """The rest of `plan`'s main steps join (`steps` holds the whole plan by now), and
        no step joins after them."""
        main = {step.id for step in plan.steps}
        for step in plan.steps:
            if step.id not in kept and step.id not in self.before:
                deps = [d for d in step_dependencies(step) if d in main and d not in self.before]
                self.scheduler.add(step.id, deps)
        self.scheduler.close()


def kept_early(admitted: Mapping[str, Step], plan: Plan) -> set[str]:
    """The early steps (`admitted`, in the order they joined: dependencies first) that
    `plan` keeps: the same step is in its main steps, and every early step it reads is
    kept too."""
    final = {step.id: step for step in plan.steps}
    kept: set[str] = set()
    for step_id, step in admitted.items():
        other = final.get(step_id)
        if other is None or _runs(other) != _runs(step):
            continue
        if all(dep in kept or dep not in admitted for dep in step_dependencies(step)):
            kept.add(step_id)
    return kept


def joined_deps(step: Step, known: Iterable[str], before: Mapping[str, Any]) -> list[str] | None:
    """What `step` waits for among the `known` steps of the graph, leaving out those that
    ran before the run (`before`: a replan's kept steps); None when it reads a step that
    is neither (it has not arrived yet)."""
    known = set(known)
    deps = [dep for dep in step_dependencies(step) if dep not in before]
    return deps if all(dep in known for dep in deps) else None


def _runs(step: Step) -> dict[str, Any]:
    return step.model_dump(mode="json", exclude=set(_NOT_RUN))
