"""The executor against the README's "Step semantics", one focused test per rule.

Every run goes through `ScriptedTools` (`test.run` is read-only, `test.write` is gated) and
the real validation, so a recipe here is a recipe a user could write. Every helper run also
checks the one rule that holds for all runs: every step ends in a terminal status.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from capabilities import Registry
from engine.approval import ApproveAll, DenyAll, GateRequest
from engine.events import EventBus
from engine.executor import Executor, RunSettings
from engine.results import TERMINAL, Decision, RunResult, StepResult
from engine.testing import (
    Call,
    Fail,
    FakeClock,
    Hang,
    Raise,
    ScriptedTools,
    Wait,
    run_recipe_text,
)
from engine.validation import validate_plan
from planners.recipe import parse_recipe_text

# -- helpers -----------------------------------------------------------------------------


@pytest.fixture
def tools(registry: Registry) -> ScriptedTools:
    return ScriptedTools(registry)


def step(
    sid: str, key: str | None = None, *, tool: str = "test.run", **fields: Any
) -> dict[str, Any]:
    """A step calling `tool` with `{key: key or sid}`; `fields` are extra step keys."""
    params = {"key": key or sid}
    if "value" in fields:
        params["value"] = fields.pop("value")
    return {"id": sid, "tool": tool, "params": params, **fields}


def recipe(steps: list[dict[str, Any]], **top: Any) -> str:
    """Recipe text (JSON is YAML) with the `test` capability granted."""
    top = {k.rstrip("_"): v for k, v in top.items()}  # `finally_=` for the `finally` key
    return json.dumps(
        {"version": 1, "name": "t", "capabilities": {"test": {}}, "steps": steps, **top}
    )


def check_terminal(result: RunResult) -> RunResult:
    bad = {sid: r.status for sid, r in result.steps.items() if r.status not in TERMINAL}
    assert not bad, f"steps not in a terminal status: {bad}"
    return result


def run(registry: Registry, steps: list[dict[str, Any]], **kwargs: Any) -> RunResult:
    """Run a recipe built from `steps` on a `FakeClock` (its `Wait`s, timeouts and deadlines
    pass at once, in order); kwargs go to the recipe or to `run_recipe_text`."""
    options = {k: kwargs.pop(k) for k in ("approver", "sleep", "clock") if k in kwargs}
    options.setdefault("clock", FakeClock())
    return check_terminal(run_recipe_text(recipe(steps, **kwargs), registry, **options))


def statuses(result: RunResult) -> dict[str, str]:
    return {sid: r.status for sid, r in result.steps.items()}


def max_concurrency(calls: list[Call]) -> int:
    """The most calls that were in flight at the same moment."""
    events = sorted(
        [(c.started, 1) for c in calls]
        + [(float("inf") if c.ended is None else c.ended, -1) for c in calls],
        key=lambda e: (e[0], e[1]),  # an end at the same instant as a start comes first
    )
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


def executor_for(
    registry: Registry, steps: list[dict[str, Any]], tmp_path: Path, **kwargs: Any
) -> Executor:
    options = {k: kwargs.pop(k) for k in ("approver", "sleep") if k in kwargs}
    data, source = parse_recipe_text(recipe(steps, **kwargs), "<test>")
    plan = validate_plan(data, source, registry, base_dir=tmp_path)
    return Executor(plan, registry=registry, base_dir=tmp_path, **options)


class RecordingSleep:
    """A fake retry sleep that remembers every wait it was asked for."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        await asyncio.sleep(0)


# -- readiness -----------------------------------------------------------------------------


def test_step_starts_only_after_every_dependency_ended(
    registry: Registry, tools: ScriptedTools
) -> None:
    tools.script("slow", Wait(0.3, "s"))
    tools.script("fast", Wait(0.01, "f"))
    result = run(
        registry,
        [step("slow"), step("fast"), step("join", depends_on=["slow", "fast"])],
    )
    assert statuses(result) == dict.fromkeys(("slow", "fast", "join"), "succeeded")
    (join,) = tools.calls_for("join")
    for dep in ("slow", "fast"):
        (call,) = tools.calls_for(dep)
        assert call.ended is not None
        assert join.started >= call.ended


