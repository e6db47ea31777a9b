"""Which step the running code belongs to: the key a cassette files each entry under."""

from __future__ import annotations

from contextvars import ContextVar

__all__ = [
    "PLANNER",
    "PLAN_REVIEW",
    "current_attempt",
    "current_item",
    "current_scope",
    "current_tool_call",
    "enter_attempt",
    "enter_scope",
    "enter_tool_call",
    "item_of",
    "step_of",
]

PLANNER = "(planner)"
"""The scope of the planner's model calls (step ids cannot contain parentheses)."""
PLAN_REVIEW = "(plan)"
"""The scope of the decision on a model-written plan."""

_scope: ContextVar[str | None] = ContextVar("planloom_scope", default=None)
_attempt: ContextVar[int | None] = ContextVar("planloom_attempt", default=None)
_tool_call: ContextVar[str | None] = ContextVar("planloom_tool_call", default=None)


def current_scope() -> str | None:
    """The step (with `[index]` for a `for_each` item) the running code belongs to."""
    return _scope.get()


def enter_scope(name: str) -> None:
    """Mark the current task as running for `name`; tasks it creates inherit it."""
    _scope.set(name)


def step_of(scope: str) -> str | None:
    """The step a scope belongs to (none for the planner and the plan review)."""
    if scope in (PLANNER, PLAN_REVIEW):
        return None
    return scope.split("[", 1)[0]


def item_of(scope: str) -> int | None:
    """The `for_each` item a scope is (`read[2]`: 2), or None for a whole step."""
    if not scope.endswith("]") or "[" not in scope:
        return None
    index = scope.rsplit("[", 1)[1][:-1]
    return int(index) if index.isdigit() else None


def current_item() -> int | None:
    """The `for_each` item the running code belongs to, if any (what its events name, so
    that items' attempts, numbered within each item, are told apart)."""
    scope = _scope.get()
    if scope is None or scope[-1] != "]":  # (a whole step: no call to find out)
        return None
    return item_of(scope)


def current_attempt() -> int | None:
    """The attempt of the step (or of the `for_each` item) the running code belongs to
    (what its events name)."""
    return _attempt.get()


def enter_attempt(number: int) -> None:
    """Mark the current task as running attempt `number` of its step, or of its item: an
    item's attempts are numbered within the item, so the number does not depend on how
    fast the other items went."""
    _attempt.set(number)


def current_tool_call() -> str | None:
    """The id a model gave the tool call the running code makes, if a model asked for it
    (an agent's turn): what traces name the call by (`gen_ai.tool.call.id`)."""
    return _tool_call.get()


def enter_tool_call(call_id: str | None) -> None:
    """Mark the current task as making the tool call a model asked for as `call_id`. An
    agent runs each call of a turn in a task of its own, so the mark ends with the task."""
    _tool_call.set(call_id)
