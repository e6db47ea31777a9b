"""Steps started at once and made tasks only if they wait (`engine._support.eager`).

The primitive first: a coroutine that ends without waiting gives its value with no task
made; one that waits goes on as a task from where it stopped (results, exceptions and
cancellation reach it where it waits); `as_task()` gives code that needs one a task of its
own. Then the executor: steps of in-process functions end without tasks, ready siblings
all start though one of them fails at once, and a long run of such steps still gives the
event loop its turns (a `max_duration` timer fires in the middle of it).
"""

from __future__ import annotations

import ast
import asyncio
import contextvars
import json
import time
from pathlib import Path
from typing import Any

import pytest

from capabilities import Registry, default_registry
from engine._support.eager import as_task, start
from engine.testing import run_recipe_text

ROOT = Path(__file__).resolve().parent.parent
_mark: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="starter")


# -- the primitive ---------------------------------------------------------------------


async def _started(coro: Any) -> tuple[Any, asyncio.Task[Any] | None]:
    """`coro` started at once, and the task its rest runs in (None: it ended at once)."""
    value, waiting = start(coro, contextvars.copy_context())
    if waiting is None:
        return value, None
    task = asyncio.get_running_loop().create_task(waiting.rest(), context=waiting.context)
    return None, task


def test_a_coroutine_that_never_waits_ends_in_its_starters_turn_with_no_task() -> None:
    async def quick() -> str:
        _mark.set("quick")
        return "done"

    async def main() -> tuple[Any, Any, int, str]:
        before = len(asyncio.all_tasks())
        value, task = await _started(quick())
        return value, task, len(asyncio.all_tasks()) - before, _mark.get()

    value, task, made, mark = asyncio.run(main())
    assert (value, task, made) == ("done", None, 0)
    assert mark == "starter", "a started coroutine's context variables leaked to its starter"


def test_a_coroutine_that_waits_goes_on_as_a_task_with_what_it_waited_for() -> None:
    seen: list[Any] = []

    async def waits(first: asyncio.Future[int], second: asyncio.Future[int]) -> int:
        _mark.set("mine")
        got = await first
        seen.append(_mark.get())  # its own context, in the task as before it
        try:
            await second
        except KeyError as exc:
            seen.append(exc.args[0])
        return got * 2

    async def main() -> int:
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        value, task = await _started(waits(first, second))
        assert value is None
        assert task is not None
        loop.call_soon(first.set_result, 21)
        loop.call_later(0.01, second.set_exception, KeyError("thrown in"))
        result = await task
        assert _mark.get() == "starter"
        return result

    assert asyncio.run(main()) == 42
    assert seen == ["mine", "thrown in"]


def test_a_started_coroutine_is_cancelled_where_it_waits_and_sees_its_task_cancelling() -> None:
    seen: list[Any] = []

    async def waits() -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            seen.append(task.cancelling() if task is not None else None)
            raise
        return "never"

    async def main() -> None:
        _, task = await _started(waits())
        assert task is not None
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == [1]


def test_as_task_makes_a_started_coroutine_a_task_of_its_own_and_is_free_in_a_task() -> None:
    seen: dict[str, Any] = {}

    async def needs_a_task() -> str:
        seen["before"] = asyncio.current_task()
        await as_task()
        seen["after"] = asyncio.current_task()
        try:
            async with asyncio.timeout(0.01):  # cancels the task it runs in: its own
                await asyncio.Event().wait()
        except TimeoutError:
            return "timed out"
        return "never"

    async def in_a_task() -> int:
        turns = [0]
        asyncio.get_running_loop().call_soon(lambda: turns.__setitem__(0, 1))
        await as_task()
        return turns[0]  # 0: as_task gave the loop no turn

    async def main() -> None:
        starter = asyncio.current_task()
        _, task = await _started(needs_a_task())
        assert task is not None
        assert await task == "timed out"
        assert seen["before"] is starter
        assert seen["after"] is task
        await asyncio.sleep(0.02)  # the starter was not cancelled by the timeout
        assert await asyncio.get_running_loop().create_task(in_a_task()) == 0

    asyncio.run(main())


