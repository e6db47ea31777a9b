"""Located problems in a recipe or plan, and how they are shown.

A `Diagnostic` is one problem at one place. `SourceMap` remembers where every node of a
loaded document came from, addressed by its path (`("steps", 2, "params", "path")`), so
validation that works on plain data can still point at a line and column.
"""

from __future__ import annotations

import difflib
import re
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, Field, PrivateAttr

from engine.sanitize import neutralize

__all__ = ["Diagnostic", "NodePath", "SourceMap", "did_you_mean", "render_diagnostics"]

NodePath = tuple[str | int, ...]
_PACK_FROM = 1_000_000  # characters
Positions = tuple[dict[NodePath, tuple[int, int]], dict[NodePath, tuple[int, int]]]
"""Where values start and where keys start: `SourceMap.values` and `SourceMap.keys`."""
Locator = Callable[["SourceMap", frozenset[NodePath] | None], Positions | None]
"""Finds positions in a map's text: of every node (None), or of the wanted paths only,
or None when the text cannot be searched path by path."""
# What YAML counts as a line break (and so the parser's line numbers): `str.splitlines`
# also breaks at VT, FF and FS..RS, which would shift every line after one.
_LINE_BREAK = re.compile("\r\n|[\n\r\x85\u2028\u2029]")
_NOT_YAML_BREAK = re.compile("[\x0b\x0c\x1c-\x1e]")
_SHOWN = 160  # characters of a long source line shown around the caret


class Diagnostic(BaseModel):
    """One problem, at one place, with a rule id and a hint on how to fix it."""

    file: str
    line: int
    column: int
    rule: str
    message: str
    hint: str | None = None
    # A warning is shown (`validate`, `run`) but refuses nothing. Left out of the data of
    # an error, so the JSON of errors reads as it always has.
    severity: Literal["error", "warning"] = Field(
        "error", exclude_if=lambda severity: severity == "error"
    )
    # The text of the line, kept by a diagnostic whose file did not load (not YAML, not
    # UTF-8): no `SourceMap` of it reaches the renderer. Not part of the model's data.
    _source_line: str | None = PrivateAttr(default=None)

    def headline(self) -> str:
        """`FILE:LINE:COL: error[rule]: message` (`warning[rule]` for a warning)."""
        where = f"{self.file}:{self.line}:{self.column}"
        return f"{where}: {self.severity}[{self.rule}]: {self.message}"

    def with_source_line(self, text: str) -> Diagnostic:
        """A copy that shows `text` as its line when rendered without a `SourceMap`."""
        copy = self.model_copy()
        copy._source_line = text
        return copy


