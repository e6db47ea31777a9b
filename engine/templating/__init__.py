"""`${{ ... }}` templates: Jinja2's immutable sandbox, strict undefined, native whole values.

A string that is exactly one `${{ expr }}` evaluates to the expression's value with its own
type (a list stays a list); any other string containing `${{` renders to text. Plain dotted
references (`steps.log.output.stdout`) are evaluated without Jinja when every hop is a plain
dict key or list index, which keeps templating off the per-step hot path; anything else goes
through the sandbox, with the same result. Besides Jinja's own, templates have the tests
`match` and `search` (regex) and the filters `regex_replace`, `fromjson`, `basename` and
`split`; an unknown filter or test is reported when the plan is validated.

Templates are hostile input (a model writes them; a read-only plan runs without approval),
so they run in `engine.templating._limits.BoundedEnvironment`: every render has a deadline and
every value a template builds a size limit, and too deep a template is a syntax error.
Regex tests and filters go through `engine.regex`, bounded by the render's deadline.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jinja2
from jinja2 import nodes

from engine import regex
from engine.errors import TemplateError
from engine.templating._data import as_data
from engine.templating._extras import basename, fromjson, join, match, regex_replace, search, split
from engine.templating._limits import (
    BoundedEnvironment,
    TemplateLimit,
    budget,
    check_depth,
    check_size,
    checked_nodes,
    finalize,
    size_of,
)
from engine.templating._placed import render_at

__all__ = [
    "Namespace",
    "Reference",
    "Template",
    "ValueTemplate",
    "begins_with_template",
    "compile_value",
    "find_templates",
    "render_at",
]

MARK = "${{"
# Exactly one template, nothing around it: text around a template (a newline, a space) is
# data, so such a value renders to text.
_WHOLE = re.compile(r"\A\$\{\{(?P<expr>.*)\}\}\Z", re.S)
_PATH = re.compile(r"^\s*[A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[\d+\])*\s*$")
_PATH_PART = re.compile(r"\.([A-Za-z_]\w*)|\[(\d+)\]")
_NAME = re.compile(r"[A-Za-z_]\w*")
_JINJA_GLOBALS = frozenset({"range", "dict", "lipsum", "cycler", "joiner", "namespace", "loop"})
# Words Jinja reads as literals or globals, never as context names: leave them to Jinja.
_NOT_NAMES = _JINJA_GLOBALS | {"true", "false", "none", "True", "False", "None"}

Reference = tuple[str | int, ...]
"""A path read by a template, from its root name: `("steps", "log", "output")`."""


class Namespace(dict[str, Any]):
    """A mapping templates read by name: `steps` and `inputs`.

    Jinja looks `steps.get` up as an attribute first, which finds the dict method (and the
    sandbox refuses `steps.pop`); in a namespace the entry wins, so every id validation
    accepts can be referenced: `${{ steps.items.output }}` is the step `items`.
    """

    __slots__ = ()


class _Sandbox(BoundedEnvironment):
    """Names from a `Namespace` first; an attribute or item of null is null.

    A step that failed, was skipped or did not run in a dry run has a null `output`, and a
    `for_each` item that failed a null entry in its list: `steps.x.output.stdout` and
    `map(attribute='content')` over such a list give null there (as GitHub Actions'
    expressions do), not an error. Anything else undefined stays an error.
    """

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is Namespace and attribute in obj:
            return obj[attribute]
        if obj is None:
            return None
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        if obj is None:
            return None
        return super().getitem(obj, argument)


_env = _Sandbox(
    variable_start_string="${{",
    variable_end_string="}}",
    block_start_string="${%",
    block_end_string="%}",
    comment_start_string="${#",
    comment_end_string="#}",
    undefined=jinja2.StrictUndefined,
    autoescape=False,
    keep_trailing_newline=True,
    finalize=finalize,
)
# Helpers recipes keep needing (as in Ansible and GitHub Actions): regex tests and filters.
_env.tests.update(match=match, search=search)
_env.filters.update(
    regex_replace=regex_replace, fromjson=fromjson, basename=basename, split=split, join=join
)
_env.guard_all()
_REGEX_TAKERS = {(nodes.Test, "match"), (nodes.Test, "search"), (nodes.Filter, "regex_replace")}


def filter_names() -> list[str]:
    """Every filter a template may use."""
    return sorted(_env.filters)


def test_names() -> list[str]:
    """Every test a template may use."""
    return sorted(_env.tests)


@dataclass(slots=True)
class Template:
    """One template string, parsed once; compiled lazily on first render.

    Immutable data in slots: a plan holds one per template string, so a 100,000-step plan
    holds 100,000 of them.
    """

    source: str
    expression: str | None
    references: tuple[Reference, ...] = ()
    locals: frozenset[str] = frozenset()
    unknown_filters: tuple[str, ...] = ()
    unknown_tests: tuple[str, ...] = ()
    constants: frozenset[str] = frozenset()
    """The string literals written inside the template (`'-l'` in `${{ ['wc', '-l'] }}`)."""
    _path: Reference | None = None  # a plain dotted reference: its one reference

    @classmethod
    # Immutable once parsed; a plan keeps its own with its steps (engine._graph.step_parsed).
    @functools.lru_cache(maxsize=8192)
    def parse(cls, source: str) -> Template:
        """Parse `source`.

        Raises:
            jinja2.TemplateSyntaxError: the template is malformed, nested too deeply, or
                gives a literal regex that does not compile.
        """
        match = _WHOLE.match(source)
        expression = None
        if match and MARK not in match["expr"] and "}}" not in match["expr"]:
            expression = match["expr"].strip()
        if expression is not None and _PATH.match(expression):
            root, parts = _split_path(expression)
            # Jinja prefers attributes over keys (`d.items` is the method): such a path is
            # left to it, so a walk never has to ask.
            if root not in _NOT_NAMES and _DICT_ATTRIBUTES.isdisjoint(parts):
                path = (root, *parts)
                return cls(source, expression, (path,), _path=path)
        tree = _parse(source)
        references, local_names = _references(tree)
        constants = frozenset(
            n.value for n in tree.find_all(nodes.Const) if isinstance(n.value, str)
        )
        # Jinja looks filter and test names up only when compiling: check them here, so
        # validation reports them instead of the run failing later.
        return cls(
            source,
            expression,
            tuple(references),
            frozenset(local_names),
            tuple(sorted({n.name for n in tree.find_all(nodes.Filter)} - set(_env.filters))),
            tuple(sorted({n.name for n in tree.find_all(nodes.Test)} - set(_env.tests))),
            constants,
        )

    @property
    def is_path(self) -> bool:
        """A plain dotted reference: walked through dicts and lists, never evaluated by
        Jinja unless a hop is missing (so it needs no time budget of its own)."""
        return self._path is not None

    def render(self, context: Mapping[str, Any]) -> Any:
        """Evaluate against `context`.

        Raises:
            TemplateError: an undefined name, a sandbox violation, or any failure inside.
        """
        if self._path is not None:
            value = _walk(context, self._path)
            if value is not _MISS:
                return value
        try:
            with budget():
                return self._evaluate(context)
        except (jinja2.TemplateError, TemplateLimit) as exc:
            raise TemplateError(f"template {self._shown()} failed: {exc}") from exc
        except TemplateError:
            raise
        except Exception as exc:  # a filter or operator raised inside; RecursionError too
            raise TemplateError(
                f"template {self._shown()} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def _evaluate(self, context: Mapping[str, Any]) -> Any:
        if self.expression is None:
            return _template(self.source).render(**context)
        result = _expression(self.expression)(**context)
        check_size(size_of(result), "the value")
        data = as_data(result)
        if data is not result:  # a generator made into a list is measured again
            check_size(size_of(data), "the value")
        return data

    def _shown(self) -> str:
        text = self.source.strip()
        return repr(text if len(text) <= 200 else text[:200] + "...")


def _parse(source: str) -> nodes.Template:
    """Jinja's parse tree for `source`, refused if too deep or with a bad literal regex."""
    check_depth(_env, source)
    try:
        tree = _env.parse(source)
    except RecursionError as exc:  # `not not not ...`, `- - - x`: recursive in the parser
        raise jinja2.TemplateSyntaxError(
            "template nested too deeply; split it into steps", 1
        ) from exc
    for node in checked_nodes(tree):  # also refuses too deep a tree, for Jinja's compiler
        if not isinstance(node, nodes.Test | nodes.Filter):
            continue
        literal = node.args[0] if node.args else None
        if (type(node), node.name) in _REGEX_TAKERS and isinstance(literal, nodes.Const):
            try:
                regex.compile_pattern(str(literal.value))
            except ValueError as exc:
                raise jinja2.TemplateSyntaxError(f"{node.name}: {exc}", node.lineno) from exc
    return tree


