"""A confined call's private TMPDIR, pids cgroup and memory cgroup, and the removal of stale ones.

Each call gets them, removed when it ends; those of calls still running are removed at
exit, and those left by engines that died mid-call are swept at the next start. A call may
adopt a scratch made before it: the resident launcher's spare process waits in its
cgroup, so that the call does not wait for the kernel to move a process into one.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Callable

__all__ = ["Scratch", "memory_cgroup_base", "pids_cgroup_base"]

_CGROUP_CLEANUP = 2.0  # seconds to empty and remove a call's pids cgroup
_V1 = "/sys/fs/cgroup"  # one hierarchy per controller beneath it (cgroup v1)
_LIMIT, _MEMSW = "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"


class Scratch:
    """A call's private TMPDIR, pids cgroup and memory cgroup, removed when the call ends
    (or at exit).

    Made when the `with` block starts, or beforehand by `make()`: the resident launcher's
    spare waits in the cgroups of a scratch made for the next call, which adopts them with
    its own limits (`limit()`). The memory cgroup bounds the resident memory of the call's
    processes together (`max_memory`, swap included); where there is none, the launcher
    limits each process's address space instead (RLIMIT_AS).
    """

    def __init__(self, max_processes: int, max_memory: int) -> None:
        self._max = max_processes
        self.max_memory = max_memory
        self.handed_over = False
        self.tmpdir = ""
        self.cgroup: str | None = None
        self.cgroup_state = "unavailable: not set up"
        self.memory_cgroup: str | None = None
        self.memory_state = "unavailable: not set up"

    def make(self) -> Scratch:
        """Make the TMPDIR and the cgroups (limited to `max_processes` and `max_memory`)."""
        _sweep_stale_scratch()
        self.tmpdir = tempfile.mkdtemp(prefix=f"planloom-shell-{os.getpid()}-")
        _LIVE_SCRATCH.add(self)
        self.cgroup, self.cgroup_state = _new_cgroup(self._max)
        self.memory_cgroup, self.memory_state = _new_memory_cgroup(self.max_memory)
        return self

    def limit(self, max_processes: int, max_memory: int) -> Scratch:
        """Limit the cgroups, made earlier, to the adopting call's grant."""
        if max_processes != self._max and self.cgroup is not None:
            self._max = max_processes
            try:
                with open(os.path.join(self.cgroup, "pids.max"), "w") as file:
                    file.write(str(max_processes))
                self.cgroup_state = f"active (max {max_processes})"
            except OSError as exc:
                # Said, not hidden: processes then keep the limit it was made with.
                self.cgroup_state = f"unavailable: {self.cgroup}/pids.max: {exc.strerror}"
        if max_memory != self.max_memory and self.memory_cgroup is not None:
            lowering = max_memory < self.max_memory
            self.max_memory = max_memory
            try:
                _limit_memory(self.memory_cgroup, max_memory, lowering)
                self.memory_state = _memory_active(max_memory)
            except OSError as exc:
                # The launcher falls back to RLIMIT_AS for a cgroup it is not told of.
                self.memory_state = f"unavailable: {self.memory_cgroup}: {exc.strerror}"
                _remove_cgroup(self.memory_cgroup)
                self.memory_cgroup = None
        return self

    def went_over_memory(self) -> bool:
        """Whether the kernel's OOM killer killed a process of the call for its memory
        cgroup's limit (asked before the scratch is removed)."""
        if self.memory_cgroup is None:
            return False
        try:
            with open(os.path.join(self.memory_cgroup, "memory.oom_control")) as file:
                lines = file.read().splitlines()
        except OSError:
            return False
        counts = dict(line.split(" ", 1) for line in lines if " " in line)
        return counts.get("oom_kill", "0").strip() not in ("", "0")

    def __enter__(self) -> Scratch:
        return self if self.tmpdir else self.make()

    def hand_over(self) -> None:
        """Leave the removal to someone else (the `with` block no longer removes it)."""
        self.handed_over = True

    async def empty_cgroup(self) -> None:
        """Kill whatever is left in the cgroup (only possible without a PID namespace)."""
        # asyncio is imported where it is used: `planloom validate` imports this module
        # without running it, and asyncio (with ssl, which loads OpenSSL) is much of its start-up.
        import asyncio

        if self.cgroup is None:
            return
        loop = asyncio.get_running_loop()
        end = loop.time() + _CGROUP_CLEANUP
        # The cgroup's emptiness is only observable by polling its procs file.
        while _sweep_cgroup(self.cgroup) and loop.time() < end:  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    def __exit__(self, *exc_info: object) -> None:
        if not self.handed_over:
            self.remove()

    def remove(self) -> None:
        _LIVE_SCRATCH.discard(self)
        shutil.rmtree(self.tmpdir, ignore_errors=True)
        for cgroup in (self.cgroup, self.memory_cgroup):
            if cgroup is not None:
                _remove_cgroup(cgroup)


def _new_cgroup(max_processes: int) -> tuple[str | None, str]:
    """A new pids cgroup limited to `max_processes`, named for this engine (so that a
    later engine sweeps it if this one dies), and its state for the call's report: the
    folder, or None and why there is none."""
    base, why = pids_cgroup_base()
    if base is None:
        return None, f"unavailable: {why}"

    def limit(path: str) -> None:
        with open(os.path.join(path, "pids.max"), "w") as file:
            file.write(str(max_processes))

    path, failed = _made(base, limit)
    return (path, f"active (max {max_processes})") if path else (None, f"unavailable: {failed}")