class SourceMap:
    """Where each node of a loaded document starts (1-based line and column).

    `values` maps a node path to the position of its value; `keys` maps the path of a
    mapping entry to the position of its key (so "unknown key" points at the key).
    `problems` holds what the loader found (duplicate keys, an unquoted `{{`) for validation
    to report with everything else; `broken` marks values the loader could not read, so
    that no second, derived problem is reported for them.

    A map made with `text` and `locator` keeps only the text: positions are found by
    `locator` the first time one is asked for. A valid document never asks, so loading one
    costs no position table (a million entries for a 100,000-step recipe).
    """

    def __init__(
        self,
        file: str,
        lines: list[str] | None = None,
        values: dict[NodePath, tuple[int, int]] | None = None,
        keys: dict[NodePath, tuple[int, int]] | None = None,
        problems: list[Diagnostic] | None = None,
        broken: set[NodePath] | None = None,
        *,
        text: str | None = None,
        locator: Locator | None = None,
    ) -> None:
        self.file = file
        self.problems: list[Diagnostic] = problems if problems is not None else []
        self.broken: set[NodePath] = broken if broken is not None else set()
        # A large text waits compressed (a 100,000-step recipe: 11 MB → 1 MB, 30 ms) until a
        # position or a line is asked for, which only a document with problems needs.
        self._packed = zlib.compress(text.encode(), 1) if text and len(text) > _PACK_FROM else None
        self._text = None if self._packed is not None else text
        self._lines = lines
        self._values = values if values is not None else {}
        self._keys = keys if keys is not None else {}
        self._locator = locator
        # A large document is searched for the paths asked for only (a table of every
        # node of a 2,000,000-node recipe takes 0.9 GB); a small one is located at once.
        self._targeted = text is not None and len(text) > _PACK_FROM
        self._searched: set[NodePath] = set()

    @property
    def text(self) -> str | None:
        """The document's text, when the map was made from one."""
        if self._packed is not None:
            self._text, self._packed = zlib.decompress(self._packed).decode(), None
        return self._text

    @property
    def lines(self) -> list[str]:
        """The text's lines, split where YAML breaks lines (so line N is the parser's N)."""
        if self._lines is None:
            self._lines = split_lines(self.text or "")
        return self._lines

    @property
    def values(self) -> dict[NodePath, tuple[int, int]]:
        self._locate_all()
        return self._values

    @property
    def keys(self) -> dict[NodePath, tuple[int, int]]:
        self._locate_all()
        return self._keys

    def _locate_all(self) -> None:
        locator, self._locator = self._locator, None
        if locator is not None:
            found = locator(self, None)
            assert found is not None, "a locator finds every position when asked for all"
            self._values, self._keys = found

    def _prepare(self, paths: Iterable[NodePath]) -> None:
        """Have the positions of `paths` and of their ancestors at hand."""
        missing = {path for path in paths if path not in self._searched}
        if self._locator is None or not missing:
            return
        if not self._targeted:
            self._locate_all()
            return
        wanted = frozenset(path[:end] for path in missing for end in range(len(path) + 1))
        found = self._locator(self, wanted)
        if found is None:  # the document cannot be searched path by path (an alias on one)
            self._locate_all()
            return
        self._values.update(found[0])
        self._keys.update(found[1])
        self._searched |= wanted

    def __repr__(self) -> str:
        return f"SourceMap(file={self.file!r}, problems={len(self.problems)})"

    def is_broken(self, path: Sequence[str | int]) -> bool:
        return any(tuple(path[: len(b)]) == b for b in self.broken)

    def locate(self, path: Sequence[str | int], *, key: bool = False) -> tuple[int, int]:
        """The position of `path`, or of its nearest located ancestor."""
        probe: NodePath = tuple(path)
        self._prepare([probe])
        return self._find(probe, key)

    def locate_many(self, requests: Sequence[tuple[NodePath, bool]]) -> list[tuple[int, int]]:
        """`locate` of each (path, key) pair, the document searched once for them all."""
        self._prepare(path for path, _ in requests)
        return [self._find(path, key) for path, key in requests]

    def _find(self, probe: NodePath, key: bool) -> tuple[int, int]:
        values, keys = self._values, self._keys
        while True:
            if key and probe in keys:
                return keys[probe]
            if probe in values:
                return values[probe]
            if probe in keys:
                return keys[probe]
            if not probe:
                return (1, 1)
            probe = probe[:-1]

    def at(
        self,
        path: Sequence[str | int],
        rule: str,
        message: str,
        hint: str | None = None,
        *,
        key: bool = False,
    ) -> Diagnostic:
        """A diagnostic located at `path`."""
        line, column = self.locate(path, key=key)
        return Diagnostic(
            file=self.file, line=line, column=column, rule=rule, message=message, hint=hint
        )


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """A "did you mean 'x'?" hint for the closest choice, if one is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None


def split_lines(text: str) -> list[str]:
    """`text` split into lines where YAML breaks them (CR LF, LF, CR, NEL, LS, PS)."""
    if _NOT_YAML_BREAK.search(text) is None:
        return text.splitlines()  # the same lines, five times faster
    lines = _LINE_BREAK.split(text)
    if lines[-1] == "":  # the break that ends the last line starts no new one
        lines.pop()
    return lines


def render_diagnostics(diagnostics: Sequence[Diagnostic], source: SourceMap | None) -> str:
    """Human-readable text: headline, the offending line, a caret, and the hint.

    The line comes from `source`, or, for a file that did not load (not YAML, not UTF-8),
    from the diagnostic itself. Control characters are made visible (`neutralize`): a
    message may quote what a server or a model wrote (a crashing server's stderr, tool
    names), headed for a terminal.
    """
    chunks: list[str] = []
    for diag in diagnostics:
        text = [neutralize(diag.headline())]
        line = diag._source_line  # the model's own, read where it is shown
        if source is not None and 1 <= diag.line <= len(source.lines):
            line = source.lines[diag.line - 1]
        if line is not None:
            gutter = f"{diag.line:>5} | "
            shown, caret = _excerpt(line, diag.column)
            text.append(f"{gutter}{shown}")
            text.append(" " * len(gutter) + caret)
        if diag.hint:
            text.append(f"  hint: {neutralize(diag.hint)}")
        chunks.append("\n".join(text))
    return "\n".join(chunks)


def _excerpt(line: str, column: int) -> tuple[str, str]:
    """The line as shown (neutralized; a long one cut around `column`) and the caret line
    under it. The caret line repeats the line's tabs and counts what the terminal shows:
    a marker such as `⟨FF⟩` is several columns, a CJK character two."""
    import unicodedata  # only when a problem is shown

    at = max(column - 1, 0)
    before, after = line[:at], line[at:]
    beyond = " " * min(at - len(before), _SHOWN)  # a column past the end of the line
    head = tail = ""
    if len(before) > _SHOWN // 2:
        before, head = before[-(_SHOWN // 2) :], "…"
    if len(after) > _SHOWN // 2:
        after, tail = after[: _SHOWN // 2], "…"
    before = head + neutralize(before)
    pad = []
    for char in before:
        if char == "\t":
            pad.append("\t")
        elif unicodedata.combining(char):
            continue
        else:
            pad.append("  " if unicodedata.east_asian_width(char) in "WF" else " ")
    return before + neutralize(after) + tail, "".join(pad) + beyond + "^"