def test_a_task_made_in_a_first_turn_is_a_task_of_its_own_for_as_task() -> None:
    """A task the coroutine makes before it waits inherits its context: `as_task` in it
    must not take it for the coroutine still in its starter's turn."""

    async def child() -> str:
        await as_task()  # a task already: nothing to do (a yield here would break it)
        try:
            async with asyncio.timeout(0.01):  # cancels this task, not the starter
                await asyncio.Event().wait()
        except TimeoutError:
            return "child timed out"
        return "never"

    async def makes_a_task() -> asyncio.Task[str]:
        return asyncio.get_running_loop().create_task(child())

    async def main() -> str:
        made, rest = await _started(makes_a_task())
        assert rest is None
        return await made

    assert asyncio.run(main()) == "child timed out"


# -- the executor ----------------------------------------------------------------------


def _registry() -> Registry:
    registry = default_registry()

    @registry.function("t.echo", side_effects=False, blocking=False)
    def echo(value: Any = None) -> Any:
        """Return `value`."""
        return value

    @registry.function("t.slow", side_effects=False, blocking=False)
    def slow(value: Any = None) -> Any:
        """Return `value` after 2 ms of work that never gives the event loop a turn."""
        time.sleep(0.002)
        return value

    @registry.function("t.fail", side_effects=False, blocking=False)
    def fail() -> Any:
        """Fail at once."""
        raise ValueError("no")

    @registry.function("t.pause", side_effects=False)
    async def pause(value: Any = None) -> Any:
        """Return `value` after letting the loop run once."""
        await asyncio.sleep(0)
        return value

    return registry


REGISTRY = _registry()


def _recipe(steps: list[dict[str, Any]], **top: Any) -> str:
    return json.dumps(
        {"version": 1, "name": "eager", "capabilities": {"t": {}}, "steps": steps, **top}
    )


def _chain(count: int, tool: str) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = [{"id": "s0", "tool": tool, "params": {"value": 0}}]
    for index in range(1, count):
        read = f"${{{{ steps.s{index - 1}.output }}}}"
        steps.append({"id": f"s{index}", "tool": tool, "params": {"value": read}})
    return steps


def _tasks_made(text: str) -> tuple[int, Any]:
    """How many tasks a run of `text` made, and its result."""
    made = [0]

    # (run_recipe_text runs a loop of its own: counted through the policy that makes it)
    class Counting(asyncio.DefaultEventLoopPolicy):
        def new_event_loop(self) -> asyncio.AbstractEventLoop:
            loop = super().new_event_loop()

            def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
                made[0] += 1
                return asyncio.Task(coro, loop=loop, **kwargs)

            loop.set_task_factory(factory)
            return loop

    before = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(Counting())
    try:
        result = run_recipe_text(text, REGISTRY)
    finally:
        asyncio.set_event_loop_policy(before)
    return made[0], result


def test_steps_that_never_wait_make_no_task_and_a_step_that_waits_makes_one() -> None:
    quick_tasks, quick = _tasks_made(_recipe(_chain(200, "t.echo")))
    assert quick.status == "succeeded"
    assert quick.steps["s199"].output == 0
    waiting_tasks, waiting = _tasks_made(_recipe(_chain(200, "t.pause")))
    assert waiting.status == "succeeded"
    assert waiting.steps["s199"].output == 0
    # The run's own few tasks (the run, the graph) either way; one more per waiting step.
    assert quick_tasks < 10, f"{quick_tasks} tasks for 200 steps that never wait"
    assert waiting_tasks >= quick_tasks + 200