def _new_memory_cgroup(max_memory: int) -> tuple[str | None, str]:
    """A new memory cgroup limited to `max_memory` bytes (swap included where the kernel
    accounts for it, so swapping does not dodge the limit), named as `_new_cgroup` names
    its, and its state for the call's report."""
    fallback = "max_memory is each process's address space"
    base, why = memory_cgroup_base()
    if base is None:
        return None, f"unavailable: {why}; {fallback}"
    path, failed = _made(base, lambda made: _limit_memory(made, max_memory, lowering=True))
    if path is None:
        return None, f"unavailable: {failed}; {fallback}"
    return path, _memory_active(max_memory)


def _made(base: str, limit: Callable[[str], None]) -> tuple[str | None, str]:
    """A new cgroup beneath `base`, named for this engine, with `limit` applied to it; or
    None (nothing left behind) and the folder and reason it could not be made."""
    path = os.path.join(base, f"planloom-{os.getpid()}-{uuid.uuid4().hex[:12]}")
    try:
        os.mkdir(path)
        limit(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.rmdir(path)
        return None, f"{path}: {exc.strerror}"
    return path, ""


def _memory_active(max_memory: int) -> str:
    return f"active (max {max_memory >> 20} MiB for the call's processes together; no RLIMIT_AS)"


def _limit_memory(path: str, max_memory: int, lowering: bool) -> None:
    """Set the memory cgroup `path`'s limits; the kernel wants the memory limit never above
    the memory+swap one, so which is written first depends on the direction."""
    files = [_LIMIT]
    if os.path.exists(os.path.join(path, _MEMSW)):
        files.append(_MEMSW)
    for name in files if lowering else reversed(files):
        with open(os.path.join(path, name), "w") as file:
            file.write(str(max_memory))


def _remove_cgroup(path: str) -> None:
    """Kill what is left in the cgroup `path` and remove it."""
    for _ in range(100):  # a just-killed process may take a moment to leave
        _sweep_cgroup(path)
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            # Blocking here is rare and short: only reached if processes survived the
            # sweep in `empty_cgroup` (e.g. after cancellation).
            time.sleep(0.005)


# Scratch of calls still running; removed at exit if the process ends mid-call.
_LIVE_SCRATCH: set[Scratch] = set()


@atexit.register
def _remove_live_scratch() -> None:
    for scratch in list(_LIVE_SCRATCH):
        scratch.remove()


@functools.cache
def _sweep_stale_scratch() -> None:
    """Once per process: remove scratch left by engines that died mid-call (by their pid).

    A dead engine's pids cgroups may still hold processes (without a PID namespace, a
    `setsid` descendant outlives a `kill -9` of the engine): they are killed first, for at
    most `_CGROUP_CLEANUP` seconds in all, then the cgroups are removed.
    """
    bases = [pids_cgroup_base()[0], memory_cgroup_base()[0]]
    places = [(tempfile.gettempdir(), "planloom-shell-")]
    places += [(base, "planloom-") for base in bases if base is not None]
    stale_cgroups = []
    for folder, prefix in places:
        with contextlib.suppress(OSError):
            for entry in os.scandir(folder):
                pid = entry.name.removeprefix(prefix).split("-", 1)[0]
                if not entry.name.startswith(prefix) or not pid.isdigit() or _pid_alive(pid):
                    continue
                if folder in bases:
                    stale_cgroups.append(entry.path)
                else:
                    shutil.rmtree(entry.path, ignore_errors=True)
    _reap_cgroups(stale_cgroups, time.monotonic() + _CGROUP_CLEANUP)


def _reap_cgroups(paths: list[str], deadline: float) -> None:
    """Kill what is left in each cgroup and remove it, until `deadline` (monotonic)."""
    left = list(paths)
    while left:
        for path in list(left):
            if _sweep_cgroup(path):
                continue  # killed some; they leave the cgroup once the kernel reaps them
            with contextlib.suppress(FileNotFoundError):
                try:
                    os.rmdir(path)
                except OSError:
                    continue  # a process is still on its way out
            left.remove(path)
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.01)


def _pid_alive(pid: str) -> bool:
    return os.path.exists(f"/proc/{pid}")


def _sweep_cgroup(path: str) -> bool:
    """SIGKILL every process in the cgroup; whether any was found."""
    try:
        with open(os.path.join(path, "cgroup.procs")) as file:
            pids = [int(line) for line in file if line.strip()]
    except OSError:
        return False
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return bool(pids)


@functools.cache
def pids_cgroup_base() -> tuple[str | None, str]:
    """The writable pids cgroup (v1) folder this process belongs to, or why there is none."""
    return _cgroup_base("pids")


@functools.cache
def memory_cgroup_base() -> tuple[str | None, str]:
    """The writable memory cgroup (v1) folder this process belongs to, or why there is none."""
    return _cgroup_base("memory")


def _cgroup_base(controller: str) -> tuple[str | None, str]:
    try:
        with open("/proc/self/cgroup") as file:
            lines = file.read().splitlines()
    except OSError as exc:
        return None, f"/proc/self/cgroup: {exc.strerror}"
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            base = os.path.join(_V1, controller, path.lstrip("/"))
            if not os.path.isfile(os.path.join(base, "cgroup.procs")):
                return None, f"{base} is not a mounted {controller} cgroup"
            if not os.access(base, os.W_OK):
                return None, f"{base} is not writable"
            return base, ""
    return None, f"no {controller} cgroup v1 controller (cgroup v2 delegation is not supported)"
