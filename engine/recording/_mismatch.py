"""What a replay mismatch says: the request, the nearest recording, and what differs."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from engine._support.scope import PLAN_REVIEW, PLANNER
from engine.recording.cassette import Cassette

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
_SHORT = 300  # characters of a value shown whole (as JSON) in a one-line difference
_CONTEXT = 60  # characters shown before and after the part where two long texts differ
_SPAN = 120  # characters of the differing part itself shown, on each side

E = TypeVar("E", bound=BaseModel)


def field_diff(recorded: Any, now: Any, path: str = "") -> list[str]:
    """The fields that differ between two JSON values, one `path: recorded → now` each;
    two long texts shown around where they differ (a multi-line one as a line diff)."""
    return [line for field in _fields(recorded, now, path) for line in field]


def _fields(recorded: Any, now: Any, path: str) -> list[list[str]]:
    """The lines of `field_diff`, one list per differing field."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        fields: list[list[str]] = []
        for key in list(recorded) + [k for k in now if k not in recorded]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in now:
                fields.append([f"{sub}: recorded {_short(recorded[key])}, now absent"])
            elif key not in recorded:
                fields.append([f"{sub}: absent in the recording, now {_short(now[key])}"])
            else:
                fields += _fields(recorded[key], now[key], sub)
        return fields
    if isinstance(recorded, list) and isinstance(now, list):
        fields = []
        for index in range(max(len(recorded), len(now))):
            sub = f"{path}[{index}]"
            if index >= len(now):
                fields.append([f"{sub}: recorded {_short(recorded[index])}, now absent"])
            elif index >= len(recorded):
                fields.append([f"{sub}: absent in the recording, now {_short(now[index])}"])
            else:
                fields += _fields(recorded[index], now[index], sub)
        return fields
    if recorded == now and type(recorded) is type(now):
        return []
    name = path or "value"
    if isinstance(recorded, str) and isinstance(now, str):
        if "\n" in recorded + now:
            return [[f"{name}:", *(f"    {line}" for line in _line_diff(recorded, now))]]
        if max(len(_json(recorded)), len(_json(now))) > _SHORT:
            return [_region_diff(name, recorded, now)]
    return [[f"{name}: recorded {_short(recorded)}, now {_short(now)}"]]


def _region_diff(name: str, recorded: str, now: str) -> list[str]:
    """Two long one-line texts: where they first differ, and each one around that part."""
    start, old, new = _region(recorded, now, quote=True)
    return [
        f"{name}: differs from character {start + 1} "
        f"(recorded {len(recorded)} chars, now {len(now)}):",
        f"    recorded: {old}",
        f"    now:      {new}",
    ]


def _line_diff(recorded: str, now: str) -> list[str]:
    """A unified diff (hunks onward) of two texts by line; a long changed line is shown
    around where it differs from the line that replaced it, other long lines cut."""
    lines = list(
        difflib.unified_diff(
            recorded.splitlines(), now.splitlines(), "recorded", "now", lineterm="", n=1
        )
    )[2:]
    shown: list[str] = []
    at = 0
    while at < len(lines):
        gone = _run(lines, at, "-")
        came = _run(lines, at + len(gone), "+")
        if not gone and not came:  # a hunk header, or a line both have
            line = lines[at]
            shown.append(line if line.startswith("@@") else line[0] + _cut(line[1:]))
            at += 1
            continue
        pairs = min(len(gone), len(came))
        regions = [
            _region(old[1:], new[1:], quote=False)
            for old, new in zip(gone, came, strict=False)  # the lines beyond: added or gone
        ]
        shown += [f"-{old}" for _, old, _ in regions] + [f"-{_cut(g[1:])}" for g in gone[pairs:]]
        shown += [f"+{new}" for _, _, new in regions] + [f"+{_cut(c[1:])}" for c in came[pairs:]]
        at += len(gone) + len(came)
    return shown


def _run(lines: list[str], start: int, sign: str) -> list[str]:
    """The lines from `start` on that begin with `sign`."""
    end = start
    while end < len(lines) and lines[end].startswith(sign):
        end += 1
    return lines[start:end]


def _region(recorded: str, now: str, *, quote: bool) -> tuple[int, str, str]:
    """Where two texts first differ (from 0), and each one shown from `_CONTEXT`
    characters before its differing part to `_CONTEXT` after (that part cut at `_SPAN`);
    what is left out is marked `[…N chars]` before and `[N chars…]` after."""
    start = _same(recorded, now, min(len(recorded), len(now)), at_end=False)
    tail = _same(recorded, now, min(len(recorded), len(now)) - start, at_end=True)
    return (
        start,
        _window(recorded, start, len(recorded) - tail, quote),
        _window(now, start, len(now) - tail, quote),
    )


def _same(a: str, b: str, most: int, *, at_end: bool) -> int:
    """How many characters `a` and `b` share at their start (or end), up to `most`: a
    binary search on slices, so long texts are compared in C, not character by character."""
    low, high = 0, most
    while low < high:
        mid = (low + high + 1) // 2
        if (a[len(a) - mid :] == b[len(b) - mid :]) if at_end else (a[:mid] == b[:mid]):
            low = mid
        else:
            high = mid - 1
    return low


def _window(text: str, start: int, end: int, quote: bool) -> str:
    left = max(0, start - _CONTEXT)
    right = min(len(text), min(end, start + _SPAN) + _CONTEXT)
    shown = text[left:right]
    before = f"[…{left} chars]" if left else ""
    after = f"[{len(text) - right} chars…]" if right < len(text) else ""
    return before + (_json(shown) if quote else shown) + after


def _cut(line: str) -> str:
    """A line of a line diff, cut to the width of a shown region."""
    limit = _SPAN + 2 * _CONTEXT
    return line if len(line) <= limit else f"{line[:limit]}[{len(line) - limit} chars…]"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=repr)


def _short(value: Any, limit: int = _SHORT) -> str:
    text = _json(value)
    return text if len(text) <= limit else f"{text[: limit - 20]}…({len(text)} chars)"


def nearest_entry(candidates: list[tuple[E, Any]], now: Any) -> tuple[E, list[str]] | None:
    """The candidate whose value differs from `now` in the fewest fields (then the fewest
    lines of difference)."""
    best: tuple[E, list[str]] | None = None
    best_rank = (0, 0)
    for entry, value in candidates[:_NEAREST_CANDIDATES]:
        fields = _fields(value, now, "")
        rank = (len(fields), sum(len(field) for field in fields))
        if best is None or rank < best_rank:
            best, best_rank = (entry, [line for field in fields for line in field]), rank
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
