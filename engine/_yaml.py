"""YAML with locations: recipes, policies, `--capabilities` files and cassettes as plain data
plus a `SourceMap`.

ruamel.yaml parses (with the C parser when it is installed, ~6x faster on large recipes);
this module composes the node tree itself, under the caps of `engine._limits` (nesting
depth, node count, alias expansion), and turns nodes into data itself so that duplicate
keys and an unquoted `{{` are reported with their positions instead of stopping at the
first problem. Policies, `--capabilities` files and cassettes are read here too.

A file that does not load is one located error like any other: a byte that is not UTF-8
at its own line and column, a YAML syntax error where the parser stopped. Its diagnostic
keeps the text of its line, so it is shown with a caret even where no `SourceMap` of the
file reaches the renderer.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable
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
from ruamel.yaml.nodes import ScalarNode
from ruamel.yaml.reader import ReaderError
from ruamel.yaml.resolver import VersionedResolver

from engine._gc import collector_paused
from engine._limits import MAX_ALIAS_NODES, MAX_DEPTH, MAX_NODES
from engine.diagnostics import Diagnostic, NodePath, Positions, SourceMap, split_lines
from engine.errors import RecipeSyntaxError

__all__ = ["MAX_RECIPE_BYTES", "decode_text", "parse_recipe_text", "read_recipe"]

MAX_RECIPE_BYTES = 20_000_000

_INT = re.compile(r"^[-+]?[0-9][0-9_]*$")
_SPECIAL_FLOATS = {".inf": "inf", "+.inf": "inf", "-.inf": "-inf", ".nan": "nan"}
_TAG = "tag:yaml.org,2002:"
_STR = _TAG + "str"
_SAVE_AS_UTF8 = "save the file as UTF-8 (in most editors: Save As, Encoding: UTF-8)"
# Byte order marks of the encodings YAML allows besides UTF-8 (UTF-32 first: its
# little-endian mark starts with UTF-16's).
_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


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
    return parse_recipe_text(decode_text(raw, name), name)


def decode_text(raw: bytes, file: str) -> str:
    """The text of a YAML file's bytes: UTF-8, with or without a byte order mark.

    Raises:
        RecipeSyntaxError: UTF-16 or UTF-32 text, a binary file, or a byte that is not
            UTF-8, reported at its line and column with its line (the bad byte shown as
            U+FFFD) and how to fix it.
    """
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_BE)):
        raise RecipeSyntaxError([_wide(raw, file)])
    if b"\x00" in raw:
        if _wide_without_bom(raw):
            raise RecipeSyntaxError([_wide(raw, file)])
        raise _syntax(file, "binary-file", "this is a binary file, not a YAML recipe")
    body = raw[len(codecs.BOM_UTF8) :] if raw.startswith(codecs.BOM_UTF8) else raw
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecipeSyntaxError([_bad_byte(body, exc.start, file)]) from None


def _wide(raw: bytes, file: str) -> Diagnostic:
    """UTF-16 or UTF-32 text: YAML allows it, planloom reads UTF-8 (and says so)."""
    found = next((name for bom, name in _WIDE_BOMS if raw.startswith(bom)), None)
    how = "it starts with a byte order mark" if found else "every other byte is zero"
    return Diagnostic(
        file=file,
        line=1,
        column=1,
        rule="encoding",
        message=f"the file is {found or 'UTF-16'} text ({how}); planloom reads UTF-8",
        hint=_SAVE_AS_UTF8,
    )


def _wide_without_bom(raw: bytes) -> bool:
    """Whether `raw` looks like UTF-16 with no byte order mark: YAML is mostly ASCII, so
    one byte of each pair is zero."""
    head = raw[:64]
    if len(head) < 4:
        return False
    for zeros, chars in ((head[1::2], head[0::2]), (head[0::2], head[1::2])):
        if zeros.count(0) * 4 >= len(zeros) * 3 and chars.count(0) * 4 < len(chars):
            return True
    return False


def _bad_byte(body: bytes, start: int, file: str) -> Diagnostic:
    """The first byte that is not UTF-8, at its line and column (characters, as the YAML
    parser counts them), keeping its line with the bad bytes shown as U+FFFD."""
    before = split_lines(body[:start].decode("utf-8") + "^")  # valid up to the bad byte
    rest = body[start : start + 4096].decode("utf-8", errors="replace")
    byte = body[start]
    hint = _SAVE_AS_UTF8
    latin = bytes([byte]).decode("cp1252", errors="replace")
    if latin.isprintable() and latin != "\ufffd":  # a Western editor's default, most often
        hint = (
            "save the file as UTF-8: it is probably Latin-1 or Windows-1252, "
            f"where 0x{byte:02X} is '{latin}'"
        )
    return Diagnostic(
        file=file,
        line=len(before),
        column=len(before[-1]),
        rule="encoding",
        message=f"the file is not UTF-8 text: byte 0x{byte:02X} cannot be read as UTF-8",
        hint=hint,
    ).with_source_line(before[-1][:-1] + split_lines(rest)[0])


def parse_recipe_text(text: str, file: str = "<recipe>") -> tuple[Any, SourceMap]:
    """Parse YAML text into plain data and a `SourceMap`.

    Duplicate keys (the first one is kept) and an unquoted `{{` do not stop parsing: they
    are left in `source.problems`, which `validate_plan` reports with every other problem.

    Raises:
        RecipeSyntaxError: the text is not YAML, or is empty, or passes a cap of
            `engine._limits` (nesting depth, nodes, alias expansion).
    """
    source = SourceMap(file=file, text=text, locator=_locate)
    try:
        with collector_paused():
            data, empty = _Loader(text, source).load()
    except LimitExceeded as exc:
        raise _failed(exc.diagnostic(file), source) from None
    except MarkedYAMLError as exc:
        raise _failed(_yaml_error(exc, source), source) from exc
    except ReaderError as exc:
        raise _failed(_unacceptable(exc, source), source) from exc
    except YAMLError as exc:
        raise _failed(source.at((), "yaml-syntax", str(exc)), source) from exc
    if empty:
        raise RecipeSyntaxError(
            [source.at((), "empty", "the recipe is empty", "start with 'version: 1'")]
        )
    return data, source  # duplicate keys and the like are in source.problems, for validation


def _locate(source: SourceMap, wanted: frozenset[NodePath] | None) -> Positions | None:
    from engine._yaml_tree import locate  # only a document with a problem needs positions

    return locate(source, wanted)


class OnceResolver(VersionedResolver):
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


def event_parser(text: str) -> tuple[Any, Any]:
    """ruamel's parser over `text` (in C when it can) and what resolves its plain scalars'
    tags. The caller disposes of the parser."""
    yaml = YAML(typ="safe", pure=False)
    yaml.Resolver = OnceResolver
    loader, parser = yaml.get_constructor_parser(text)
    # With the C parser one object parses and resolves; the pure parser has a resolver apart.
    resolver = loader if hasattr(loader, "resolve") else yaml.resolver
    return parser, resolver


class LimitExceeded(Exception):
    """A cap of `engine._limits` was passed while loading, at `mark`."""

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


def too_many(mark: Any) -> LimitExceeded:
    return LimitExceeded(
        mark,
        "yaml-too-large",
        f"the document holds more than {MAX_NODES:,} YAML nodes (aliases expanded)",
        "split it into smaller files",
    )


def too_deep(mark: Any, where: str = "") -> LimitExceeded:
    return LimitExceeded(
        mark,
        "too-deep",
        f"lists and mappings nest more than {MAX_DEPTH} levels deep here{where}",
        "flatten this value: recipes, policies and plans need only a few levels",
    )


def too_many_aliased(mark: Any, name: str, size: int) -> LimitExceeded:
    return LimitExceeded(
        mark,
        "yaml-too-large",
        f"YAML aliases expand to more than {MAX_ALIAS_NODES:,} nodes "
        f"(here '*{name}' adds {size:,})",
        "each alias is a full copy of its anchor, and aliases of aliases multiply: "
        "use fewer aliases, or write the values out",
    )


class Caps:
    """The caps of `engine._limits`, counted as the document's nodes will be expanded.

    `size` is the number of nodes a subtree expands to (aliases copied out), `height` the
    number of nested lists/mappings in it. An alias adds its anchor's size and puts its
    anchor's height under the current depth, so caps hold for the data made of the text.
    """

    def __init__(self) -> None:
        self.nodes = 0
        self.aliased = 0

    def count(self, mark: Any, size: int = 1) -> None:
        self.nodes += size
        if self.nodes > MAX_NODES:
            raise too_many(mark)

    def open(self, mark: Any, depth: int) -> None:
        """A list or mapping starts at `depth`."""
        if depth >= MAX_DEPTH:
            raise too_deep(mark)
        self.count(mark)

    def alias(self, mark: Any, name: str, size: int, height: int, depth: int) -> None:
        """An alias of an anchor of `size` nodes and `height` levels, at `depth`."""
        if depth + height > MAX_DEPTH:
            raise too_deep(mark, f" once alias '*{name}' is expanded")
        self.aliased += size
        if self.aliased > MAX_ALIAS_NODES:
            raise too_many_aliased(mark, name, size)
        self.count(mark, size)


def no_anchor(name: str, open_anchors: Iterable[str | None], mark: Any) -> ComposerError:
    """An alias of `name`, which no node before it anchors."""
    if name in open_anchors:
        return ComposerError(
            None, None, f"alias '*{name}' is inside its own anchor (a cycle)", mark
        )
    return ComposerError(None, None, "found undefined alias", mark)


def anchored_twice(name: str, first: Any, mark: Any) -> ComposerError:
    return ComposerError(
        None, None, f"duplicate anchor '&{name}' (first defined on line {first.line + 1})", mark
    )


def scalar_value(tag: str, value: str, style: str | None) -> Any:
    """A scalar's data: text when quoted or tagged with a tag of its own, else by its tag."""
    if style or not tag.startswith(_TAG):
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


