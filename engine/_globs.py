"""Globs for paths and names: `*`, `?` and `[..]` stay within one `/` segment; `**` spans
segments. One translator for fs write grants, fs.search and policy rules."""

from __future__ import annotations

import functools
import re

__all__ = ["compile_glob"]


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
