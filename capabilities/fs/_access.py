"""What an `fs` call may touch: the grant's read and write checks, and the file checks.

Every action gets its grant and `Jail` here; writes, appends and deletes are held to the
grant's `write` globs and to its `protected:` globs for `.git` folders and `.env*` files.
The file checks refuse symlinks, folders, non-regular files and hard links.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from capabilities.fs._jail import Jail, clean_relpath, not_regular
from capabilities.fs._models import FsGrant
from capabilities.protected import is_protected, matches_any
from engine.capability import CallContext
from engine.errors import CapabilityDenied, StepFailed

__all__ = [
    "check_stat",
    "checked_file",
    "grant_of",
    "jail_for",
    "lstat",
    "read_capped",
    "require_read",
    "require_write",
]

_CHUNK = 1 << 16


def grant_of(ctx: CallContext) -> FsGrant:
    if isinstance(ctx.grant, FsGrant):
        return ctx.grant
    return FsGrant.model_validate(ctx.grant.model_dump())


def jail_for(grant: FsGrant, ctx: CallContext, action: str) -> Jail:
    root = Path(grant.root)
    if not root.is_absolute():
        root = ctx.base_dir / root
    return Jail(Path(os.path.abspath(root)), action)


def admission(action: str, *, writes: bool) -> Callable[[Any, CallContext], None]:
    """`Action.admit` of an `fs` action: reading granted, or the path granted for writing,
    beneath the root and not protected (its `path` only when the recipe wrote it, at
    validation). The jail's checks of what is on disk come when the call runs."""

    def admit(params: Any, ctx: CallContext) -> None:
        grant = grant_of(ctx)
        if not writes:
            require_read(grant, action)
        if ctx.unrendered and ctx.templated(("path",)):
            return
        try:
            rel = clean_relpath(params.path, action)
            if writes:
                require_write(grant, rel, action)
        except CapabilityDenied as exc:
            exc.param = ("path",)
            raise

    return admit


def require_read(grant: FsGrant, action: str) -> None:
    if not grant.read:
        raise CapabilityDenied(
            f"{action}: reading is not granted; grant it with capabilities: fs: {{read: true}}",
            rule="fs.read-not-granted",
        )


def require_write(grant: FsGrant, rel: str, action: str) -> None:
    if rel == ".":
        raise StepFailed(f"{action}: the fs root itself is a directory, not a file")
    if grant.write is not True and not matches_any(rel, grant.write or []):
        raise CapabilityDenied(
            f"{action}: writing {rel!r} is not granted; "
            f"grant it with capabilities: fs: {{write: [{_suggest_glob(rel)!r}]}}",
            rule="fs.write-not-granted",
        )
    if is_protected(rel) and not matches_any(rel, grant.protected):
        raise CapabilityDenied(
            f"{action}: {rel!r} is protected (.git and .env* files); "
            f"grant it explicitly with capabilities: fs: {{protected: [{rel!r}]}}",
            rule="fs.protected",
        )


def _suggest_glob(rel: str) -> str:
    head, _, _ = rel.rpartition("/")
    return f"{head}/**" if head else rel


def checked_file(fd: int, jail: Jail, rel: str) -> os.stat_result:
    st = os.fstat(fd)
    check_stat(st, jail, rel)
    return st


def check_stat(st: os.stat_result, jail: Jail, rel: str, *, allow_links: bool = False) -> None:
    where = f"{rel!r} under root {str(jail.root)!r}"
    if stat.S_ISLNK(st.st_mode):
        raise CapabilityDenied(
            f"{jail.action}: {where} is a symlink; fs never follows symlinks",
            rule="fs.symlink",
        )
    if stat.S_ISDIR(st.st_mode):
        raise StepFailed(f"{jail.action}: is a directory {where}")
    if not stat.S_ISREG(st.st_mode):
        raise not_regular(jail.action, rel)
    if st.st_nlink > 1 and not allow_links:
        raise CapabilityDenied(
            f"{jail.action}: {where} has {st.st_nlink} hard links and may be a file from "
            "outside the root; copy it instead of linking it",
            rule="fs.hardlink",
        )


def lstat(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def read_capped(fd: int, cap: int) -> bytes:
    chunks: list[bytes] = []
    left = cap
    while left > 0:
        chunk = os.read(fd, min(_CHUNK, left))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
