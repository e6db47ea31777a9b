"""The common step's short path (`engine.executor._fast`) against the general path.

Random plans (tools that succeed, fail, suspend, have side effects or run past their
timeout; templates plain and not, nested in params; `when`, `for_each`, fallbacks, retries,
`can_fail`, `confirm`, gates approved or denied, a tool-call budget, `finally` steps, both
`on_failure` modes) run twice, journaled: with the short path and with every step on the
general one (`RunSettings(fast_path=False)`). The two runs must give the same result, the
same events and the same journal entries, times aside.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capabilities import Registry, default_registry
from engine._graph import step_parsed
from engine._step_call import step_call
from engine.app.sqlite_store import open_store
from engine.errors import StepFailed
from engine.events import Event, EventBus
from engine.executor import Executor, RunSettings
from engine.journal import Journal
from engine.sandbox import LiveResults
from engine.store import RunRecord
from engine.testing import FakeClock, ScriptedApprover, instant_sleep
from engine.validation import validate_plan
from planners.recipe import parse_recipe_text

RUN_ID = "differential"
EXAMPLES = 2000
_TIMES = {"seconds", "duration", "at", "started", "finished"}  # (differ from run to run)


def _registry() -> Registry:
    registry = default_registry()

    @registry.function("t.echo", side_effects=False, blocking=False)
    def echo(value: Any = None) -> Any:
        """Return `value`."""
        return value

    @registry.function("t.pause", side_effects=False)
    async def pause(value: Any = None, ticks: int = 1) -> Any:
        """Return `value` after letting the loop run `ticks` times."""
        for _ in range(ticks):
            await asyncio.sleep(0)
        return value

    @registry.function("t.fail", side_effects=False, blocking=False)
    def fail(message: str = "no") -> Any:
        """Fail with `message`."""
        raise StepFailed(f"t.fail: {message}")

    @registry.function("t.crash", side_effects=False, blocking=False)
    def crash(value: Any = None) -> Any:
        """Raise an exception that is not a step error."""
        raise ValueError(f"crashed on {value!r}")

    @registry.function("t.write", blocking=False)
    def write(key: str = "k", value: Any = None) -> dict[str, Any]:
        """A side effect: what was written."""
        return {"wrote": key, "value": value}

    @registry.function("t.hang", side_effects=False)
    async def hang(value: Any = None) -> Any:
        """Never end on its own (its step's timeout ends it)."""
        await asyncio.Event().wait()

    return registry


REGISTRY = _registry()
TOOLS = [*["t.echo"] * 4, *["t.pause", "t.fail", "t.crash"] * 2, *["t.write"] * 4, "t.hang"]


@st.composite
def _value(draw: st.DrawFn, earlier: list[str], depth: int = 0, fans: tuple[str, ...] = ()) -> Any:
    """A params value: literals, templates reading earlier steps, nested containers."""
    choices = ["literal", "literal"]
    if earlier:
        choices += ["plain", "plain", "status", "expression", "text", "missing"]
    if depth < 2:
        choices += ["dict", "list"]
    kind = draw(st.sampled_from(choices))
    if kind == "literal":
        return draw(st.one_of(st.integers(-5, 5), st.text("ab", max_size=3), st.none()))
    if kind == "dict":
        keys = draw(st.lists(st.sampled_from("xyz"), min_size=1, max_size=3, unique=True))
        return {key: draw(_value(earlier, depth + 1, fans)) for key in keys}
    if kind == "list":
        return draw(st.lists(_value(earlier, depth + 1, fans), min_size=1, max_size=3))
    ref = draw(st.sampled_from(earlier))
    if kind == "missing" and ref in fans:  # (a for_each step's output is a list)
        kind = "plain"
    return {
        "plain": f"${{{{ steps.{ref}.output }}}}",
        "status": f"${{{{ steps.{ref}.status }}}}",
        "expression": f"${{{{ steps.{ref}.output | string ~ '!' }}}}",
        "text": f"got ${{{{ steps.{ref}.status }}}}",
        "missing": f"${{{{ steps.{ref}.output.deep }}}}",  # null through a null output
    }[kind]


def _params(draw: st.DrawFn, tool: str, earlier: list[str], fans: tuple[str, ...]) -> Any:
    value = draw(_value(earlier, 0, fans))
    if tool == "t.fail":
        return {"message": draw(st.sampled_from(["a", "b"]))}
    if tool == "t.write":
        return {"key": draw(st.sampled_from(["k1", "k2"])), "value": value}
    if tool == "t.pause":
        return {"value": value, "ticks": draw(st.integers(0, 3))}
    return {"value": value}


@st.composite
def recipes(draw: st.DrawFn) -> tuple[str, dict[str, bool]]:
    """A recipe's text, and the gate's decision for each step."""
    count = draw(st.integers(1, 7))
    steps: list[dict[str, Any]] = []
    decisions: dict[str, bool] = {}
    ids: list[str] = []
    fans: list[str] = []  # the for_each steps
    for index in range(count):
        step_id = f"s{index}"
        tool = draw(st.sampled_from(TOOLS))
        step: dict[str, Any] = {
            "id": step_id,
            "tool": tool,
            "params": _params(draw, tool, ids, tuple(fans)),
        }
        if ids and draw(st.booleans()):
            step["depends_on"] = draw(st.lists(st.sampled_from(ids), max_size=2, unique=True))
        if tool == "t.hang" or draw(st.integers(0, 9)) == 0:
            step["timeout"] = 0.01
        if draw(st.integers(0, 3)) == 0:
            step["can_fail"] = True
        if draw(st.integers(0, 4)) == 0:
            step["confirm"] = draw(st.sampled_from(["always", "never"]))
        if draw(st.integers(0, 6)) == 0:
            step["idempotent"] = True
        extra = draw(st.sampled_from(["none"] * 6 + ["when", "for_each", "fallback", "retry"]))
        if extra == "when":
            step["when"] = draw(
                st.sampled_from(
                    [True, False] + [f"${{{{ steps.{ref}.status == 'succeeded' }}}}" for ref in ids]
                )
            )
        elif extra == "for_each":
            step["for_each"] = draw(st.sampled_from([[1, 2], [], "${{ [3, 4, 5] }}"]))
            fans.append(step_id)
        elif extra == "fallback":
            step["fallback"] = {"tool": "t.echo", "params": {"value": "fb"}}
        elif extra == "retry":
            attempts = draw(st.sampled_from([1, 2]))
            step["retry"] = {"attempts": attempts, "backoff": "fixed", "initial": 0}
        decisions[step_id] = draw(st.booleans())
        steps.append(step)
        ids.append(step_id)
    recipe: dict[str, Any] = {
        "version": 1,
        "name": "differential",
        "capabilities": {"t": {}},
        "on_failure": draw(st.sampled_from(["stop", "continue"])),
        "limits": {"max_parallel": draw(st.integers(1, 4))},
        "steps": steps,
    }
    if draw(st.integers(0, 5)) == 0:
        recipe["limits"]["max_tool_calls"] = draw(st.integers(1, 4))
    if draw(st.integers(0, 4)) == 0:
        recipe["finally"] = [
            {"id": "last", "tool": "t.echo", "params": {"value": "${{ run.status }}"}}
        ]
        decisions["last"] = True
    return json.dumps(recipe), decisions  # (JSON is YAML)


def _run(text: str, decisions: dict[str, bool], fast: bool, store_path: Path) -> dict[str, Any]:
    """Run the recipe journaled; its result, events and journal entries, times left out."""
    data, source = parse_recipe_text(text, "<differential>")
    plan = validate_plan(data, source, REGISTRY, base_dir=Path.cwd())
    events: list[Event] = []
    bus = EventBus(RUN_ID)
    bus.subscribe(events.append)
    store = open_store(store_path)
    try:
        store.begin(
            RunRecord(
                id=RUN_ID,
                name=plan.name,
                recipe=None,
                base_dir=str(Path.cwd()),
                started=time.time(),
                pid=os.getpid(),
            )
        )
        journal = Journal(store, RUN_ID)
        journal.plan(plan.to_data(), inputs={}, model=None)
        executor = Executor(
            plan,
            registry=REGISTRY,
            base_dir=Path.cwd(),
            settings=RunSettings(
                events=bus,
                run_id=RUN_ID,
                approver=journal.approver(ScriptedApprover(dict(decisions))),
                tool_results=journal.results(LiveResults()),
                sleep=instant_sleep,
                fast_path=fast,
            ),
        )
        journal.watch(executor)
        # Virtual time: a step's timeout fires only when every other step waits, so which
        # steps have started when it stops the run is the plan's, not the machine's load
        # (real time let a 10 ms timeout stop a loaded run at a different point each time).
        result = FakeClock().run(executor.run())
        journal.finish(result)
        entries = [(e.kind, e.scope, _timeless(e.data)) for e in store.journal(RUN_ID)]
    finally:
        store.close()
    # Steps that run at once interleave as time lets them (a timeout fires by the clock):
    # each step's own events and entries are compared, in their order; the run's calls are
    # numbered in the order they were made, so not the numbers.
    by_step: dict[str | None, list[Any]] = {}
    for e in events:
        data = {k: v for k, v in _timeless(e.data).items() if k != "call"}
        by_step.setdefault(e.step_id, []).append((e.kind, e.attempt, data))
    by_scope: dict[str | None, list[Any]] = {}
    for kind, scope, data in entries:
        by_scope.setdefault(scope, []).append((kind, data))
    dumped = _timeless(result.model_dump(mode="json"))
    dumped["approvals"].sort(key=lambda decision: (decision["step_id"], decision["action"]))
    return {
        "result": dumped,
        "events": by_step,
        "journal": by_scope,
    }


def _timeless(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _timeless(v) for k, v in data.items() if k not in _TIMES}
    if isinstance(data, list):
        return [_timeless(item) for item in data]
    return data


def _same(recipe: tuple[str, dict[str, bool]]) -> None:
    text, decisions = recipe
    with tempfile.TemporaryDirectory() as folder:
        fast = _run(text, decisions, True, Path(folder) / "fast.db")
        general = _run(text, decisions, False, Path(folder) / "general.db")
    assert fast["result"] == general["result"], text
    assert fast["events"] == general["events"], text
    assert fast["journal"] == general["journal"], text


@pytest.mark.slow
@settings(max_examples=EXAMPLES)
@given(recipes())
def test_the_short_path_gives_what_the_general_path_gives(
    recipe: tuple[str, dict[str, bool]],
) -> None:
    _same(recipe)


@settings(max_examples=100)
@given(recipes())
def test_the_short_path_gives_what_the_general_path_gives_quickly(
    recipe: tuple[str, dict[str, bool]],
) -> None:
    """The same, over fewer plans, for the quick loop (`-m "not slow"`)."""
    _same(recipe)


def test_the_short_path_is_taken_by_common_steps_only() -> None:
    """A step that is one tool call (whatever its params, `can_fail`, `confirm` or
    timeout) takes the short path; a `when`, a `for_each`, a fallback, a retry or an agent
    sends it the general way. Both run it to the same outputs."""
    text = """\
version: 1
name: paths
capabilities: {t: {}}
steps:
  - {id: plain, tool: t.echo, params: {value: {a: ["${{ 1 + 1 }}", 3]}}}
  - {id: read, tool: t.echo, params: {value: "${{ steps.plain.output.a }}"}, can_fail: true}
  - {id: timed, tool: t.write, params: {key: k}, timeout: 5, confirm: never}
  - {id: once, tool: t.echo, retry: {attempts: 1}, when: true}
  - {id: guarded, tool: t.echo, params: {value: 1}, when: "${{ true }}"}
  - {id: many, tool: t.echo, params: {value: "${{ item }}"}, for_each: [1]}
  - {id: backup, tool: t.fail, fallback: {tool: t.echo, params: {value: fb}}}
  - {id: again, tool: t.echo, params: {value: 2}, retry: {attempts: 2}}
"""
    data, source = parse_recipe_text(text, "<paths>")
    plan = validate_plan(data, source, REGISTRY, base_dir=Path.cwd())
    short = {step.id for step in plan.steps if step_call(step) is not None}
    assert short == {"plain", "read", "timed", "once"}
    outputs = []
    for fast in (True, False):
        result = asyncio.run(
            Executor(
                plan, registry=REGISTRY, base_dir=Path.cwd(), sleep=instant_sleep, fast_path=fast
            ).run()
        )
        outputs.append({step_id: step.output for step_id, step in result.steps.items()})
    assert outputs[0] == outputs[1]
    assert outputs[0]["plain"] == {"a": [2, 3]}
    assert outputs[0]["read"] == [2, 3]


def test_a_common_steps_call_is_found_at_validation_and_steps_of_one_shape_share_its_paths() -> (
    None
):
    """Validation keeps each common step's call with the step (the run reads it, not the
    step's fields); steps whose templates stand in the same places share where they go
    and what is data among them."""
    steps = [
        {"id": f"s{i}", "tool": "t.echo", "params": {"value": f"${{{{ steps.s{i - 1}.output }}}}"}}
        for i in range(1, 4)
    ]
    steps.insert(0, {"id": "s0", "tool": "t.echo", "params": {"value": "x-${{ 1 }}"}})
    recipe = {"version": 1, "name": "shapes", "capabilities": {"t": {}}, "steps": steps}
    data, source = parse_recipe_text(json.dumps(recipe), "<shapes>")
    plan = validate_plan(data, source, REGISTRY, base_dir=Path.cwd())
    assert all("_call" in (step.__pydantic_private__ or {}) for step in plan.steps)
    # The call holds the templates: the step keeps them parsed no more, and parses them
    # again if asked.
    assert all("_parsed" not in (step.__pydantic_private__ or {}) for step in plan.steps)
    assert [source for _, source, _ in step_parsed(plan.steps[1])] == ["${{ steps.s0.output }}"]
    calls = [step_call(step) for step in plan.steps]
    assert all(call is not None for call in calls)
    first, *alike = [call for call in calls if call is not None]
    assert first.data_paths == frozenset()  # text around its template: the author's words
    assert all(call.data_paths == {("value",)} for call in alike)
    assert alike[0].wheres is alike[1].wheres is alike[2].wheres
    assert alike[0].data_paths is alike[2].data_paths
    assert [call.templates[0].source for call in alike] == [
        "${{ steps.s0.output }}",
        "${{ steps.s1.output }}",
        "${{ steps.s2.output }}",
    ]
