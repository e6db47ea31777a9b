"""Recipe YAML as a node tree, for positions: where every value and key starts.

Loading (`engine.yaml`) builds data straight from the parser's events and keeps no
positions. When a document has something to report, `locate` composes its text again as
a tree of nodes, under the same caps, and walks it for the position of every value and
key: `SourceMap` calls it on the first position asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ruamel.yaml.composer import ComposerError
from ruamel.yaml.error import YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from engine._support.gc import collector_paused
from engine.diagnostics import Diagnostic, NodePath, Positions, SourceMap
from engine.yaml._nodes import (
    Caps,
    LimitExceeded,
    anchored_twice,
    complex_key,
    duplicate_key,
    event_parser,
    merge_key,
    no_anchor,
    scalar_value,
)

__all__ = ["load", "locate"]


def locate(source: SourceMap, wanted: frozenset[NodePath] | None = None) -> Positions | None:
    """The position of every value and key (`wanted` None): the text composed again, as a
    tree; or of the `wanted` paths only, from one walk of the parser's events that keeps
    nothing else (None if an alias lies on a wanted path: positions inside an anchor are
    found from the tree).

    Only a document with something to report needs positions, so the load leaves them out
    and `SourceMap` asks for them when it is first asked for one. The text already loaded
    once, so it composes the same way.
    """
    try:
        if wanted is not None:
            return _Seeker(wanted).seek(source.text or "")
        return load(source)[1]
    except (YAMLError, LimitExceeded):  # a document that does not load: (1, 1) for all
        return {}, {}


@dataclass(slots=True)
class _Level:
    """A list or mapping being walked: its path, and where the next value goes."""

    path: NodePath | None  # None: left out of the data (nothing in it has a path)
    mapping: bool
    index: int = 0
    key: str | None = None  # the key waiting for its value
    waiting: bool = True  # a mapping reads a key next
    seen: set[str] | None = None


class _Seeker:
    """The positions of the wanted paths, walking events with the loader's rules: keys
    read as the loader reads them, the values of keys it leaves out left out too."""

    def __init__(self, wanted: frozenset[NodePath]) -> None:
        self.wanted = wanted
        self.values: dict[NodePath, tuple[int, int]] = {}
        self.keys: dict[NodePath, tuple[int, int]] = {}
        self.scalars: dict[str, str | None] = {}  # anchor → its scalar's text (None: a list/map)
        # anchor → where its node starts: an alias stands where its anchor's node is, as
        # in the tree, where both are the one node
        self.marks: dict[str, Any] = {}

    def seek(self, text: str) -> Positions | None:
        parser, _ = event_parser(text)
        try:
            stack: list[_Level] = []
            while True:
                event = parser.get_event()
                kind = type(event)
                if kind is StreamEndEvent:
                    return self.values, self.keys
                if kind is ScalarEvent or kind is AliasEvent:
                    mark = event.start_mark
                    if kind is ScalarEvent:
                        scalar: str | None = event.value
                        if event.anchor is not None:
                            self.scalars[event.anchor] = event.value
                            self.marks[event.anchor] = mark
                    else:
                        scalar = self.scalars.get(event.anchor)
                        mark = self.marks.get(event.anchor, mark)
                    path = self._place(stack, mark, scalar)
                    if path is not None and kind is AliasEvent and self._below(path):
                        return None  # a wanted path inside an aliased anchor
                elif kind is SequenceStartEvent or kind is MappingStartEvent:
                    if event.anchor is not None:
                        self.scalars[event.anchor] = None
                        self.marks[event.anchor] = event.start_mark
                    path = self._place(stack, event.start_mark, None)
                    mapping = kind is MappingStartEvent
                    stack.append(_Level(path, mapping, seen=set() if mapping else None))
                elif kind is SequenceEndEvent or kind is MappingEndEvent:
                    stack.pop()
        finally:
            parser.dispose()

    def _place(self, stack: list[_Level], mark: Any, scalar: str | None) -> NodePath | None:
        """The path of a node starting now (None if left out), its position recorded when
        wanted; a mapping's key is read as the loader reads it."""
        if not stack:
            path: NodePath | None = ()
        else:
            level = stack[-1]
            if level.mapping and level.waiting:  # this node is a key
                level.waiting = False
                level.key = None
                seen = level.seen
                assert seen is not None
                if level.path is None or scalar is None or scalar == "<<" or scalar in seen:
                    return None  # left out: its value is left out too
                seen.add(scalar)
                level.key = scalar
                at = (*level.path, scalar)
                if at in self.wanted:
                    self.keys[at] = (mark.line + 1, mark.column + 1)
                return None  # a key is not a value
            if level.mapping:
                level.waiting = True
                path = None if level.path is None or level.key is None else (*level.path, level.key)
            else:
                path = None if level.path is None else (*level.path, level.index)
                level.index += 1
        if path is not None and path in self.wanted:
            self.values[path] = (mark.line + 1, mark.column + 1)
        return path

    def _below(self, path: NodePath) -> bool:
        """Whether a wanted path lies strictly below `path`."""
        depth = len(path)
        return any(len(want) > depth and want[:depth] == path for want in self.wanted)


