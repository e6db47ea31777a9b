"""The `fs` capability: read, write, list and search files beneath a granted root.

A recipe grants it with, for example:

```yaml
capabilities:
  fs: {root: ., write: ["notes/**"]}
```

Every path is resolved by the kernel beneath the root (see `capabilities._jail`): absolute
paths, `..` that leaves the root, symlinks, hard links and non-regular files are refused.
Inside the root, `.git` folders and `.env*` files are protected: writing them needs an extra
`protected:` grant. Writes go to a temporary file that replaces the target atomically.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, field_validator

from capabilities._jail import Jail, WalkLimits, clean_relpath, not_regular, openat2_available
from capabilities._protected import allowed_write
from capabilities._protected import is_protected as _is_protected
from capabilities._protected import matches_any as _matches_any
from engine import _regex
from engine._globs import compile_glob
from engine.capability import Action, CallContext, Family, Registry
from engine.errors import CapabilityDenied, StepFailed

__all__ = [
    "AppendParams",
    "DeleteParams",
    "DeleteResult",
    "FsGrant",
    "ListEntry",
    "ListParams",
    "ListResult",
    "ReadParams",
    "ReadResult",
    "SearchMatch",
    "SearchParams",
    "SearchResult",
    "WriteParams",
    "WriteResult",
    "register",
]

_CHUNK = 1 << 16
_MAX_LINE_CHARS = 1000  # a match's `text` is cut here so one minified file can't flood output
_BINARY_SNIFF = 8192

_Impl: TypeAlias = Callable[["Jail", str, bytes, bool], None]


class FsGrant(BaseModel):
    """What a recipe's `capabilities: fs:` block grants.

    Attributes:
        root: the folder everything happens beneath; relative to the recipe's folder.
        read: whether files may be read, listed and searched.
        write: `True` for anything under root, or glob patterns relative to root
            (`**` spans folders, e.g. `notes/**`).
        protected: globs that may be written even though they are protected
            (`.git` folders, `.env*` files).
        max_read_bytes: the most bytes one read (or one searched file) returns.
        max_write_bytes: the largest content one write or append accepts.
    """

    model_config = ConfigDict(extra="forbid")

    root: str = "."
    read: bool = True
    write: bool | list[str] = False
    protected: list[str] = []
    max_read_bytes: int = Field(default=1_000_000, ge=0)
    max_write_bytes: int = Field(default=10_000_000, ge=0)

    @field_validator("protected")
    @classmethod
    def _relative_globs(cls, value: list[str]) -> list[str]:
        for pattern in value:
            if pattern.startswith("/"):
                raise ValueError(f"glob {pattern!r} must be relative to the fs root")
            compile_glob(pattern)  # a bad glob is a grant error, not a silent literal
        return value

    @field_validator("write")
    @classmethod
    def _relative_write_globs(cls, value: bool | list[str]) -> bool | list[str]:
        if isinstance(value, list):
            cls._relative_globs(value)
        return value


# PATH_MAX: a longer path cannot name a file, and would be echoed back in messages.
PathParam = Annotated[str, Field(max_length=4096)]


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReadParams(_Params):
    """Params of `fs.read`."""

    path: PathParam


class ReadResult(BaseModel):
    """Result of `fs.read`: UTF-8 text (bad bytes replaced), the file's full size."""

    content: str
    size: int
    truncated: bool


class WriteParams(_Params):
    """Params of `fs.write`."""

    path: PathParam
    content: str
    create_dirs: bool = True


class AppendParams(WriteParams):
    """Params of `fs.append`."""


class WriteResult(BaseModel):
    """Result of `fs.write` and `fs.append`."""

    path: str
    bytes_written: int


class DeleteParams(_Params):
    """Params of `fs.delete` (regular files only)."""

    path: PathParam
    missing_ok: bool = False


class DeleteResult(BaseModel):
    """Result of `fs.delete`; `deleted` is false when the file was missing."""

    path: str
    deleted: bool


class ListParams(_Params):
    """Params of `fs.list`."""

    path: PathParam = "."
    recursive: bool = False
    max_depth: int = Field(default=8, ge=1, le=64)
    max_entries: int = Field(default=10_000, ge=1, le=1_000_000)


class ListEntry(BaseModel):
    """One listed entry; `size` is set for files only. Symlinks are reported, not followed."""

    path: str
    type: Literal["file", "dir", "symlink", "other"]
    size: int | None = None


class ListResult(BaseModel):
    """Result of `fs.list`, sorted by path; `paths` lists just the files."""

    entries: list[ListEntry]
    paths: list[str]
    truncated: bool


