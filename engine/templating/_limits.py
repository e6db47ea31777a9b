"""The Jinja environment every template runs in, bounded in time, size and depth.

Templates are written by recipe authors and by models, and a read-only plan runs without
approval, so a template is hostile input. Jinja's sandbox stops it reaching Python's
internals, not from spending memory or time: `('a' * 6000000000)[:5]` asks for 6 GB, three
nested loops over `range(100000)` run for ever, seventy nested parentheses overflow the
parser's stack. `BoundedEnvironment` bounds them:

- **Size.** Every value a template builds is measured where it is built, before the
  allocation when the result's size can be known in advance: the operators `*`, `**`, `+`,
  `%` and `~`, list/tuple/dict literals, calls (string methods, globals, macros), filters,
  `str.format` fields and the text a template outputs. A value's size counts shared
  references once per reference (what printing it would produce), so `[x, x]` weighs twice
  `x`. Anything over `MAX_SIZE` (about 10 MB) is an error, and so is building more than
  `MAX_BUILT` in all in one render (a loop making many large values, kept or not).
- **Time.** A render runs under a deadline (`budget`). The deadline is checked at every
  step a template can repeat: each loop iteration, call, filter, operator, attribute
  access, and output. Each single operation between two checks is bounded by the size
  limit, and user regexes get the time left (`engine.regex`).
- **Depth.** `check_depth` refuses brackets nested deeper than `MAX_BRACKETS` before
  Jinja's recursive parser sees them, and parsed trees deeper than `MAX_TREE_DEPTH` before
  its recursive compiler does.

A limit reached raises `TemplateLimit`, a `TemplateError`.
"""

from __future__ import annotations

import builtins
import functools
import types
from collections.abc import Callable, Iterable
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from markupsafe import Markup

from engine.templating._budget import (
    RENDER_SECONDS,
    TemplateLimit,
    budget,
    deadline,
    guarded_iter,
    past_deadline,
    tick,
)
from engine.templating._data import as_data
from engine.templating._depth import (
    MAX_BRACKETS,
    MAX_TREE_DEPTH,
    check_depth,
    check_tree,
    checked_nodes,
)
from engine.templating._filters import guard_callable
from engine.templating._operators import (
    BINOP_GUARDS,
    CountingEscapeFormatter,
    CountingFormatter,
    guard_method,
    materialized,
)
from engine.templating._rewrite import Bounder, guarded_concat, guarded_value
from engine.templating._size import (
    ITEM_SIZE,
    MAX_BUILT,
    MAX_INT_BITS,
    MAX_SIZE,
    account,
    check_size,
    checked,
    size_of,
)

__all__ = [
    "ITEM_SIZE",
    "MAX_BRACKETS",
    "MAX_BUILT",
    "MAX_INT_BITS",
    "MAX_SIZE",
    "MAX_TREE_DEPTH",
    "RENDER_SECONDS",
    "BoundedEnvironment",
    "TemplateLimit",
    "budget",
    "check_depth",
    "check_size",
    "check_tree",
    "checked_nodes",
    "deadline",
    "finalize",
    "guard_callable",
    "guarded_concat",
    "guarded_iter",
    "guarded_value",
    "size_of",
    "tick",
]


# Jinja's own parameter names, shadowing `min` and `max`: hence `builtins.max` below.
def _lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    """Jinja's `lipsum`, refused when it would write too much."""
    words = builtins.max(min, max, 0)
    check_size(builtins.max(n, 0) * words * 12, "lipsum")
    return jinja2.utils.generate_lorem_ipsum(n=n, html=html, min=min, max=max)


def _bounded_concat(pieces: Iterable[str]) -> str:
    """Jinja's `concat` for output and captured blocks: stops once the text is too long."""
    total = 0
    buffer: list[str] = []
    for piece in pieces:
        total += len(piece)
        check_size(total, "the rendered text")
        buffer.append(piece)
    return "".join(buffer)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, bounded in size, time and depth.

    Filters, tests and globals added after construction are guarded by `guard_all`.
    """

    intercepted_binops = frozenset(BINOP_GUARDS)
    concat = staticmethod(_bounded_concat)  # Jinja's hook for joining output

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.globals["lipsum"] = _lipsum
        self.guard_all()

    def guard_all(self) -> None:
        """Wrap every filter and test not wrapped yet (idempotent)."""
        for table, kind in ((self.filters, "filter"), (self.tests, "test")):
            for name, fn in list(table.items()):
                if not getattr(fn, "_planloom_guarded", False):
                    guarded = guard_callable(name, fn, kind)
                    guarded._planloom_guarded = True  # type: ignore[attr-defined]  # a marker
                    table[name] = guarded

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        """`left operator right`, refused before it starts if its result would be too large."""
        tick()
        BINOP_GUARDS[operator](left, right)
        return checked(self.binop_table[operator](left, right), f"'{operator}'")

    # Jinja's signature: the odd names cannot clash with the call's keyword arguments.
    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        """A call from a template: deadline, argument guards, then the result measured."""
        tick()
        args = materialized(__obj, args)
        guard_method(__obj, args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        return checked(result, "the call's result")

    def getattr(self, obj: Any, attribute: str) -> Any:
        """`obj.attribute`, with the deadline checked."""
        tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        """`obj[argument]`, with the deadline checked."""
        tick()
        return super().getitem(obj, argument)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """`str.format` and `format_map` with each field measured (see `CountingFormatter`)."""
        if not isinstance(value, types.MethodType | types.BuiltinMethodType) or (
            value.__name__ not in ("format", "format_map")
        ):
            return None
        owner: Any = value.__self__
        if not isinstance(owner, str):
            return None
        is_map = value.__name__ == "format_map"

        def wrapper(*args: Any, **kwargs: Any) -> str:
            formatter: CountingFormatter
            if isinstance(owner, Markup):
                formatter = CountingEscapeFormatter(self, escape=owner.escape)
            else:
                formatter = CountingFormatter(self)
            if is_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                return type(owner)(formatter.vformat(owner, (), args[0]))
            return type(owner)(formatter.vformat(owner, args, kwargs))

        return functools.update_wrapper(wrapper, value)

    def _generate(
        self,
        source: nodes.Template,
        name: str | None,
        filename: str | None,
        defer_init: bool = False,
    ) -> str:
        check_tree(source)
        bounded = Bounder().visit(source)
        bounded.set_environment(self)
        # Jinja folds constant parts by calling filters and tests while it compiles. A
        # deadline already past makes every guarded one decline (Jinja then leaves the part
        # to run time), so nothing runs twice and nothing runs unbounded here.
        with past_deadline():
            return super()._generate(bounded, name, filename, defer_init=defer_init)


def finalize(value: Any) -> Any:
    """What `${{ }}` outputs: None prints as nothing; anything else is measured first."""
    if value is None:
        return ""
    if type(value) is str:  # the usual case, measured in O(1)
        # counted even when printed by reference: a `set` block or macro keeps what it prints
        if len(value) > 64:
            account(len(value), "the value printed")
        return value
    if type(value) is int:  # bounded by `MAX_INT_BITS` where a template computes one
        return value
    checked(value, "the value printed")
    data = as_data(value)  # an Undefined inside a list is an error here too, not "Undefined"
    return data if data is value else checked(data, "the value printed")
