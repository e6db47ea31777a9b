"""Read-only steps of a plan the model is still writing, run as they arrive
(`planloom plan --stream`).

Each complete step the planner streams, valid among the steps so far, is offered here. One
that can change nothing (no side effects, no gate: `may_start_early`) joins the run at
once, which begins with the first such step, and starts as soon as the steps it reads have
ended. Every other step waits for the whole plan: validated, shown, approved. The run's
executor then settles on that plan (`Executor.settle`): early steps it keeps stand, the
others are thrown away. A plan rejected, or planning that fails or is interrupted, ends
the run with nothing but read-only steps having run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine.capability import Registry
from engine.events import EventBus
from engine.executor import Executor
from engine.model import Plan, Step
from engine.render import step_has_side_effects
from engine.results import RunResult
from engine.session._parts import Attached

__all__ = ["EarlyRun", "may_start_early"]


def may_start_early(step: Step, registry: Registry) -> bool:
    """Whether `step` can change nothing and asks nobody: no side effects (its tool, its
    fallback's, an agent's tools), no `confirm: always`, no tool the grant always gates."""
    if step.confirm == "always" or step_has_side_effects(step, registry):
        return False
    names = [step.tool] if step.tool else list(step.agent.tools if step.agent else [])
    return not any(
        (action := registry.get(name)) is None or action.confirm_always for name in names
    )


@dataclass
class EarlyRun:
    """The run a streamed plan's read-only steps begin, before the plan is whole.

    `start` makes the run's executor (a growing one) and what the frontend attaches to
    it, from the plan so far; `events` are the session's own (`plan.step` for each step
    the model wrote, and whether it started early).
    """

    start: Callable[[Plan], tuple[Executor, Attached]]
    registry: Registry
    base_dir: Path
    events: EventBus | None = None
    executor: Executor | None = None
    attached: Attached | None = None
    task: asyncio.Task[RunResult] | None = None
    opening: Plan | None = None  # the plan so far when the run began
    joined: list[str] = field(default_factory=list)
    _bound: Registry | None = None

    def offer(self, plan: Plan, step: Step) -> None:
        """`step`, the newest of `plan` (valid, the steps the model has written so far),
        starts now if it may (`may_start_early`)."""
        if self._bound is None:
            self._bound = self.registry.bind(plan.capabilities, self.base_dir)
        joined = False
        if may_start_early(step, self._bound):
            if self.executor is None:
                self.executor, self.attached = self.start(plan)
                self.opening = plan
                self.task = asyncio.get_running_loop().create_task(
                    self.executor.run(), name="planloom-run"
                )
            joined = self.executor.admit(step)
        if joined:
            self.joined.append(step.id)
        if self.events is not None:  # (a step written again, a repair's: begun already)
            what, early = step.tool or "agent", step.id in self.joined
            self.events.emit("plan.step", step.id, action=what, early=early)

    def fits(self, plan: Plan) -> bool:
        """Whether the run begun can go on as `plan`'s: the same grants, limits and inputs
        (a person's edit may change them; the early results are then thrown away)."""
        opening = self.opening
        return (
            opening is not None
            and plan.capabilities == opening.capabilities
            and plan.limits == opening.limits
            and plan.inputs == opening.inputs
        )

    def states(self) -> dict[str, str]:
        """Each early step's state for the plan's review: its status once ended, else
        `running`."""
        executor = self.executor
        if executor is None:
            return {}
        ended = executor.results
        return {
            step_id: ended[step_id].status if step_id in ended else "running"
            for step_id in self.joined
        }

    async def abandon(self) -> None:
        """End the run begun (if any) without the rest of the plan: its early steps still
        running are cancelled. Waits for it to end, even when this task is being cancelled
        (Ctrl-C): what runs must not outlive the session."""
        if self.executor is None or self.task is None:
            return
        self.executor.cancel()
        task, self.task = self.task, None
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.shield(task)
        if not task.done():  # this task was cancelled while waiting: wait on regardless
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
