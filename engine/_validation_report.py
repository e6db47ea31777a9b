"""Collecting the problems found while a plan is checked, each located in its source."""

from __future__ import annotations

from engine.diagnostics import Diagnostic, NodePath, SourceMap

__all__ = ["Report"]


class Report:
    """The problems found so far; calling it records one more, at a node path."""

    def __init__(self, source: SourceMap) -> None:
        self.source = source
        self.problems: list[Diagnostic] = []

    def __call__(
        self, path: NodePath, rule: str, message: str, hint: str | None = None, *, key: bool = False
    ) -> None:
        if self.source.broken and self.source.is_broken(path):
            return  # the loader already reported why this value is unreadable
        self.problems.append(self.source.at(path, rule, message, hint, key=key))
