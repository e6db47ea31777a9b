"""Race-free path resolution beneath a root folder, for the `fs` capability.

Every path a recipe names is resolved by the kernel relative to a file descriptor of the
root, never by joining strings: on Linux with `openat2(2)` and `RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, elsewhere (or on kernels without openat2) by
a walk that opens one component at a time with `O_NOFOLLOW`. Callers then work on the
descriptors they got back, so swapping a checked folder for a symlink cannot redirect them.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import posixpath
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from engine.errors import CapabilityDenied, StepFailed

_SYS_OPENAT2 = 437  # the same number on x86_64 and aarch64 (the generic syscall table)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_RESOLVE = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


@functools.cache
def _libc_syscall() -> ctypes._NamedFuncPointer | None:
    if platform.system() != "Linux" or platform.machine().lower() not in (
        "x86_64",
        "amd64",
        "aarch64",
        "arm64",
    ):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    return fn


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    """Call openat2; raises OSError like os.open does (ENOSYS when unavailable)."""
    fn = _libc_syscall()
    if fn is None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    how = _OpenHow(flags, mode if flags & os.O_CREAT else 0, _RESOLVE)
    for _ in range(8):
        fd = int(
            fn(
                ctypes.c_long(_SYS_OPENAT2),
                ctypes.c_int(dir_fd),
                ctypes.c_char_p(os.fsencode(path)),
                ctypes.byref(how),
                ctypes.c_size_t(ctypes.sizeof(how)),
            )
        )
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        # EAGAIN: the kernel saw a concurrent rename and asks us to retry.
        if err not in (errno.EAGAIN, errno.EINTR):
            raise OSError(err, os.strerror(err), path)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), path)


@functools.cache
def openat2_available() -> bool:
    """Whether this kernel lets us use openat2 (seccomp filters may answer EPERM)."""
    try:
        # AT_FDCWD and ".": a relative path, since RESOLVE_BENEATH refuses absolute ones.
        os.close(_openat2(-100, ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, 0))
    except OSError:
        return False
    return True


def clean_relpath(path: str, action: str) -> str:
    """Normalise a recipe path lexically, refusing anything that is not beneath the root.

    No unicode normalisation happens here or later: `．．` is a literal file name.

    Returns:
        A relative path without `.`/`..` components, or `"."` for the root itself.

    Raises:
        CapabilityDenied: NUL bytes, absolute paths, or `..` that leaves the root.
    """
    if "\x00" in path:
        raise CapabilityDenied(
            f"{action}: the path contains a NUL byte; pass a plain relative path",
            rule="fs.nul-byte",
        )
    if path.startswith("/"):
        raise CapabilityDenied(
            f"{action}: absolute path {path!r} is not allowed; use a path relative to the fs root",
            rule="fs.absolute-path",
        )
    norm = posixpath.normpath(path) if path else "."
    if norm == ".." or norm.startswith("../"):
        raise CapabilityDenied(
            f"{action}: path {path!r} leaves the fs root; "
            "widen the grant's root (capabilities: fs: {root: ...}) if you need it",
            rule="fs.outside-root",
        )
    return norm


class Jail:
    """A root folder opened once; paths beneath it are opened relative to its descriptor.

    Use as a context manager: entering opens the root, leaving closes it.

    Attributes:
        root: the absolute root folder, for messages.
        action: the calling action (`fs.read`), for messages.
    """

    def __init__(self, root: Path, action: str) -> None:
        self.root = root
        self.action = action
        self.fd = -1

    def __enter__(self) -> Jail:
        # Opened here, not in __init__, so the blocking open happens in the worker thread.
        try:
            self.fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise StepFailed(
                f"{self.action}: cannot open fs root {str(self.root)!r}: {exc.strerror}"
            ) from exc
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def open(self, rel: str, flags: int, mode: int = 0o666, *, dir_fd: int | None = None) -> int:
        """Open `rel` (already cleaned) beneath the root, or beneath `dir_fd` if given.

        Raises:
            CapabilityDenied: a symlink on the way or the path escapes.
            StepFailed: anything else the OS reports (missing, is a directory, ...).
        """
        base = self.fd if dir_fd is None else dir_fd
        flags |= os.O_CLOEXEC
        try:
            if rel == ".":
                return os.open(".", flags, dir_fd=base)
            if openat2_available():
                # No O_NOFOLLOW: with it a final symlink reports ENOTDIR under O_DIRECTORY;
                # RESOLVE_NO_SYMLINKS refuses it (and any other link) with ELOOP instead.
                return _openat2(base, rel, flags, mode)
            return self._walk_open(base, rel, flags | os.O_NOFOLLOW, mode)
        except OSError as exc:
            raise self.error(exc, rel) from exc

    def _walk_open(self, base: int, rel: str, flags: int, mode: int) -> int:
        # Fallback without openat2: one component at a time, none of them a symlink.
        *dirs, last = rel.split("/")
        fd = os.dup(base)
        try:
            for name in dirs:
                fd = _swap(fd, self._open_component(fd, name, _DIR_FLAGS, 0))
            return self._open_component(fd, last, flags, mode)
        finally:
            os.close(fd)

    @staticmethod
    def _open_component(dir_fd: int, name: str, flags: int, mode: int) -> int:
        if name in ("", ".", ".."):
            raise OSError(errno.EXDEV, "path component not allowed", name)
        try:
            return os.open(name, flags, mode, dir_fd=dir_fd)
        except OSError as exc:
            # O_NOFOLLOW|O_DIRECTORY on a symlink reports ENOTDIR; call it what it is.
            if exc.errno == errno.ENOTDIR and _is_symlink(dir_fd, name):
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from exc
            raise

    def open_parent(self, rel: str, *, create: bool) -> tuple[int, str]:
        """Open the folder holding `rel`, creating missing folders if `create`.

        Returns:
            The folder's descriptor (the caller closes it) and the final name.
        """
        parent, name = posixpath.split(rel)
        if not parent:
            return os.dup(self.fd), name
        if not create:
            return self.open(parent, os.O_RDONLY | os.O_DIRECTORY), name
        fd = os.dup(self.fd)
        try:
            for part in parent.split("/"):
                try:
                    os.mkdir(part, dir_fd=fd)  # never follows a symlink: EEXIST instead
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise self.error(exc, parent) from exc
                fd = _swap(fd, self.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd))
        except BaseException:
            os.close(fd)
            raise
        return fd, name

    def error(self, exc: OSError, rel: str) -> CapabilityDenied | StepFailed:
        """Translate an OSError met while resolving `rel` into a planloom error."""
        where = f"{rel!r} under root {str(self.root)!r}"
        code = exc.errno
        if code == errno.ELOOP:
            return CapabilityDenied(
                f"{self.action}: {where} goes through a symlink; fs never follows symlinks, "
                "use the real path inside the root",
                rule="fs.symlink",
            )
        if code == errno.EXDEV:
            return CapabilityDenied(
                f"{self.action}: {where} resolves outside the root", rule="fs.outside-root"
            )
        if code == errno.ENXIO:
            return not_regular(self.action, rel)
        reasons = {
            errno.ENOENT: "no such file",
            errno.ENOTDIR: "not a directory (a part of the path is a file)",
            errno.EISDIR: "is a directory",
        }
        reason = reasons.get(code or 0, exc.strerror or str(exc))
        return StepFailed(f"{self.action}: {reason} {where}")

    def walk(
        self, start_fd: int, start_rel: str, limits: WalkLimits, enter: Enter | None = None
    ) -> Iterator[Entry]:
        """Yield the entries under an open folder, depth first, never following symlinks.

        `limits.truncated` is set when the depth or entry cap stopped the walk. Each entry's
        `dir_fd` is valid only until the next entry is requested. `enter`, when given, says
        which folders to go into (the folder itself is still yielded): a folder it refuses
        costs nothing more, and does not count as cut off by the depth cap.
        """
        yield from self._walk(start_fd, start_rel, 1, limits, enter)

    def _walk(
        self, dir_fd: int, rel: str, depth: int, limits: WalkLimits, enter: Enter | None
    ) -> Iterator[Entry]:
        try:
            names = _list_names(dir_fd, limits.max_entries + 1)
        except OSError:
            return  # vanished or unreadable while walking: skip it
        for name in names:
            if limits.seen >= limits.max_entries:
                limits.truncated = True
                return
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                continue
            child = name if rel == "." else f"{rel}/{name}"
            limits.seen += 1
            yield Entry(child, name, dir_fd, st)
            if not (stat.S_ISDIR(st.st_mode) and limits.recursive):
                continue
            try:
                # One component and O_NOFOLLOW: a folder swapped for a link is skipped.
                sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                if enter is not None and not enter(child, name, sub):
                    continue
                if depth < limits.max_depth:
                    yield from self._walk(sub, child, depth + 1, limits, enter)
                elif _has_entries(sub):
                    limits.truncated = True  # a deeper level exists that we did not list
            finally:
                os.close(sub)


Enter = Callable[[str, str, int], bool]
"""`enter(rel, name, fd)`: whether `Jail.walk` goes into the folder at `rel` (root-relative),
named `name`, open (without following links) as `fd`."""


@dataclass
class WalkLimits:
    """Caps for `Jail.walk`, and what the walk found out about them."""

    max_depth: int
    max_entries: int
    recursive: bool = True
    seen: int = 0
    truncated: bool = False


@dataclass(frozen=True)
class Entry:
    """One walked entry: its root-relative path, name, parent descriptor and lstat."""

    rel: str
    name: str
    dir_fd: int
    st: os.stat_result


def not_regular(action: str, rel: str) -> CapabilityDenied:
    """The denial for FIFOs, devices, sockets and other non-regular files."""
    return CapabilityDenied(
        f"{action}: {rel!r} is not a regular file (FIFO, device or socket); "
        "fs only works on regular files",
        rule="fs.not-regular",
    )


def _list_names(dir_fd: int, limit: int) -> list[str]:
    names: list[str] = []
    # scandir duplicates the descriptor, so ours stays open and positioned.
    with os.scandir(dir_fd) as it:
        for entry in it:
            names.append(entry.name)
            if len(names) >= limit:
                break
    return sorted(names)


def _has_entries(dir_fd: int) -> bool:
    try:
        return bool(_list_names(dir_fd, 1))
    except OSError:
        return False


def _is_symlink(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _swap(old_fd: int, new_fd: int) -> int:
    os.close(old_fd)
    return new_fd
