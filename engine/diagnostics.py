"""Located problems in a recipe or plan, and how they are shown.

A `Diagnostic` is one problem at one place. `SourceMap` remembers where every node of a
loaded document came from, addressed by its path (`("steps", 2, "params", "path")`), so
validation that works on plain data can still point at a line and column.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel

from engine._sanitize import neutralize

__all__ = ["Diagnostic", "NodePath", "SourceMap", "did_you_mean", "render_diagnostics"]

NodePath = tuple[str | int, ...]


class Diagnostic(BaseModel):
    """One problem, at one place, with a rule id and a hint on how to fix it."""

    file: str
    line: int
    column: int
    rule: str
    message: str
    hint: str | None = None

    def headline(self) -> str:
        """`FILE:LINE:COL: error[rule]: message`."""
        return f"{self.file}:{self.line}:{self.column}: error[{self.rule}]: {self.message}"


@dataclass
class SourceMap:
    """Where each node of a loaded document starts (1-based line and column).

    `values` maps a node path to the position of its value; `keys` maps the path of a
    mapping entry to the position of its key (so "unknown key" points at the key).
    `problems` holds what the loader found (duplicate keys, an unquoted `{{`) for validation
    to report with everything else; `broken` marks values the loader could not read, so
    that no second, derived problem is reported for them.
    """

    file: str
    lines: list[str] = field(default_factory=list)
    values: dict[NodePath, tuple[int, int]] = field(default_factory=dict)
    keys: dict[NodePath, tuple[int, int]] = field(default_factory=dict)
    problems: list[Diagnostic] = field(default_factory=list)
    broken: set[NodePath] = field(default_factory=set)

    def is_broken(self, path: Sequence[str | int]) -> bool:
        return any(tuple(path[: len(b)]) == b for b in self.broken)

    def locate(self, path: Sequence[str | int], *, key: bool = False) -> tuple[int, int]:
        """The position of `path`, or of its nearest located ancestor."""
        probe: NodePath = tuple(path)
        while True:
            if key and probe in self.keys:
                return self.keys[probe]
            if probe in self.values:
                return self.values[probe]
            if probe in self.keys:
                return self.keys[probe]
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


def render_diagnostics(diagnostics: Sequence[Diagnostic], source: SourceMap | None) -> str:
    """Human-readable text: headline, the offending line, a caret, and the hint.

    Control characters are made visible (`neutralize`): a message may quote what a server
    or a model wrote (a crashing server's stderr, tool names), headed for a terminal.
    """
    chunks: list[str] = []
    for diag in diagnostics:
        text = [neutralize(diag.headline())]
        if source is not None and 1 <= diag.line <= len(source.lines):
            line = source.lines[diag.line - 1].rstrip("\n")
            gutter = f"{diag.line:>5} | "
            text.append(f"{gutter}{neutralize(line)}")
            text.append(" " * (len(gutter) + max(diag.column - 1, 0)) + "^")
        if diag.hint:
            text.append(f"  hint: {neutralize(diag.hint)}")
        chunks.append("\n".join(text))
    return "\n".join(chunks)