def test_siblings_ready_together_all_start_though_one_fails_at_once() -> None:
    steps = [
        {"id": "bad", "tool": "t.fail"},
        {"id": "sibling", "tool": "t.echo", "params": {"value": 1}},
        {"id": "child", "tool": "t.echo", "depends_on": ["sibling"]},
    ]
    result = run_recipe_text(_recipe(steps, on_failure="stop"), REGISTRY)
    assert result.steps["bad"].status == "failed"
    assert result.steps["sibling"].status == "succeeded", "a sibling ready with it never started"
    assert result.steps["child"].status == "pending", "a step started after the failure"
    one_slot = run_recipe_text(
        _recipe(steps, on_failure="stop", limits={"max_parallel": 1}), REGISTRY
    )
    assert one_slot.steps["bad"].status == "failed"
    assert one_slot.steps["sibling"].status == "pending", "it started with no free slot"


def test_a_long_run_of_steps_that_never_wait_still_gives_the_loop_its_turns() -> None:
    """300 steps of 2 ms each that never wait: 0.6 s. The run's 0.1 s `max_duration` is a
    timer on the event loop; it fires only if the loop gets a turn between steps."""
    started = time.monotonic()
    result = run_recipe_text(_recipe(_chain(300, "t.slow"), limits={"max_duration": 0.1}), REGISTRY)
    took = time.monotonic() - started
    assert result.status == "failed"
    assert any("max_duration" in error for error in result.errors)
    done = sum(1 for step in result.steps.values() if step.status == "succeeded")
    assert 0 < done < 300
    assert took < 0.45, f"the run went on for {took:.2f} s past a 0.1 s max_duration"


# -- where a task of its own is needed ---------------------------------------------------

# Code that runs in a step needs its own task for an `asyncio.timeout` (it cancels the task
# it is in) and a `TaskGroup` (it cancels its parent task when a child fails): it awaits
# `as_task()` first in the same function. These run where a step cannot have started them
# at once, each with the reason.
_NOT_IN_A_FIRST_TURN = {
    ("engine/executor/_scheduler.py", "run"): "the graph's own task, not a step",
    ("engine/llm/__init__.py", "_attempt"): "a model call: an agent step's, after its as_task",
    ("engine/app/dask_backend.py", "run"): "behind the sandbox's backend call, after as_task",
}
_NEEDS_A_TASK = {"timeout", "timeout_at", "TaskGroup"}


def _needs_a_task(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _NEEDS_A_TASK
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "asyncio"
    )


def _awaits_as_task(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Await)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "as_task"
    )


def test_engine_code_that_needs_a_task_of_its_own_asks_for_one_first() -> None:
    found: dict[tuple[str, str], str] = {}
    for path in sorted((ROOT / "engine").rglob("*.py")):
        module = str(path.relative_to(ROOT))
        for function in ast.walk(ast.parse(path.read_text())):
            if not isinstance(function, ast.AsyncFunctionDef):
                continue
            body = [n for n in ast.walk(function) if n is not function]
            uses = [n for n in body if _needs_a_task(n)]
            if not uses:
                continue
            asked = [n.lineno for n in body if _awaits_as_task(n)]
            first_use = min(n.lineno for n in uses)
            if asked and min(asked) < first_use:
                found[(module, function.name)] = "asks"
            else:
                found[(module, function.name)] = "does not ask"
    unasked = {key for key, how in found.items() if how == "does not ask"}
    assert unasked == set(_NOT_IN_A_FIRST_TURN), (
        "engine code using asyncio.timeout or a TaskGroup without `await as_task()` before "
        f"it: {sorted(unasked - set(_NOT_IN_A_FIRST_TURN))}; listed but gone or asking now: "
        f"{sorted(set(_NOT_IN_A_FIRST_TURN) - unasked)}"
    )
    assert {key for key, how in found.items() if how == "asks"} >= {
        ("engine/_support/execute.py", "execute"),
        ("engine/executor/_attempts.py", "items"),
    }