class SearchParams(_Params):
    """Params of `fs.search`; `glob` is matched against paths relative to `path`."""

    pattern: str
    path: PathParam = "."
    glob: str = "**/*"
    max_matches: int = Field(default=1000, ge=1, le=100_000)
    max_depth: int = Field(default=8, ge=1, le=64)
    max_entries: int = Field(default=10_000, ge=1, le=1_000_000)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        _regex.compile_pattern(value)  # ValueError says what is wrong
        return value

    @field_validator("glob")
    @classmethod
    def _glob_compiles(cls, value: str) -> str:
        compile_glob(value)  # ValueError names what is wrong
        return value


class SearchMatch(BaseModel):
    """One matching line (1-based), its text cut at 1000 characters."""

    path: str
    line: int
    text: str


class SearchResult(BaseModel):
    """Result of `fs.search`."""

    matches: list[SearchMatch]
    truncated: bool


@functools.cache
def _confinement_report() -> dict[str, str]:
    beneath = (
        "active"
        if openat2_available()
        else "unavailable: the kernel refused openat2; using a component-wise O_NOFOLLOW walk"
    )
    return {
        "openat2 RESOLVE_BENEATH|NO_SYMLINKS": beneath,
        "O_NOFOLLOW component walk": "active (fallback)" if beneath == "active" else "active",
        "regular files only, no hard links": "active",
        "atomic writes (temp file + rename)": "active",
    }


def register(registry: Registry) -> None:
    """Add the `fs` family and its six actions to `registry`."""
    registry.add_family(
        Family("fs", "read and write files beneath a granted root", FsGrant, _confinement_report)
    )
    registry.add(Action("fs.read", "Read a text file.", ReadParams, _read, ReadResult, False))
    registry.add(
        Action("fs.write", "Write a file, replacing it.", WriteParams, _write, WriteResult, True)
    )
    registry.add(
        Action("fs.append", "Append text to a file.", AppendParams, _append, WriteResult, True)
    )
    registry.add(
        Action("fs.list", "List a folder.", ListParams, _list, ListResult, side_effects=False)
    )
    registry.add(
        Action(
            "fs.search",
            "Search files for lines matching a regular expression.",
            SearchParams,
            _search,
            SearchResult,
            side_effects=False,
        )
    )
    registry.add(Action("fs.delete", "Delete a file.", DeleteParams, _delete, DeleteResult, True))


# -- grants -------------------------------------------------------------------------------


def _grant(ctx: CallContext) -> FsGrant:
    if isinstance(ctx.grant, FsGrant):
        return ctx.grant
    return FsGrant.model_validate(ctx.grant.model_dump())


def _jail(grant: FsGrant, ctx: CallContext, action: str) -> Jail:
    root = Path(grant.root)
    if not root.is_absolute():
        root = ctx.base_dir / root
    return Jail(Path(os.path.abspath(root)), action)


def _require_read(grant: FsGrant, action: str) -> None:
    if not grant.read:
        raise CapabilityDenied(
            f"{action}: reading is not granted; grant it with capabilities: fs: {{read: true}}",
            rule="fs.read-not-granted",
        )


def _require_write(grant: FsGrant, rel: str, action: str) -> None:
    if rel == ".":
        raise StepFailed(f"{action}: the fs root itself is a directory, not a file")
    if grant.write is not True and not _matches_any(rel, grant.write or []):
        raise CapabilityDenied(
            f"{action}: writing {rel!r} is not granted; "
            f"grant it with capabilities: fs: {{write: [{_suggest_glob(rel)!r}]}}",
            rule="fs.write-not-granted",
        )
    if _is_protected(rel) and not _matches_any(rel, grant.protected):
        raise CapabilityDenied(
            f"{action}: {rel!r} is protected (.git and .env* files); "
            f"grant it explicitly with capabilities: fs: {{protected: [{rel!r}]}}",
            rule="fs.protected",
        )


def _suggest_glob(rel: str) -> str:
    head, _, _ = rel.rpartition("/")
    return f"{head}/**" if head else rel


# -- actions --------------------------------------------------------------------------------


async def _read(params: ReadParams, ctx: CallContext) -> ReadResult:
    grant = _grant(ctx)
    _require_read(grant, "fs.read")
    rel = clean_relpath(params.path, "fs.read")
    jail = _jail(grant, ctx, "fs.read")
    return await asyncio.to_thread(_read_sync, jail, rel, grant.max_read_bytes)