def test_satisfied_dependencies_count_and_carry_null_output_and_a_reason(
    registry: Registry, tools: ScriptedTools
) -> None:
    tools.script("acceptable", Fail("acceptable broke"))
    tools.script("primary", Fail("primary broke"))
    tools.script("backup", "from backup")
    seen = {
        f"{dep}_{field}": f"${{{{ steps.{dep}.{field} }}}}"
        for dep in ("skip", "acceptable", "fb")
        for field in ("output", "error", "status")
    }
    result = run(
        registry,
        [
            step("skip", when=False),
            step("acceptable", can_fail=True),
            step(
                "fb",
                "primary",
                fallback={"tool": "test.run", "params": {"key": "backup"}},
            ),
            step("after", value=seen),
        ],
    )
    assert result.status == "succeeded"
    assert result.steps["after"].status == "succeeded"
    out = result.steps["after"].output
    assert out["skip_status"] == "skipped"
    assert out["skip_output"] is None
    assert "when" in out["skip_error"]
    assert out["acceptable_status"] == "failed_acceptable"
    assert out["acceptable_output"] is None
    assert "acceptable broke" in out["acceptable_error"]
    # A fallback step's output is what its fallback produced; the error keeps the reason.
    assert out["fb_status"] == "fallback"
    assert out["fb_output"] == "from backup"
    assert "primary broke" in out["fb_error"]


@pytest.mark.parametrize("mode", ["stop", "continue"])
def test_failed_or_denied_dependency_never_lets_a_dependent_start(
    registry: Registry, tools: ScriptedTools, mode: str
) -> None:
    tools.script("bad", Fail("nope"))
    result = run(
        registry,
        [
            step("bad"),
            step("gated", tool="test.write"),
            step("after_bad", depends_on=["bad"]),
            step("after_gated", depends_on=["gated"]),
        ],
        on_failure=mode,
        approver=DenyAll(),
        limits={"max_parallel": 4},
    )
    assert result.steps["bad"].status == "failed"
    assert result.steps["gated"].status == "denied"
    assert tools.calls_for("after_bad") == []
    assert tools.calls_for("after_gated") == []
    expected = "pending" if mode == "stop" else "skipped"
    assert result.steps["after_bad"].status == expected
    assert result.steps["after_gated"].status == expected
    assert result.status == "failed"


def test_ready_steps_start_at_once_without_rounds(registry: Registry, tools: ScriptedTools) -> None:
    """F1 shares a "layer" with S; a round-based executor would hold F2 until S ended."""
    tools.script("S", Wait(1.0, "s"))
    for key in ("F1", "F2", "F3"):
        tools.script(key, Wait(0.05, key))
    result = run(
        registry,
        [
            step("S"),
            step("F1"),
            step("F2", depends_on=["F1"]),
            step("F3", depends_on=["F2"]),
            step("T", depends_on=["S", "F1"]),
        ],
        limits={"max_parallel": 4},
    )
    assert set(statuses(result).values()) == {"succeeded"}
    (slow,) = tools.calls_for("S")
    (f3,) = tools.calls_for("F3")
    assert f3.ended is not None
    assert slow.ended is not None
    assert f3.ended < slow.ended - 0.3  # F3 needs ~0.15 s of a 1 s window


# -- retries -------------------------------------------------------------------------------


def test_retry_counts_attempts_until_success(registry: Registry, tools: ScriptedTools) -> None:
    tools.script("flaky", Fail("1"), Fail("2"), "ok")
    result = run(registry, [step("flaky", retry={"attempts": 3, "initial": 0})])
    assert result.steps["flaky"].status == "succeeded"
    assert result.steps["flaky"].output == "ok"
    assert result.steps["flaky"].attempts == 3
    assert [c.outcome for c in tools.calls_for("flaky")] == ["StepFailed", "StepFailed", "ok"]


def test_retry_gives_up_after_the_allowed_attempts(
    registry: Registry, tools: ScriptedTools
) -> None:
    tools.script("broken", Fail("still broken"))
    result = run(registry, [step("broken", retry={"attempts": 3, "initial": 0})])
    assert result.steps["broken"].status == "failed"
    assert result.steps["broken"].attempts == 3
    assert len(tools.calls_for("broken")) == 3
    assert "still broken" in (result.steps["broken"].error or "")


def test_retry_by_default_retries_both_errors_and_timeouts(
    registry: Registry, tools: ScriptedTools
) -> None:
    tools.script("flaky", Hang(), Fail("error"), Raise(OSError("io")), "ok")
    result = run(registry, [step("flaky", retry={"attempts": 4, "initial": 0}, timeout=0.05)])
    assert result.steps["flaky"].status == "succeeded"
    assert result.steps["flaky"].attempts == 4
    assert [c.outcome for c in tools.calls_for("flaky")] == [
        "cancelled",
        "StepFailed",
        "OSError",
        "ok",
    ]


