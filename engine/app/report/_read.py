"""Reading a run's journal into the report's view of it: steps, attempts, gates, calls, usage.

A journal may be from another version, torn by a crash or hand-edited: a field of the wrong
type is read as missing (`as_dict`, `as_str`, ... give an empty value), never an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from engine._support.scope import step_of
from engine.app.sqlite_store import is_alive
from engine.store import INTERRUPTED, Entry, RunRecord

__all__ = [
    "INTERRUPTED",
    "CallView",
    "ModelCallView",
    "RunView",
    "StepView",
    "as_dict",
    "as_int",
    "as_list",
    "as_str",
    "as_time",
    "attempt_number",
    "ordered",
    "read_run",
    "usage_counts",
]


@dataclass
class CallView:
    """A journaled tool call: a side-effect call's intent (with its params), and its result
    when one was journaled; a read-only call's result."""

    scope: str
    attempt: int
    action: str
    params: Any
    started: float
    finished: float | None = None
    output: Any = None
    error: str | None = None


@dataclass
class ModelCallView:
    """A journaled model call: what was sent (the messages, the tools offered) and the
    answer (its text, the tool calls it asked for, its tokens), or the error it ended with."""

    scope: str
    at: float
    messages: list[Any]
    tools: list[str]
    answer: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class StepView:
    """What the journal says about one step."""

    id: str
    index: int
    final: bool
    spec: dict[str, Any]
    status: str = "pending"
    result: dict[str, Any] = field(default_factory=dict)
    started: float | None = None
    finished: float | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    gates: list[dict[str, Any]] = field(default_factory=list)
    llm: dict[str, int] = field(default_factory=dict)
    ended_seq: int = -1
    active_seq: int = -1
    first_at: float | None = None
    in_flight: bool = False

    @property
    def anchor(self) -> str:
        # Ids are untrusted: the page's element ids are made from the index only.
        return f"step-{self.index}"


@dataclass
class RunView:
    """What the journal says about the run as a whole (`read_run` fills it in)."""

    record: RunRecord
    name: str
    status: str
    inputs: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    steps: dict[str, StepView] = field(default_factory=dict)
    end: dict[str, Any] | None = None
    segments: list[float] = field(default_factory=list)
    calls: list[CallView] = field(default_factory=list)
    model_calls: list[ModelCallView] = field(default_factory=list)
    doubts: list[CallView] = field(default_factory=list)
    approvals: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    answers: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    llm: dict[str, dict[str, int]] = field(default_factory=dict)
    t0: float = 0.0
    t1: float = 0.0
    last_at: float | None = None


def read_run(record: RunRecord, entries: list[Entry]) -> RunView:
    """The report's view of a run: its journal read in order, then settled."""
    run = RunView(record=record, name=record.name, status=record.status)
    pending: dict[tuple[Any, ...], CallView] = {}
    for entry in entries:
        data = entry.data if isinstance(entry.data, dict) else {}
        kind = entry.kind
        if kind == "start":
            run.segments.append(entry.at)
            run.end = None  # a resume after an end: that end is no longer the run's
        elif kind == "plan":
            _read_plan(run, data)
        elif kind == "end":
            run.end = data
        elif kind == "step" and isinstance(entry.scope, str):
            _read_step(run, entry, data)
        elif kind in ("intent", "tool"):
            _read_call(run, pending, entry, data)
        elif kind == "llm":
            usage = run.llm.setdefault(entry.scope or "(run)", usage_counts())
            response = as_dict(data.get("response"))
            usage["calls"] += 1
            usage["prompt_tokens"] += as_int(response.get("prompt_tokens"))
            usage["completion_tokens"] += as_int(response.get("completion_tokens"))
            usage["errors"] += 1 if data.get("error") is not None else 0
            run.model_calls.append(_model_call(entry, data))
        elif kind == "approval":
            run.approvals.append((entry.at, data))
        elif kind == "answer":
            run.answers.append((entry.at, data))
        if kind in ("intent", "tool", "llm", "approval", "answer") and entry.scope:
            step_id = step_of(entry.scope)
            if step_id is not None:
                step = _step(run, step_id)
                step.active_seq = entry.seq
                step.first_at = as_time(entry.at) if step.first_at is None else step.first_at
        run.last_at = as_time(entry.at) or run.last_at
    run.doubts = list(pending.values())
    _settle(run, entries)
    return run


def _read_plan(run: RunView, data: dict[str, Any]) -> None:
    plan = as_dict(data.get("plan"))
    run.inputs = as_dict(data.get("inputs"))
    run.model = data.get("model") if isinstance(data.get("model"), str) else run.model
    if isinstance(plan.get("name"), str):
        run.name = plan["name"]
    for final, section in ((False, "steps"), (True, "finally")):
        for spec in as_list(plan.get(section)):
            if isinstance(spec, dict) and isinstance(spec.get("id"), str):
                step = _step(run, spec["id"])
                step.spec, step.final = spec, final


