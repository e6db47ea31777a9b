"""The `fs.search` action: lines matching a regular expression, in files matching a glob.

The walk goes only where the glob can match (`*/*.py`: one level of folders; `src/**`:
under `src`), and not into the folders of tools (`TOOL_FOLDERS`, and any folder holding a
`pyvenv.cfg`: a virtual environment) unless the glob names them (`.venv/**`) or `path` is
inside one. The walk, the glob and the pattern are all bounded: by the walk's limits, by a
deadline set a little before the call's own timeout, and by cancellation of the call.
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from dataclasses import dataclass, field

from capabilities.fs._access import grant_of, jail_for, read_capped, require_read
from capabilities.fs._jail import Enter, Jail, WalkLimits, clean_relpath
from capabilities.fs._models import SearchMatch, SearchParams, SearchResult
from engine import regex
from engine.capability import CallContext
from engine.errors import StepFailed
from engine.globs import GlobReach, compile_glob, glob_reach

__all__ = ["TOOL_FOLDERS", "search_files"]

TOOL_FOLDERS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        "node_modules",
        "__pycache__",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
    }
)
"""Folders of version control, environments and caches: what a tool put there, not the
project's own files. `fs.search` does not enter them unless its glob names them."""

_MAX_LINE_CHARS = 1000  # a match's `text` is cut here so one minified file can't flood output
_BINARY_SNIFF = 8192


async def search_files(params: SearchParams, ctx: CallContext) -> SearchResult:
    # asyncio is imported where it is used: `planloom validate` imports this module
    # without running it, and asyncio (with ssl, which loads OpenSSL) is much of its start-up.
    import asyncio

    grant = grant_of(ctx)
    require_read(grant, "fs.search")
    rel = clean_relpath(params.path, "fs.search")
    jail = jail_for(grant, ctx, "fs.search")
    # The worker thread cannot be stopped from outside, so it stops itself: when the call is
    # cancelled (Ctrl-C), and a little before the sandbox's own timeout, which then still
    # sees the error naming pattern and file.
    until = _Until(time.monotonic() + ctx.timeout - min(0.5, ctx.timeout / 10))
    try:
        return await asyncio.to_thread(_search_sync, jail, rel, params, grant.max_read_bytes, until)
    finally:
        until.stopped.set()


@dataclass
class _Until:
    """When a search in a worker thread must stop: its deadline, or `stopped` being set."""

    deadline: float
    stopped: threading.Event = field(default_factory=threading.Event)


def _search_sync(
    jail: Jail, rel: str, params: SearchParams, cap: int, until: _Until
) -> SearchResult:
    # A glob is a user regex too: `*a*a*a*a*a*a*a*b` backtracks for hours on a long name.
    glob = f"(?s:{compile_glob(params.glob).pattern})"
    limits = WalkLimits(params.max_depth, params.max_entries)
    matches: list[SearchMatch] = []
    prefix = "" if rel == "." else rel + "/"
    enter = _entering(params.glob, glob_reach(params.glob), prefix, until)
    with jail:
        fd = jail.open(rel, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for entry in jail.walk(fd, rel, limits, enter):
                if not stat.S_ISREG(entry.st.st_mode) or entry.st.st_size > cap:
                    continue
                if not _glob_matches(params.glob, glob, entry.rel.removeprefix(prefix), until):
                    continue
                text = _read_for_search(entry.name, entry.dir_fd, cap)
                for number, line in enumerate((text or "").splitlines(), 1):
                    if _search_line(params.pattern, line, until, entry.rel):
                        if len(matches) >= params.max_matches:
                            return SearchResult(
                                matches=matches, truncated=True, visited=limits.seen
                            )
                        cut = line[:_MAX_LINE_CHARS]
                        matches.append(SearchMatch(path=entry.rel, line=number, text=cut))
        finally:
            os.close(fd)
    return SearchResult(matches=matches, truncated=limits.truncated, visited=limits.seen)


def _entering(glob: str, reach: GlobReach, prefix: str, until: _Until) -> Enter:
    """Which folders the walk goes into: those beneath which the glob can match a file,
    and no tool folder the glob does not name."""

    def match(segment: re.Pattern[str], name: str) -> bool:
        return _glob_matches(glob, f"(?s:{segment.pattern})", name, until)

    def enter(rel: str, name: str, fd: int) -> bool:
        if not reach.enters(rel.removeprefix(prefix), match):
            return False
        return name in reach.literals or not (name in TOOL_FOLDERS or _is_venv(fd))

    return enter


def _is_venv(fd: int) -> bool:
    """Whether the open folder is a Python virtual environment (it holds `pyvenv.cfg`)."""
    try:
        os.stat("pyvenv.cfg", dir_fd=fd, follow_symlinks=False)
    except OSError:
        return False
    return True


def _glob_matches(glob: str, translated: str, rel: str, until: _Until) -> bool:
    try:
        return regex.fullmatch(translated, rel, deadline=until.deadline) is not None
    except regex.RegexTimeout as exc:
        raise StepFailed(
            f"fs.search: glob {glob!r} took longer than {exc.seconds:.2g} s to match {rel!r}; "
            "many '*' in one glob backtrack: use fewer"
        ) from exc


def _search_line(pattern: str, line: str, until: _Until, rel: str) -> bool:
    if until.stopped.is_set():  # the caller is gone: nobody reads what this would find
        raise StepFailed("fs.search: cancelled")
    try:
        return regex.search(pattern, line, deadline=until.deadline) is not None
    except regex.RegexTimeout as exc:
        raise StepFailed(f"fs.search in {rel!r}: {exc}") from exc


def _read_for_search(name: str, dir_fd: int, cap: int) -> str | None:
    """The file's text, or None if it is not a plain single-link text file: skip it then."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            return None
        data = read_capped(fd, cap)
    except OSError:
        return None
    finally:
        os.close(fd)
    if b"\x00" in data[:_BINARY_SNIFF]:
        return None
    return data.decode("utf-8", errors="replace")