def _read_sync(jail: Jail, rel: str, cap: int) -> ReadResult:
    with jail:
        # O_NONBLOCK so a FIFO opens at once instead of waiting for a writer.
        fd = jail.open(rel, os.O_RDONLY | os.O_NONBLOCK)
        try:
            st = _checked_file(fd, jail, rel)
            data = _read_capped(fd, cap)
        except OSError as exc:
            raise jail.error(exc, rel) from exc
        finally:
            os.close(fd)
    return ReadResult(
        content=data.decode("utf-8", errors="replace"),
        size=st.st_size,
        truncated=st.st_size > len(data),
    )


async def _write(params: WriteParams, ctx: CallContext) -> WriteResult:
    return await _write_or_append(params, ctx, "fs.write", _write_sync)


async def _append(params: AppendParams, ctx: CallContext) -> WriteResult:
    return await _write_or_append(params, ctx, "fs.append", _append_sync)


async def _write_or_append(
    params: WriteParams, ctx: CallContext, action: str, impl: _Impl
) -> WriteResult:
    grant = _grant(ctx)
    rel = clean_relpath(params.path, action)
    _require_write(grant, rel, action)
    data = params.content.encode("utf-8")
    if len(data) > grant.max_write_bytes:
        raise CapabilityDenied(
            f"{action}: {len(data)} bytes is more than max_write_bytes "
            f"({grant.max_write_bytes}); raise it in capabilities: fs: {{max_write_bytes: ...}}",
            rule="fs.too-large",
        )
    jail = _jail(grant, ctx, action)
    if _is_protected(rel):  # allowed by `protected:`: no confined child's check removes it
        allowed_write(str(jail.root), rel)
    await asyncio.to_thread(impl, jail, rel, data, params.create_dirs)
    return WriteResult(path=rel, bytes_written=len(data))


def _write_sync(jail: Jail, rel: str, data: bytes, create_dirs: bool) -> None:
    with jail:
        dir_fd, name = jail.open_parent(rel, create=create_dirs)
        tmp = f".{secrets.token_hex(8)}.planloom-tmp"
        try:
            existing = _lstat(dir_fd, name)
            if existing is not None:
                _check_stat(existing, jail, rel)
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
            before = _checked_file(fd, jail, rel).st_size
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


async def _delete(params: DeleteParams, ctx: CallContext) -> DeleteResult:
    grant = _grant(ctx)
    rel = clean_relpath(params.path, "fs.delete")
    _require_write(grant, rel, "fs.delete")
    jail = _jail(grant, ctx, "fs.delete")
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
                st = _lstat(dir_fd, name)
            except OSError as exc:
                raise jail.error(exc, rel) from exc
            if st is None:
                if missing_ok:
                    return False
                raise StepFailed(f"fs.delete: no such file {rel!r} under root {str(jail.root)!r}")
            if stat.S_ISDIR(st.st_mode):
                raise StepFailed(f"fs.delete: {rel!r} is a directory; fs.delete removes files")
            # Hard links are fine here: unlinking a name inside the root leaves the data alone.
            _check_stat(st, jail, rel, allow_links=True)
            try:
                os.unlink(name, dir_fd=dir_fd)  # unlink never follows a symlink
            except OSError as exc:
                raise jail.error(exc, rel) from exc
        finally:
            os.close(dir_fd)
    return True


async def _list(params: ListParams, ctx: CallContext) -> ListResult:
    grant = _grant(ctx)
    _require_read(grant, "fs.list")
    rel = clean_relpath(params.path, "fs.list")
    jail = _jail(grant, ctx, "fs.list")
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


async def _search(params: SearchParams, ctx: CallContext) -> SearchResult:
    grant = _grant(ctx)
    _require_read(grant, "fs.search")
    rel = clean_relpath(params.path, "fs.search")
    jail = _jail(grant, ctx, "fs.search")
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
        data = _read_capped(fd, cap)
    except OSError:
        return None
    finally:
        os.close(fd)
    if b"\x00" in data[:_BINARY_SNIFF]:
        return None
    return data.decode("utf-8", errors="replace")


# -- helpers ----------------------------------------------------------------------------------


def _checked_file(fd: int, jail: Jail, rel: str) -> os.stat_result:
    st = os.fstat(fd)
    _check_stat(st, jail, rel)
    return st


def _check_stat(st: os.stat_result, jail: Jail, rel: str, *, allow_links: bool = False) -> None:
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


def _kind(mode: int) -> Literal["file", "dir", "symlink", "other"]:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _read_capped(fd: int, cap: int) -> bytes:
    chunks: list[bytes] = []
    left = cap
    while left > 0:
        chunk = os.read(fd, min(_CHUNK, left))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _unlink_quietly(name: str, dir_fd: int) -> None:
    # The temp file may never have been created, or be gone already.
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)
