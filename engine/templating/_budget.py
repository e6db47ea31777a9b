"""The time a render may take: its deadline, checked at every step a template can repeat.

A render's state (`Render`: its deadline, and how much it has built so far) lives in a
context variable, so nested renders and concurrent steps each see their own.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterable, Iterator
from typing import Any

from engine.errors import TemplateError

__all__ = [
    "RENDER_SECONDS",
    "Render",
    "TemplateLimit",
    "budget",
    "current_render",
    "deadline",
    "guarded_iter",
    "past_deadline",
    "tick",
]

RENDER_SECONDS = 1.0
"""The longest one render (one value with its templates) may take."""


class TemplateLimit(TemplateError):
    """A template reached a size, time or depth limit."""

    retryable = False


class Render:
    """The running render's limits: its deadline, and how much it has built so far."""

    __slots__ = ("built", "deadline")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.built = 0


_render: contextvars.ContextVar[Render | None] = contextvars.ContextVar(
    "planloom_template_render", default=None
)


def current_render() -> Render | None:
    """The running render, if any."""
    return _render.get()


class budget:  # lower case: used like a function, `with budget():`
    """Run the renders inside under one deadline, `seconds` from now, and one allowance of
    `MAX_BUILT` for all they build.

    Nested budgets share the outer one, keeping the sooner deadline: a value's templates
    share one. (A class, not `contextlib.contextmanager`: it is entered on every render.)
    """

    __slots__ = ("_outer_deadline", "_seconds", "_token")

    def __init__(self, seconds: float = RENDER_SECONDS) -> None:
        self._seconds = seconds

    def __enter__(self) -> None:
        limit = time.monotonic() + self._seconds
        outer = _render.get()
        self._token = None
        if outer is None:
            self._token = _render.set(Render(limit))
        else:
            self._outer_deadline = outer.deadline
            outer.deadline = min(outer.deadline, limit)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _render.reset(self._token)
        else:
            state = _render.get()
            assert state is not None
            state.deadline = self._outer_deadline


@contextlib.contextmanager
def past_deadline() -> Iterator[None]:
    """Run what is inside as a render whose deadline has already passed."""
    token = _render.set(Render(float("-inf")))
    try:
        yield
    finally:
        _render.reset(token)


def deadline() -> float | None:
    """The current render's deadline (`time.monotonic()`), if one is running."""
    state = _render.get()
    return None if state is None else state.deadline


def tick() -> None:
    """Raise `TemplateLimit` if the current render is past its deadline."""
    state = _render.get()
    if state is not None and time.monotonic() > state.deadline:
        raise TemplateLimit(
            f"the template ran longer than its time limit ({RENDER_SECONDS:g} s); "
            "loops and repetition in templates must stay small"
        )


def guarded_iter(iterable: Iterable[Any]) -> Iterator[Any]:
    """A `for` loop's items, checking the deadline every few (a body that does anything
    checks it too)."""
    for count, item in enumerate(iterable):
        if not count & 31:
            tick()
        yield item
