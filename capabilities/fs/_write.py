"""The `fs.write`, `fs.append` and `fs.delete` actions, each confined to the granted root.

A write goes to a temporary file in the same folder that then replaces the target, so
readers never see half a file; a failed append is rolled back; a delete removes one
regular file and never follows a symlink.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Callable
from typing import TypeAlias

from capabilities.fs._access import (
    check_stat,
    checked_file,
    grant_of,
    jail_for,
    lstat,
    require_write,
)
from capabilities.fs._jail import Jail, clean_relpath
from capabilities.fs._models import (
    AppendParams,
    DeleteParams,
    DeleteResult,
    WriteParams,
    WriteResult,
)
from capabilities.protected import allowed_write, is_protected
from engine.capability import CallContext
from engine.errors import CapabilityDenied, StepFailed

__all__ = ["append_file", "delete_file", "write_file"]

_Impl: TypeAlias = Callable[[Jail, str, bytes, bool], None]


async def write_file(params: WriteParams, ctx: CallContext) -> WriteResult:
    return await _write_or_append(params, ctx, "fs.write", _write_sync)


async def append_file(params: AppendParams, ctx: CallContext) -> WriteResult:
    return await _write_or_append(params, ctx, "fs.append", _append_sync)


async def _write_or_append(
    params: WriteParams, ctx: CallContext, action: str, impl: _Impl
) -> WriteResult:
    # asyncio is imported where it is used: `planloom validate` imports this module
    # without running it, and asyncio (with ssl, which loads OpenSSL) is much of its start-up.
    import asyncio

    grant = grant_of(ctx)
    rel = clean_relpath(params.path, action)
    require_write(grant, rel, action)
    data = params.content.encode("utf-8")
    if len(data) > grant.max_write_bytes:
        raise CapabilityDenied(
            f"{action}: {len(data)} bytes is more than max_write_bytes "
            f"({grant.max_write_bytes}); raise it in capabilities: fs: {{max_write_bytes: ...}}",
            rule="fs.too-large",
        )
    jail = jail_for(grant, ctx, action)
    if is_protected(rel):  # allowed by `protected:`: no confined child's check removes it
        allowed_write(str(jail.root), rel)
    await asyncio.to_thread(impl, jail, rel, data, params.create_dirs)
    return WriteResult(path=rel, bytes_written=len(data))


def _write_sync(jail: Jail, rel: str, data: bytes, create_dirs: bool) -> None:
    with jail:
        dir_fd, name = jail.open_parent(rel, create=create_dirs)
        tmp = f".{secrets.token_hex(8)}.planloom-tmp"
        try:
            existing = lstat(dir_fd, name)
            if existing is not None:
                check_stat(existing, jail, rel)
            mode = stat.S_IMODE(existing.st_mode) if existing else 0o666
            # A temp file in the same folder, then rename: readers never see half a file,
            # and rename replaces a symlink swapped in meanwhile rather than following it.
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(tmp, flags, mode, dir_fd=dir_fd)
            try:
                if existing is not None:
                    os.fchmod(fd, mode)  # keep the old mode regardless of umask
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError as exc:
            _unlink_quietly(tmp, dir_fd)
            raise jail.error(exc, rel) from exc
        finally:
            os.close(dir_fd)


def _append_sync(jail: Jail, rel: str, data: bytes, create_dirs: bool) -> None:
    with jail:
        dir_fd, name = jail.open_parent(rel, create=create_dirs)
        try:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK
            fd = jail.open(name, flags, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        try:
            before = checked_file(fd, jail, rel).st_size
            try:
                _write_all(fd, data)
            except OSError:
                # Roll back a partial append so a failure leaves the file as it was.
                os.ftruncate(fd, before)
                raise
        except OSError as exc:
            raise jail.error(exc, rel) from exc
        finally:
            os.close(fd)


async def delete_file(params: DeleteParams, ctx: CallContext) -> DeleteResult:
    import asyncio

    grant = grant_of(ctx)
    rel = clean_relpath(params.path, "fs.delete")
    require_write(grant, rel, "fs.delete")
    jail = jail_for(grant, ctx, "fs.delete")
    deleted = await asyncio.to_thread(_delete_sync, jail, rel, params.missing_ok)
    return DeleteResult(path=rel, deleted=deleted)


def _delete_sync(jail: Jail, rel: str, missing_ok: bool) -> bool:
    with jail:
        try:
            dir_fd, name = jail.open_parent(rel, create=False)
        except StepFailed as exc:
            if missing_ok and isinstance(exc.__cause__, FileNotFoundError):
                return False
            raise
        try:
            try:
                st = lstat(dir_fd, name)
            except OSError as exc:
                raise jail.error(exc, rel) from exc
            if st is None:
                if missing_ok:
                    return False
                raise StepFailed(f"fs.delete: no such file {rel!r} under root {str(jail.root)!r}")
            if stat.S_ISDIR(st.st_mode):
                raise StepFailed(f"fs.delete: {rel!r} is a directory; fs.delete removes files")
            # Hard links are fine here: unlinking a name inside the root leaves the data alone.
            check_stat(st, jail, rel, allow_links=True)
            try:
                os.unlink(name, dir_fd=dir_fd)  # unlink never follows a symlink
            except OSError as exc:
                raise jail.error(exc, rel) from exc
        finally:
            os.close(dir_fd)
    return True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _unlink_quietly(name: str, dir_fd: int) -> None:
    # The temp file may never have been created, or be gone already.
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)
