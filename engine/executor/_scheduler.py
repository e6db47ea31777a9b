"""Start-when-ready scheduling of a DAG: no rounds, no barriers.

Knows asyncio and the plan's `Edges` only: each node's dependencies and dependents, the
counters a start-when-ready scheduler needs (a graph library is for drawing and for naming
cycles; building one per run cost a 100,000-step run 50 MB and seconds). A node starts the
moment its last dependency ends (up to `max_parallel` at once). Each node's outcome comes
back as a value; an exception in one node becomes that node's outcome through `crash`, so
it cannot tear down its siblings.
When an outcome `blocks`, either nothing new starts (`stop`) or every descendant is
skipped (`continue`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, Literal, TypeVar

from engine._graph import Edges

__all__ = ["Scheduler"]

OutcomeT = TypeVar("OutcomeT")


class Scheduler(Generic[OutcomeT]):
    """Runs every node of `edges` through `run`, respecting them.

    After `run()` returns (or is cancelled), `outcomes` holds every node that ended,
    `running` the nodes that were in flight, and the rest never started.
    """

    def __init__(
        self,
        edges: Edges,
        run: Callable[[str], Awaitable[OutcomeT]],
        *,
        max_parallel: int,
        blocks: Callable[[OutcomeT], bool],
        crash: Callable[[str, Exception], OutcomeT],
        skip: Callable[[str, str], OutcomeT],
        on_block: Literal["stop", "continue"] = "stop",
    ) -> None:
        self.edges = edges
        self._run = run
        self.max_parallel = max_parallel
        self._blocks = blocks
        self._crash = crash
        self._skip = skip
        self.on_block = on_block
        self.outcomes: dict[str, OutcomeT] = {}
        self.running: set[str] = set()
        self.stopped_by: str | None = None

    async def run(self) -> None:
        waiting = {node: len(deps) for node, deps in self.edges.dependencies.items()}
        ready = deque(node for node, count in waiting.items() if count == 0)
        done: asyncio.Queue[tuple[str, OutcomeT]] = asyncio.Queue()
        async with asyncio.TaskGroup() as group:
            while ready or self.running:
                while ready and len(self.running) < self.max_parallel and not self.stopped_by:
                    node = ready.popleft()
                    self.running.add(node)
                    group.create_task(self._track(node, done), name=f"step:{node}")
                if not self.running:
                    break
                finished = [await done.get()]
                # Take in everything that ended in the same tick before starting anything,
                # so a failure queued behind a success still stops new starts.
                while not done.empty():
                    finished.append(done.get_nowait())
                for node, outcome in finished:
                    self._settle(node, outcome, waiting, ready)

    def _settle(
        self, node: str, outcome: OutcomeT, waiting: dict[str, int], ready: deque[str]
    ) -> None:
        self.running.discard(node)
        self.outcomes[node] = outcome
        if self._blocks(outcome):
            if self.on_block == "stop":
                self.stopped_by = self.stopped_by or node
            else:
                for later in self.edges.descendants(node):
                    if later not in self.outcomes:
                        self.outcomes[later] = self._skip(later, node)
            return
        for successor in self.edges.dependents.get(node, ()):
            if successor in self.outcomes:
                continue
            waiting[successor] -= 1
            if waiting[successor] == 0:
                ready.append(successor)

    async def _track(self, node: str, done: asyncio.Queue[tuple[str, OutcomeT]]) -> None:
        try:
            outcome = await self._run(node)
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise  # a real cancellation of this node
            # Raised by the node's own code without anyone cancelling it: an outcome too,
            # or the scheduler would wait for this node forever.
            outcome = self._crash(node, RuntimeError(f"stray CancelledError: {exc}"))
        except Exception as exc:  # becomes this node's outcome, by design
            outcome = self._crash(node, exc)
        done.put_nowait((node, outcome))
