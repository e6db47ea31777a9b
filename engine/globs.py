"""Globs for paths and names: `*`, `?` and `[..]` stay within one `/` segment; `**` spans
segments. One translator for fs write grants, fs.search and policy rules, and one answer
to which folders a glob can reach (`glob_reach`), for walks that should not enter the rest."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["GlobReach", "compile_glob", "glob_reach"]


@functools.lru_cache(maxsize=512)
def compile_glob(glob: str) -> re.Pattern[str]:
    """`*`, `?` and `[..]` stay within one `/` segment; `**` spans them.

    Raises:
        ValueError: an unclosed `[` class.
    """
    out: list[str] = []
    i, n = 0, len(glob)
    while i < n:
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")  # zero or more whole segments
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[":
            start = i + 1
            negate = start < n and glob[start] in "!^"
            first = start + 1 if negate else start
            end = glob.find("]", first + 1)  # a ']' right after '[' is a literal
            if end == -1:
                raise ValueError(f"'[' at position {i + 1} is never closed")
            escaped = re.escape(glob[first:end]).replace(r"\-", "-")
            out.append(f"[^/{escaped}]" if negate else f"[{escaped}]")
            i = end + 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out), re.DOTALL)


_MAGIC = frozenset("*?[")


@dataclass(frozen=True)
class GlobReach:
    """Which folders a glob can match files beneath, so a walk need not enter the others.

    `*/*.py` matches files two segments deep only: no folder below the first level holds
    one. `src/**/*.py` matches under `src` only, at any depth; `**/*.py` anywhere.

    Attributes:
        segments: the glob's `/`-separated segments, each `**` (any number of segments),
            a literal name, or a pattern for one name (a regular expression); None when
            the glob cannot be cut into segments (a `**` inside a segment, as in `a**b`,
            spans segments; a `[..]` class holding `/`): then every folder may hold a match.
        literals: the folder and file names the glob writes out in full (`.venv` in
            `.venv/**`): a caller that skips folders by name by default enters these.
    """

    segments: tuple[str | re.Pattern[str], ...] | None
    literals: frozenset[str]

    def enters(
        self,
        folder: str,
        match: Callable[[re.Pattern[str], str], bool] = lambda p, name: bool(p.fullmatch(name)),
    ) -> bool:
        """Whether a file beneath `folder` (`/`-separated, relative to where the glob
        applies) can match the glob. `match(pattern, name)` matches one name against one
        segment's pattern (a caller may bound it in time)."""
        segments = self.segments
        if segments is None:
            return True
        states = _skip_any(segments, {0})
        for name in folder.split("/"):
            following: set[int] = set()
            for i in states:
                segment = segments[i]
                if segment == "**":
                    following.add(i)  # `**` takes this folder and stays for more
                elif segment == name or (not isinstance(segment, str) and match(segment, name)):
                    following.add(i + 1)
            states = _skip_any(segments, following)
            if not states:
                return False
        return True  # (states hold only indices of segments still to match)


@functools.lru_cache(maxsize=512)
def glob_reach(glob: str) -> GlobReach:
    """The folders `glob` can match files beneath (see `GlobReach`).

    Raises:
        ValueError: an unclosed `[` class.
    """
    compile_glob(glob)  # the same errors as the matcher's
    parts = _split(glob)
    literals = frozenset(p for p in parts or [] if not _MAGIC & set(p))
    if parts is None or any("**" in p and p != "**" for p in parts):
        return GlobReach(None, literals)
    segments: tuple[str | re.Pattern[str], ...] = tuple(
        p if p == "**" or p in literals else compile_glob(p) for p in parts
    )
    return GlobReach(segments, literals)


def _split(glob: str) -> list[str] | None:
    """The glob's segments, or None if a `[..]` class holds a `/`."""
    parts, start, i = [], 0, 0
    while i < len(glob):
        if glob[i] == "[":
            first = i + 2 if glob[i + 1 : i + 2] in ("!", "^") else i + 1
            end = glob.find("]", first + 1)
            if "/" in glob[i:end]:
                return None
            i = end
        elif glob[i] == "/":
            parts.append(glob[start:i])
            start = i + 1
        i += 1
    parts.append(glob[start:])
    return parts


def _skip_any(segments: tuple[str | re.Pattern[str], ...], states: set[int]) -> set[int]:
    """`states` with every `**` also taken as no segment at all, and without the states
    that have no segment left (those matched the whole glob: nothing beneath can)."""
    out: set[int] = set()
    todo = list(states)
    while todo:
        i = todo.pop()
        if i >= len(segments) or i in out:
            continue
        out.add(i)
        if segments[i] == "**":
            todo.append(i + 1)
    return out