def test_retry_on_timeout_does_not_retry_errors(registry: Registry, tools: ScriptedTools) -> None:
    tools.script("err", Fail("plain error"), "ok")
    tools.script("slow", Hang(), Hang(), "ok")
    result = run(
        registry,
        [
            step("err", retry={"attempts": 3, "initial": 0, "on": ["timeout"]}),
            step("slow", retry={"attempts": 3, "initial": 0, "on": ["timeout"]}, timeout=0.05),
        ],
        on_failure="continue",
    )
    assert result.steps["err"].status == "failed"
    assert result.steps["err"].attempts == 1
    assert len(tools.calls_for("err")) == 1
    assert result.steps["slow"].status == "succeeded"
    assert result.steps["slow"].attempts == 3


def test_retry_on_error_does_not_retry_timeouts(registry: Registry, tools: ScriptedTools) -> None:
    tools.script("slow", Hang(), "ok")
    tools.script("err", Fail("once"), "ok")
    result = run(
        registry,
        [
            step("slow", retry={"attempts": 3, "initial": 0, "on": ["error"]}, timeout=0.05),
            step("err", retry={"attempts": 3, "initial": 0, "on": ["error"]}),
        ],
        on_failure="continue",
    )
    assert result.steps["slow"].status == "failed"
    assert result.steps["slow"].attempts == 1
    assert "timed out" in (result.steps["slow"].error or "")
    assert len(tools.calls_for("slow")) == 1
    assert result.steps["err"].status == "succeeded"
    assert result.steps["err"].attempts == 2


@pytest.mark.parametrize(
    ("policy", "waits"),
    [
        ({"backoff": "exponential", "initial": 1, "max": 5}, [1, 2, 4, 5, 5]),
        ({"backoff": "exponential", "initial": 0.5, "max": 30}, [0.5, 1, 2, 4, 8]),
        ({"backoff": "fixed", "initial": 2, "max": 1}, [2, 2, 2, 2, 2]),
    ],
)
def test_backoff_waits_passed_to_the_injected_sleep(
    registry: Registry, tools: ScriptedTools, policy: dict[str, Any], waits: list[float]
) -> None:
    tools.script("flaky", Fail("again"))
    sleep = RecordingSleep()
    result = run(registry, [step("flaky", retry={"attempts": 6, **policy})], sleep=sleep)
    assert result.steps["flaky"].attempts == 6
    assert sleep.waits == pytest.approx(waits)


def test_a_denial_is_never_retried(registry: Registry, tools: ScriptedTools) -> None:
    sleep = RecordingSleep()
    result = run(
        registry,
        [step("w", tool="test.write", retry={"attempts": 5, "initial": 1})],
        approver=DenyAll(),
        sleep=sleep,
    )
    assert result.steps["w"].status == "denied"
    assert result.steps["w"].attempts == 1
    assert tools.calls == []
    assert sleep.waits == []
    assert len(result.approvals) == 1


# -- fallback, can_fail, denial --------------------------------------------------------------


def test_fallback_success_gives_status_fallback_and_its_output(
    registry: Registry, tools: ScriptedTools
) -> None:
    tools.script("primary", Fail("primary down"))
    result = run(
        registry,
        [step("s", "primary", fallback={"tool": "test.run", "params": {"key": "b", "value": 7}})],
    )
    assert result.steps["s"].status == "fallback"
    assert result.steps["s"].output == 7
    assert "primary down" in (result.steps["s"].error or "")
    assert result.status == "succeeded"


def test_fallback_runs_after_retries_are_exhausted(
    registry: Registry, tools: ScriptedTools
) -> None:
    tools.script("primary", Fail("down"))
    result = run(
        registry,
        [
            step(
                "s",
                "primary",
                retry={"attempts": 2, "initial": 0},
                fallback={"tool": "test.run", "params": {"key": "b", "value": 1}},
            )
        ],
    )
    assert result.steps["s"].status == "fallback"
    primary_calls = tools.calls_for("primary")
    (backup,) = tools.calls_for("b")
    assert len(primary_calls) == 2
    assert all(c.ended is not None and c.ended <= backup.started for c in primary_calls)


def test_failing_fallback_fails_the_step_naming_both_errors(
    registry: Registry, tools: ScriptedTools
) -> None:
    tools.script("primary", Fail("primary down"))
    tools.script("b", Fail("backup down too"))
    result = run(
        registry, [step("s", "primary", fallback={"tool": "test.run", "params": {"key": "b"}})]
    )
    assert result.steps["s"].status == "failed"
    error = result.steps["s"].error or ""
    assert "primary down" in error
    assert "backup down too" in error
    assert result.status == "failed"


def test_can_fail_gives_failed_acceptable_and_a_succeeded_run(
    registry: Registry, tools: ScriptedTools
) -> None:
    tools.script("s", Fail("meh"))
    result = run(registry, [step("s", can_fail=True), step("t", depends_on=["s"])])
    assert result.steps["s"].status == "failed_acceptable"
    assert result.steps["s"].error == "meh"
    assert result.steps["t"].status == "succeeded"
    assert result.status == "succeeded"


