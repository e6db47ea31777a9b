"""Bounds on what a template may compute: its time, the size of what it builds, its depth.

Templates are written by recipe authors and by models, and a read-only plan runs without
approval, so a template is hostile input. Jinja's sandbox stops it reaching Python's
internals, not from spending memory or time: `('a' * 6000000000)[:5]` asks for 6 GB, three
nested loops over `range(100000)` run for ever, seventy nested parentheses overflow the
parser's stack. This module is the environment every template runs in, and it bounds them:

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
  limit, and user regexes get the time left (`engine._regex`).
- **Depth.** `check_depth` refuses brackets nested deeper than `MAX_BRACKETS` before
  Jinja's recursive parser sees them, and parsed trees deeper than `MAX_TREE_DEPTH` before
  its recursive compiler does.

A limit reached raises `TemplateLimit`, a `TemplateError`.
"""

from __future__ import annotations

import builtins
import contextlib
import contextvars
import functools
import re
import time
import types
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter
from jinja2.utils import Namespace
from jinja2.visitor import NodeTransformer
from markupsafe import EscapeFormatter, Markup

from engine.errors import TemplateError

__all__ = [
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

RENDER_SECONDS = 1.0
"""The longest one render (one value with its templates) may take."""

MAX_BRACKETS = 32
"""The deepest nesting of `(`, `[` and `{` in a template."""

MAX_TREE_DEPTH = 120
"""The deepest parsed expression (`1+1+...`, filter chains) Jinja's compiler is given."""


class TemplateLimit(TemplateError):
    """A template reached a size, time or depth limit."""

    retryable = False


# -- time --------------------------------------------------------------------------------


class _Render:
    """The running render's limits: its deadline, and how much it has built so far."""

    __slots__ = ("built", "deadline")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.built = 0


_render: contextvars.ContextVar[_Render | None] = contextvars.ContextVar(
    "planloom_template_render", default=None
)


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
            self._token = _render.set(_Render(limit))
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


# -- size --------------------------------------------------------------------------------

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


def _checked(value: Any, what: str) -> Any:
    """`value`, measured; what the render has built so far grows by its size."""
    _account(size_of(value), what)
    return value


def _account(size: int, what: str) -> None:
    check_size(size, what)
    state = _render.get()
    if state is not None and size > 64:  # small values are not worth the bookkeeping
        state.built += size
        if state.built > MAX_BUILT:
            raise TemplateLimit(
                f"the template built more than {MAX_BUILT:,} characters in all "
                f"({what} was the last straw); keep loops over large values small"
            )


def _check_int_bits(bits: int, what: str) -> None:
    if bits > MAX_INT_BITS:
        raise TemplateLimit(
            f"{what} would be an integer of about {bits:,} bits; a template may compute "
            f"at most {MAX_INT_BITS:,}"
        )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# -- operators ---------------------------------------------------------------------------


def _repeat(seq: Any, times: Any) -> None:
    count = max(_int(times) or int(bool(times)), 0)
    if isinstance(seq, str | bytes):
        check_size(len(seq) * count, "repeating a string")
    elif isinstance(seq, list | tuple):
        check_size(size_of(seq) * count, "repeating a list")


def _guard_mul(left: Any, right: Any) -> None:
    a, b = _int(left), _int(right)
    if a is not None and b is not None:
        _check_int_bits(a.bit_length() + b.bit_length(), "'*'")
    elif isinstance(right, int):
        _repeat(left, right)
    elif isinstance(left, int):
        _repeat(right, left)


def _guard_pow(left: Any, right: Any) -> None:
    base, exponent = _int(left), _int(right)
    if base is not None and exponent is not None and exponent > 0 and abs(base) > 1:
        _check_int_bits((abs(base) - 1).bit_length() * exponent, "'**'")


def _guard_add(left: Any, right: Any) -> None:
    sequences = (str, bytes, list, tuple)
    if isinstance(left, sequences) and isinstance(right, sequences):
        check_size(size_of(left) + size_of(right), "'+'")


_PRINTF = re.compile(
    r"%(?:\((?P<key>[^)]*)\))?[-#0 +]*(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d+))?"
    r"[hlL]?(?P<conv>[diouxXeEfFgGcrsa%])"
)


def _guard_printf(fmt: str, args: Any) -> None:
    """Refuse `fmt % args` when its result could be over the limit."""
    specs = list(_PRINTF.finditer(fmt))
    stars = [v for v in (args if isinstance(args, tuple) else (args,)) if _int(v) is not None]
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
        _guard_printf(left, right)
    elif isinstance(left, bytes | bytearray):  # bytes have printf formatting too
        _guard_printf(left.decode("latin-1"), right)


_BINOP_GUARDS: dict[str, Callable[[Any, Any], None]] = {
    "*": _guard_mul,
    "**": _guard_pow,
    "+": _guard_add,
    "%": _guard_mod,
}


# -- string methods ----------------------------------------------------------------------


def _width_guard(self: Any, width: Any = 0, *_: Any) -> None:
    check_size(max(len(self), _int(width) or 0), "padding a string")


def _expandtabs_guard(self: Any, tabsize: Any = 8) -> None:
    tabs = self.count("\t" if isinstance(self, str) else b"\t")
    check_size(len(self) + tabs * max(_int(tabsize) or 0, 0), "expanding tabs")


def _replace_guard(self: Any, old: Any = "", new: Any = "", count: Any = -1) -> None:
    if not isinstance(old, str | bytes) or not isinstance(new, str | bytes):
        return
    found = self.count(old) if old else len(self) + 1
    limit = _int(count)
    if limit is not None and limit >= 0:
        found = min(found, limit)
    check_size(len(self) + found * max(len(new) - len(old), 0), "replacing")


def _join_guard(self: Any, items: Any = ()) -> None:
    if isinstance(items, Sized):  # (a lazy input is a list by now: see `_materialized`)
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
    "replace": _replace_guard,
    "join": _join_guard,
    "translate": _translate_guard,
    "split": _split_guard,
    "rsplit": _split_guard,
}