def _read_step(run: RunView, entry: Entry, data: dict[str, Any]) -> None:
    step = _step(run, step_of(entry.scope or "") or entry.scope or "?")
    step.result = as_dict(data.get("result"))
    step.status = as_str(step.result.get("status")) or "pending"
    step.started = as_time(data.get("started"))
    step.finished = as_time(data.get("finished"))
    step.attempts = [a for a in as_list(data.get("attempts")) if isinstance(a, dict)]
    if not step.attempts and as_int(step.result.get("attempts")) == 1 and step.finished:
        # The journal leaves out a lone attempt that went well: it spans the step, and made
        # the step's own action (its tool, or `agent`, as an agent's attempts name it).
        span = {"n": 1, "started": step.started, "finished": step.finished, "outcome": "ok"}
        action = as_str(step.spec.get("tool")) or ("agent" if step.spec.get("agent") else "")
        step.attempts = [{**span, "action": action} if action else span]
    step.gates = [g for g in as_list(data.get("gates")) if isinstance(g, dict)]
    llm = as_dict(data.get("llm"))
    step.llm = {k: as_int(llm.get(k)) for k in ("calls", "prompt_tokens", "completion_tokens")}
    step.ended_seq = entry.seq


def _model_call(entry: Entry, data: dict[str, Any]) -> ModelCallView:
    request = as_dict(data.get("request"))
    tools = [
        as_dict(as_dict(tool).get("function")).get("name") for tool in as_list(request.get("tools"))
    ]
    call = ModelCallView(
        scope=entry.scope or as_str(data.get("step")) or "?",
        at=entry.at,
        messages=as_list(request.get("messages")),
        tools=[name for name in tools if isinstance(name, str)],
    )
    error = data.get("error")
    if error is not None:
        found = as_dict(error)
        call.error = f"{as_str(found.get('type')) or 'error'}: {as_str(found.get('message'))}"
    else:
        call.answer = as_dict(data.get("response"))
    return call


def _read_call(
    run: RunView, pending: dict[tuple[Any, ...], CallView], entry: Entry, data: dict[str, Any]
) -> None:
    key = tuple(
        json.dumps(data.get(k), default=repr)
        for k in ("step", "attempt", "action", "params_hash", "ordinal")
    )
    call = pending.pop(key) if entry.kind == "tool" and key in pending else None
    if call is None:
        # An intent, or the result of a read-only call (those have no intent: no params).
        call = CallView(
            scope=entry.scope or as_str(data.get("step")) or "?",
            attempt=as_int(data.get("attempt")),
            action=as_str(data.get("action")) or "?",
            params=data.get("params"),
            started=entry.at,
        )
        run.calls.append(call)
        if entry.kind == "intent":
            pending[key] = call
            return
    call.finished = entry.at
    error = data.get("error")
    if error is not None:
        found = as_dict(error)
        call.error = f"{as_str(found.get('type')) or 'error'}: {as_str(found.get('message'))}"
    else:
        call.output = data.get("output")


def _settle(run: RunView, entries: list[Entry]) -> None:
    """The run's status, each step's final status, and the time span drawn."""
    ended = run.end is not None
    if ended and run.end is not None:
        run.status = as_str(run.end.get("status")) or run.record.status
        for step_id, result in as_dict(run.end.get("steps")).items():
            status = as_str(as_dict(result).get("status"))
            if status:
                step = _step(run, step_id)
                step.status = status
                if not step.result:
                    step.result = as_dict(result)
    elif run.record.status == "running":
        run.status = "running" if is_alive(run.record) else INTERRUPTED
    if not ended:
        for step in run.steps.values():
            # Activity after the step's last end (or with no end): it was running.
            if step.active_seq > step.ended_seq:
                step.in_flight = True
                step.status = "running"
    found = [run.record.started or None, run.record.finished, *(e.at for e in entries)]
    for step in run.steps.values():
        found += [step.started, step.finished]
    times = [t for t in map(as_time, found) if t is not None]
    run.t0 = min(times, default=0.0)
    run.t1 = max(times, default=0.0)
    if not ended and any(step.in_flight for step in run.steps.values()):
        # How long in-flight work went on after the last entry is unknown: leave room to
        # draw it running off past that point.
        run.t1 += max((run.t1 - run.t0) * 0.15, 0.05)


def _step(run: RunView, step_id: str) -> StepView:
    step = run.steps.get(step_id)
    if step is None:
        step = run.steps[step_id] = StepView(id=step_id, index=len(run.steps), final=False, spec={})
    return step


def usage_counts() -> dict[str, int]:
    """Model-usage counters at zero, in the order of the usage table's columns."""
    return {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "errors": 0}


def as_dict(value: Any) -> dict[str, Any]:
    """`value` if it is a dict, else an empty one."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """`value` if it is a list, else an empty one."""
    return value if isinstance(value, list) else []


def as_str(value: Any) -> str:
    """`value` if it is a string, else an empty one."""
    return value if isinstance(value, str) else ""


def as_int(value: Any) -> int:
    """`value` if it is an int (not a bool), else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def attempt_number(attempt: dict[str, Any]) -> str:
    """A timeline attempt's number as shown: `2`, or `2 (item 3)` for a `for_each` item's
    (an item's attempts are numbered within the item)."""
    item, number = attempt.get("item"), as_int(attempt.get("n"))
    if isinstance(item, int) and not isinstance(item, bool):
        return f"{number} (item {item})"
    return str(number)


def as_time(value: Any) -> float | None:
    """A time (epoch seconds), or None: a value no clock gives (a torn or edited journal)
    must not stretch the time axis out of shape."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e11:
        return float(value)
    return None


def ordered(run: RunView) -> list[StepView]:
    """The steps in the order the page lists them: the main steps, then `finally`."""
    return sorted(run.steps.values(), key=lambda s: (s.final, s.index))
