"""Size guards for Jinja's filters and tests.

Every filter and test runs wrapped by `guard_callable`: the deadline is checked, its
arguments are measured first for the filters that can grow their input (`center`,
`indent`, `format`, `wordwrap`, ...), and its result is measured after.
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Iterable, Sized
from typing import Any

from engine.templating._budget import TemplateLimit, guarded_iter, tick
from engine.templating._operators import guard_printf, replace_guard
from engine.templating._size import ITEM_SIZE, as_int, check_size, checked, size_of

__all__ = ["guard_callable"]


def _stringified(value: Any, *_: Any, **__: Any) -> None:
    check_size(size_of(value), "the filter's input")


def _center_filter(value: Any, width: Any = 80) -> None:
    check_size(max(size_of(value), as_int(width) or 0), "center")


def _indent_filter(s: Any, width: Any = 4, first: Any = False, blank: Any = False) -> None:
    pad = len(width) if isinstance(width, str) else max(as_int(width) or 0, 0)
    text = str(checked(s, "indent"))
    check_size(len(text) + (text.count("\n") + 1) * pad, "indent")


def _format_filter(value: Any, *args: Any, **kwargs: Any) -> None:
    # Jinja formats str(value): a list holding '%0999999999d' is a format string too
    guard_printf(str(checked(value, "format")), kwargs if kwargs else args)


def _join_filter(value: Any, d: Any = "", attribute: Any = None) -> None:
    items = value if isinstance(value, Sized) else ()  # (a lazy input is a list by now)
    check_size(size_of(value) + len(str(d)) * len(items), "join")


def _replace_filter(s: Any, old: Any = "", new: Any = "", count: Any = None) -> None:
    text = str(checked(s, "replace"))
    replace_guard(text, str(old), str(new), -1 if count is None else count)


def _wordwrap_filter(s: Any, width: Any = 79, *args: Any, wrapstring: Any = None) -> None:
    text = str(checked(s, "wordwrap"))
    if len(args) >= 2:
        wrapstring = args[1]
    joint = len(wrapstring) if isinstance(wrapstring, str) else 1
    check_size(len(text) * (1 + joint), "wordwrap")
    # textwrap works word by word in Python: keep it to what finishes in well under a second
    check_size(len(text) * 10, "wordwrap's input (it is slow)")


def _batch_filter(value: Any, linecount: Any = 1, fill_with: Any = None) -> None:
    if fill_with is not None:
        count = max(as_int(linecount) or 0, 0)
        check_size(count * (ITEM_SIZE + size_of(fill_with)), "batch")


def _slice_filter(value: Any, slices: Any = 1, fill_with: Any = None) -> None:
    count = max(as_int(slices) or 0, 0)
    check_size(count * ITEM_SIZE * 4 + count * size_of(fill_with), "slice")


def _tojson_filter(value: Any, indent: Any = None) -> None:
    width = len(indent) if isinstance(indent, str) else max(as_int(indent) or 0, 0)
    if width > 16:
        raise TemplateLimit(f"tojson: indent {width} is more than 16")
    check_size(size_of(value) * (2 + width), "tojson")


def _sum_filter(iterable: Any, attribute: Any = None, start: Any = 0) -> None:
    if not isinstance(start, int | float):
        # sum() over lists copies the total so far at each item: quadratic in time
        items = list(iterable) if isinstance(iterable, Iterable) else []  # a list by now
        check_size(size_of(start) + size_of(items) * max(len(items), 1), "sum")


_FILTER_GUARDS: dict[str, Callable[..., None]] = {
    "center": _center_filter,
    "indent": _indent_filter,
    "format": _format_filter,
    "join": _join_filter,
    "replace": _replace_filter,
    "wordwrap": _wordwrap_filter,
    "batch": _batch_filter,
    "slice": _slice_filter,
    "tojson": _tojson_filter,
    "sum": _sum_filter,
    "string": _stringified,
    "pprint": _stringified,
    "xmlattr": _stringified,
    "urlencode": _stringified,
    "urlize": _stringified,
    "striptags": _stringified,
    "escape": _stringified,
    "e": _stringified,
    "forceescape": _stringified,
    "safe": _stringified,
    "title": _stringified,
    "upper": _stringified,
    "lower": _stringified,
    "capitalize": _stringified,
    "trim": _stringified,
    "truncate": _stringified,
    "wordcount": _stringified,
}


def _passes_arg(fn: Callable[..., Any]) -> bool:
    return getattr(fn, "jinja_pass_arg", None) is not None


def guard_callable(name: str, fn: Callable[..., Any], kind: str) -> Callable[..., Any]:
    """`fn` (a filter or test named `name`), checking the deadline, its result's size and,
    for the filters in `_FILTER_GUARDS`, its arguments before it runs (a lazy input such
    as `map`'s output is made a list first, so the guard can measure it)."""
    pre = _FILTER_GUARDS.get(name) if kind == "filter" else None
    skip = 1 if _passes_arg(fn) else 0

    @functools.wraps(fn)  # keeps Jinja's pass_context/pass_environment marker
    def guarded(*args: Any, **kwargs: Any) -> Any:
        tick()
        if pre is not None:
            if len(args) > skip and isinstance(args[skip], types.GeneratorType):
                # a lazy input (`map`, `select`) is made a list, so the guard can measure it
                items = checked(list(guarded_iter(args[skip])), f"the input of {kind} '{name}'")
                args = (*args[:skip], items, *args[skip + 1 :])
            # wrong arguments (TypeError) are for the filter itself to report
            with contextlib.suppress(TypeError):
                pre(*args[skip:], **kwargs)
        return checked(fn(*args, **kwargs), f"the result of {kind} '{name}'")

    return guarded