_JINJA_CALL_KEYWORDS = ("_loop_vars", "_block_vars")  # Jinja's own, removed before the call


def _materialized(method: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """`args`, with a lazy input (`map`, `select`) of `str.join` made a list to measure."""
    if (
        args
        and isinstance(args[0], types.GeneratorType)
        and getattr(method, "__name__", "") == "join"
    ):
        return (_checked(list(guarded_iter(args[0])), "the input of join"), *args[1:])
    return args


def _guard_method(method: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
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


# -- str.format --------------------------------------------------------------------------


class _CountingFormatter(SandboxedFormatter):
    """`str.format` in the sandbox, refusing fields that would make the result too large."""

    _total = 0

    def format_field(self, value: Any, format_spec: str) -> Any:
        tick()
        widest = max((int(d) for d in re.findall(r"\d+", format_spec)), default=0)
        self._total += widest + size_of(value)
        check_size(self._total, "str.format")
        return super().format_field(value, format_spec)


class _CountingEscapeFormatter(_CountingFormatter, EscapeFormatter):
    pass


# -- filters, tests and globals ----------------------------------------------------------


def _stringified(value: Any, *_: Any, **__: Any) -> None:
    check_size(size_of(value), "the filter's input")


def _center_filter(value: Any, width: Any = 80) -> None:
    check_size(max(size_of(value), _int(width) or 0), "center")


def _indent_filter(s: Any, width: Any = 4, first: Any = False, blank: Any = False) -> None:
    pad = len(width) if isinstance(width, str) else max(_int(width) or 0, 0)
    text = str(_checked(s, "indent"))
    check_size(len(text) + (text.count("\n") + 1) * pad, "indent")


def _format_filter(value: Any, *args: Any, **kwargs: Any) -> None:
    # Jinja formats str(value): a list holding '%0999999999d' is a format string too
    _guard_printf(str(_checked(value, "format")), kwargs if kwargs else args)


def _join_filter(value: Any, d: Any = "", attribute: Any = None) -> None:
    items = value if isinstance(value, Sized) else ()  # (a lazy input is a list by now)
    check_size(size_of(value) + len(str(d)) * len(items), "join")


def _replace_filter(s: Any, old: Any = "", new: Any = "", count: Any = None) -> None:
    text = str(_checked(s, "replace"))
    _replace_guard(text, str(old), str(new), -1 if count is None else count)


def _wordwrap_filter(s: Any, width: Any = 79, *args: Any, wrapstring: Any = None) -> None:
    text = str(_checked(s, "wordwrap"))
    if len(args) >= 2:
        wrapstring = args[1]
    joint = len(wrapstring) if isinstance(wrapstring, str) else 1
    check_size(len(text) * (1 + joint), "wordwrap")
    # textwrap works word by word in Python: keep it to what finishes in well under a second
    check_size(len(text) * 10, "wordwrap's input (it is slow)")


def _batch_filter(value: Any, linecount: Any = 1, fill_with: Any = None) -> None:
    if fill_with is not None:
        count = max(_int(linecount) or 0, 0)
        check_size(count * (ITEM_SIZE + size_of(fill_with)), "batch")


def _slice_filter(value: Any, slices: Any = 1, fill_with: Any = None) -> None:
    count = max(_int(slices) or 0, 0)
    check_size(count * ITEM_SIZE * 4 + count * size_of(fill_with), "slice")


def _tojson_filter(value: Any, indent: Any = None) -> None:
    width = len(indent) if isinstance(indent, str) else max(_int(indent) or 0, 0)
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
                items = _checked(list(guarded_iter(args[skip])), f"the input of {kind} '{name}'")
                args = (*args[:skip], items, *args[skip + 1 :])
            # wrong arguments (TypeError) are for the filter itself to report
            with contextlib.suppress(TypeError):
                pre(*args[skip:], **kwargs)
        return _checked(fn(*args, **kwargs), f"the result of {kind} '{name}'")

    return guarded


# Jinja's own parameter names, shadowing `min` and `max`: hence `builtins.max` below.
def _lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    """Jinja's `lipsum`, refused when it would write too much."""
    words = builtins.max(min, max, 0)
    check_size(builtins.max(n, 0) * words * 12, "lipsum")
    return jinja2.utils.generate_lorem_ipsum(n=n, html=html, min=min, max=max)


# -- the tree: loops, concatenation, literals --------------------------------------------


def guarded_iter(iterable: Iterable[Any]) -> Iterator[Any]:
    """A `for` loop's items, checking the deadline every few (a body that does anything
    checks it too)."""
    for count, item in enumerate(iterable):
        if not count & 31:
            tick()
        yield item


def guarded_concat(*parts: Any) -> str:
    """`a ~ b`: refuses to print anything whose text would be over the limit."""
    check_size(sum(size_of(part) for part in parts), "'~'")
    return "".join(map(str, parts))


def guarded_value(value: Any) -> Any:
    """A list, tuple or dict literal, measured."""
    return _checked(value, "a literal")


def _imported(function: Callable[..., Any]) -> nodes.ImportedName:
    return nodes.ImportedName(f"{__name__}.{function.__name__}")


class _Bounder(NodeTransformer):
    """Route loops, `~` and literals with variable parts through the guards above."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Call(
            _imported(guarded_iter), [node.iter], [], None, None, lineno=node.lineno
        )
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Call(
            _imported(guarded_concat), list(node.nodes), [], None, None, lineno=node.lineno
        )

    def _literal(self, node: nodes.Expr) -> nodes.Node:
        self.generic_visit(node)
        if all(isinstance(child, nodes.Const) for child in node.find_all(nodes.Expr)):
            return node  # constant: bounded by the source's own size
        return nodes.Call(_imported(guarded_value), [node], [], None, None, lineno=node.lineno)

    def visit_List(self, node: nodes.List) -> nodes.Node:
        return self._literal(node)

    def visit_Dict(self, node: nodes.Dict) -> nodes.Node:
        return self._literal(node)

    def visit_Tuple(self, node: nodes.Tuple) -> nodes.Node:
        if node.ctx != "load":  # an assignment target (`for a, b in ...`), not a value
            return node
        return self._literal(node)


# -- depth -------------------------------------------------------------------------------


def check_depth(environment: jinja2.Environment, source: str) -> None:
    """Refuse templates nested too deeply for Jinja's recursive parser and compiler.

    Raises:
        jinja2.TemplateSyntaxError: brackets nested deeper than `MAX_BRACKETS`.
    """
    if sum(map(source.count, "([{")) <= MAX_BRACKETS:  # the usual case: no need to lex
        return
    depth = 0
    for lineno, kind, value in environment.lex(source):
        if kind == "operator" and value in "([{":
            depth += 1
            if depth > MAX_BRACKETS:
                raise jinja2.TemplateSyntaxError(
                    f"brackets nested more than {MAX_BRACKETS} deep; "
                    "split the expression into steps",
                    lineno,
                )
        elif kind == "operator" and value in ")]}":
            depth -= 1


def check_tree(tree: nodes.Node) -> None:
    """Refuse a parsed template deeper than `MAX_TREE_DEPTH`.

    Raises:
        jinja2.TemplateSyntaxError: the tree is too deep.
    """
    for _ in checked_nodes(tree):
        pass


def checked_nodes(tree: nodes.Node) -> Iterator[nodes.Node]:
    """Every node of `tree`, refusing it (as `check_tree` does) once too deep a one shows.

    Raises:
        jinja2.TemplateSyntaxError: the tree is too deep.
    """
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        yield node
        if depth > MAX_TREE_DEPTH:
            raise jinja2.TemplateSyntaxError(
                f"expression nested more than {MAX_TREE_DEPTH} levels deep (long operator or "
                "filter chains count); split it into steps",
                node.lineno,
            )
        stack.extend((child, depth + 1) for child in node.iter_child_nodes())


# -- the environment ---------------------------------------------------------------------


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
    """Jinja's immutable sandbox with the size, time and depth bounds of this module.

    Filters, tests and globals added after construction are guarded by `guard_all`.
    """

    intercepted_binops = frozenset(_BINOP_GUARDS)
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
        _BINOP_GUARDS[operator](left, right)
        return _checked(self.binop_table[operator](left, right), f"'{operator}'")

    # Jinja's signature: the odd names cannot clash with the call's keyword arguments.
    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        """A call from a template: deadline, argument guards, then the result measured."""
        tick()
        args = _materialized(__obj, args)
        _guard_method(__obj, args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        return _checked(result, "the call's result")

    def getattr(self, obj: Any, attribute: str) -> Any:
        """`obj.attribute`, with the deadline checked."""
        tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        """`obj[argument]`, with the deadline checked."""
        tick()
        return super().getitem(obj, argument)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """`str.format` and `format_map` with each field measured (see `_CountingFormatter`)."""
        if not isinstance(value, types.MethodType | types.BuiltinMethodType) or (
            value.__name__ not in ("format", "format_map")
        ):
            return None
        owner: Any = value.__self__
        if not isinstance(owner, str):
            return None
        is_map = value.__name__ == "format_map"

        def wrapper(*args: Any, **kwargs: Any) -> str:
            formatter: _CountingFormatter
            if isinstance(owner, Markup):
                formatter = _CountingEscapeFormatter(self, escape=owner.escape)
            else:
                formatter = _CountingFormatter(self)
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
        bounded = _Bounder().visit(source)
        bounded.set_environment(self)
        # Jinja folds constant parts by calling filters and tests while it compiles. A
        # deadline already past makes every guarded one decline (Jinja then leaves the part
        # to run time), so nothing runs twice and nothing runs unbounded here.
        token = _render.set(_Render(float("-inf")))
        try:
            return super()._generate(bounded, name, filename, defer_init=defer_init)
        finally:
            _render.reset(token)


def finalize(value: Any) -> Any:
    """What `${{ }}` outputs: None prints as nothing; anything else is measured first."""
    if value is None:
        return ""
    if type(value) is str:  # the usual case, measured in O(1)
        # counted even when printed by reference: a `set` block or macro keeps what it prints
        if len(value) > 64:
            _account(len(value), "the value printed")
        return value
    if type(value) is int:  # bounded by `MAX_INT_BITS` where a template computes one
        return value
    return _checked(value, "the value printed")