_MISS = object()
_NONE: frozenset[str] = frozenset()


def _walk(context: Mapping[str, Any], path: Reference) -> Any:
    hops = iter(path)
    root: Any = next(hops)  # (a reference's root is a name)
    if root not in context:
        return _MISS
    value = context[root]
    for part in hops:
        if isinstance(part, int):
            if isinstance(value, list) and -len(value) <= part < len(value):
                value = value[part]
                continue
            return None if value is None else _MISS
        if isinstance(value, dict) and part in value:  # (no part is a dict attribute)
            value = value[part]
            continue
        return None if value is None else _MISS  # an attribute of null is null (_Sandbox)
    return value


_DICT_ATTRIBUTES = frozenset(dir(dict))  # (what hasattr(dict, name) finds, looked up at once)


def _split_path(expression: str) -> tuple[str, tuple[str | int, ...]]:
    """A path `_PATH` matched, as its root name and parts. Names are interned: 100,000
    templates reading `steps.X.output` hold one "steps" and one "output" (and each X is
    its step's id), not 100,000 of each."""
    expression = expression.strip()
    if "[" not in expression:  # names only (the usual case): `_PATH` has checked each
        root, *names = expression.split(".")
        return sys.intern(root), tuple(map(sys.intern, names))
    head = _NAME.match(expression)
    assert head is not None  # guaranteed by _PATH
    parts: list[str | int] = []
    for attr, index in _PATH_PART.findall(expression[head.end() :]):
        parts.append(sys.intern(attr) if attr else int(index))
    return sys.intern(head.group(0)), tuple(parts)


