"""The `fs.search` action: lines matching a regular expression, in files matching a glob.

The walk, the glob and the pattern are all bounded: by the walk's limits, by a deadline
set a little before the call's own timeout, and by cancellation of the call.
"""

from __future__ import annotations

import asyncio
import os
import stat
import threading
import time
from dataclasses import dataclass, field

from capabilities._fs_access import grant_of, jail_for, read_capped, require_read
from capabilities._fs_models import SearchMatch, SearchParams, SearchResult
from capabilities._jail import Jail, WalkLimits, clean_relpath
from engine import _regex
from engine._globs import compile_glob
from engine.capability import CallContext
from engine.errors import StepFailed

__all__ = ["search_files"]

_MAX_LINE_CHARS = 1000  # a match's `text` is cut here so one minified file can't flood output
_BINARY_SNIFF = 8192


async def search_files(params: SearchParams, ctx: CallContext) -> SearchResult:
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
    with jail:
        fd = jail.open(rel, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for entry in jail.walk(fd, rel, limits):
                if not stat.S_ISREG(entry.st.st_mode) or entry.st.st_size > cap:
                    continue
                if not _glob_matches(params.glob, glob, entry.rel.removeprefix(prefix), until):
                    continue
                text = _read_for_search(entry.name, entry.dir_fd, cap)
                for number, line in enumerate((text or "").splitlines(), 1):
                    if _search_line(params.pattern, line, until, entry.rel):
                        if len(matches) >= params.max_matches:
                            return SearchResult(matches=matches, truncated=True)
                        cut = line[:_MAX_LINE_CHARS]
                        matches.append(SearchMatch(path=entry.rel, line=number, text=cut))
        finally:
            os.close(fd)
    return SearchResult(matches=matches, truncated=limits.truncated)


def _glob_matches(glob: str, translated: str, rel: str, until: _Until) -> bool:
    try:
        return _regex.fullmatch(translated, rel, deadline=until.deadline) is not None
    except _regex.RegexTimeout as exc:
        raise StepFailed(
            f"fs.search: glob {glob!r} took longer than {exc.seconds:.2g} s to match {rel!r}; "
            "many '*' in one glob backtrack: use fewer"
        ) from exc


def _search_line(pattern: str, line: str, until: _Until, rel: str) -> bool:
    if until.stopped.is_set():  # the caller is gone: nobody reads what this would find
        raise StepFailed("fs.search: cancelled")
    try:
        return _regex.search(pattern, line, deadline=until.deadline) is not None
    except _regex.RegexTimeout as exc:
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
