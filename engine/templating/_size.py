"""Measuring the values a template builds, against the size limits.

A value's size counts shared references once per reference (what printing it would
produce), so `[x, x]` weighs twice `x`. Anything over `MAX_SIZE` is an error, and so is
building more than `MAX_BUILT` in all in one render.
"""

from __future__ import annotations

import types
from collections import deque
from typing import Any

from jinja2.utils import Namespace

from engine.templating._budget import TemplateLimit, current_render

__all__ = [
    "ITEM_SIZE",
    "MAX_BUILT",
    "MAX_INT_BITS",
    "MAX_SIZE",
    "account",
    "as_int",
    "check_int_bits",
    "check_size",
    "checked",
    "size_of",
]

MAX_SIZE = 10_000_000
"""The largest value a template may build or output, in characters (about bytes)."""

MAX_BUILT = 10 * MAX_SIZE
"""The most one render may build in all, counting what it drops again (loops that make many
large values must not be able to exhaust memory before their deadline)."""

ITEM_SIZE = 16
"""What one item of a list, tuple or dict counts for, besides its own content."""

MAX_INT_BITS = 65_536
"""The largest integer a template may compute (Python prints at most 4,300 digits)."""

_DICT_VIEWS: tuple[type, ...] = (type({}.keys()), type({}.values()), type({}.items()))


def _scalar_size(value: Any) -> int | None:
    """The size of a value without parts, or None for a container."""
    if isinstance(value, str | bytes | bytearray):
        return len(value)
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return 0
    if isinstance(value, int):
        return value.bit_length() // 8
    if isinstance(value, list | tuple | set | frozenset | dict | deque | Namespace):
        return None
    if isinstance(value, (types.MappingProxyType, *_DICT_VIEWS)):
        return None
    return 0  # an opaque object (a generator, a loop, a cycler): printed as a short name


def _children(value: Any) -> list[Any]:
    if isinstance(value, dict | types.MappingProxyType):
        return [*value.keys(), *value.values()]
    if isinstance(value, Namespace):
        attrs: dict[str, Any] = object.__getattribute__(value, "_Namespace__attrs")
        return [*attrs.keys(), *attrs.values()]
    return list(value)


def size_of(value: Any, limit: int = MAX_SIZE) -> int:
    """How large `value` prints, roughly in characters; `limit + 1` once it is over `limit`.

    A shared part counts once per reference to it, but is measured once, so this takes
    time in proportion to the distinct objects, not to the size it reports.
    """
    scalar = _scalar_size(value)
    if scalar is not None:
        return scalar
    sizes: dict[int, int] = {}
    keep: list[Any] = []  # children made on the fly (dict views) stay alive: ids stay unique
    pending: set[int] = set()
    stack: list[tuple[Any, list[Any] | None]] = [(value, None)]
    while stack:
        obj, parts = stack.pop()
        if parts is not None:  # every child is measured: add them up
            total = ITEM_SIZE
            for child in parts:
                own = _scalar_size(child)
                total += ITEM_SIZE + (own if own is not None else sizes[id(child)])
                if total > limit:
                    return limit + 1
            sizes[id(obj)] = total
            pending.discard(id(obj))
            continue
        if id(obj) in sizes:
            continue
        if id(obj) in pending:  # a cycle: printing it would never end
            return limit + 1
        pending.add(id(obj))
        parts = _children(obj)
        keep.append(parts)
        stack.append((obj, parts))
        for child in parts:
            if _scalar_size(child) is None and id(child) not in sizes:
                if id(child) in pending:
                    return limit + 1
                stack.append((child, None))
    return sizes[id(value)]


def check_size(size: int, what: str) -> None:
    """Raise `TemplateLimit` if `size` (of `what`) is over `MAX_SIZE`."""
    if size > MAX_SIZE:
        raise TemplateLimit(
            f"{what} would be {_amount(size)} characters; a template may build at most {MAX_SIZE:,}"
        )


def _amount(size: int) -> str:
    return f"about {size:.3g}" if size > 10**15 else f"{size:,}"


def checked(value: Any, what: str) -> Any:
    """`value`, measured; what the render has built so far grows by its size."""
    account(size_of(value), what)
    return value


def account(size: int, what: str) -> None:
    """Check `size` (of `what`) and add it to what the running render has built."""
    check_size(size, what)
    state = current_render()
    if state is not None and size > 64:  # small values are not worth the bookkeeping
        state.built += size
        if state.built > MAX_BUILT:
            raise TemplateLimit(
                f"the template built more than {MAX_BUILT:,} characters in all "
                f"({what} was the last straw); keep loops over large values small"
            )


def check_int_bits(bits: int, what: str) -> None:
    """Raise `TemplateLimit` if an integer of `bits` bits (from `what`) is too large."""
    if bits > MAX_INT_BITS:
        raise TemplateLimit(
            f"{what} would be an integer of about {bits:,} bits; a template may compute "
            f"at most {MAX_INT_BITS:,}"
        )


def as_int(value: Any) -> int | None:
    """`value` if it is an integer (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