def test_can_fail_with_failing_fallback_is_failed_acceptable(
    registry: Registry, tools: ScriptedTools
) -> None:
    tools.script("s", Fail("a"))
    tools.script("b", Fail("b"))
    result = run(
        registry,
        [step("s", can_fail=True, fallback={"tool": "test.run", "params": {"key": "b"}})],
    )
    assert result.steps["s"].status == "failed_acceptable"
    assert result.status == "succeeded"


def test_denied_step_without_recovery_is_denied_and_fails_the_run(
    registry: Registry, tools: ScriptedTools
) -> None:
    result = run(registry, [step("w", tool="test.write")], approver=DenyAll())
    assert result.steps["w"].status == "denied"
    assert "denied by approver" in (result.steps["w"].error or "")
    assert result.status == "failed"
    assert tools.calls == []


def test_denied_step_with_can_fail_is_failed_acceptable(
    registry: Registry, tools: ScriptedTools
) -> None:
    result = run(registry, [step("w", tool="test.write", can_fail=True)], approver=DenyAll())
    assert result.steps["w"].status == "failed_acceptable"
    assert "denied by approver" in (result.steps["w"].error or "")
    assert result.status == "succeeded"


def test_denied_step_with_fallback_is_fallback(registry: Registry, tools: ScriptedTools) -> None:
    result = run(
        registry,
        [
            step(
                "w",
                tool="test.write",
                fallback={"tool": "test.run", "params": {"key": "safe", "value": "kept"}},
            )
        ],
        approver=DenyAll(),
    )
    assert result.steps["w"].status == "fallback"
    assert result.steps["w"].output == "kept"
    assert "denied by approver" in (result.steps["w"].error or "")
    assert [c.key for c in tools.calls] == ["safe"]
    assert result.status == "succeeded"


# -- on_failure ----------------------------------------------------------------------------


def test_on_failure_stop_lets_in_flight_finish_and_starts_nothing_new(
    registry: Registry, tools: ScriptedTools
) -> None:
    tools.script("bad", Wait(0.05, Fail("critical")))
    tools.script("sibling", Wait(0.4, "done"))
    result = run(
        registry,
        [
            step("bad"),
            step("sibling"),
            step("queued"),  # independent, but no free slot until after the failure
            step("child", depends_on=["sibling"]),
        ],
        on_failure="stop",
        limits={"max_parallel": 2},
    )
    assert statuses(result) == {
        "bad": "failed",
        "sibling": "succeeded",
        "queued": "pending",
        "child": "pending",
    }
    assert result.steps["sibling"].output == "done"
    assert [c.key for c in tools.calls] == ["bad", "sibling"]
    (bad,) = tools.calls_for("bad")
    assert bad.ended is not None
    assert all(c.started <= bad.ended for c in tools.calls)
    assert result.status == "failed"


def test_on_failure_stop_starts_nothing_after_a_failure_in_the_same_tick(
    registry: Registry, tools: ScriptedTools
) -> None:
    """`done` finishes just before `bad` fails, in one loop tick; `child` must not start.

    Both calls complete without suspending, so `bad` has failed before the scheduler gets
    round to starting `done`'s dependent: starting it then is a new start after a failure.
    """
    tools.script("bad", Fail("critical"))
    result = run(
        registry,
        [step("done"), step("bad"), step("child", depends_on=["done"])],
        on_failure="stop",
        limits={"max_parallel": 4},
    )
    (bad,) = tools.calls_for("bad")
    assert bad.ended is not None
    late = [c.key for c in tools.calls if c.started > bad.ended]
    assert late == [], f"started after the critical failure: {late}"
    assert statuses(result) == {"done": "succeeded", "bad": "failed", "child": "pending"}


def test_on_failure_continue_skips_only_transitive_dependents(
    registry: Registry, tools: ScriptedTools
) -> None:
    tools.script("bad", Fail("critical"))
    result = run(
        registry,
        [
            step("bad"),
            step("child", depends_on=["bad"]),
            step("grandchild", depends_on=["child"]),
            step("other"),
            step("other_child", depends_on=["other"]),
            step("mixed", depends_on=["other", "grandchild"]),
        ],
        on_failure="continue",
    )
    assert statuses(result) == {
        "bad": "failed",
        "child": "skipped",
        "grandchild": "skipped",
        "other": "succeeded",
        "other_child": "succeeded",
        "mixed": "skipped",
    }
    for sid in ("child", "grandchild", "mixed"):
        assert "'bad'" in (result.steps[sid].error or ""), sid
        assert tools.calls_for(sid) == []
    assert result.status == "failed"


# -- when ----------------------------------------------------------------------------------


