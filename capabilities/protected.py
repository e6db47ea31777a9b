"""Protected paths inside a granted folder: what they are, and how children are kept off them.

`.git` folders (or a worktree's `.git` file) and `.env*` files are protected, matched
case-insensitively (`.GIT`, `.ENV` too): a hook or a config written there runs, or is read,
outside the sandbox the next time the user runs git or loads the environment. This module
is the one definition of "protected", used by:

* `fs`, per path: `is_protected(rel)` unless the grant's `protected:` globs match it;
* the confinement of child processes (`shell.run`, and anything else started through
  `confine/_launcher.py`), per folder: `scan()` finds the protected entries beneath a writable root
  with a bounded walk; the launcher bind-mounts each one read-only in the child's mount
  namespace (`mounts()`), and after the child has ended `created()` lists the entries that
  appeared during the call (a new `.env`, a new `sub/.git`), which no mount could cover, so
  the caller removes them (`remove()`) and fails the call.

Entries the grant's `protected:` globs allow are neither mounted nor removed. A glob allows
a whole entry when it matches the entry's path (`.env`, `sub/.git`) or everything beneath
it (`.git/**`, `**`): a read-only mount covers a whole `.git` folder, so a glob for only a
part of one (`.git/hooks/*`) cannot open that part for children.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import threading
import time
from dataclasses import dataclass, field

from engine.errors import CapabilityDenied
from engine.globs import compile_glob

__all__ = [
    "MAX_DEPTH",
    "MAX_ENTRIES",
    "WHAT",
    "Changes",
    "Entry",
    "Scan",
    "Watch",
    "allowed_write",
    "allows_entry",
    "created",
    "is_protected",
    "matches_any",
    "remove",
    "scan",
]

WHAT = ".git folders and .env* files"
MAX_ENTRIES = 200_000  # folder entries one walk looks at; past it the walk stops
MAX_DEPTH = 64  # folder levels beneath the root one walk descends
# Only `**` can match this tail (it holds a `/`, and `*`, `?`, `[..]` stay in one segment):
# a glob matching `ENTRY/<tail>` matches every path beneath the entry.
_BENEATH = "\x00/\x00"


def is_protected(rel: str) -> bool:
    """Whether the root-relative path `rel` is, or is inside, a protected entry."""
    parts = [part.casefold() for part in rel.split("/")]
    return ".git" in parts or parts[-1].startswith(".env")


def _is_protected_name(name: str) -> bool:
    folded = name.casefold()
    return folded == ".git" or folded.startswith(".env")


def matches_any(rel: str, globs: list[str]) -> bool:
    """Whether any of `globs` (see `engine.globs`) matches the whole of `rel`."""
    return any(compile_glob(glob).fullmatch(rel) for glob in globs)


def allows_entry(rel: str, globs: list[str]) -> bool:
    """Whether `globs` open the whole protected entry `rel` (itself or all beneath it)."""
    return matches_any(rel, globs) or matches_any(f"{rel}/{_BENEATH}", globs)


@dataclass(frozen=True)
class Entry:
    """One protected entry found beneath a root.

    Attributes:
        path: its absolute path.
        rel: its path relative to the root.
        kind: "dir", "file" or "other" (a symlink, FIFO, socket or device: never mounted).
        ident: (st_dev, st_ino), to tell a moved entry from a new one.
        ctime_ns: its inode change time, to tell entries older than a call.
    """

    path: str
    rel: str
    kind: str
    ident: tuple[int, int]
    ctime_ns: int


@dataclass
class Scan:
    """The protected entries beneath one root that the grant does not allow.

    Attributes:
        root: the real path walked.
        entries: by root-relative path.
        complete: False when the walk stopped at `MAX_ENTRIES` or `MAX_DEPTH`; entries past
            that point are not listed (and so not mounted read-only).
        started_ns: when the walk began (wall clock, as inode times are).
    """

    root: str
    entries: dict[str, Entry] = field(default_factory=dict)
    complete: bool = True
    started_ns: int = 0

    def mounts(self) -> list[str]:
        """The absolute paths to bind-mount read-only: protected folders and regular files,
        and what a protected symlink points to when that is a folder or regular file
        beneath the root (`.env.local -> config/app.env`: writing through the link would
        change the target). A link pointing outside the root needs nothing: confined
        children cannot write there anyway."""
        paths = []
        for entry in self.entries.values():
            if entry.kind in ("dir", "file"):
                paths.append(entry.path)
            elif (target := _link_target(entry.path, self.root)) is not None:
                paths.append(target)
        return sorted(set(paths))

    def refusal(self) -> str:
        """Why a call must not start here, or "" when the walk saw everything."""
        if self.complete:
            return ""
        return (
            f"{self.root} holds more than {MAX_ENTRIES:,} entries or is deeper than "
            f"{MAX_DEPTH} levels, so it cannot be checked for protected paths ({WHAT}); "
            "grant a narrower folder (`cwd`), or, if programs may write them anywhere "
            "beneath it, `protected: ['**']`"
        )

    def note(self) -> str:
        """A caveat for the confinement report, or "" when the walk saw everything."""
        if self.complete:
            return ""
        return (
            f"the walk stopped after {MAX_ENTRIES} entries or {MAX_DEPTH} levels; "
            "protected paths past that point are not covered"
        )


def scan(root: str, allowed: list[str]) -> Scan:
    """Walk `root` (never following symlinks, never entering a protected folder) for
    protected entries that `allowed` globs do not open. Bounded by MAX_ENTRIES/MAX_DEPTH."""
    found = Scan(root=root, started_ns=_now_ns())
    if "**" in allowed:  # every protected entry is allowed: nothing to look for
        return found
    seen = 0
    stack: list[tuple[str, str, int]] = [(root, "", 0)]
    while stack:
        folder, prefix, depth = stack.pop()
        try:
            with os.scandir(folder) as listing:
                children = list(listing)
        except OSError:
            continue  # vanished or unreadable: nothing of it can be mounted either
        for child in children:
            seen += 1
            if seen > MAX_ENTRIES:
                found.complete = False
                return found
            rel = prefix + child.name
            if _is_protected_name(child.name):
                if not allows_entry(rel, allowed):
                    _add(found, child, rel)
                continue  # never descend into a `.git`, allowed or not
            with contextlib.suppress(OSError):
                if child.is_dir(follow_symlinks=False):
                    if depth + 1 >= MAX_DEPTH:
                        found.complete = False
                        continue
                    stack.append((child.path, rel + "/", depth + 1))
    return found


def _add(found: Scan, child: os.DirEntry[str], rel: str) -> None:
    try:
        info = child.stat(follow_symlinks=False)
    except OSError:
        return
    if stat.S_ISDIR(info.st_mode):
        kind = "dir"
    elif stat.S_ISREG(info.st_mode):
        kind = "file"
    else:
        kind = "other"
    found.entries[rel] = Entry(child.path, rel, kind, (info.st_dev, info.st_ino), info.st_ctime_ns)


def _link_target(path: str, root: str) -> str | None:
    """The real path a symlink leads to, when it is a folder or regular file beneath root."""
    target = os.path.realpath(path)
    if not target.startswith(root + "/"):
        return None
    try:
        info = os.stat(target)
    except OSError:
        return None
    return target if stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode) else None


def _now_ns() -> int:
    # A little before now: file systems stamp inodes from a coarser clock than time_ns().
    return time.time_ns() - 10**8


@dataclass(frozen=True)
class Changes:
    """What a call did to protected entries that were not allowed.

    Attributes:
        new: entries that appeared during the call (to be removed).
        replaced: unmounted entries (a protected symlink or special file) at a known path
            whose identity changed; to be removed like new ones.
        moved: (before, now) pairs of entries now at another path (a child renamed a folder
            holding them); their content is intact and they are left where they are.
        unchecked: why the walk after the call could not see everything (the call made the
            tree too large or too deep to check: a `.git` moved past the bound would be
            out of sight), or "".
    """

    new: list[Entry]
    replaced: list[Entry]
    moved: list[tuple[Entry, Entry]]
    unchecked: str = ""

    def __bool__(self) -> bool:
        return bool(self.new or self.replaced or self.moved or self.unchecked)


def created(before: Scan, allowed: list[str]) -> Changes:
    """Compare the protected entries beneath `before.root` now with `before`.

    An entry at a path the first walk did not list counts as new only if the first walk was
    complete or the entry changed after it began (older ones were past the walk's bound).
    """
    after = scan(before.root, allowed)
    known = {entry.ident: entry for entry in before.entries.values()}
    changes = Changes([], [], [], "" if after.complete else after.refusal())
    for rel, entry in sorted(after.entries.items()):
        old = before.entries.get(rel)
        if old is not None:
            # A mounted entry cannot be replaced from inside the sandbox (EBUSY): if it was,
            # someone outside did it (an editor saving `.env`), and it is theirs.
            if old.ident != entry.ident and old.kind == "other":
                changes.replaced.append(entry)
        elif entry.ident in known:
            changes.moved.append((known[entry.ident], entry))
        elif before.complete or entry.ctime_ns >= before.started_ns:
            changes.new.append(entry)
    return changes


class Watch:
    """One confined child's protected entries: a walk before it starts, a check after it ends.

    Calls running side by side in one folder see each other's files appear, so a watch
    keeps, for the whole process, which watches are running and what each has removed or
    let through: an entry a running (or overlapping) call, or an `fs` write, was allowed
    to create is not removed by another call, and an entry removed by one call also fails
    every other call that was running in that folder when it appeared (the culprit cannot
    be told apart from its neighbours, so all of them fail rather than the wrong one alone).
    """

    def __init__(self, root: str, allowed: list[str]) -> None:
        """Register a watch over `root`; end it with `finish()` or `abandon()`."""
        self.root = root
        self.allowed = allowed
        self.started = time.time_ns()  # compared with this process's stamps (removals)
        self.since = _now_ns()  # compared with the file system's (a little before now)
        self.before = Scan(root=root, started_ns=self.since)
        with _LOCK:
            _ACTIVE.add(self)

    def start(self) -> Scan:
        """Walk the root; the walk's entries are to be mounted read-only for the child."""
        self.before = scan(self.root, self.allowed)
        return self.before

    def abandon(self) -> None:
        """End the watch without checking (the child was never started)."""
        with _LOCK:
            _ACTIVE.discard(self)
            _prune()

    def finish(self, *, who: str, rule: str, grant: str, step_id: str | None = None) -> None:
        """After the child has ended: remove the protected entries that appeared, and refuse.

        Args:
            who: names the call in the message (`shell.run: 'cp'`).
            rule: the rule of the refusal (`shell.protected`).
            grant: the grant block the message tells the user to extend (`shell`).
            step_id: the step, for the error.

        Raises:
            CapabilityDenied: a protected entry was created, replaced or moved beneath the
                root while the call ran; the message names each path, what was done about
                it, and how to allow it.
        """
        changes = created(self.before, self.allowed)
        with _LOCK:
            _ACTIVE.discard(self)
            lines, globs = self._settle(changes)
            _prune()
        if not lines:
            return
        raise CapabilityDenied(
            f"{who}: protected paths ({WHAT}) beneath {self.root} changed while it ran, and "
            f"confined programs may not write them: {'; '.join(lines)}. "
            f"If the step is meant to write them, grant it with "
            f"capabilities: {grant}: {{protected: {sorted(globs)!r}}}",
            rule=rule,
            step_id=step_id,
        )

    def _settle(self, changes: Changes) -> tuple[list[str], set[str]]:
        """Under `_LOCK`: remove what is nobody's to keep; the message lines and globs."""
        lines: list[str] = []
        globs: set[str] = set()
        for when, entry in _REMOVED:  # removed by calls beside this one, while it ran
            rel = self._rel(entry.path)
            if (
                rel is not None
                and when >= self.started
                and entry.ctime_ns >= self.since
                and rel not in self.before.entries
                and not allows_entry(rel, self.allowed)
            ):
                lines.append(f"{rel!r} appeared while this call ran (removed by a call beside it)")
                globs.add(_allow_glob(entry, rel))
        now = time.time_ns()
        for entry in [*changes.new, *changes.replaced]:
            if self._excused(entry):
                continue
            verb = "created" if entry in changes.new else "replaced"
            done = "could NOT be removed" if remove([entry]) else "removed"
            _REMOVED.append((now, entry))
            lines.append(f"{verb} {entry.rel!r} ({done})")
            globs.add(_allow_glob(entry, entry.rel))
        for old, moved in changes.moved:
            lines.append(f"moved {old.rel!r} to {moved.rel!r} (left there)")
            globs.add(_allow_glob(moved, moved.rel))
        if changes.unchecked:
            lines.append(f"after it ran, {changes.unchecked}")
            globs.add("**")
        _FINISHED.append((now, self))
        return lines, globs

    def _rel(self, path: str) -> str | None:
        """`path` relative to this root, or None when it is not beneath it."""
        return path[len(self.root) + 1 :] if path.startswith(self.root + "/") else None

    def _excused(self, entry: Entry) -> bool:
        """Whether a call beside this one, allowed to write `entry`, could have made it."""
        beside = [*_ACTIVE, *(w for when, w in _FINISHED if when >= self.started)]
        for other in beside:
            rel = other._rel(entry.path)
            if rel is not None and allows_entry(rel, other.allowed):
                return True
        return any(
            when >= self.started and (path == entry.path or path.startswith(entry.path + "/"))
            for when, path in _ALLOWED
        )


def allowed_write(root: str, rel: str) -> None:
    """Note that the protected path `rel` beneath the folder `root` is being written under
    an explicit allowance (an `fs` write with `protected:`), so no confined child's check
    removes it."""
    path = os.path.join(os.path.realpath(root), rel)
    with _LOCK:
        _ALLOWED.append((time.time_ns(), path))


_LOCK = threading.Lock()
_ACTIVE: set[Watch] = set()
_FINISHED: list[tuple[int, Watch]] = []  # (when it ended, watch)
_REMOVED: list[tuple[int, Entry]] = []  # (when, entry) removed by a watch
_ALLOWED: list[tuple[int, str]] = []  # (when, absolute path) written with an allowance


def _prune() -> None:
    """Under `_LOCK`: forget what no running watch can still be affected by."""
    oldest = min((w.started for w in _ACTIVE), default=time.time_ns())
    _FINISHED[:] = [item for item in _FINISHED if item[0] >= oldest]
    _REMOVED[:] = [item for item in _REMOVED if item[0] >= oldest]
    _ALLOWED[:] = [item for item in _ALLOWED if item[0] >= oldest]


def _allow_glob(entry: Entry, rel: str) -> str:
    return f"{rel}/**" if entry.kind == "dir" else rel


def remove(entries: list[Entry]) -> list[str]:
    """Delete each entry without following symlinks; the paths that could not be removed."""
    failed = []
    for entry in entries:
        try:
            info = os.lstat(entry.path)
            if (info.st_dev, info.st_ino) != entry.ident:
                continue  # changed again since the walk: not ours to delete
            if stat.S_ISDIR(info.st_mode):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except FileNotFoundError:
            continue
        except OSError:
            failed.append(entry.path)
    return failed