def load(source: SourceMap) -> tuple[Any, Positions, list[Diagnostic], set[NodePath]]:
    """The text of `source` as data, positions, the problems found and the values left out.

    What `engine.yaml` loads in one pass, made the slow way: it is the reference the
    one-pass loader is tested against.
    """
    builder = _Builder(source)
    with collector_paused():
        node = _compose(source.text or "")
        data = builder.build(node, ()) if node is not None else None
    return data, (builder.values, builder.keys), builder.problems, builder.broken


def _compose(text: str) -> Node | None:
    """The document's node tree, composed under the caps of `engine.limits`.

    ruamel parses (in C when it can) and this module composes: ruamel's composers recurse
    once per nesting level (the C one overflows the C stack on deep input) and share one
    node per anchor, so a few hundred bytes of aliases-of-aliases only blow up later, when
    the tree is turned into data. Composing here counts every node as it will be expanded
    and stops at the cap, with the document's own position.
    """
    parser, resolver = event_parser(text)
    try:
        return _Composer(parser, resolver).single_node()
    finally:
        parser.dispose()


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

    Counted as the one-pass loader counts (`engine.yaml.Caps`).
    """

    def __init__(self, parser: Any, resolver: Any) -> None:
        self.parser = parser
        self.resolve = resolver.resolve
        self.anchors: dict[str, tuple[Node, int, int]] = {}
        self.tags: dict[str, Any] = {}
        self.caps = Caps()

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
                self.caps.count(event.start_mark)
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
        self.caps.open(event.start_mark, depth)
        kind = MappingNode if mapping else SequenceNode
        tag = event.ctag
        if tag is None or str(tag) == "!":
            tag = self.resolve(kind, None, event.implicit)
        node = kind(tag, [], event.start_mark, None, flow_style=event.flow_style)
        return _Open(node, event.anchor)

    def _alias(self, event: Any, stack: list[_Open]) -> tuple[Node, int, int]:
        name = event.anchor
        if name not in self.anchors:
            raise no_anchor(name, (open_.anchor for open_ in stack), event.start_mark)
        node, size, height = self.anchors[name]
        self.caps.alias(event.start_mark, name, size, height, len(stack))
        return node, size, height

    def _anchor(self, name: str, node: Node, size: int, height: int) -> None:
        if name in self.anchors:
            raise anchored_twice(name, self.anchors[name][0].start_mark, node.start_mark)
        self.anchors[name] = (node, size, height)


class _Builder:
    """Node tree → plain data, recording positions and collecting structural problems."""

    def __init__(self, source: SourceMap) -> None:
        self.source = source
        self.problems: list[Diagnostic] = []
        self.broken: set[NodePath] = set()
        self.values: dict[NodePath, tuple[int, int]] = {}
        self.keys: dict[NodePath, tuple[int, int]] = {}

    def build(self, node: Node, path: NodePath) -> Any:
        self.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
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
        file = self.source.file
        for key_node, value_node in node.value:
            line, column = key_node.start_mark.line + 1, key_node.start_mark.column + 1
            if not isinstance(key_node, ScalarNode):
                self.problems.append(complex_key(self.source, line, column))
                self.broken.add(path)
                continue
            key = str(key_node.value)
            if key == "<<":
                self.problems.append(merge_key(file, line, column))
                continue
            if key in seen:
                self.problems.append(duplicate_key(file, line, column, key, seen[key]))
                continue
            seen[key] = line
            self.keys[(*path, key)] = (line, column)
            result[key] = self.build(value_node, (*path, key))
        return result


def _scalar(node: ScalarNode) -> Any:
    return scalar_value(str(node.tag or ""), node.value, node.style)