@pytest.mark.parametrize("when", [False, "${{ steps.first.output == 'go' }}"])
def test_when_false_skips_the_step_but_not_its_dependents(
    registry: Registry, tools: ScriptedTools, when: bool | str
) -> None:
    result = run(
        registry,
        [
            step("first", value="stop"),
            step("maybe", when=when, depends_on=["first"]),
            step("after", depends_on=["maybe"]),
        ],
    )
    assert result.steps["maybe"].status == "skipped"
    assert tools.calls_for("maybe") == []
    assert result.steps["after"].status == "succeeded"
    assert result.status == "succeeded"


def test_when_true_template_runs_the_step(registry: Registry, tools: ScriptedTools) -> None:
    result = run(
        registry,
        [
            step("first", value="go"),
            step("maybe", when="${{ steps.first.output == 'go' }}"),
        ],
    )
    assert result.steps["maybe"].status == "succeeded"
    assert len(tools.calls_for("maybe")) == 1


def test_when_template_error_fails_the_step(registry: Registry, tools: ScriptedTools) -> None:
    result = run(
        registry,
        [
            step("first", value={"a": 1}),
            step("maybe", when="${{ steps.first.output.missing.deeper }}"),
            step("sibling"),
        ],
        on_failure="continue",
    )
    assert result.steps["maybe"].status == "failed"
    assert "template" in (result.steps["maybe"].error or "")
    assert tools.calls_for("maybe") == []
    assert result.steps["sibling"].status == "succeeded"
    assert result.status == "failed"


# -- for_each ------------------------------------------------------------------------------


def test_for_each_output_is_in_item_order_with_item_and_index(
    registry: Registry, tools: ScriptedTools
) -> None:
    tools.script("k0", Wait(0.2, "first"))
    tools.script("k1", Wait(0.0, "second"))
    tools.script("k2", Wait(0.1, "third"))
    result = run(
        registry,
        [
            step("ordered", "k${{ index }}", for_each=["a", "b", "c"]),
            step(
                "labels",
                "label",
                for_each="${{ steps.source.output }}",
                value="${{ index }}:${{ item }}",
            ),
            step("source", value=["x", "y", "z"]),
        ],
    )
    assert result.steps["ordered"].status == "succeeded"
    assert result.steps["ordered"].output == ["first", "second", "third"]
    # Completion order differed from item order, so order is not an accident.
    ends = sorted(tools.calls, key=lambda c: float("inf") if c.ended is None else c.ended)
    assert [c.key for c in ends if c.key.startswith("k")] == ["k1", "k2", "k0"]
    assert result.steps["labels"].output == ["0:x", "1:y", "2:z"]


def test_for_each_honours_step_max_parallel(registry: Registry, tools: ScriptedTools) -> None:
    tools.script("item", Wait(0.1, "ok"))
    result = run(
        registry,
        [step("many", "item", for_each=list(range(6)), max_parallel=2)],
        limits={"max_parallel": 8},
    )
    assert result.steps["many"].status == "succeeded"
    assert result.steps["many"].output == ["ok"] * 6
    calls = tools.calls_for("item")
    assert len(calls) == 6
    assert max_concurrency(calls) == 2


def test_for_each_one_failing_item_fails_the_step(registry: Registry, tools: ScriptedTools) -> None:
    tools.script("i1", Fail("item one broke"))
    result = run(
        registry,
        [
            step("each", "i${{ index }}", for_each=[0, 1, 2]),
            step("each_ok", "j${{ index }}", for_each=[0, 1], can_fail=True),
            step("each_acceptable", "i${{ index }}", for_each=[0, 1], can_fail=True),
        ],
        on_failure="continue",
    )
    assert result.steps["each"].status == "failed"
    assert "item 1" in (result.steps["each"].error or "")
    assert "item one broke" in (result.steps["each"].error or "")
    assert result.steps["each_ok"].status == "succeeded"
    assert result.steps["each_acceptable"].status == "failed_acceptable"
    assert result.status == "failed"


def test_for_each_over_a_non_list_fails_clearly(registry: Registry, tools: ScriptedTools) -> None:
    result = run(
        registry,
        [
            step("source", value={"not": "a list"}),
            step("each", "x", for_each="${{ steps.source.output }}"),
        ],
    )
    assert result.steps["each"].status == "failed"
    error = result.steps["each"].error or ""
    assert "for_each" in error
    assert "list" in error
    assert tools.calls_for("x") == []


# -- timeouts, limits, crashes -------------------------------------------------------------


