"""What a replay mismatch says: the request, the nearest recording, and what differs."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from engine._scope import PLAN_REVIEW, PLANNER
from engine.cassette import Cassette

__all__ = [
    "HOW",
    "diff_text",
    "field_diff",
    "gate_miss",
    "llm_miss",
    "nearest_entry",
    "tool_miss",
    "where",
]

_DIFF_LINES = 24  # lines of a mismatch diff shown
_NEAREST_CANDIDATES = 200  # recorded entries compared when looking for the nearest

E = TypeVar("E", bound=BaseModel)


def field_diff(recorded: Any, now: Any, path: str = "") -> list[str]:
    """The fields that differ between two JSON values, one `path: recorded → now` each;
    long texts as a line diff."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        lines: list[str] = []
        for key in list(recorded) + [k for k in now if k not in recorded]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in now:
                lines.append(f"{sub}: recorded {_short(recorded[key])}, now absent")
            elif key not in recorded:
                lines.append(f"{sub}: absent in the recording, now {_short(now[key])}")
            else:
                lines += field_diff(recorded[key], now[key], sub)
        return lines
    if isinstance(recorded, list) and isinstance(now, list):
        lines = []
        for index in range(max(len(recorded), len(now))):
            sub = f"{path}[{index}]"
            if index >= len(now):
                lines.append(f"{sub}: recorded {_short(recorded[index])}, now absent")
            elif index >= len(recorded):
                lines.append(f"{sub}: absent in the recording, now {_short(now[index])}")
            else:
                lines += field_diff(recorded[index], now[index], sub)
        return lines
    if recorded == now and type(recorded) is type(now):
        return []
    if isinstance(recorded, str) and isinstance(now, str) and ("\n" in recorded + now):
        text = difflib.unified_diff(
            recorded.splitlines(), now.splitlines(), "recorded", "now", lineterm="", n=1
        )
        return [f"{path or 'value'}:", *(f"    {line}" for line in list(text)[2:])]
    return [f"{path or 'value'}: recorded {_short(recorded)}, now {_short(now)}"]


def _short(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else f"{text[: limit - 20]}…({len(text)} chars)"


def nearest_entry(candidates: list[tuple[E, Any]], now: Any) -> tuple[E, list[str]] | None:
    """The candidate whose value differs from `now` in the fewest fields."""
    best: tuple[E, list[str]] | None = None
    for entry, value in candidates[:_NEAREST_CANDIDATES]:
        diff = field_diff(value, now)
        if best is None or len(diff) < len(best[1]):
            best = (entry, diff)
    return best


def diff_text(diff: list[str]) -> str:
    lines = diff[:_DIFF_LINES]
    more = f"\n  … and {len(diff) - _DIFF_LINES} more lines" if len(diff) > _DIFF_LINES else ""
    return "\n".join(f"  {line}" for line in lines) + more


HOW = (
    "if the change is intended, record again: --record-mode new_episodes adds what is "
    "missing, --record-mode all records the whole run again"
)
"""How to record again, said after each mismatch (`Tape.how`): the CLI's flags."""


def where(scope: str) -> str:
    if scope == PLANNER:
        return "the planner"
    if scope == PLAN_REVIEW:
        return "the plan review"
    return f"step '{scope}'"


def llm_miss(
    recorded: Cassette,
    path: Path,
    used: set[int],
    scope: str,
    canonical: dict[str, Any],
    key: str,
    ordinal: int,
) -> str:
    """A model request with no recording: the nearest recorded request (unused ones first)
    and what differs."""
    head = (
        f"replay: {where(scope)} made a model request that {path} has no recording of "
        f"(key {key}, repeat #{ordinal})"
    )
    same_step = [(e, e.request) for e in recorded.llm if e.step == scope]
    others = [(e, e.request) for e in recorded.llm if e.step != scope]
    unused_first = sorted(same_step or others, key=lambda pair: id(pair[0]) in used)
    nearest = nearest_entry(unused_first, canonical)
    if nearest is None:
        return f"{head}; the cassette has no model requests at all."
    entry, diff = nearest
    detail = diff_text(diff) if diff else f"  (the same request, recorded {entry.ordinal + 1}x)"
    return (
        f"{head}.\nnearest recorded request: {where(entry.step)}, key {entry.key} "
        f"#{entry.ordinal}; what differs:\n{detail}"
    )


def tool_miss(
    recorded: Cassette,
    path: Path,
    scope: str,
    attempt: int,
    action: str,
    params: Any,
    digest: str,
    ordinal: int,
) -> str:
    """A tool call with no recording: the nearest recorded call of the step and what differs."""
    head = (
        f"replay: {where(scope)} (attempt {attempt}) called {action} with params that "
        f"{path} has no recording of (params hash {digest}, repeat #{ordinal}); "
        "nothing was run"
    )
    same = [(e, e.params) for e in recorded.tools if e.step == scope]
    same_action = [pair for pair in same if pair[0].action == action]
    nearest = nearest_entry(same_action or same, params)
    if nearest is None:
        return f"{head}.\nthe cassette has no tool calls for this step."
    entry, diff = nearest
    what = (
        diff_text(diff)
        if entry.action == action and diff
        else f"  action: recorded {entry.action}, now {action}"
        if entry.action != action
        else f"  (the same params; recorded for attempt {entry.attempt} #{entry.ordinal})"
    )
    return (
        f"{head}.\nnearest recorded call: {where(entry.step)} attempt {entry.attempt}, "
        f"{entry.action} #{entry.ordinal}; what differs:\n{what}"
    )


def gate_miss(
    recorded: Cassette, path: Path, step_id: str, action: str, params: Any, digest: str
) -> str:
    """A gate with no recorded decision: the nearest recorded params and what differs."""
    head = (
        f"replay: {where(step_id)} reached a gate for {action} that {path} has no "
        f"decision for (params hash {digest})"
    )
    calls = {
        (e.step, e.action, e.params_hash): e for e in recorded.tools
    }  # the gated params are the tool call's
    candidates = [
        (e, e.params) for (step, act, _), e in calls.items() if (step, act) == (step_id, action)
    ]
    nearest = nearest_entry(candidates, params)
    if nearest is None:
        return f"{head}."
    return f"{head}.\nnearest recorded params, what differs:\n{diff_text(nearest[1])}"
