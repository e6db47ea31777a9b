"""The `fs.read` and `fs.list` actions: a capped text read, and a walk of a folder."""

from __future__ import annotations

import os
import stat
from typing import Literal

from capabilities.fs._access import checked_file, grant_of, jail_for, read_capped, require_read
from capabilities.fs._jail import Jail, WalkLimits, clean_relpath
from capabilities.fs._models import ListEntry, ListParams, ListResult, ReadParams, ReadResult
from engine.capability import CallContext

__all__ = ["list_folder", "read_file"]


async def read_file(params: ReadParams, ctx: CallContext) -> ReadResult:
    # asyncio is imported where it is used: `planloom validate` imports this module
    # without running it, and asyncio (with ssl, which loads OpenSSL) is much of its start-up.
    import asyncio

    grant = grant_of(ctx)
    require_read(grant, "fs.read")
    rel = clean_relpath(params.path, "fs.read")
    jail = jail_for(grant, ctx, "fs.read")
    return await asyncio.to_thread(_read_sync, jail, rel, grant.max_read_bytes)


def _read_sync(jail: Jail, rel: str, cap: int) -> ReadResult:
    with jail:
        # O_NONBLOCK so a FIFO opens at once instead of waiting for a writer.
        fd = jail.open(rel, os.O_RDONLY | os.O_NONBLOCK)
        try:
            st = checked_file(fd, jail, rel)
            data = read_capped(fd, cap)
        except OSError as exc:
            raise jail.error(exc, rel) from exc
        finally:
            os.close(fd)
    return ReadResult(
        content=data.decode("utf-8", errors="replace"),
        size=st.st_size,
        truncated=st.st_size > len(data),
    )


async def list_folder(params: ListParams, ctx: CallContext) -> ListResult:
    import asyncio

    grant = grant_of(ctx)
    require_read(grant, "fs.list")
    rel = clean_relpath(params.path, "fs.list")
    jail = jail_for(grant, ctx, "fs.list")
    limits = WalkLimits(params.max_depth, params.max_entries, params.recursive)
    return await asyncio.to_thread(_list_sync, jail, rel, limits)


def _list_sync(jail: Jail, rel: str, limits: WalkLimits) -> ListResult:
    entries: list[ListEntry] = []
    with jail:
        fd = jail.open(rel, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for entry in jail.walk(fd, rel, limits):
                kind = _kind(entry.st.st_mode)
                size = entry.st.st_size if kind == "file" else None
                entries.append(ListEntry(path=entry.rel, type=kind, size=size))
        finally:
            os.close(fd)
    entries.sort(key=lambda e: e.path)
    paths = [e.path for e in entries if e.type == "file"]
    return ListResult(entries=entries, paths=paths, truncated=limits.truncated)


def _kind(mode: int) -> Literal["file", "dir", "symlink", "other"]:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"