def test_per_attempt_timeout_fails_the_step(registry: Registry, tools: ScriptedTools) -> None:
    tools.script("stuck", Hang())
    clock = FakeClock()
    result = run(registry, [step("stuck", timeout=0.2)], clock=clock)
    assert result.steps["stuck"].status == "failed"
    assert "timed out" in (result.steps["stuck"].error or "")
    assert clock.time() == pytest.approx(0.2)
    (call,) = tools.calls_for("stuck")
    assert call.ended is not None
    assert call.ended - call.started >= 0.15


def test_limits_max_parallel_is_honoured(registry: Registry, tools: ScriptedTools) -> None:
    for i in range(6):
        tools.script(f"s{i}", Wait(0.1, i))
    result = run(
        registry,
        [step(f"s{i}") for i in range(6)],
        limits={"max_parallel": 2},
    )
    assert set(statuses(result).values()) == {"succeeded"}
    assert max_concurrency(tools.calls) == 2


def test_by_default_ready_steps_start_at_once_up_to_64(
    registry: Registry, tools: ScriptedTools
) -> None:
    """No `limits`: 70 independent steps, 64 run together (the default `max_parallel`)."""
    for i in range(70):
        tools.script(f"s{i}", Wait(0.3, i))
    result = run(registry, [step(f"s{i}") for i in range(70)])
    assert set(statuses(result).values()) == {"succeeded"}
    assert max_concurrency(tools.calls) == 64


def test_limits_per_family_bounds_one_family_only(registry: Registry) -> None:
    slow = ScriptedTools(registry, family="slow")
    fast = ScriptedTools(registry)
    for i in range(6):
        slow.script(f"s{i}", Wait(0.1, i))
        fast.script(f"f{i}", Wait(0.1, i))
    steps = [step(f"s{i}", tool="slow.run") for i in range(6)]
    steps += [step(f"f{i}") for i in range(6)]
    result = run(
        registry, steps, capabilities={"test": {}, "slow": {}}, limits={"per_family": {"slow": 2}}
    )
    assert set(statuses(result).values()) == {"succeeded"}
    assert max_concurrency(slow.calls) == 2
    assert max_concurrency(fast.calls) == 6


def test_a_family_default_limit_applies_and_the_recipe_overrides_it(
    registry: Registry, tools: ScriptedTools
) -> None:
    registry.families["test"] = dataclasses.replace(registry.families["test"], max_parallel=1)
    for i in range(4):
        tools.script(f"s{i}", Wait(0.1, i))
    run(registry, [step(f"s{i}") for i in range(4)])
    assert max_concurrency(tools.calls) == 1
    tools.calls.clear()
    result = run(registry, [step(f"s{i}") for i in range(4)], limits={"per_family": {"test": 3}})
    assert set(statuses(result).values()) == {"succeeded"}
    assert max_concurrency(tools.calls) == 3


def test_waiting_for_a_family_slot_is_not_part_of_the_call_timeout(
    registry: Registry, tools: ScriptedTools
) -> None:
    """Three 0.2 s calls one at a time take 0.6 s; each call's own 0.3 s limit holds."""
    for i in range(3):
        tools.script(f"s{i}", Wait(0.2, i))
    result = run(
        registry,
        [step(f"s{i}", timeout=0.3) for i in range(3)],
        limits={"per_family": {"test": 1}},
    )
    assert statuses(result) == dict.fromkeys(("s0", "s1", "s2"), "succeeded")
    assert max_concurrency(tools.calls) == 1


def test_a_tool_raising_any_exception_fails_only_that_step(
    registry: Registry, tools: ScriptedTools
) -> None:
    tools.script("buggy", Raise(ValueError("kaboom")))
    tools.script("sibling", Wait(0.1, "fine"))
    result = run(
        registry,
        [step("buggy"), step("sibling"), step("after", depends_on=["sibling"])],
        on_failure="continue",
    )
    assert result.steps["buggy"].status == "failed"
    assert "ValueError" in (result.steps["buggy"].error or "")
    assert "kaboom" in (result.steps["buggy"].error or "")
    assert result.steps["sibling"].status == "succeeded"
    assert result.steps["sibling"].output == "fine"
    assert result.steps["after"].status == "succeeded"
    assert result.status == "failed"


def test_a_tool_raising_cancelled_error_fails_only_that_step(
    registry: Registry, tools: ScriptedTools
) -> None:
    """A CancelledError the run did not ask for (say, from a task the tool awaited) is
    that call's failure; it must not leave the scheduler waiting for an outcome forever.
    """
    # Raise is typed for Exception; CancelledError is a BaseException, which is the point.
    tools.script("odd", Raise(asyncio.CancelledError()))  # type: ignore[arg-type]
    clock = FakeClock()
    result = run(
        registry,
        [step("odd"), step("sibling"), step("after", depends_on=["odd"])],
        on_failure="continue",
        limits={"max_duration": 1},  # turns the hang this guards against into a failure
        clock=clock,
    )
    assert clock.time() < 1
    assert statuses(result) == {"odd": "failed", "sibling": "succeeded", "after": "skipped"}
    assert "CancelledError" in (result.steps["odd"].error or "")
    assert result.errors == []


