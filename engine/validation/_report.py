"""Collecting the problems found while a plan is checked, each located in its source."""

from __future__ import annotations

from engine.diagnostics import Diagnostic, NodePath, SourceMap

__all__ = ["Report"]


class Report:
    """The problems found so far; calling it records one more, at a node path.

    Positions are found when the problems are read (`problems`), all at once: a large
    document is then searched once for every path reported, not once per problem.
    """

    def __init__(self, source: SourceMap) -> None:
        self.source = source
        self._located: list[Diagnostic] = []
        self._pending: list[tuple[NodePath, str, str, str | None, bool]] = []

    def __call__(
        self, path: NodePath, rule: str, message: str, hint: str | None = None, *, key: bool = False
    ) -> None:
        if self.source.broken and self.source.is_broken(path):
            return  # the loader already reported why this value is unreadable
        self._pending.append((tuple(path), rule, message, hint, key))

    def add(self, problems: list[Diagnostic]) -> None:
        """Problems located already (the loader's)."""
        self._located.extend(problems)

    def __bool__(self) -> bool:
        return bool(self._located or self._pending)

    @property
    def problems(self) -> list[Diagnostic]:
        """Every problem so far, located."""
        pending, self._pending = self._pending, []
        if pending:
            positions = self.source.locate_many([(path, key) for path, _, _, _, key in pending])
            file = self.source.file
            self._located.extend(
                Diagnostic(file=file, line=line, column=column, rule=rule, message=msg, hint=hint)
                for (_, rule, msg, hint, _), (line, column) in zip(pending, positions, strict=True)
            )
        return self._located
