"""`Sandbox.call` seam by seam: admit (the grant, the params, the action's own rules), the
tool-call budget, the gate (edits checked again), execute (through the `Results` layer, a
failure audited) and record (`tool.called`, `tool.finished`, a truncation warning). Each
test pins what one seam decides and that nothing after it runs when it refuses."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from capabilities import Registry, Sandbox
from engine.errors import ApprovalDenied, BudgetExceeded, CapabilityDenied, DryRun, StepFailed
from engine.events import Event, EventBus
from engine.sandbox import ToolCall


class Tools:
    """A family `t` of three actions, and what each was called with."""

    def __init__(self) -> None:
        self.registry = Registry()
        self.made: list[tuple[str, Any]] = []

        @self.registry.function("t.read", side_effects=False, blocking=False)
        def read(path: str) -> dict[str, Any]:
            self.made.append(("t.read", path))
            return {"content": f"text of {path}", "truncated": path == "big"}

        @self.registry.function("t.write", blocking=False)
        def write(path: str, content: str) -> dict[str, Any]:
            self.made.append(("t.write", (path, content)))
            return {"written": len(content)}

        @self.registry.function("t.fail", side_effects=False, blocking=False)
        def fail(why: str) -> None:
            raise StepFailed(why)


class Gate:
    """Answers each gate with `answer(params)` (the params to run with, or raises)."""

    def __init__(self, answer: Callable[[Any], Any] | None = None) -> None:
        self.asked: list[tuple[str, Any, str, bool]] = []
        self.answer = answer or (lambda params: None)
        self.validate: Callable[[Any], str | None] | None = None

    def __call__(
        self,
        step_id: str,
        action: str,
        params: Any,
        reason: str,
        validate: Callable[[Any], str | None],
        /,
        *,
        replayed: bool = False,
        in_doubt: bool = False,
    ) -> Awaitable[Any]:
        self.asked.append((action, params, reason, in_doubt))
        self.validate = validate

        async def decide() -> Any:
            return self.answer(params)

        return decide()


def box(
    tools: Tools, tmp_path: Path, events: list[Event], gate: Gate | None = None, **kw: Any
) -> Sandbox:
    bus = EventBus("seams")
    bus.subscribe(events.append)
    return Sandbox(tools.registry, {"t": {}}, tmp_path, gate=gate, events=bus, **kw)


def call(sandbox: Sandbox, name: str, params: Any, **kw: Any) -> Any:
    return asyncio.run(sandbox.call(name, params, step_id="s", **kw))


def kinds(events: list[Event]) -> list[tuple[str, Any, Any]]:
    return [(e.kind, e.data.get("decision"), e.data.get("call")) for e in events]


# -- admit --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params", "rule"),
    [
        ("t.nope", {}, "unknown-tool"),
        ("t.write", {"path": "a"}, "params-schema"),  # `content` is required
        ("t.write", {"path": "a", "content": "x", "mode": "w"}, "params-schema"),  # no such param
    ],
)
def test_admit_refuses_before_the_budget_and_the_gate(
    tmp_path: Path, name: str, params: Any, rule: str
) -> None:
    tools, events, gate = Tools(), [], Gate()
    sandbox = box(tools, tmp_path, events, gate)
    with pytest.raises(CapabilityDenied) as refused:
        call(sandbox, name, params)
    assert refused.value.rule == rule
    assert sandbox.calls == 0  # not counted
    assert gate.asked == []  # nobody asked about a call that would be refused
    assert tools.made == []
    assert kinds(events) == [("tool.finished", "denied", None)]


def test_admit_refuses_a_family_that_is_not_granted(tmp_path: Path) -> None:
    tools, events = Tools(), []
    sandbox = Sandbox(tools.registry, {}, tmp_path, events=EventBus("seams"))
    with pytest.raises(CapabilityDenied, match="not granted") as refused:
        call(sandbox, "t.read", {"path": "a"})
    assert refused.value.rule == "not-granted"
    assert tools.made == events == []


# -- budget -------------------------------------------------------------------------------


def test_the_budget_counts_admitted_calls_and_stops_the_next_before_its_gate(
    tmp_path: Path,
) -> None:
    tools, events, gate = Tools(), [], Gate()
    sandbox = box(tools, tmp_path, events, gate, max_tool_calls=2)
    call(sandbox, "t.read", {"path": "a"})
    call(sandbox, "t.write", {"path": "b", "content": "x"})
    with pytest.raises(BudgetExceeded, match="max_tool_calls"):
        call(sandbox, "t.write", {"path": "c", "content": "y"})
    assert [a for a, *_ in gate.asked] == ["t.write"]  # the third was never put to the gate
    assert [name for name, _ in tools.made] == ["t.read", "t.write"]
    assert sandbox.calls == 2
    assert sandbox.step_calls == {"s": 2}
    numbers = [e.data["call"] for e in events if e.kind == "tool.called"]
    assert numbers == [1, 2]  # each call's number in the run, from the budget


# -- gate ---------------------------------------------------------------------------------


def test_the_gate_is_asked_for_side_effects_only_unless_the_step_says_always(
    tmp_path: Path,
) -> None:
    tools, events, gate = Tools(), [], Gate()
    sandbox = box(tools, tmp_path, events, gate)
    call(sandbox, "t.read", {"path": "a"})
    call(sandbox, "t.write", {"path": "b", "content": "x"})
    call(sandbox, "t.read", {"path": "c"}, confirm="always")
    call(sandbox, "t.write", {"path": "d", "content": "y"}, confirm="never")
    assert [(a, p.get("path")) for a, p, *_ in gate.asked] == [("t.write", "b"), ("t.read", "c")]
    assert len(tools.made) == 4


def test_a_denial_at_the_gate_runs_nothing_and_is_audited_as_denied(tmp_path: Path) -> None:
    def deny(params: Any) -> Any:
        raise ApprovalDenied("no")

    tools, events = Tools(), []
    sandbox = box(tools, tmp_path, events, Gate(deny))
    with pytest.raises(ApprovalDenied):
        call(sandbox, "t.write", {"path": "b", "content": "x"})
    assert tools.made == []
    assert kinds(events) == [("tool.finished", "denied", 1)]  # counted: it reached the gate


def test_an_edit_at_the_gate_runs_and_is_checked_as_a_call_of_its_own(tmp_path: Path) -> None:
    tools, events = Tools(), []
    gate = Gate(lambda params: {**params, "content": "edited"})
    sandbox = box(tools, tmp_path, events, gate)
    assert call(sandbox, "t.write", {"path": "b", "content": "x"}) == {"written": 6}
    assert tools.made == [("t.write", ("b", "edited"))]
    assert gate.validate is not None  # the gate's check refuses a malformed edit up front
    assert gate.validate({"path": "b"}) is not None
    assert gate.validate({"path": "b", "content": "fine"}) is None


class InDoubt:
    """A `Results` layer for which every side-effect call may already have happened."""

    def serves(self, call: ToolCall) -> bool:
        return False

    def in_doubt(self, call: ToolCall) -> str | None:
        return None if call.read_only else "it may have run before the run stopped"

    def timed(self) -> bool:
        return False

    async def result(
        self, call: ToolCall, live: Callable[[], Awaitable[Any]], *, replayed: bool = False
    ) -> Any:
        return await live()


def test_a_call_in_doubt_goes_to_the_gate_whatever_its_confirm(tmp_path: Path) -> None:
    tools, events, gate = Tools(), [], Gate()
    sandbox = box(tools, tmp_path, events, gate, results=InDoubt())
    call(sandbox, "t.write", {"path": "b", "content": "x"}, confirm="never")
    assert [(a, doubt) for a, _, _, doubt in gate.asked] == [("t.write", True)]
    assert "may have run" in gate.asked[0][2]
    # idempotent: made again unasked
    call(sandbox, "t.write", {"path": "c", "content": "x"}, confirm="never", idempotent=True)
    assert len(gate.asked) == 1
    # nobody to ask: refused, nothing made
    alone = box(tools, tmp_path, [], None, results=InDoubt())
    with pytest.raises(ApprovalDenied, match="nobody can be asked"):
        call(alone, "t.write", {"path": "d", "content": "x"})
    assert [p for _, p in tools.made] == [("b", "x"), ("c", "x")]


# -- execute and record -----------------------------------------------------------------------


def test_a_failing_call_is_audited_as_allowed_with_its_step_and_attempt(tmp_path: Path) -> None:
    tools, events = Tools(), []
    sandbox = box(tools, tmp_path, events)
    with pytest.raises(StepFailed, match="broken") as failed:
        call(sandbox, "t.fail", {"why": "broken"}, attempt=3)
    assert (failed.value.step_id, failed.value.attempt) == ("s", 3)
    assert kinds(events) == [("tool.called", "allowed", 1), ("tool.finished", "allowed", 1)]
    assert events[-1].data["outcome"] == "StepFailed"


def test_a_call_is_recorded_called_then_finished_and_a_cut_output_warns(tmp_path: Path) -> None:
    tools, events = Tools(), []
    sandbox = box(tools, tmp_path, events)
    call(sandbox, "t.read", {"path": "a"})
    call(sandbox, "t.read", {"path": "big"})
    assert kinds(events) == [
        ("tool.called", "allowed", 1),
        ("tool.finished", "allowed", 1),
        ("tool.called", "allowed", 2),
        ("tool.finished", "allowed", 2),
        ("step.warning", None, None),
    ]
    assert events[0].data["side_effects"] is False
    assert events[1].data["outcome"] == "ok"
    assert len(sandbox.step_warnings["s"]) == 1
    assert "truncated" in sandbox.step_warnings["s"][0]


def test_a_dry_run_reports_a_side_effect_uncounted_and_runs_what_only_reads(
    tmp_path: Path,
) -> None:
    tools, events = Tools(), []
    sandbox = box(tools, tmp_path, events, dry_run=True)
    call(sandbox, "t.read", {"path": "a"})
    with pytest.raises(DryRun, match=r"t\.write"):
        call(sandbox, "t.write", {"path": "b", "content": "x"})
    assert [name for name, _ in tools.made] == ["t.read"]
    assert sandbox.calls == 1
