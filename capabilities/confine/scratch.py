"""A `shell.run` call's private TMPDIR and pids cgroup, and the removal of stale ones.

Each call gets both, removed when it ends; those of calls still running are removed at
exit, and those left by engines that died mid-call are swept at the next start. A call may
adopt a scratch made before it: the resident launcher's spare process waits in its
cgroup, so that the call does not wait for the kernel to move a process into one.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import os
import shutil
import signal
import tempfile
import time
import uuid

__all__ = ["Scratch", "pids_cgroup_base"]

_CGROUP_CLEANUP = 2.0  # seconds to empty and remove a call's pids cgroup
_PIDS_V1 = "/sys/fs/cgroup/pids"


class Scratch:
    """A call's private TMPDIR and pids cgroup, removed when the call ends (or at exit).

    Made when the `with` block starts, or beforehand by `make()`: the resident launcher's
    spare waits in the cgroup of a scratch made for the next call, which adopts it with
    its own limit (`limit()`).
    """

    def __init__(self, max_processes: int) -> None:
        self._max = max_processes
        self.handed_over = False
        self.tmpdir = ""
        self.cgroup: str | None = None
        self.cgroup_state = "unavailable: not set up"

    def make(self) -> Scratch:
        """Make the TMPDIR and the cgroup (limited to `max_processes`) now."""
        _sweep_stale_scratch()
        self.tmpdir = tempfile.mkdtemp(prefix=f"planloom-shell-{os.getpid()}-")
        _LIVE_SCRATCH.add(self)
        self.cgroup, self.cgroup_state = _new_cgroup(self._max)
        return self

    def limit(self, max_processes: int) -> Scratch:
        """Limit the cgroup, made earlier, to `max_processes` (the adopting call's grant)."""
        if max_processes != self._max and self.cgroup is not None:
            self._max = max_processes
            try:
                with open(os.path.join(self.cgroup, "pids.max"), "w") as file:
                    file.write(str(max_processes))
                self.cgroup_state = f"active (max {max_processes})"
            except OSError as exc:
                # Said, not hidden: processes then keep the limit it was made with.
                self.cgroup_state = f"unavailable: {self.cgroup}/pids.max: {exc.strerror}"
        return self

    def __enter__(self) -> Scratch:
        return self if self.tmpdir else self.make()

    def hand_over(self) -> None:
        """Leave the removal to someone else (the `with` block no longer removes it)."""
        self.handed_over = True

    async def empty_cgroup(self) -> None:
        """Kill whatever is left in the cgroup (only possible without a PID namespace)."""
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
        if self.cgroup is not None:
            _remove_cgroup(self.cgroup)


def _new_cgroup(max_processes: int) -> tuple[str | None, str]:
    """A new pids cgroup limited to `max_processes`, named for this engine (so that a
    later engine sweeps it if this one dies), and its state for the call's report: the
    folder, or None and why there is none."""
    base, why = pids_cgroup_base()
    if base is None:
        return None, f"unavailable: {why}"
    path = os.path.join(base, f"planloom-{os.getpid()}-{uuid.uuid4().hex[:12]}")
    try:
        os.mkdir(path)
        with open(os.path.join(path, "pids.max"), "w") as file:
            file.write(str(max_processes))
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.rmdir(path)
        return None, f"unavailable: {path}: {exc.strerror}"
    return path, f"active (max {max_processes})"


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
    base, _ = pids_cgroup_base()
    places = [(tempfile.gettempdir(), "planloom-shell-"), (base, "planloom-")]
    stale_cgroups = []
    for folder, prefix in places:
        if folder is None:
            continue
        with contextlib.suppress(OSError):
            for entry in os.scandir(folder):
                pid = entry.name.removeprefix(prefix).split("-", 1)[0]
                if not entry.name.startswith(prefix) or not pid.isdigit() or _pid_alive(pid):
                    continue
                if folder == base:
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
    try:
        with open("/proc/self/cgroup") as file:
            lines = file.read().splitlines()
    except OSError as exc:
        return None, f"/proc/self/cgroup: {exc.strerror}"
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            base = os.path.join(_PIDS_V1, path.lstrip("/"))
            if not os.path.isfile(os.path.join(base, "cgroup.procs")):
                return None, f"{base} is not a mounted pids cgroup"
            if not os.access(base, os.W_OK):
                return None, f"{base} is not writable"
            return base, ""
    return None, "no pids cgroup v1 controller (cgroup v2 delegation is not supported)"
