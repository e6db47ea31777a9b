"""Property tests: random DAGs and failure patterns against an independent oracle.

Each example is a random acyclic plan (edges only from lower to higher step index) whose
steps call scripted fake tools: per attempt the tool succeeds, fails, raises, or hangs past
a short timeout; steps draw random retries, `can_fail`, fallbacks, `when`, approval gates,
and the plan draws `on_failure` and `limits.max_parallel`. The oracle below computes every
step's status from the README's "Step semantics" alone, without looking at the engine.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities import default_registry
from engine.approval import GateRequest
from engine.events import Event, EventBus
from engine.executor import Executor
from engine.results import TERMINAL, Decision, RunResult
from engine.testing import Call, Fail, Hang, Raise, ScriptedTools, instant_sleep
from engine.validation import validate_plan
from planners.recipe import parse_recipe_text

TIMEOUT = 0.02  # per attempt; a `hang` costs this much real time
BLOCKING = frozenset({"failed", "denied"})
# `hang` is drawn less often: it is the only behaviour that costs real time.
BEHAVIOURS = st.sampled_from(["ok", "ok", "fail", "raise", "hang"])
WHENS = st.sampled_from([None, None, True, False, "${{ 1 == 1 }}", "${{ 1 == 2 }}"])
RETRY_ON = st.sampled_from([("error", "timeout"), ("error",), ("timeout",)])


@dataclass
class StepSpec:
    index: int
    deps: list[int]
    behaviours: list[str]
    attempts: int
    retry_on: tuple[str, ...]
    can_fail: bool
    fallback: str | None  # None, or the fallback's one behaviour
    when: bool | str | None
    gate: str  # "none" (read-only tool), "approve" or "deny"

    @property
    def id(self) -> str:
        return f"s{self.index}"

    @property
    def fallback_key(self) -> str:
        return f"{self.id}_fb"

    @property
    def when_false(self) -> bool:
        return self.when is False or self.when == "${{ 1 == 2 }}"


@dataclass
class PlanSpec:
    steps: list[StepSpec]
    mode: str
    max_parallel: int


@st.composite
def plans(draw: st.DrawFn) -> PlanSpec:
    n = draw(st.integers(1, 12))
    steps = []
    for i in range(n):
        deps = sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else []
        steps.append(
            StepSpec(
                index=i,
                deps=deps,
                behaviours=draw(st.lists(BEHAVIOURS, min_size=1, max_size=3)),
                attempts=draw(st.integers(1, 3)),
                retry_on=draw(RETRY_ON),
                can_fail=draw(st.booleans()),
                fallback=draw(st.sampled_from([None, None, "ok", "fail", "hang"])),
                when=draw(WHENS),
                gate=draw(st.sampled_from(["none", "none", "approve", "deny"])),
            )
        )
    return PlanSpec(
        steps=steps,
        mode=draw(st.sampled_from(["stop", "continue"])),
        max_parallel=draw(st.integers(1, 4)),
    )


# -- running a spec ------------------------------------------------------------------------


def _behaviour(name: str, key: str) -> Any:
    return {
        "ok": f"{key}-ok",
        "fail": Fail(f"{key} failed"),
        "raise": Raise(ValueError(f"{key} raised")),
        "hang": Hang(),
    }[name]


def _recipe(spec: PlanSpec) -> str:
    steps = []
    for s in spec.steps:
        data: dict[str, Any] = {
            "id": s.id,
            "tool": "test.run" if s.gate == "none" else "test.write",
            "params": {"key": s.id},
            "timeout": TIMEOUT,
            "can_fail": s.can_fail,
            "retry": {"attempts": s.attempts, "initial": 0, "on": list(s.retry_on)},
        }
        if s.deps:
            data["depends_on"] = [f"s{d}" for d in s.deps]
        if s.fallback is not None:
            data["fallback"] = {"tool": "test.run", "params": {"key": s.fallback_key}}
        if s.when is not None:
            data["when"] = s.when
        steps.append(data)
    return json.dumps(
        {
            "version": 1,
            "name": "prop",
            "capabilities": {"test": {}},
            "on_failure": spec.mode,
            "limits": {"max_parallel": spec.max_parallel, "max_duration": 60},
            "steps": steps,
        }
    )


class _KeyApprover:
    """Denies the gates of the steps whose key is in `deny`, approves the rest."""

    def __init__(self, deny: set[str]) -> None:
        self.deny = deny

    async def decide(self, request: GateRequest) -> Decision:
        denied = request.params["key"] in self.deny
        return Decision(
            step_id=request.step_id,
            action=request.action,
            params_hash=request.params_hash,
            approved=not denied,
            by="test",
            reason="scripted denial" if denied else None,
        )


@dataclass
class Outcome:
    result: RunResult
    calls: list[Call]
    events: list[Event] = field(default_factory=list)

    def calls_for(self, key: str) -> list[Call]:
        return [c for c in self.calls if c.key == key]

    def first(self, kind: str, step_id: str) -> int | None:
        """Position in the event log of the first `kind` event of `step_id`."""
        for i, event in enumerate(self.events):
            if event.kind == kind and event.step_id == step_id:
                return i
        return None


def execute(spec: PlanSpec) -> Outcome:
    registry = default_registry()
    tools = ScriptedTools(registry)
    for s in spec.steps:
        tools.script(s.id, *(_behaviour(b, s.id) for b in s.behaviours))
        if s.fallback is not None:
            tools.script(s.fallback_key, _behaviour(s.fallback, s.fallback_key))
    data, source = parse_recipe_text(_recipe(spec), "<prop>")
    base = Path.cwd()
    plan = validate_plan(data, source, registry, base_dir=base)
    events = EventBus("prop")
    log: list[Event] = []
    events.subscribe(log.append)
    executor = Executor(
        plan,
        registry=registry,
        base_dir=base,
        approver=_KeyApprover({s.id for s in spec.steps if s.gate == "deny"}),
        events=events,
        sleep=instant_sleep,
    )
    result = asyncio.run(executor.run())
    return Outcome(result, tools.calls, log)


# -- the oracle ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    statuses: frozenset[str]  # more than one only where the README leaves a choice
    primary_calls: int
    fallback_calls: int


def own_outcome(s: StepSpec) -> Expected:
    """How a step ends once it starts (all its dependencies satisfied)."""
    if s.when_false:
        return Expected(frozenset({"skipped"}), 0, 0)
    calls = 0
    succeeded = False
    denied = s.gate == "deny"  # a denial is never retried and never reaches the tool
    if not denied:
        for attempt in range(1, s.attempts + 1):
            behaviour = s.behaviours[min(attempt, len(s.behaviours)) - 1]
            calls += 1
            if behaviour == "ok":
                succeeded = True
                break
            kind = "timeout" if behaviour == "hang" else "error"
            if kind not in s.retry_on:
                break
    if succeeded:
        return Expected(frozenset({"succeeded"}), calls, 0)
    fallback_calls = 0
    if s.fallback is not None:
        fallback_calls = 1
        if s.fallback == "ok":
            return Expected(frozenset({"fallback"}), calls, 1)
    if s.can_fail:
        status = {"failed_acceptable"}
    elif denied and s.fallback is not None:
        # Denied, then the fallback failed: the README does not say which of the two
        # blocking statuses wins; both fail the run and block dependents the same way.
        status = {"denied", "failed"}
    else:
        status = {"denied" if denied else "failed"}
    return Expected(frozenset(status), calls, fallback_calls)


NOT_RUN = Expected(frozenset({"skipped"}), 0, 0)
PENDING = Expected(frozenset({"pending"}), 0, 0)


def oracle_continue(spec: PlanSpec) -> dict[str, Expected]:
    """`on_failure: continue`: exact, whatever the timing.

    A step is skipped when any ancestor ended critically (failed/denied); otherwise it
    runs to its own outcome. Steps skipped by `when` do not propagate anything.
    """
    expected: dict[str, Expected] = {}
    poisoned: set[int] = set()
    for s in spec.steps:  # index order is a topological order
        upstream_bad = any(d in poisoned or expected[f"s{d}"].statuses <= BLOCKING for d in s.deps)
        if upstream_bad:
            poisoned.add(s.index)
            expected[s.id] = NOT_RUN
        else:
            expected[s.id] = own_outcome(s)
    return expected


def oracle_stop(spec: PlanSpec, started: set[str]) -> dict[str, Expected]:
    """`on_failure: stop`, given which steps started.

    Which ready step the scheduler picks first is its own choice, so the set of steps that
    started before a critical failure is read from the run; everything else is exact: a
    started step ends with its own outcome (in-flight steps finish, nothing is cancelled),
    every other step is `pending`. `check_stop_starts` checks that the started set itself is
    one the contract allows.
    """
    return {s.id: own_outcome(s) if s.id in started else PENDING for s in spec.steps}


# -- checks --------------------------------------------------------------------------------


def check_terminal(out: Outcome, spec: PlanSpec) -> None:
    result = out.result
    assert set(result.steps) == {s.id for s in spec.steps}
    bad = {sid: r.status for sid, r in result.steps.items() if r.status not in TERMINAL}
    assert not bad, f"not terminal: {bad}"
    unfinished = [c for c in out.calls if c.ended is None or c.outcome == "running"]
    assert not unfinished, f"calls left running: {unfinished}"


def check_statuses(out: Outcome, expected: dict[str, Expected]) -> None:
    actual = {sid: r.status for sid, r in out.result.steps.items()}
    wrong = {
        sid: (actual[sid], sorted(e.statuses))
        for sid, e in expected.items()
        if actual[sid] not in e.statuses
    }
    assert not wrong, f"status (actual, expected) mismatches: {wrong}; all: {actual}"


def check_calls(out: Outcome, spec: PlanSpec, expected: dict[str, Expected]) -> None:
    """Exact call counts: no attempt beyond the retry policy, nothing after a final status."""
    for s in spec.steps:
        e = expected[s.id]
        primary = len(out.calls_for(s.id))
        fallback = len(out.calls_for(s.fallback_key))
        assert primary == e.primary_calls, (s.id, primary, e)
        assert fallback == e.fallback_calls, (s.id, fallback, e)
        assert primary <= s.attempts
        assert fallback <= (1 if s.fallback is not None else 0)


def check_dependency_order(out: Outcome, spec: PlanSpec) -> None:
    """No call of a step starts before every call of each of its dependencies ended."""
    for s in spec.steps:
        mine = out.calls_for(s.id) + out.calls_for(s.fallback_key)
        if not mine:
            continue
        first_start = min(c.started for c in mine)
        for d in s.deps:
            dep = f"s{d}"
            for call in out.calls_for(dep) + out.calls_for(f"{dep}_fb"):
                assert call.ended is not None, (s.id, dep)
                assert call.ended <= first_start, (s.id, dep)
            started = out.first("step.started", s.id)
            finished = out.first("step.finished", dep)
            assert started is not None, s.id
            assert finished is not None, dep
            assert finished < started, (s.id, dep)


def check_stop_starts(out: Outcome, spec: PlanSpec, started: set[str]) -> None:
    """The set of started steps is one that `on_failure: stop` allows.

    - every started step had all its dependencies end, none critically, before it started;
    - with no critical failure, every step started;
    - after the first critical failure, no step whose last dependency ended after it
      starts (a step made ready before the failure may still be in the act of starting);
    - with `max_parallel: 1` nothing is ever in flight beside the failing step, so no step
      starts after the first critical failure at all.
    """
    statuses = {sid: r.status for sid, r in out.result.steps.items()}
    failures = [
        i
        for i, event in enumerate(out.events)
        if event.kind == "step.finished" and event.data.get("status") in BLOCKING
    ]
    if not failures:
        assert started == {s.id for s in spec.steps}
        return
    first_failure = failures[0]
    for s in spec.steps:
        if s.id not in started:
            continue
        for d in s.deps:
            assert statuses[f"s{d}"] not in BLOCKING, (s.id, d)
        ends = [out.first("step.finished", f"s{d}") for d in s.deps]
        assert None not in ends, f"{s.id} started before a dependency finished"
        ready_at = max((e for e in ends if e is not None), default=-1)
        assert ready_at < first_failure, f"{s.id} became ready after the failure, then started"
        if spec.max_parallel == 1:
            begun = out.first("step.started", s.id)
            assert begun is not None, s.id
            assert begun < first_failure, f"{s.id} started after the failure"


def check_concurrency(out: Outcome, spec: PlanSpec) -> None:
    """Never more tool calls in flight than `limits.max_parallel` (one per step at most)."""
    marks = sorted(  # at equal times an end (-1) sorts before a start (+1)
        [(c.started, 1) for c in out.calls]
        + [(float("inf") if c.ended is None else c.ended, -1) for c in out.calls]
    )
    running = peak = 0
    for _, delta in marks:
        running += delta
        peak = max(peak, running)
    assert peak <= spec.max_parallel


# -- properties ----------------------------------------------------------------------------


@pytest.mark.slow
@given(plans())
def test_random_dags_follow_step_semantics(spec: PlanSpec) -> None:
    out = execute(spec)
    check_terminal(out, spec)
    if spec.mode == "continue":
        expected = oracle_continue(spec)
    else:
        started = {e.step_id for e in out.events if e.kind == "step.started" and e.step_id}
        check_stop_starts(out, spec, started)
        expected = oracle_stop(spec, started)
    check_statuses(out, expected)
    check_calls(out, spec, expected)
    check_dependency_order(out, spec)
    check_concurrency(out, spec)


@pytest.mark.slow
@given(plans())
def test_run_status_is_failed_iff_a_step_failed_or_was_denied(spec: PlanSpec) -> None:
    out = execute(spec)
    statuses = {r.status for r in out.result.steps.values()}
    assert out.result.status == ("failed" if statuses & BLOCKING else "succeeded")
    if spec.mode == "stop" and not statuses & BLOCKING:
        assert "pending" not in statuses
    if spec.mode == "continue":
        # skipped-by-upstream only ever follows a critical failure
        upstream = [r for r in out.result.steps.values() if "upstream" in (r.error or "")]
        assert not upstream or statuses & BLOCKING
