"""User regular expressions, bounded in time: the one way planloom compiles and runs them.

A pattern a recipe or a model writes (`fs.search {pattern: ...}`, the `match` and `search`
template tests, the `regex_replace` filter) can backtrack for longer than the universe
lasts: `^(a|a)+$` against 40 `a` and a `!`. Python's `re` cannot be stopped once it starts
and holds the GIL while it runs, so not even Ctrl-C gets through. These helpers run the
pattern with the `regex` module instead, which takes a `timeout` and (with `concurrent`)
releases the GIL while it matches, in its `VERSION0` mode: the syntax and semantics of `re`.

Every match is given the time left before a deadline (the caller's step or template
budget), and at most `CALL_SECONDS`; running out raises `RegexTimeout`, which each caller
turns into its own clear error.

Patterns planloom writes itself are fixed and known to be linear; they keep using `re`.

The `regex` module is imported by the first pattern compiled, not with this module:
validating a recipe imports the templates' tests and filters, which may never run one.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import regex

__all__ = [
    "CALL_SECONDS",
    "MAX_EXPANDED",
    "MAX_PATTERN_CHARS",
    "RegexTimeout",
    "compile_pattern",
    "fullmatch",
    "match",
    "search",
    "sub",
]

CALL_SECONDS = 1.0
"""The longest one match may take, in CPU seconds (the `regex` module's timeout measures
CPU time, so on a busy machine a match may take longer by the wall clock)."""

MAX_PATTERN_CHARS = 10_000
"""The longest pattern accepted: compiling is not interruptible, so its size is bounded."""

MAX_EXPANDED = 20_000
"""The most pattern nodes a pattern's repeat counts may unroll to (about 5 MB compiled)."""

T = TypeVar("T")


class RegexTimeout(Exception):
    """A user pattern ran out of time.

    Attributes:
        pattern: the pattern, as written.
        seconds: the time it was given.
    """

    def __init__(self, pattern: str, seconds: float) -> None:
        super().__init__(
            f"regular expression {pattern!r} took longer than {seconds:.2g} s; nested "
            "repetition such as (a|a)+ or (a+)+ backtracks exponentially: simplify the pattern"
        )
        self.pattern = pattern
        self.seconds = seconds


@functools.lru_cache(maxsize=256)
def compile_pattern(pattern: str) -> regex.Pattern[str]:
    """Compile a user pattern with `re`'s syntax.

    Raises:
        ValueError: the pattern is invalid, longer than `MAX_PATTERN_CHARS`, or repeats more
            than `MAX_EXPANDED` times in all; the message says what is wrong.
    """
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(
            f"regular expression of {len(pattern):,} characters: at most "
            f"{MAX_PATTERN_CHARS:,} are accepted"
        )
    expanded = _expanded_size(pattern)
    if expanded > MAX_EXPANDED:
        raise ValueError(
            f"regular expression {_shown(pattern)}: its fixed repeat counts ({{n}}, {{n,m}}) "
            f"multiply to about {expanded:,} copies; at most {MAX_EXPANDED:,} are accepted "
            "(use {0,n} or + where an exact count is not needed)"
        )
    import regex

    try:  # VERSION0: `re`-compatible syntax and semantics (VERSION1 changes both)
        return regex.compile(pattern, regex.VERSION0)
    except (regex.error, OverflowError, RecursionError, MemoryError) as exc:
        raise ValueError(f"invalid regular expression {_shown(pattern)}: {exc}") from exc


def _shown(pattern: str) -> str:
    return repr(pattern if len(pattern) <= 100 else pattern[:100] + "...")


_REPEAT = re.compile(r"\{(\d*)(?:,(\d*))?\}")


def _expanded_size(pattern: str) -> int:
    """Roughly how many nodes the `regex` module builds for `pattern`.

    It unrolls the minimum count of a repeat (`a{1000}` is a thousand nodes, about 270 bytes
    each), so nested counts multiply: `((a{1000}){1000}){1000}` would take hundreds of GB.
    `re` keeps a counter instead; this estimate keeps such patterns out before compiling.
    """
    totals = [0]  # what each open group holds so far, innermost last
    last = 0  # the size of the last atom or group: what a repeat applies to
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "(":
            totals.append(0)
            i += 1
            continue
        if char == ")" and len(totals) > 1:
            last = max(totals.pop(), 1)
            totals[-1] += last
            i += 1
            continue
        repeat = _REPEAT.match(pattern, i) if char == "{" else None
        if repeat is not None and (repeat[1] or repeat[2]):
            times = int(repeat[1] or 0)
            totals[-1] += last * (times - 1)  # the atom itself is counted already
            last *= times
            i = repeat.end()
            continue
        if char == "\\":
            i += 1
        elif char == "[":
            i = _class_end(pattern, i)
        last = 1
        totals[-1] += 1
        i += 1
    return sum(totals)


def _class_end(pattern: str, start: int) -> int:
    """The index of the `]` closing the character class opened at `start`."""
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":  # a `]` first is a literal
        i += 1
    while i < len(pattern) and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i


def search(pattern: str, text: str, *, deadline: float | None = None) -> regex.Match[str] | None:
    """`re.search`, bounded: at most until `deadline` (`time.monotonic()`).

    Raises:
        ValueError: the pattern is invalid.
        RegexTimeout: the search ran out of time.
    """
    compiled = compile_pattern(pattern)
    return _bounded(pattern, deadline, lambda t: compiled.search(text, concurrent=True, timeout=t))


def match(pattern: str, text: str, *, deadline: float | None = None) -> regex.Match[str] | None:
    """`re.match`, bounded like `search`."""
    compiled = compile_pattern(pattern)
    return _bounded(pattern, deadline, lambda t: compiled.match(text, concurrent=True, timeout=t))


def fullmatch(pattern: str, text: str, *, deadline: float | None = None) -> regex.Match[str] | None:
    """`re.fullmatch`, bounded like `search`."""
    compiled = compile_pattern(pattern)
    return _bounded(
        pattern, deadline, lambda t: compiled.fullmatch(text, concurrent=True, timeout=t)
    )


def sub(
    pattern: str,
    replacement: str | Callable[[regex.Match[str]], str],
    text: str,
    *,
    deadline: float | None = None,
) -> str:
    """`re.sub`, bounded like `search` (the whole substitution shares one time limit)."""
    compiled = compile_pattern(pattern)
    return _bounded(
        pattern, deadline, lambda t: compiled.sub(replacement, text, concurrent=True, timeout=t)
    )


def _bounded(pattern: str, deadline: float | None, run: Callable[[float], T]) -> T:
    seconds = CALL_SECONDS if deadline is None else min(CALL_SECONDS, deadline - time.monotonic())
    if seconds <= 0:
        raise RegexTimeout(pattern, 0.0)
    try:
        return run(seconds)
    except TimeoutError as exc:
        raise RegexTimeout(pattern, seconds) from exc