def test_max_duration_cancels_in_flight_steps(registry: Registry, tools: ScriptedTools) -> None:
    tools.script("stuck", Hang())
    clock = FakeClock()
    result = run(
        registry,
        [step("quick"), step("stuck", timeout=30), step("later", depends_on=["stuck"])],
        limits={"max_duration": 0.3},
        clock=clock,
    )
    assert clock.time() == pytest.approx(0.3)
    assert result.steps["quick"].status == "succeeded"
    assert result.steps["stuck"].status == "cancelled"
    assert "max_duration" in (result.steps["stuck"].error or "")
    assert result.steps["later"].status == "pending"
    assert result.status == "failed"
    assert any("max_duration" in e for e in result.errors)
    (call,) = tools.calls_for("stuck")
    assert call.outcome == "cancelled"


def test_cancel_mid_run_cancels_in_flight_and_still_runs_finally(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    tools.script("stuck", Hang())
    executor = executor_for(
        registry,
        [step("quick"), step("stuck", timeout=30), step("later", depends_on=["stuck"])],
        tmp_path,
        finally_=[step("cleanup", value="${{ run.status }}")],
    )

    async def main() -> RunResult:
        asyncio.get_running_loop().call_later(0.2, executor.cancel)
        return await executor.run()

    clock = FakeClock()
    result = check_terminal(clock.run(main()))
    assert clock.time() == pytest.approx(0.2)
    assert result.status == "cancelled"
    assert result.steps["quick"].status == "succeeded"
    assert result.steps["stuck"].status == "cancelled"
    assert result.steps["later"].status == "pending"
    assert result.steps["cleanup"].status == "succeeded"
    assert result.steps["cleanup"].output == "cancelled"


# -- finally -------------------------------------------------------------------------------


def test_finally_runs_after_a_failure_and_sees_failed(
    registry: Registry, tools: ScriptedTools
) -> None:
    tools.script("main", Fail("main broke"))
    result = run(
        registry,
        [step("main"), step("next", depends_on=["main"])],
        finally_=[step("report", value="${{ run.status }}")],
    )
    assert result.steps["main"].status == "failed"
    assert result.steps["report"].status == "succeeded"
    assert result.steps["report"].output == "failed"
    assert result.status == "failed"
    (main,) = tools.calls_for("main")
    (report,) = tools.calls_for("report")
    assert main.ended is not None
    assert report.started >= main.ended


def test_finally_sees_succeeded_after_a_good_run(registry: Registry, tools: ScriptedTools) -> None:
    result = run(registry, [step("main")], finally_=[step("report", value="${{ run.status }}")])
    assert result.steps["report"].output == "succeeded"
    assert result.status == "succeeded"


def test_a_failing_finally_step_fails_a_succeeded_run(
    registry: Registry, tools: ScriptedTools
) -> None:
    tools.script("cleanup", Fail("cleanup broke"))
    result = run(registry, [step("main")], finally_=[step("cleanup")])
    assert result.steps["main"].status == "succeeded"
    assert result.steps["cleanup"].status == "failed"
    assert result.status == "failed"


# -- templates -----------------------------------------------------------------------------


def test_whole_expressions_keep_native_types(registry: Registry, tools: ScriptedTools) -> None:
    result = run(
        registry,
        [
            step("a", value={"n": 3, "items": [1, 2], "flag": True}),
            step("whole", value="${{ steps.a.output.n }}"),
            step("listed", value="${{ steps.a.output['items'] }}"),
            step("text", value="n=${{ steps.a.output.n }}"),
        ],
        outputs={"items": "${{ steps.a.output['items'] }}", "flag": "${{ steps.a.output.flag }}"},
    )
    assert result.steps["whole"].output == 3
    assert result.steps["listed"].output == [1, 2]
    assert result.steps["text"].output == "n=3"
    assert result.outputs == {"items": [1, 2], "flag": True}


def test_an_attribute_of_a_skipped_dependency_output_is_null(
    registry: Registry, tools: ScriptedTools
) -> None:
    # A skipped step's output is null, and an attribute of null is null (as in GitHub
    # Actions' expressions); any other undefined name stays an error (test_templating).
    result = run(
        registry,
        [
            step("x", when=False),
            step("use", value="${{ steps.x.output.foo }}"),
            step("sibling"),
        ],
        on_failure="continue",
    )
    assert result.steps["x"].status == "skipped"
    assert result.steps["use"].status == "succeeded"
    assert len(tools.calls_for("use")) == 1
    assert result.steps["use"].output is None  # the scripted tool returns the value it got
    assert result.steps["sibling"].status == "succeeded"
    assert result.status == "succeeded"


# -- approvals -----------------------------------------------------------------------------


def test_approve_all_lets_a_side_effect_run(registry: Registry, tools: ScriptedTools) -> None:
    result = run(registry, [step("w", tool="test.write", value=1)], approver=ApproveAll())
    assert result.steps["w"].status == "succeeded"
    assert result.steps["w"].output == 1
    assert [(d.step_id, d.action, d.approved) for d in result.approvals] == [
        ("w", "test.write", True)
    ]


def test_read_only_steps_are_not_gated(registry: Registry, tools: ScriptedTools) -> None:
    result = run(registry, [step("r")], approver=DenyAll())
    assert result.steps["r"].status == "succeeded"
    assert result.approvals == []


def test_fail_closed_by_default_says_how_to_approve(
    registry: Registry, tools: ScriptedTools
) -> None:
    result = run(registry, [step("w", tool="test.write")])  # no approver: fail closed
    assert result.steps["w"].status == "denied"
    error = result.steps["w"].error or ""
    assert "denied by approver" in error
    assert "--yes" in error
    assert tools.calls == []
    assert result.status == "failed"


def test_approval_is_asked_once_across_retries(registry: Registry, tools: ScriptedTools) -> None:
    tools.script("w", Fail("1"), Fail("2"), "ok")
    result = run(
        registry,
        [step("w", tool="test.write", retry={"attempts": 3, "initial": 0})],
        approver=ApproveAll(),
    )
    assert result.steps["w"].status == "succeeded"
    assert len(tools.calls_for("w")) == 3
    assert len(result.approvals) == 1


def test_approval_is_asked_again_for_different_params(
    registry: Registry, tools: ScriptedTools
) -> None:
    result = run(
        registry,
        [
            step(
                "w",
                tool="test.write",
                value="${{ item }}",
                for_each=["same", "same", "other"],
                max_parallel=1,
            )
        ],
        approver=ApproveAll(),
    )
    assert result.steps["w"].status == "succeeded"
    assert result.steps["w"].output == ["same", "same", "other"]
    assert len(tools.calls_for("w")) == 3
    assert len(result.approvals) == 2
    assert len({d.params_hash for d in result.approvals}) == 2


class _BrokenApprover:
    async def decide(self, request: GateRequest) -> Decision:
        raise RuntimeError("approver exploded")


def test_an_approver_that_raises_fails_closed(registry: Registry, tools: ScriptedTools) -> None:
    result = run(
        registry,
        [step("w", tool="test.write"), step("r")],
        approver=_BrokenApprover(),
        on_failure="continue",
    )
    assert result.steps["w"].status == "denied"
    assert "approver exploded" in (result.steps["w"].error or "")
    assert result.steps["r"].status == "succeeded"
    assert [c.key for c in tools.calls] == ["r"]
    assert result.status == "failed"


# -- one settings object ---------------------------------------------------------------------


def test_an_executor_is_built_from_one_settings_object_and_changes_none_of_it(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    data, source = parse_recipe_text(recipe([step("a", value=1), step("b")]), "<test>")
    plan = validate_plan(data, source, registry, base_dir=tmp_path)
    events = EventBus("r1", redact=lambda value: value)
    kept = {"a": StepResult(status="succeeded", output=1)}
    settings = RunSettings(
        approver=ApproveAll(), events=events, run_id="r1", preloaded=kept, dry_run=True
    )
    before = dataclasses.replace(settings)
    executor = Executor(plan, registry=registry, base_dir=tmp_path, settings=settings)
    assert executor.settings is settings
    assert (executor.run_id, executor.events) == ("r1", events)
    assert executor.sandbox.dry_run is True
    result = asyncio.run(executor.run())
    assert result.steps["a"].output == 1  # kept, not run again
    assert [call.key for call in tools.calls] == ["b"]
    assert settings == before  # nothing in it was replaced
    assert events.run_id == "r1"


def test_settings_or_their_fields_by_name_not_both(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    data, source = parse_recipe_text(recipe([step("a")]), "<test>")
    plan = validate_plan(data, source, registry, base_dir=tmp_path)
    with pytest.raises(TypeError, match="settings or approver, run_id, not both"):
        Executor(
            plan,
            registry=registry,
            base_dir=tmp_path,
            settings=RunSettings(),
            approver=ApproveAll(),
            run_id="x",
        )
    by_name = Executor(plan, registry=registry, base_dir=tmp_path, run_id="x", inputs=None)
    assert by_name.settings == RunSettings(run_id="x")  # None given is the default
