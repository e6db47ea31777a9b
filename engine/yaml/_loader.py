"""The fast loader: YAML events to plain data in one pass, without positions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ruamel.yaml.composer import ComposerError
from ruamel.yaml.events import (
    AliasEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from ruamel.yaml.nodes import ScalarNode

from engine.diagnostics import Diagnostic, NodePath, SourceMap
from engine.yaml._nodes import (
    STR,
    Caps,
    anchored_twice,
    complex_key,
    duplicate_key,
    event_parser,
    merge_key,
    no_anchor,
    scalar_value,
)

_WAITING = object()  # a mapping's key not read yet


@dataclass(slots=True)
class _Frame:
    """A list or mapping being loaded: its expanded size and height so far.

    `dropped_at`: when the value is left out of the document's data (it is a key that is a
    list or mapping, or the value of a key already reported, or inside one), the depth of
    the deepest frame that left it out; what is found inside it is not reported. It is
    still built, since an anchor inside it may be aliased elsewhere, where what was found
    inside the anchor is found again unless a frame inside the anchor left it out.
    `found_at` and `broken_at` are where the logs stood when it opened.
    """

    value: Any
    anchor: str | None
    mark: Any
    dropped_at: int | None
    found_at: int
    broken_at: int
    size: int = 1
    height: int = 1
    key: Any = _WAITING  # a mapping's key waiting for its value
    skip: bool = False  # a mapping's waiting value is left out
    seen: dict[str, int] | None = None  # a mapping's keys → the line each is on


@dataclass(slots=True)
class _Anchored:
    value: Any
    size: int
    height: int
    mark: Any
    text: str | None  # a scalar's text: as a key, an alias reads as its anchor's text
    found: tuple[Diagnostic, ...] = ()  # problems inside it, reported again where aliased
    broken: tuple[NodePath, ...] = ()  # values left out inside it, from its own path


class Loader:
    """Events → plain data in one pass, under the caps of `engine.limits`.

    No recursion (ruamel's composers recurse once per nesting level, and the C one
    overflows the C stack on deep input) and no node tree: the data is built as events
    arrive, and each node is counted as it will be expanded, so a few hundred bytes of
    aliases-of-aliases stop at the cap with the document's own position. An alias is a
    copy of its anchor's data, never the same object, and what was found inside the
    anchor is found again where it is aliased. Positions are not kept:
    `engine.yaml._tree.locate` finds them when something is to be reported.
    """

    def __init__(self, text: str, source: SourceMap) -> None:
        self.text = text
        self.source = source
        self.anchors: dict[str, _Anchored] = {}
        self.kinds: dict[str, str] = {}  # plain scalar → its resolved tag
        # One string object per distinct key or plain word (`id`, `params`, a tool's name):
        # the parser makes a new one for every occurrence, 100,000 copies of each in a
        # 100,000-step recipe.
        self.words: dict[str, str] = {}
        self.caps = Caps()
        # Everything found, reported or not, with the depth at which it was left out: an
        # anchor keeps what was found inside it.
        self.found: list[tuple[Diagnostic, int | None]] = []
        self.broken: list[tuple[NodePath, int | None]] = []

    def load(self) -> tuple[Any, bool]:
        """The document's data, and whether the stream held no document at all."""
        parser, resolver = event_parser(self.text)
        self.resolve = resolver.resolve
        try:
            parser.get_event()  # stream start
            if parser.check_event(StreamEndEvent):
                parser.get_event()
                return None, True
            parser.get_event()  # document start
            data, mark = self._document(parser.get_event)
            parser.get_event()  # document end
            if not parser.check_event(StreamEndEvent):
                event = parser.get_event()
                raise ComposerError(
                    "expected a single document in the stream",
                    mark,
                    "but found another document",
                    event.start_mark,
                )
            parser.get_event()
            return data, False
        finally:
            parser.dispose()

    def _document(self, get_event: Any) -> tuple[Any, Any]:
        stack: list[_Frame] = []
        while True:
            event = get_event()
            kind = type(event)
            text: str | None = None
            if kind is ScalarEvent:  # most events: kept short
                value, text, mark = self._scalar(event), event.value, event.start_mark
                size, height = 1, 0
                self.caps.count(mark)
                if event.anchor is not None:
                    self._anchor(event.anchor, _Anchored(value, 1, 0, mark, text))
            elif kind is AliasEvent:
                anchored = self._alias(event, stack)
                value, size, height = _copy(anchored.value), anchored.size, anchored.height
                mark, text = anchored.mark, anchored.text
                if anchored.found or anchored.broken:
                    at = self._path(stack, len(stack))
                    dropped = self._dropped(stack)
                    self._report(dropped, *anchored.found)
                    self._break(dropped, *((*at, *inner) for inner in anchored.broken))
            elif kind is SequenceStartEvent or kind is MappingStartEvent:
                self.caps.open(event.start_mark, len(stack))
                mapping = kind is MappingStartEvent
                stack.append(
                    _Frame(
                        {} if mapping else [],
                        event.anchor,
                        event.start_mark,
                        self._dropped(stack),
                        len(self.found),
                        len(self.broken),
                        seen={} if mapping else None,
                    )
                )
                continue
            else:  # the end of a list or mapping
                done = stack.pop()
                value, size, height, mark = done.value, done.size, done.height, done.mark
                if done.anchor is not None:
                    depth = len(stack)  # the length of this value's own path
                    self._anchor(
                        done.anchor,
                        _Anchored(
                            value,
                            size,
                            height,
                            mark,
                            None,
                            tuple(
                                found
                                for found, at in self.found[done.found_at :]
                                if at is None or at < depth
                            ),
                            tuple(
                                path[depth:]
                                for path, at in self.broken[done.broken_at :]
                                if at is None or at < depth
                            ),
                        ),
                    )
            if not stack:
                return value, mark
            parent = stack[-1]
            parent.size += size
            if height >= parent.height:
                parent.height = height + 1
            if parent.seen is None:  # a list
                parent.value.append(value)
            elif parent.key is _WAITING:
                self._key(stack, text, mark)
            else:
                if not parent.skip:
                    parent.value[parent.key] = value
                parent.key, parent.skip = _WAITING, False

    @staticmethod
    def _dropped(stack: list[_Frame]) -> int | None:
        """Whether a value placed in `stack[-1]` now is left out of the document's data:
        the depth of the deepest frame that leaves it out, or None."""
        if not stack:
            return None
        parent = stack[-1]
        if parent.seen is not None and (parent.key is _WAITING or parent.skip):
            return len(stack) - 1
        return parent.dropped_at

    def _key(self, stack: list[_Frame], text: str | None, mark: Any) -> None:
        mapping = stack[-1]
        seen = mapping.seen
        assert seen is not None  # a mapping
        line, column = mark.line + 1, mark.column + 1
        mapping.key = None
        mapping.skip = True
        dropped = mapping.dropped_at
        if text is None:  # a list or mapping as a key
            self._report(dropped, complex_key(self.source, line, column))
            self._break(dropped, self._path(stack, len(stack) - 1))
        elif text == "<<":
            self._report(dropped, merge_key(self.source.file, line, column))
        elif text in seen:
            problem = duplicate_key(self.source.file, line, column, text, seen[text])
            self._report(dropped, problem)
        else:
            seen[text] = line
            mapping.key, mapping.skip = self._word(text), False

    def _scalar(self, event: Any) -> Any:
        value: str = event.value
        tag = event.ctag
        if tag is not None and str(tag) != "!":
            return scalar_value(str(tag), value, event.style)
        if event.style:  # quoted, or a block of text
            return value
        implicit = event.implicit
        kind = self.kinds.get(value) if implicit[0] else None
        if kind is None:
            kind = str(self.resolve(ScalarNode, value, implicit))
            if implicit[0] and len(self.kinds) < 10_000:  # keys and common words repeat
                self.kinds[value] = kind
        if kind == STR:
            return self._word(value)
        return scalar_value(kind, value, None)

    def _word(self, text: str) -> str:
        """The one copy of `text` kept so far (the first 10,000 distinct ones are kept)."""
        kept = self.words.get(text)
        if kept is not None:
            return kept
        if len(self.words) < 10_000:
            self.words[text] = text
        return text

    def _alias(self, event: Any, stack: list[_Frame]) -> _Anchored:
        name = event.anchor
        anchored = self.anchors.get(name)
        if anchored is None:
            raise no_anchor(name, (frame.anchor for frame in stack), event.start_mark)
        self.caps.alias(event.start_mark, name, anchored.size, anchored.height, len(stack))
        return anchored

    def _anchor(self, name: str, anchored: _Anchored) -> None:
        if name in self.anchors:
            raise anchored_twice(name, self.anchors[name].mark, anchored.mark)
        self.anchors[name] = anchored

    @staticmethod
    def _path(stack: list[_Frame], depth: int) -> NodePath:
        """The path of what goes next into `stack[depth - 1]` (of the document at 0)."""
        return tuple(
            frame.key if frame.seen is not None else len(frame.value) for frame in stack[:depth]
        )

    def _report(self, dropped: int | None, *problems: Diagnostic) -> None:
        self.found.extend((problem, dropped) for problem in problems)
        if dropped is None:
            self.source.problems.extend(problems)

    def _break(self, dropped: int | None, *paths: NodePath) -> None:
        self.broken.extend((path, dropped) for path in paths)
        if dropped is None:
            self.source.broken.update(paths)


def _copy(value: Any) -> Any:
    """A fresh copy of an anchor's data (bounded: aliases add at most MAX_ALIAS_NODES)."""
    if type(value) is dict:
        return {key: _copy(item) for key, item in value.items()}
    if type(value) is list:
        return [_copy(item) for item in value]
    return value
