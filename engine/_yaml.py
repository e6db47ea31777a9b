"""YAML with locations: recipes, policies, `--capabilities` files and cassettes as plain data
plus a `SourceMap`.

ruamel.yaml parses (with the C parser when it is installed, ~6x faster on large recipes);
this module composes the node tree itself, under the caps of `engine._limits` (nesting
depth, node count, alias expansion), and turns nodes into data itself so that duplicate
keys and an unquoted `{{` are reported with their positions instead of stopping at the
first problem. Policies, `--capabilities` files and cassettes are read here too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.composer import ComposerError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.resolver import VersionedResolver

from engine._gc import collector_paused
from engine._limits import MAX_ALIAS_NODES, MAX_DEPTH, MAX_NODES
from engine.diagnostics import Diagnostic, NodePath, SourceMap
from engine.errors import RecipeSyntaxError

__all__ = ["MAX_RECIPE_BYTES", "parse_recipe_text", "read_recipe"]

MAX_RECIPE_BYTES = 20_000_000

_INT = re.compile(r"^[-+]?[0-9][0-9_]*$")
_SPECIAL_FLOATS = {".inf": "inf", "+.inf": "inf", "-.inf": "-inf", ".nan": "nan"}
_TAG = "tag:yaml.org,2002:"


def read_recipe(path: str | Path) -> tuple[Any, SourceMap]:
    """Read a recipe file into plain data and a `SourceMap`."""
    name = str(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_RECIPE_BYTES + 1)
    except OSError as exc:
        raise _syntax(name, "unreadable", f"cannot read recipe: {exc.strerror or exc}") from exc
    if len(raw) > MAX_RECIPE_BYTES:
        raise _syntax(name, "too-large", f"recipe is larger than {MAX_RECIPE_BYTES} bytes")
    if b"\x00" in raw:
        raise _syntax(name, "binary-file", "this is a binary file, not a YAML recipe")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _syntax(
            name, "encoding", f"recipe is not UTF-8 text (bad byte at offset {exc.start})"
        ) from exc
    return parse_recipe_text(text, name)


def parse_recipe_text(text: str, file: str = "<recipe>") -> tuple[Any, SourceMap]:
    """Parse YAML text into plain data and a `SourceMap`.

    Duplicate keys (the first one is kept) and an unquoted `{{` do not stop parsing: they
    are left in `source.problems`, which `validate_plan` reports with every other problem.

    Raises:
        RecipeSyntaxError: the text is not YAML, or is empty, or passes a cap of
            `engine._limits` (nesting depth, nodes, alias expansion).
    """
    source = SourceMap(file=file, lines=text.splitlines())
    try:
        with collector_paused():
            node = _compose(text)
    except _LimitExceeded as exc:
        raise RecipeSyntaxError([exc.diagnostic(file)]) from None
    except MarkedYAMLError as exc:
        raise RecipeSyntaxError([_yaml_error(exc, source)]) from exc
    except YAMLError as exc:
        raise RecipeSyntaxError([source.at((), "yaml-syntax", str(exc))]) from exc
    if node is None:
        raise RecipeSyntaxError(
            [source.at((), "empty", "the recipe is empty", "start with 'version: 1'")]
        )
    builder = _Builder(source)
    with collector_paused():
        data = builder.build(node, ())
    source.problems.extend(builder.problems)  # reported by validation, with the rest
    return data, source


class _OnceResolver(VersionedResolver):
    """Looks the document's YAML version up once.

    ruamel asks for it on every scalar, and with the C parser each ask raises and catches
    two AttributeErrors: a third of the parse time of a large recipe. The version is fixed
    by the time the first scalar is resolved (a `%YAML` directive precedes the document).
    """

    _table: Any = None

    @property
    def versioned_resolver(self) -> Any:
        if self._table is None:
            self._table = VersionedResolver.versioned_resolver.fget(self)  # type: ignore[attr-defined]  # a property
        return self._table


def _compose(text: str) -> Node | None:
    """The document's node tree, composed under the caps of `engine._limits`.

    ruamel parses (in C when it can) and this module composes: ruamel's composers recurse
    once per nesting level (the C one overflows the C stack on deep input) and share one
    node per anchor, so a few hundred bytes of aliases-of-aliases only blow up later, when
    the tree is turned into data. Composing here counts every node as it will be expanded
    and stops at the cap, with the document's own position.
    """
    yaml = YAML(typ="safe", pure=False)
    yaml.Resolver = _OnceResolver
    loader, parser = yaml.get_constructor_parser(text)
    # With the C parser one object parses and resolves; the pure parser has a resolver apart.
    resolver = loader if hasattr(loader, "resolve") else yaml.resolver
    try:
        return _Composer(parser, resolver).single_node()
    finally:
        parser.dispose()


class _LimitExceeded(Exception):
    """A cap of `engine._limits` was passed while composing, at `mark`."""

    def __init__(self, mark: Any, rule: str, message: str, hint: str) -> None:
        super().__init__(message)
        self.mark, self.rule, self.message, self.hint = mark, rule, message, hint

    def diagnostic(self, file: str) -> Diagnostic:
        line, column = self.mark.line + 1, self.mark.column + 1
        return Diagnostic(
            file=file,
            line=line,
            column=column,
            rule=self.rule,
            message=self.message,
            hint=self.hint,
        )


@dataclass(slots=True)
class _Open:
    """A list or mapping being composed: its expanded size and height so far."""

    node: SequenceNode | MappingNode
    anchor: str | None
    size: int = 1
    height: int = 1
    key: Node | None = None  # a mapping's key waiting for its value


class _Composer:
    """Events → nodes without recursion, counting what aliases would expand to.

    `size` is the number of nodes a subtree expands to (aliases copied out), `height` the
    number of nested lists/mappings in it. An alias adds its anchor's size and puts its
    anchor's height under the current depth, so caps hold for the data the builder makes.
    """

    def __init__(self, parser: Any, resolver: Any) -> None:
        self.parser = parser
        self.resolve = resolver.resolve
        self.anchors: dict[str, tuple[Node, int, int]] = {}
        self.tags: dict[str, Any] = {}
        self.nodes = 0
        self.aliased = 0

    def single_node(self) -> Node | None:
        parser = self.parser
        parser.get_event()  # stream start
        if parser.check_event(StreamEndEvent):
            parser.get_event()
            return None
        parser.get_event()  # document start
        node = self._document()
        parser.get_event()  # document end
        if not parser.check_event(StreamEndEvent):
            event = parser.get_event()
            raise ComposerError(
                "expected a single document in the stream",
                node.start_mark,
                "but found another document",
                event.start_mark,
            )
        parser.get_event()
        return node

    def _document(self) -> Node:
        stack: list[_Open] = []
        get_event = self.parser.get_event
        while True:
            event = get_event()
            kind = type(event)
            if kind is ScalarEvent:  # most events: kept short
                node: Node = self._scalar(event)
                size, height = 1, 0
                self.nodes += 1
                if self.nodes > MAX_NODES:
                    raise _too_many(event.start_mark)
            elif kind is AliasEvent:
                node, size, height = self._alias(event, stack)
            elif kind is SequenceStartEvent or kind is MappingStartEvent:
                stack.append(self._open(event, kind is MappingStartEvent, len(stack)))
                continue
            else:  # the end of a list or mapping
                done = stack.pop()
                node, size, height = done.node, done.size, done.height
                node.end_mark = event.end_mark
                if done.anchor is not None:
                    self._anchor(done.anchor, node, size, height)
            if not stack:
                return node
            parent = stack[-1]
            parent.size += size
            if height >= parent.height:
                parent.height = height + 1
            if not isinstance(parent.node, MappingNode):
                parent.node.value.append(node)
            elif parent.key is None:
                parent.key = node
            else:
                parent.node.value.append((parent.key, node))
                parent.key = None

    def _scalar(self, event: Any) -> ScalarNode:
        tag = event.ctag
        if tag is None or str(tag) == "!":
            tag = self.resolve(ScalarNode, event.value, event.implicit)
            # one Tag object per distinct tag, not per scalar: a third of the tree's memory
            tag = self.tags.setdefault(tag.suffix, tag)
        node = ScalarNode(tag, event.value, event.start_mark, None, style=event.style)
        if event.anchor is not None:
            self._anchor(event.anchor, node, 1, 0)
        return node

    def _open(self, event: Any, mapping: bool, depth: int) -> _Open:
        if depth >= MAX_DEPTH:
            raise _too_deep(event.start_mark)
        self._count(event, 1)
        kind = MappingNode if mapping else SequenceNode
        tag = event.ctag
        if tag is None or str(tag) == "!":
            tag = self.resolve(kind, None, event.implicit)
        node = kind(tag, [], event.start_mark, None, flow_style=event.flow_style)
        return _Open(node, event.anchor)

    def _alias(self, event: Any, stack: list[_Open]) -> tuple[Node, int, int]:
        name = event.anchor
        if name not in self.anchors:
            if any(open_.anchor == name for open_ in stack):
                raise ComposerError(
                    None,
                    None,
                    f"alias '*{name}' is inside its own anchor (a cycle)",
                    event.start_mark,
                )
            raise ComposerError(None, None, "found undefined alias", event.start_mark)
        node, size, height = self.anchors[name]
        if len(stack) + height > MAX_DEPTH:
            raise _too_deep(event.start_mark, f" once alias '*{name}' is expanded")
        self.aliased += size
        if self.aliased > MAX_ALIAS_NODES:
            raise _LimitExceeded(
                event.start_mark,
                "yaml-too-large",
                f"YAML aliases expand to more than {MAX_ALIAS_NODES:,} nodes "
                f"(here '*{name}' adds {size:,})",
                "each alias is a full copy of its anchor, and aliases of aliases multiply: "
                "use fewer aliases, or write the values out",
            )
        self._count(event, size)
        return node, size, height

    def _anchor(self, name: str, node: Node, size: int, height: int) -> None:
        if name in self.anchors:
            first = self.anchors[name][0].start_mark.line + 1
            raise ComposerError(
                None,
                None,
                f"duplicate anchor '&{name}' (first defined on line {first})",
                node.start_mark,
            )
        self.anchors[name] = (node, size, height)

    def _count(self, event: Any, size: int) -> None:
        self.nodes += size
        if self.nodes > MAX_NODES:
            raise _too_many(event.start_mark)


def _too_many(mark: Any) -> _LimitExceeded:
    return _LimitExceeded(
        mark,
        "yaml-too-large",
        f"the document holds more than {MAX_NODES:,} YAML nodes (aliases expanded)",
        "split it into smaller files",
    )


def _too_deep(mark: Any, where: str = "") -> _LimitExceeded:
    return _LimitExceeded(
        mark,
        "too-deep",
        f"lists and mappings nest more than {MAX_DEPTH} levels deep here{where}",
        "flatten this value: recipes, policies and plans need only a few levels",
    )


class _Builder:
    """Node tree → plain data, recording positions and collecting structural problems."""

    def __init__(self, source: SourceMap) -> None:
        self.source = source
        self.problems: list[Diagnostic] = []

    def build(self, node: Node, path: NodePath) -> Any:
        self.source.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, ScalarNode):
            return _scalar(node)
        if isinstance(node, SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        if isinstance(node, MappingNode):
            return self._mapping(node, path)
        return None  # pragma: no cover - composer yields only the three node kinds

    def _mapping(self, node: MappingNode, path: NodePath) -> dict[str, Any]:
        result: dict[str, Any] = {}
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            line, column = key_node.start_mark.line + 1, key_node.start_mark.column + 1
            if not isinstance(key_node, ScalarNode):
                self.problems.append(self._unquoted_braces(line, column, key_node))
                self.source.broken.add(path)
                continue
            key = str(key_node.value)
            if key == "<<":
                self.problems.append(
                    self._diag(
                        line,
                        column,
                        "merge-key",
                        "YAML merge keys ('<<') are not supported",
                        "write the keys out, or use YAML anchors per value",
                    )
                )
                continue
            if key in seen:
                self.problems.append(
                    self._diag(
                        line,
                        column,
                        "duplicate-key",
                        f"duplicate key '{key}' (first defined on line {seen[key]})",
                        "remove one of them; YAML would silently keep only the last",
                    )
                )
                continue
            seen[key] = line
            self.source.keys[(*path, key)] = (line, column)
            result[key] = self.build(value_node, (*path, key))
        return result

    def _unquoted_braces(self, line: int, column: int, key_node: Node) -> Diagnostic:
        text = self.source.lines[line - 1] if line <= len(self.source.lines) else ""
        if "{{" in text:
            return self._diag(
                line,
                column,
                "unquoted-template",
                "unquoted '{{': YAML reads it as a nested mapping, not a template",
                "write templates as '${{ ... }}' and quote them, e.g. path: \"${{ inputs.file }}\"",
            )
        return self._diag(line, column, "complex-key", "mapping keys must be plain strings", None)

    def _diag(
        self, line: int, column: int, rule: str, message: str, hint: str | None
    ) -> Diagnostic:
        return Diagnostic(
            file=self.source.file, line=line, column=column, rule=rule, message=message, hint=hint
        )


def _scalar(node: ScalarNode) -> Any:
    tag = node.tag or ""
    value: str = node.value
    if not tag.startswith(_TAG) or node.style:  # quoted or explicitly tagged: keep text
        return value
    kind = tag[len(_TAG) :]
    if kind == "null":
        return None
    if kind == "bool":
        return value.lower() == "true"
    if kind == "int":
        cleaned = value.replace("_", "")
        if _INT.match(value):
            return int(cleaned, 10)
        try:
            return int(cleaned, 0)
        except ValueError:
            return value
    if kind == "float":
        special = _SPECIAL_FLOATS.get(value.lower())
        try:
            return float(special or value.replace("_", ""))
        except ValueError:
            return value
    return value


def _yaml_error(exc: MarkedYAMLError, source: SourceMap) -> Diagnostic:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or exc.context or "invalid YAML"
    hint = "check indentation and quoting on this line or the one before"
    if exc.context_mark is not None and "quoted scalar" in (exc.context or ""):
        # e.g. an unclosed quote: the end of the file is not where the mistake is
        mark = exc.context_mark
        problem = f"{problem} {exc.context}".strip()
        if "quoted" in (exc.context or ""):
            hint = "this quote is never closed: add the closing quote"
    line = mark.line + 1 if mark is not None else 1
    column = mark.column + 1 if mark is not None else 1
    text = source.lines[line - 1] if 1 <= line <= len(source.lines) else ""
    if "{{" in text or (line >= 2 and "{{" in source.lines[line - 2]):
        hint = "quote template values: path: \"${{ item }}\" (a bare '{' starts a YAML mapping)"
    elif "\t" in text:
        hint = "YAML does not allow tabs for indentation; use spaces"
    return Diagnostic(
        file=source.file, line=line, column=column, rule="yaml-syntax", message=problem, hint=hint
    )


def _syntax(file: str, rule: str, message: str) -> RecipeSyntaxError:
    return RecipeSyntaxError([Diagnostic(file=file, line=1, column=1, rule=rule, message=message)])
