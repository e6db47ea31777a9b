"""Start-when-ready scheduling of a DAG: no rounds, no barriers.

Knows asyncio and the plan's `Edges` only: each node's dependencies and dependents, the
counters a start-when-ready scheduler needs (a graph library is for drawing and for naming
cycles; building one per run cost a 100,000-step run 50 MB and seconds). A node starts the
moment its last dependency ends (up to `max_parallel` at once). Each node's outcome comes
back as a value; an exception in one node becomes that node's outcome through `crash`, so
it cannot tear down its siblings.
A node is started at once, in the scheduler's turn (`engine._support.eager`): one that
ends without waiting (an in-process function, a call a recording serves) costs no task;
one that waits runs on as a task. The nodes ready together all start before any of those
that ended at once is settled, as tasks started together would; a long run of nodes that
never wait gives the event loop a turn every few milliseconds (timers, signals).
When an outcome `blocks`, either nothing new starts (`stop`) or every descendant is
skipped (`continue`).

A graph may also be `open`: nodes join it while it runs (`add`), leave it (`drop`: a
running one is cancelled, an ended one forgotten), and it ends only once `close`d and
drained. A plan streamed by the planner runs so, its read-only steps first.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Generic, Literal, TypeVar, cast

from engine._graph import Edges
from engine._support.eager import Waiting, start

__all__ = ["Scheduler"]

OutcomeT = TypeVar("OutcomeT")

_TURN = 0.005  # seconds of nodes ended at once before the event loop gets a turn
_WAITS = object()  # a node started that waits for something: it runs on as a task


def _take(ready: deque[str], count: int) -> list[str]:
    return [ready.popleft() for _ in range(count)]


class Scheduler(Generic[OutcomeT]):
    """Runs every node of `edges` through `run`, respecting them.

    After `run()` returns (or is cancelled), `outcomes` holds every node that ended,
    `running` the nodes that were in flight, and the rest never started.
    """

    def __init__(
        self,
        edges: Edges,
        run: Callable[[str], Coroutine[Any, Any, OutcomeT]],
        *,
        max_parallel: int,
        blocks: Callable[[OutcomeT], bool],
        crash: Callable[[str, Exception], OutcomeT],
        skip: Callable[[str, str], OutcomeT],
        on_block: Literal["stop", "continue"] = "stop",
        open: bool = False,
    ) -> None:
        self.edges = edges
        self._run = run
        self.max_parallel = max_parallel
        self._blocks = blocks
        self._crash = crash
        self._skip = skip
        self.on_block = on_block
        self.outcomes: dict[str, OutcomeT] = {}
        self.running: dict[str, asyncio.Task[None]] = {}
        self.stopped_by: str | None = None
        self._open = open
        self._waiting = {node: len(deps) for node, deps in edges.dependencies.items()}
        self._ready = deque(node for node, count in self._waiting.items() if count == 0)
        # Each ended node's outcome; None only wakes the loop (a node joined, the graph closed).
        self._done: asyncio.Queue[tuple[str, OutcomeT] | None] = asyncio.Queue()
        self._stale: dict[str, int] = {}  # outcomes queued by nodes dropped since: not taken

    async def run(self) -> None:
        waiting, ready, done = self._waiting, self._ready, self._done
        loop = asyncio.get_running_loop()
        async with asyncio.TaskGroup() as group:
            while ready or self.running or self._open:
                turn = loop.time()
                while ready and len(self.running) < self.max_parallel and not self.stopped_by:
                    # Every node ready now starts now (as many as there are free slots), as
                    # tasks started together would; those that ended at once are settled
                    # after, so one's failure does not keep its siblings from starting.
                    room = min(len(ready), self.max_parallel - len(self.running))
                    ended = [(node, self._start(node, group)) for node in _take(ready, room)]
                    for node, outcome in ended:
                        if outcome is not _WAITS:
                            self._settle(node, cast(OutcomeT, outcome), waiting, ready)
                    if loop.time() - turn >= _TURN:  # the loop's turn (timers, signals)
                        await asyncio.sleep(0)
                        turn = loop.time()
                if not self.running and not self._open:
                    break
                finished = [await done.get()]
                # Take in everything that ended in the same tick before starting anything,
                # so a failure queued behind a success still stops new starts.
                while not done.empty():
                    finished.append(done.get_nowait())
                for ended_node in finished:
                    if ended_node is None:
                        continue
                    node, outcome = ended_node
                    if self._stale and self._stale.get(node):
                        self._stale[node] -= 1
                        continue
                    del self.running[node]
                    self._settle(node, outcome, waiting, ready)

    def _start(self, node: str, group: asyncio.TaskGroup) -> OutcomeT | object:
        """Start `node` at once (`engine._support.eager`): its outcome if it ended without
        waiting for anything (no task was made), else `_WAITS` (the rest of it runs as a
        task)."""
        context = contextvars.copy_context()
        try:
            value, rest = start(self._run(node), context)
        except (Exception, asyncio.CancelledError) as exc:  # (nobody can have cancelled it)
            return self._crashed(node, exc)
        if rest is None:
            return value
        self.running[node] = group.create_task(
            self._track(node, rest), name=f"step:{node}", context=rest.context
        )
        return _WAITS

    @property
    def ended(self) -> bool:
        """Whether every node has its outcome (none is running, none never started)."""
        return len(self.outcomes) == len(self._waiting)

    # -- an open graph -------------------------------------------------------------------

    def add(self, node: str, deps: list[str]) -> None:
        """`node` joins the (open) graph: it starts once `deps` have ended (those ended
        already count); it is skipped at once if one of them blocked (`continue`), and
        never starts if the graph stopped (`stop`)."""
        self.edges.dependencies[node] = deps
        for dep in deps:
            self.edges.dependents.setdefault(dep, []).append(node)
        # Counted whether it may start or not: every node has its count (see `ended`).
        self._waiting[node] = count = sum(1 for dep in deps if dep not in self.outcomes)
        blocked = next(
            (d for d in deps if d in self.outcomes and self._blocks(self.outcomes[d])), None
        )
        if blocked is not None:
            if self.on_block == "continue":
                self.outcomes[node] = self._skip(node, blocked)
            return
        if count == 0:
            self._ready.append(node)
        self._done.put_nowait(None)

    def drop(self, nodes: set[str]) -> list[asyncio.Task[None]]:
        """`nodes` leave the graph, with every node that waits for them (the caller names
        them all): a running one is cancelled (its task returned, to be waited for), an
        ended one's outcome forgotten."""
        cancelled = []
        for node in nodes:
            task = self.running.pop(node, None)
            if task is not None and not task.cancel():  # it ended: its outcome is queued
                self._stale[node] = self._stale.get(node, 0) + 1
            elif task is not None:
                cancelled.append(task)
            self.outcomes.pop(node, None)
            self._waiting.pop(node, None)
            for dep in self.edges.dependencies.pop(node, ()):
                later = self.edges.dependents.get(dep)
                if later is not None and node in later:
                    later.remove(node)
            self.edges.dependents.pop(node, None)
        if any(node in nodes for node in self._ready):
            self._ready = deque(node for node in self._ready if node not in nodes)
        if self.stopped_by in nodes:  # what stopped the graph has left it: it goes on
            self.stopped_by = next(
                (node for node, ended in self.outcomes.items() if self._blocks(ended)), None
            )
        self._done.put_nowait(None)
        return cancelled

    def close(self) -> None:
        """No node joins any more: the graph ends once what is in it has ended."""
        self._open = False
        self._done.put_nowait(None)

    def _settle(
        self, node: str, outcome: OutcomeT, waiting: dict[str, int], ready: deque[str]
    ) -> None:
        self.outcomes[node] = outcome
        if self._blocks(outcome):
            if self.on_block == "stop":
                self.stopped_by = self.stopped_by or node
            else:
                for later in self.edges.descendants(node):
                    if later not in self.outcomes:
                        self.outcomes[later] = self._skip(later, node)
            return
        outcomes = self.outcomes
        for successor in self.edges.dependents.get(node, ()):
            count = waiting[successor] - 1
            waiting[successor] = count
            if count == 0 and successor not in outcomes:  # (not skipped already)
                ready.append(successor)

    async def _track(self, node: str, rest: Waiting) -> None:
        try:
            outcome = await rest.rest()
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise  # a real cancellation of this node
            outcome = self._crashed(node, exc)
        except Exception as exc:
            outcome = self._crashed(node, exc)
        self._done.put_nowait((node, outcome))

    def _crashed(self, node: str, exc: Exception | asyncio.CancelledError) -> OutcomeT:
        """What an exception from the node's own code makes of it: its outcome (through
        `crash`), so it cannot tear down its siblings. A CancelledError it raised without
        anyone cancelling it is an outcome too, or the scheduler would wait for it forever."""
        if isinstance(exc, asyncio.CancelledError):
            return self._crash(node, RuntimeError(f"stray CancelledError: {exc}"))
        return self._crash(node, exc)
