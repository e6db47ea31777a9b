"""A run whose plan grows while it runs (`RunSettings.growing`, what `planloom plan
--stream` builds on): read-only steps join and start before the plan is whole; `settle`
keeps the early steps the whole plan keeps, forgets the others (cancelling those still
running), and runs the rest; a run cancelled before it settles runs nothing more.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from capabilities import Registry
from engine.approval import ApproveAll
from engine.events import Event, EventBus
from engine.executor import Executor, RunSettings
from engine.model import Plan, Step


def _in_a_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


def _registry(calls: list[tuple[str, Any]]) -> Registry:
    registry = Registry()

    @registry.function("t.read", side_effects=False)
    async def read(key: str, delay: float = 0.0) -> str:
        calls.append(("read", key))
        await asyncio.sleep(delay)
        return key.upper()

    @registry.function("t.fail", side_effects=False)
    async def fail(key: str) -> str:
        calls.append(("fail", key))
        raise RuntimeError(f"no {key}")

    @registry.function("t.write", side_effects=True)
    async def write(key: str, value: str) -> str:
        calls.append(("write", (key, value)))
        return "ok"

    return registry


def _plan(*steps: dict[str, Any]) -> Plan:
    return Plan.model_validate({"name": "grow", "capabilities": {"t": {}}, "steps": list(steps)})


def _read(step_id: str, key: str, delay: float = 0.0, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "tool": "t.read", "params": {"key": key, "delay": delay}, **extra}


def _write(step_id: str, value: str) -> dict[str, Any]:
    return {"id": step_id, "tool": "t.write", "params": {"key": "k", "value": value}}


def _step(plan: Plan, step_id: str) -> Step:
    return next(step for step in plan.steps if step.id == step_id)


class _Seen:
    def __init__(self, bus: EventBus) -> None:
        self.events: list[Event] = []
        bus.subscribe(self.events.append)

    def kinds(self, step_id: str) -> list[str]:
        return [e.kind for e in self.events if e.step_id == step_id]


def _executor(registry: Registry, opening: Plan) -> tuple[Executor, _Seen]:
    bus = EventBus("grow")
    seen = _Seen(bus)
    settings = RunSettings(approver=ApproveAll(), events=bus, growing=True)
    return Executor(opening, registry=registry, base_dir=Path.cwd(), settings=settings), seen


async def _slow_step_running() -> tuple[Executor, _Seen, asyncio.Task[Any]]:
    """A growing run whose one early step (a 30 s read) has started."""
    calls: list[tuple[str, Any]] = []
    partial = _plan(_read("slow", "s", delay=30))
    executor, seen = _executor(_registry(calls), partial)
    run = asyncio.create_task(executor.run())
    assert executor.admit(_step(partial, "slow"))
    await _until(lambda: calls, "the slow step to start")
    return executor, seen, run


async def _until(check: Any, what: str) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@_in_a_loop
async def test_early_steps_run_before_the_plan_is_whole_and_stand_when_kept() -> None:
    calls: list[tuple[str, Any]] = []
    registry = _registry(calls)
    partial = _plan(_read("a", "x"), _read("b", "${{ steps.a.output }}"))
    executor, seen = _executor(registry, partial)
    run = asyncio.create_task(executor.run())
    assert executor.admit(_step(partial, "a"))
    assert executor.admit(_step(partial, "b"))
    assert not executor.admit(_step(partial, "a"))  # once
    await _until(lambda: "b" in executor.results, "the early steps to end")
    assert not run.done()  # the plan is not whole: the run waits for it
    assert calls == [("read", "x"), ("read", "X")]

    whole = _plan(
        _read("a", "x", description="said otherwise: what runs is the same"),
        _read("b", "${{ steps.a.output }}"),
        _write("w", "${{ steps.b.output }}"),
    )
    kept = await executor.settle(whole)
    result = await run
    assert kept == {"a", "b"}
    assert result.status == "succeeded"
    assert list(result.steps) == ["a", "b", "w"]
    assert result.steps["w"].output == "ok"
    # the kept steps ran once; the write came only after the plan was settled
    assert calls == [("read", "x"), ("read", "X"), ("write", ("k", "X"))]
    assert result.usage.tool_calls == 3
    settled = next(i for i, e in enumerate(seen.events) if e.kind == "run.settled")
    started_w = next(
        i for i, e in enumerate(seen.events) if e.kind == "step.started" and e.step_id == "w"
    )
    assert settled < started_w
    assert seen.events[settled].data == {"steps": 3, "kept": ["a", "b"]}


@_in_a_loop
async def test_a_changed_early_step_and_what_reads_it_are_forgotten_and_run_as_the_plan_says() -> (
    None
):
    calls: list[tuple[str, Any]] = []
    registry = _registry(calls)
    partial = _plan(_read("a", "x"), _read("b", "${{ steps.a.output }}"), _read("c", "y"))
    executor, seen = _executor(registry, partial)
    run = asyncio.create_task(executor.run())
    for step_id in ("a", "b", "c"):
        assert executor.admit(_step(partial, step_id))
    await _until(lambda: {"a", "b", "c"} <= set(executor.results), "the early steps to end")

    whole = _plan(_read("a", "z"), _read("b", "${{ steps.a.output }}"), _read("c", "y"))
    kept = await executor.settle(whole)
    result = await run
    assert kept == {"c"}
    assert result.status == "succeeded"
    assert result.steps["a"].output == "Z"
    assert result.steps["b"].output == "Z"
    assert seen.kinds("a").count("step.discarded") == 1
    assert seen.kinds("b").count("step.discarded") == 1
    assert "step.discarded" not in seen.kinds("c")
    assert sorted(calls) == sorted(
        [("read", "x"), ("read", "X"), ("read", "y"), ("read", "z"), ("read", "Z")]
    )
    assert result.usage.tool_calls == 5  # calls made and thrown away were made all the same


@_in_a_loop
async def test_a_running_early_step_the_plan_drops_is_cancelled_and_waited_for() -> None:
    executor, seen, run = await _slow_step_running()
    whole = _plan(_write("w", "v"))
    kept = await asyncio.wait_for(executor.settle(whole), 5)
    result = await asyncio.wait_for(run, 5)
    assert kept == set()
    assert list(result.steps) == ["w"]
    assert result.status == "succeeded"
    assert seen.kinds("slow") == [
        "step.started",
        "attempt.started",
        "tool.called",
        "step.discarded",
    ]


@_in_a_loop
async def test_a_step_reading_one_that_has_not_joined_waits_for_the_whole_plan() -> None:
    registry = _registry([])
    partial = _plan(_write("w", "v"), _read("r", "${{ steps.w.output }}"))
    executor, _ = _executor(registry, partial)
    assert not executor.admit(_step(partial, "r"))
    run = asyncio.create_task(executor.run())
    await executor.settle(partial)
    result = await run
    assert result.status == "succeeded"
    assert result.steps["r"].output == "OK"


@_in_a_loop
async def test_a_run_cancelled_before_its_plan_is_whole_ends_with_nothing_more_started() -> None:
    executor, seen, run = await _slow_step_running()
    executor.cancel()
    result = await asyncio.wait_for(run, 5)
    assert result.status == "cancelled"
    # the plan so far is what the run reports: its early step cancelled
    assert {k: v.status for k, v in result.steps.items()} == {"slow": "cancelled"}
    assert seen.kinds("slow")[-1] == "step.finished"  # cancelled, and said so


@_in_a_loop
async def test_an_early_step_that_failed_and_is_thrown_away_does_not_stop_the_plan() -> None:
    calls: list[tuple[str, Any]] = []
    registry = _registry(calls)
    bad = {"id": "bad", "tool": "t.fail", "params": {"key": "k"}}
    partial = _plan(bad)
    executor, _ = _executor(registry, partial)
    run = asyncio.create_task(executor.run())
    assert executor.admit(_step(partial, "bad"))
    await _until(lambda: "bad" in executor.results, "the early step to fail")
    assert executor.results["bad"].status == "failed"
    await executor.settle(_plan(_read("a", "x"), _write("w", "${{ steps.a.output }}")))
    result = await asyncio.wait_for(run, 5)
    # the failure stopped the graph (on_failure: stop) while it stood; thrown away, it
    # stops nothing, and the plan's own steps all run
    assert result.status == "succeeded"
    assert {k: v.status for k, v in result.steps.items()} == {"a": "succeeded", "w": "succeeded"}
    assert calls[-1] == ("write", ("k", "X"))
