"""A plan answer read as it streams: each complete step, valid among the steps so far,
handed on at once (`planloom plan --stream`).

The sink the model client feeds (`engine.llm.streaming_to`) parses the answer as it
comes (`StepStream`); each step object it completes is checked as a plan of the steps
accepted so far plus it, through the same validation and per-step goal checks as a whole
plan. A valid step is accepted and handed on; an invalid one is not, nor is any step
that reads it (they do not validate without it): they wait for the whole plan, which is
validated, repaired if need be, and approved as always.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.model import Plan, Step
from planners._stream_plan import StepStream

__all__ = ["StreamedSteps"]


class StreamedSteps:
    """The content sink of one planning call.

    Args:
        check: the plan of these steps (dicts as the model wrote them), validated; None
            when it is not valid.
        on_step: told of each accepted step, with the plan of the steps accepted so far.
    """

    def __init__(
        self,
        check: Callable[[list[Any]], Plan | None],
        on_step: Callable[[Plan, Step], None],
    ) -> None:
        self._check = check
        self._on_step = on_step
        self._stream = StepStream()
        self.accepted: list[Any] = []

    def begin(self) -> None:
        """The answer starts (again, after a stream cut short): what came before is void;
        steps handed on already stay with their taker, which compares them with the plan
        that is finally approved."""
        self._stream.begin()
        self.accepted = []

    def feed(self, text: str) -> None:
        for written in self._stream.feed(text):
            plan = self._check([*self.accepted, written])
            step_id = written.get("id") if isinstance(written, dict) else None
            newest = plan.steps[-1] if plan is not None and plan.steps else None
            if plan is None or newest is None or newest.id != step_id:
                continue  # invalid, or a step the plan keeps from before (a replan's)
            self.accepted.append(written)
            self._on_step(plan, newest)
