"""What a resume takes from a run's journal: the plan, the steps kept, and the calls served
again or in doubt.

Steps that ended `succeeded`, `fallback`, `failed_acceptable` or `skipped` are kept (their
results stand, as a replan's kept steps do). Every other step runs again, and within it:

* a tool call whose result is journaled is served, not made again, when the call succeeded;
  when it failed, it is served only if its step had not ended (the run stopped inside the
  step's retries, which go on where they were), while a step that ended `failed` or
  `denied` runs its failed calls again: that new try is what resuming it asks for;
* a side-effect call whose intent is journaled with no result is in doubt (see
  `engine.journal`);
* model exchanges and a person's answers are served for a step that had not ended, so an
  agent goes on from where it was; a step that ended `failed` or `denied` asks again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from engine._graph import step_dependencies
from engine._support.scope import step_of
from engine.capability import Registry
from engine.model import Plan
from engine.recording.cassette import Answer, LLMExchange, ToolResult
from engine.results import KEPT, StepResult
from engine.store import Entry

__all__ = [
    "Intent",
    "Resumed",
    "ToolKey",
    "changed_steps",
    "kept_steps",
    "plan_steps",
    "resumed_from",
    "steps_in_doubt",
]

_ENDED = frozenset({"failed", "denied"})

ToolKey = tuple[str, str, str, int]
"""A call's key in the journal, as in a cassette: its scope (step, or `step[i]`), action,
params hash, and how many calls with these params the scope made before it, over its
attempts (the attempt is journaled with the call, to be read; a resumed step numbers its
attempts from 1 again, so it is no key)."""


@dataclass(frozen=True)
class Intent:
    """A side-effect call journaled as starting, at `at`, with no result after it."""

    call: ToolResult
    at: float


@dataclass
class Resumed:
    """A run's journal, read for a resume (and for `planloom show` and reports)."""

    plan: dict[str, Any] | None = None
    inputs: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    kept: dict[str, StepResult] = field(default_factory=dict)
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    tools: dict[ToolKey, ToolResult] = field(default_factory=dict)
    doubts: dict[ToolKey, Intent] = field(default_factory=dict)
    llm: dict[tuple[str, str, int], LLMExchange] = field(default_factory=dict)
    answers: dict[tuple[str, str, int], Answer] = field(default_factory=dict)
    result: dict[str, Any] | None = None


def _tool_key(data: dict[str, Any]) -> ToolKey:
    return (data["step"], data["action"], data["params_hash"], data["ordinal"])


def resumed_from(entries: list[Entry]) -> Resumed:
    """Read a journal (see the module docstring for what is kept and served)."""
    resumed = Resumed()
    tools: dict[ToolKey, ToolResult] = {}
    for entry in entries:
        data = entry.data
        try:
            if entry.kind == "plan":
                plan, inputs, model = data["plan"], data.get("inputs"), data.get("model")
                if not isinstance(plan, dict) or not isinstance(inputs, dict | None):
                    continue  # not a plan planloom wrote: a resume finds no plan
                resumed.plan, resumed.inputs = plan, inputs or {}
                resumed.model = model if isinstance(model, str) else None
            elif entry.kind == "step" and entry.scope is not None:
                resumed.steps[entry.scope] = data
            elif entry.kind == "intent":
                key = _tool_key(data)
                resumed.doubts[key] = Intent(ToolResult.model_validate(data), entry.at)
            elif entry.kind == "tool":
                key = _tool_key(data)
                tools[key] = ToolResult.model_validate(data)
                resumed.doubts.pop(key, None)
            elif entry.kind == "llm":
                exchange = LLMExchange.model_validate(data)
                resumed.llm[(exchange.step, exchange.key, exchange.ordinal)] = exchange
            elif entry.kind == "answer":
                answer = Answer.model_validate(data)
                resumed.answers[(answer.step, answer.key, answer.ordinal)] = answer
            elif entry.kind == "end":
                resumed.result = data
        except (KeyError, TypeError, ValidationError):  # an entry from a newer planloom
            continue
    ended: set[str] = set()
    for step_id, data in resumed.steps.items():
        try:
            result = StepResult.model_validate(data.get("result") or {})
        except ValidationError:
            continue
        if result.status in KEPT:
            resumed.kept[step_id] = result
        elif result.status in _ENDED:
            ended.add(step_id)
    plan_ids = plan_steps(resumed.plan)
    resumed.kept = {k: v for k, v in resumed.kept.items() if k in plan_ids}
    resumed.tools = {
        key: entry
        for key, entry in tools.items()
        if entry.error is None or step_of(key[0]) not in ended
    }
    resumed.llm = {k: v for k, v in resumed.llm.items() if step_of(k[0]) not in ended}
    resumed.answers = {k: v for k, v in resumed.answers.items() if step_of(k[0]) not in ended}
    return resumed