@functools.lru_cache(maxsize=4096)
def _expression(expression: str) -> Callable[..., Any]:
    return _env.compile_expression(expression, undefined_to_none=False)


@functools.lru_cache(maxsize=4096)
def _template(source: str) -> jinja2.Template:
    return _env.from_string(source)


def _references(tree: nodes.Node) -> tuple[list[Reference], set[str]]:
    stored = {n.name for n in tree.find_all(nodes.Name) if n.ctx in ("store", "param")}
    found: list[Reference] = []

    def chain(node: nodes.Node) -> Reference | None:
        parts: list[str | int] = []
        while True:
            if isinstance(node, nodes.Getattr):
                parts.append(node.attr)
                node = node.node
            elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
                if not isinstance(node.arg.value, str | int):
                    return None
                parts.append(node.arg.value)
                node = node.node
            elif isinstance(node, nodes.Name):
                return (node.name, *reversed(parts))
            else:
                return None

    def visit(node: nodes.Node) -> None:
        if isinstance(node, nodes.Getattr | nodes.Getitem | nodes.Name):
            ref = chain(node)
            if ref is not None:
                root = ref[0]
                if isinstance(node, nodes.Name) and node.ctx != "load":
                    return
                if root not in stored and root not in _JINJA_GLOBALS:
                    found.append(ref)
                if isinstance(node, nodes.Getitem):
                    visit(node.arg)
                return
        for child in node.iter_child_nodes():
            visit(child)

    visit(tree)
    return found, stored


class ValueTemplate:
    """A value tree (dicts, lists, scalars) with templates inside, rendered as a whole."""

    __slots__ = ("_plain", "_render", "templates", "value")

    def __init__(self, value: Any, templates: list[Template], render: Callable[..., Any]):
        self.value = value
        self.templates = templates
        self._render = render
        self._plain = all(template.is_path for template in templates)

    @property
    def is_static(self) -> bool:
        return not self.templates

    @property
    def constants(self) -> frozenset[str]:
        """The string literals written inside any of its templates."""
        found = [t.constants for t in self.templates if t.constants]
        return _NONE if not found else frozenset().union(*found)

    def render(self, context: Mapping[str, Any]) -> Any:
        """The value with every template evaluated (the value itself when it has none).

        Its templates share one time budget (`engine.templating._limits.RENDER_SECONDS`),
        unless each is a plain reference (`Template.is_path`: walked, not evaluated).
        """
        if self._plain:
            return self._render(context)
        with budget():
            return self._render(context)


def compile_value(value: Any, parsed: Mapping[str, Template] | None = None) -> ValueTemplate:
    """Prepare a value tree for rendering; `parsed` holds templates parsed already.

    Raises:
        jinja2.TemplateSyntaxError: a template inside is malformed.
    """
    templates: list[Template] = []

    def build(item: Any) -> Callable[[Mapping[str, Any]], Any] | None:
        if isinstance(item, str):
            if MARK not in item:
                return None
            template = parsed.get(item) if parsed else None
            template = template or Template.parse(item)
            templates.append(template)
            return template.render
        if isinstance(item, dict):
            built = {k: build(v) for k, v in item.items()}
            if all(b is None for b in built.values()):
                return None
            return lambda ctx: {k: (b(ctx) if b is not None else item[k]) for k, b in built.items()}
        if isinstance(item, list):
            parts = [build(v) for v in item]
            if all(p is None for p in parts):
                return None
            return lambda ctx: [p(ctx) if p is not None else item[i] for i, p in enumerate(parts)]
        return None

    renderer = build(value)
    if renderer is None:
        return ValueTemplate(value, [], lambda ctx: value)
    return ValueTemplate(value, templates, renderer)


def begins_with_template(text: str) -> bool:
    """Whether `text` begins with a template (spaces aside): what a call finds in its place
    is data (a file name, a step's output), not words the recipe's author wrote."""
    return text.lstrip().startswith("${")


def find_templates(
    value: Any, path: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Every string holding `${{` in a value tree, with its path."""
    if isinstance(value, str):
        if MARK in value:
            yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from find_templates(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from find_templates(item, (*path, index))
