"""Size guards for what a template's expressions do: operators, string methods, `str.format`.

Each guard refuses an operation before it runs when its result's size can be known in
advance (`'a' * 6000000000` asks for 6 GB); `BoundedEnvironment` measures every result
after it runs as well.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Mapping, Sized
from typing import Any

from jinja2.sandbox import SandboxedFormatter
from markupsafe import EscapeFormatter

from engine.templating._budget import guarded_iter, tick
from engine.templating._size import (
    ITEM_SIZE,
    as_int,
    check_int_bits,
    check_size,
    checked,
    size_of,
)

__all__ = [
    "BINOP_GUARDS",
    "CountingEscapeFormatter",
    "CountingFormatter",
    "guard_method",
    "guard_printf",
    "materialized",
    "replace_guard",
]


def _repeat(seq: Any, times: Any) -> None:
    count = max(as_int(times) or int(bool(times)), 0)
    if isinstance(seq, str | bytes):
        check_size(len(seq) * count, "repeating a string")
    elif isinstance(seq, list | tuple):
        check_size(size_of(seq) * count, "repeating a list")


def _guard_mul(left: Any, right: Any) -> None:
    a, b = as_int(left), as_int(right)
    if a is not None and b is not None:
        check_int_bits(a.bit_length() + b.bit_length(), "'*'")
    elif isinstance(right, int):
        _repeat(left, right)
    elif isinstance(left, int):
        _repeat(right, left)


def _guard_pow(left: Any, right: Any) -> None:
    base, exponent = as_int(left), as_int(right)
    if base is not None and exponent is not None and exponent > 0 and abs(base) > 1:
        check_int_bits((abs(base) - 1).bit_length() * exponent, "'**'")


def _guard_add(left: Any, right: Any) -> None:
    sequences = (str, bytes, list, tuple)
    if isinstance(left, sequences) and isinstance(right, sequences):
        check_size(size_of(left) + size_of(right), "'+'")


_PRINTF = re.compile(
    r"%(?:\((?P<key>[^)]*)\))?[-#0 +]*(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d+))?"
    r"[hlL]?(?P<conv>[diouxXeEfFgGcrsa%])"
)


def guard_printf(fmt: str, args: Any) -> None:
    """Refuse `fmt % args` when its result could be over the limit."""
    specs = list(_PRINTF.finditer(fmt))
    stars = [v for v in (args if isinstance(args, tuple) else (args,)) if as_int(v) is not None]
    star = max((abs(v) for v in stars), default=0)
    estimate = len(fmt)
    for spec in specs:
        for number in (spec["width"], spec["prec"]):
            if number:
                estimate += star if number == "*" else int(number)
    widen = 6 if any(s["conv"] in "ra" for s in specs) else 1  # repr may escape each char
    if isinstance(args, Mapping):
        estimate += sum(widen * size_of(args.get(s["key"])) for s in specs if s["key"])
    else:
        estimate += widen * size_of(args)
    check_size(estimate, "'%' formatting")


def _guard_mod(left: Any, right: Any) -> None:
    if isinstance(left, str):
        guard_printf(left, right)
    elif isinstance(left, bytes | bytearray):  # bytes have printf formatting too
        guard_printf(left.decode("latin-1"), right)


BINOP_GUARDS: dict[str, Callable[[Any, Any], None]] = {
    "*": _guard_mul,
    "**": _guard_pow,
    "+": _guard_add,
    "%": _guard_mod,
}


def _width_guard(self: Any, width: Any = 0, *_: Any) -> None:
    check_size(max(len(self), as_int(width) or 0), "padding a string")


def _expandtabs_guard(self: Any, tabsize: Any = 8) -> None:
    tabs = self.count("\t" if isinstance(self, str) else b"\t")
    check_size(len(self) + tabs * max(as_int(tabsize) or 0, 0), "expanding tabs")


def replace_guard(self: Any, old: Any = "", new: Any = "", count: Any = -1) -> None:
    """Refuse `self.replace(old, new, count)` when its result would be too large."""
    if not isinstance(old, str | bytes) or not isinstance(new, str | bytes):
        return
    found = self.count(old) if old else len(self) + 1
    limit = as_int(count)
    if limit is not None and limit >= 0:
        found = min(found, limit)
    check_size(len(self) + found * max(len(new) - len(old), 0), "replacing")


def _join_guard(self: Any, items: Any = ()) -> None:
    if isinstance(items, Sized):  # (a lazy input is a list by now: see `materialized`)
        check_size(size_of(items) + len(self) * max(len(items) - 1, 0), "joining")


def _translate_guard(self: Any, table: Any = None) -> None:
    if isinstance(table, Mapping):
        longest = max((size_of(v) for v in table.values()), default=1)
        check_size(len(self) * max(longest, 1), "translating")


def _split_guard(self: Any, sep: Any = None, maxsplit: Any = -1) -> None:
    if isinstance(sep, str | bytes) and sep:
        parts = self.count(sep) + 1
        check_size(len(self) + parts * ITEM_SIZE, "splitting")


_METHOD_GUARDS: dict[str, Callable[..., None]] = {
    "center": _width_guard,
    "ljust": _width_guard,
    "rjust": _width_guard,
    "zfill": _width_guard,
    "expandtabs": _expandtabs_guard,
    "replace": replace_guard,
    "join": _join_guard,
    "translate": _translate_guard,
    "split": _split_guard,
    "rsplit": _split_guard,
}


_JINJA_CALL_KEYWORDS = ("_loop_vars", "_block_vars")  # Jinja's own, removed before the call


def materialized(method: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """`args`, with a lazy input (`map`, `select`) of `str.join` made a list to measure."""
    if (
        args
        and isinstance(args[0], types.GeneratorType)
        and getattr(method, "__name__", "") == "join"
    ):
        return (checked(list(guarded_iter(args[0])), "the input of join"), *args[1:])
    return args


def guard_method(method: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse a call of a string method whose result would be too large."""
    if not isinstance(method, types.BuiltinMethodType | types.MethodType):
        return  # (Markup's string methods are Python methods wrapping str's)
    owner = getattr(method, "__self__", None)
    guard = _METHOD_GUARDS.get(method.__name__)
    if guard is None or not isinstance(owner, str | bytes):
        return
    given = {k: v for k, v in kwargs.items() if k not in _JINJA_CALL_KEYWORDS}
    try:
        guard(owner, *args, **given)
    except TypeError:  # wrong arguments: the method itself says so
        return


class CountingFormatter(SandboxedFormatter):
    """`str.format` in the sandbox, refusing fields that would make the result too large."""

    _total = 0

    def format_field(self, value: Any, format_spec: str) -> Any:
        tick()
        widest = max((int(d) for d in re.findall(r"\d+", format_spec)), default=0)
        self._total += widest + size_of(value)
        check_size(self._total, "str.format")
        return super().format_field(value, format_spec)


class CountingEscapeFormatter(CountingFormatter, EscapeFormatter):
    """`CountingFormatter` for `Markup` strings, escaping each field."""