def kept_steps(plan: Plan, kept: dict[str, StepResult]) -> dict[str, StepResult]:
    """The steps a resume keeps: those that ended well and whose every dependency is kept.

    A step skipped because a step it needs failed is run again once that step runs again
    (its skip no longer holds); a step that ran needed only steps that ended well.
    """
    steps = {step.id: step for step in plan.all_steps()}
    keeping = {k: v for k, v in kept.items() if k in steps}
    changed = True
    while changed:
        changed = False
        for step_id in list(keeping):
            if any(dep not in keeping for dep in step_dependencies(steps[step_id])):
                del keeping[step_id]
                changed = True
    return keeping


_HOW = frozenset({"idempotent", "confirm", "timeout", "retry"})
"""A step's keys that say how its calls are made, asked about and tried, not what they do:
a resume may change them (mark a step in doubt `idempotent: true`, give it longer)."""


def changed_steps(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What differs between two plans (as `Plan.to_data()`), one phrase each: the steps
    changed (in more than `_HOW`), added or removed, and the other sections changed."""
    changes: list[str] = []
    old, new = plan_steps(before), plan_steps(after)
    for step_id in old:
        if step_id not in new:
            changes.append(f"step '{step_id}' was removed")
        elif _what(old[step_id]) != _what(new[step_id]):
            changes.append(f"step '{step_id}' changed")
    changes += [f"step '{step_id}' was added" for step_id in new if step_id not in old]
    for key in sorted(set(before) | set(after)):
        if key not in ("steps", "finally") and before.get(key) != after.get(key):
            changes.append(f"'{key}:' changed")
    return changes


def _what(step: Any) -> Any:
    """What a step (as data) does: all but how its calls are made (`_HOW`)."""
    if not isinstance(step, dict):
        return step
    return {k: v for k, v in step.items() if k not in _HOW}


def steps_in_doubt(
    resumed: Resumed, plan: Plan, kept: Mapping[str, StepResult], registry: Registry
) -> tuple[list[str], list[str]]:
    """The steps a resume runs with a call in doubt, in plan order: those whose call goes
    to the gate (only a person may make it again), and those whose call is made again
    unasked (the step or its action is idempotent)."""
    steps = {step.id: step for step in plan.all_steps()}
    asked: set[str] = set()
    unasked: set[str] = set()
    for key in resumed.doubts:
        step_id = step_of(key[0])
        step = steps.get(step_id) if step_id is not None else None
        if step is None or step.id in kept:
            continue
        action = registry.get(key[1])
        idempotent = step.idempotent or (action is not None and action.idempotent)
        (unasked if idempotent else asked).add(step.id)
    return [s for s in steps if s in asked], [s for s in steps if s in unasked - asked]


def plan_steps(plan: dict[str, Any] | None) -> dict[str, Any]:
    """A plan's steps (as data: `Plan.to_data()`, journaled) by id, `finally` last."""
    if not plan:
        return {}
    return {
        step["id"]: step
        for section in ("steps", "finally")
        for step in plan.get(section) or []
        if isinstance(step, dict) and isinstance(step.get("id"), str)
    }
