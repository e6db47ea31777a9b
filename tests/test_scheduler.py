"""The scheduler on its own (`engine.executor._scheduler`): an open graph a node joins
after one of its dependencies blocked, and whether every node has ended."""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest

from engine._graph import Edges
from engine.executor._scheduler import Scheduler


def _scheduler(
    on_block: Literal["stop", "continue"], waiting: asyncio.Event, gate: asyncio.Event
) -> tuple[Scheduler[str], list[str]]:
    started: list[str] = []

    async def run(node: str) -> str:
        started.append(node)
        if node == "slow":
            waiting.set()
            await gate.wait()
        return "bad" if node == "bad" else "ok"

    scheduler: Scheduler[str] = Scheduler(
        Edges({"bad": [], "slow": []}, {}),
        run,
        max_parallel=4,
        blocks=lambda outcome: outcome == "bad",
        crash=lambda node, exc: f"crashed: {exc!r}",
        skip=lambda node, cause: f"skipped for {cause}",
        on_block=on_block,
        open=True,
    )
    return scheduler, started


@pytest.mark.parametrize("on_block", ["stop", "continue"])
def test_a_node_joining_after_a_dependency_blocked_never_starts_as_its_others_end(
    on_block: Literal["stop", "continue"],
) -> None:
    """`late` waits for `bad` (blocked already) and `slow` (still running): when `slow`
    ends, `late` must neither start nor break the graph; it is skipped (`continue`) or
    left unstarted (`stop`)."""

    async def main() -> tuple[Scheduler[str], list[str]]:
        waiting, gate = asyncio.Event(), asyncio.Event()
        scheduler, started = _scheduler(on_block, waiting, gate)
        running = asyncio.create_task(scheduler.run())
        await waiting.wait()  # (`bad` ended at once, in the same turn `slow` started)
        assert scheduler.outcomes["bad"] == "bad"
        scheduler.add("late", ["bad", "slow"])
        gate.set()
        scheduler.close()  # (the graph ends once `slow` has)
        await asyncio.wait_for(running, 5)
        return scheduler, started

    scheduler, started = asyncio.run(main())
    assert "late" not in started
    assert scheduler.outcomes["slow"] == "ok"
    if on_block == "continue":
        assert scheduler.outcomes["late"] == "skipped for bad"
        assert scheduler.ended
    else:
        assert "late" not in scheduler.outcomes
        assert not scheduler.ended, "a node that never started counted as ended"