def merge_key(file: str, line: int, column: int) -> Diagnostic:
    return Diagnostic(
        file=file,
        line=line,
        column=column,
        rule="merge-key",
        message="YAML merge keys ('<<') are not supported",
        hint="write the keys out, or use YAML anchors per value",
    )


def duplicate_key(file: str, line: int, column: int, key: str, first: int) -> Diagnostic:
    return Diagnostic(
        file=file,
        line=line,
        column=column,
        rule="duplicate-key",
        message=f"duplicate key '{key}' (first defined on line {first})",
        hint="remove one of them; YAML would silently keep only the last",
    )


def complex_key(source: SourceMap, line: int, column: int) -> Diagnostic:
    """A key that is a list or mapping: most often an unquoted `{{`."""
    text = source.lines[line - 1] if line <= len(source.lines) else ""
    if "{{" in text:
        return Diagnostic(
            file=source.file,
            line=line,
            column=column,
            rule="unquoted-template",
            message="unquoted '{{': YAML reads it as a nested mapping, not a template",
            hint="write templates as '${{ ... }}' and quote them, "
            'e.g. path: "${{ inputs.file }}"',
        )
    return Diagnostic(
        file=source.file,
        line=line,
        column=column,
        rule="complex-key",
        message="mapping keys must be plain strings",
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


class _Loader:
    """Events → plain data in one pass, under the caps of `engine._limits`.

    No recursion (ruamel's composers recurse once per nesting level, and the C one
    overflows the C stack on deep input) and no node tree: the data is built as events
    arrive, and each node is counted as it will be expanded, so a few hundred bytes of
    aliases-of-aliases stop at the cap with the document's own position. An alias is a
    copy of its anchor's data, never the same object, and what was found inside the
    anchor is found again where it is aliased. Positions are not kept:
    `engine._yaml_tree.locate` finds them when something is to be reported.
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
        if kind == _STR:
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
    elif "\t" in text[: len(text) - len(text.lstrip())] or "\t" in text[column - 1 : column]:
        # a tab elsewhere (inside a quoted value) is allowed, and not what went wrong
        hint = "YAML does not allow tabs for indentation; use spaces"
    return Diagnostic(
        file=source.file, line=line, column=column, rule="yaml-syntax", message=problem, hint=hint
    )


def _unacceptable(exc: ReaderError, source: SourceMap) -> Diagnostic:
    """A character YAML does not allow (a control character), where it is."""
    text = source.text or ""
    position = exc.position if isinstance(exc.position, int) else 0
    before = split_lines(text[:position] + "^")
    code = exc.character if isinstance(exc.character, int) else 0
    escape = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return Diagnostic(
        file=source.file,
        line=len(before),
        column=len(before[-1]),
        rule="yaml-syntax",
        message=f"character U+{code:04X} is not allowed in YAML",
        hint=f'remove it, or write it as the escape "{escape}" inside a double-quoted string',
    )


def _failed(diagnostic: Diagnostic, source: SourceMap) -> RecipeSyntaxError:
    """The error for a document that did not load, its diagnostic keeping its line: the
    renderer gets no `SourceMap` of a document that did not load."""
    lines = source.lines
    if 1 <= diagnostic.line <= len(lines):
        diagnostic = diagnostic.with_source_line(lines[diagnostic.line - 1])
    return RecipeSyntaxError([diagnostic])


def _syntax(file: str, rule: str, message: str) -> RecipeSyntaxError:
    return RecipeSyntaxError([Diagnostic(file=file, line=1, column=1, rule=rule, message=message)])
