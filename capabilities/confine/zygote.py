"""The engine's side of the resident launcher (`_zygote.py`): start it, ask it for calls, stop it.

`Zygote` is what the `shell` family's `Family.scope` yields for a run: it starts the
zygote on the run's first call (from the event loop's thread, so the zygote's
parent-death signal follows the thread that lives as long as the run), restarts it once if
it has died since, and stops it when the run ends. A zygote that cannot be started is an
error (`ZygoteError`); no call falls back to anything less confined.

After each call it asks the zygote for a spare (`Spare`) for the next call without
network: a process waiting in the next call's cgroup with its namespaces, init and mounts
made. That call sends its descriptors straight to the spare's init: the zygote is not on
its path at all.

`ResidentCall` is one call's handle: its launcher's pid and pidfd, and the pidfd of the
sandbox's init. The call has ended when the init has (the kernel has then emptied its PID
namespace); the kill is aimed through the pidfds (the init, and the launcher's process
group), so a recycled pid is never hit. The launcher itself (which relays the init's end)
leaves a moment later; the call's cgroup is removed once it has (`Zygote.retire`).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import errno
import json
import os
import socket
import subprocess
import sys

from capabilities.confine._resident import (
    ResidentCall,
    Spare,
    ZygoteError,
    ZygoteLost,
    started_call,
)
from capabilities.confine._wire import (
    abandon,
    close_all,
    exited,
    has_ended,
    readable,
    receive,
    send,
)
from capabilities.confine.scratch import Scratch

__all__ = ["ResidentCall", "Spare", "Zygote", "ZygoteError", "ZygoteLost"]

_ZYGOTE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_zygote.py")
_PYTHON = os.path.realpath(sys.executable)
_START_TIMEOUT = 30.0  # seconds for a new zygote to say it is ready (a loaded machine)
_STOP_TIMEOUT = 2.0  # seconds for it, and the launchers of calls, to exit at the end
_STDERR_LIMIT = 4096  # bytes of a failed zygote's stderr kept for the error message
# A send to a zygote that has died fails with one of these: start a new one and retry.
_GONE = (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ECONNREFUSED, errno.EBADF)


class Zygote:
    """The engine's handle on one resident launcher, for one run (or any one event loop).

    Calls must come from the event loop it was first used in (`usable()` says whether this
    one is); `aclose()` stops it, after which no call may be made.
    """

    def __init__(self) -> None:
        self._spare: Spare | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None
        self._retiring: dict[int, Scratch] = {}  # a launcher's pidfd (a dup): its scratch
        self._closed = False
        self.starts = 0  # how many zygotes this handle started (a restart is the second)

    @property
    def pid(self) -> int | None:
        """The running zygote's pid, if one was started and has not been stopped."""
        return None if self._process is None else self._process.pid

    def usable(self) -> bool:
        """Whether calls from the running event loop may go through this zygote."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        return not self._closed and (self._loop is None or self._loop is loop)

    def take_spare(self) -> Spare | None:
        """The spare waiting for the next call, for a call without network to use (with its
        scratch); None if there is none."""
        spare, self._spare = self._spare, None
        return spare

    async def call(self, fds: list[int], spare: Spare | None) -> ResidentCall:
        """Start one call: in `spare` if it is still there, else in a child forked for it.

        `fds` are the config memfd, the status pipe's write end, and the program's stdin,
        stdout and stderr; the caller keeps (and closes) its copies. A forked child joins
        the config's cgroup itself (the spare's, when the spare has gone).

        Raises:
            ZygoteError: no zygote could be started, or it refused the call.
            ZygoteLost: it ended before it had started the call.
        """
        if spare is not None:
            started = await self._hand_to(spare, fds)
            if started is not None:
                return started
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            ours.setblocking(False)
            await self._ask(b'{"call": true}', [theirs.fileno(), *fds])
            theirs.close()
            return await started_call(ours)
        except BaseException:
            theirs.close()
            abandon(ours)
            raise

    async def _hand_to(self, spare: Spare, fds: list[int]) -> ResidentCall | None:
        """Give the call to `spare`'s init; None (and the spare discarded) if it has gone,
        or is going: its zygote died (it dies with it)."""
        try:
            launcher = await spare.ready()
            process = self._process
            if (
                launcher is not None
                and process is not None
                and process.poll() is None
                and not has_ended(launcher.pidfd)
                and not has_ended(launcher.init_pidfd)
            ):
                ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
                spare.call.sendmsg([b"{}"], ancillary, socket.MSG_NOSIGNAL)
                spare.call.close()
                return launcher
        except OSError:
            pass
        except BaseException:
            spare.discard(scratch=False)  # the caller's now
            raise
        spare.discard(scratch=False)
        return None

    async def prepare_spare(self, max_processes: int, max_memory: int) -> None:
        """Ask the running zygote for a spare for the next call, if none is waiting
        (`max_processes` and `max_memory` limit its cgroups until a call adopts them).

        Under the lock, and published only once asked for. Meant for just after a call
        has started: its scratch is made while that call runs.
        """
        async with self._locked():
            control = self._control
            if self._spare is not None or self._closed or control is None:
                return
            scratch = Scratch(max_processes, max_memory).make()
            reply, reply_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            call, call_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            spare = Spare(scratch, reply, call)
            cgroups = {"cgroup": scratch.cgroup, "memory_cgroup": scratch.memory_cgroup}
            header = json.dumps({"spare": cgroups}).encode()
            try:
                reply.setblocking(False)
                await send(control, header, [reply_theirs.fileno(), call_theirs.fileno()])
            except OSError:  # it died: the next call starts a new one
                spare.discard()
                return
            except BaseException:
                spare.discard()
                raise
            finally:
                reply_theirs.close()
                call_theirs.close()
            self._spare = spare

    async def _ask(self, header: bytes, fds: list[int]) -> None:
        """Send one request, starting (or restarting once) the zygote if need be."""
        async with self._locked():
            for attempt in (1, 2):
                control = await self._running()
                try:
                    await send(control, header, fds)
                    return
                except OSError as exc:
                    if exc.errno not in _GONE or attempt == 2:
                        raise ZygoteError(f"cannot reach it: {exc.strerror or exc}") from exc
                    self._discard(control)  # it died since it was last asked: anew

    def _locked(self) -> asyncio.Lock:
        """The lock over the control socket (made in, and bound to, the first caller's
        event loop)."""
        if self._lock is None:
            self._loop = asyncio.get_running_loop()
            self._lock = asyncio.Lock()
        return self._lock

    async def _running(self) -> socket.socket:
        """The control socket of a live zygote, started (or restarted) here if need be."""
        if self._closed:
            raise ZygoteError("the run that started it has ended")
        process = self._process
        if self._control is not None and process is not None and process.poll() is None:
            return self._control
        self._discard(self._control)
        self._control = await self._start()
        return self._control

    async def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            process = _spawn(theirs.fileno())
        except OSError as exc:
            ours.close()
            raise ZygoteError(f"cannot start {_PYTHON}: {exc.strerror or exc}") from exc
        finally:
            theirs.close()
        self._process = process
        self.starts += 1
        ours.setblocking(False)
        try:
            async with asyncio.timeout(_START_TIMEOUT):
                message, fds = await receive(ours)
        except TimeoutError:
            message, fds = {}, []
        except BaseException:
            ours.close()
            raise
        close_all(fds)
        stderr = process.stderr
        process.stderr = None
        if "ready" not in message:
            ours.close()
            process.kill()
            process.wait()
            why = b""
            if stderr is not None:
                with stderr:
                    why = stderr.read(_STDERR_LIMIT * 4)[-_STDERR_LIMIT:]
            raise ZygoteError(
                f"it did not start (exit {process.returncode}): "
                f"{why.decode(errors='replace').strip() or 'no message'}"
            )
        if stderr is not None:
            stderr.close()
        return ours

    def _discard(self, control: socket.socket | None) -> None:
        """Forget the zygote behind `control`, found dead: reap it, close its socket, and
        drop its spare (which died with it). A no-op if another call has replaced it."""
        if control is not self._control:
            return
        if control is not None:
            control.close()
        self._control = None
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()  # dead or SIGKILLed: at once
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.discard()

    def retire(self, scratch: Scratch, call: ResidentCall) -> None:
        """Remove `scratch` once the call's launcher has exited (it is in the cgroup until
        then, a moment after the init): when its pidfd says so, not on the call's path."""
        loop = asyncio.get_running_loop()
        watched = os.dup(call.pidfd)

        def retired() -> None:
            loop.remove_reader(watched)
            os.close(watched)
            self._retiring.pop(watched, None)
            scratch.remove()

        self._retiring[watched] = scratch
        loop.add_reader(watched, retired)

    async def aclose(self) -> None:
        """Stop the zygote (closing its control socket ends it, and its spare and any
        call's launcher with it), reap it, and remove what calls left to remove."""
        self._closed = True
        process, control = self._process, self._control
        self._process = self._control = None
        if control is not None:
            control.close()
        spare, self._spare = self._spare, None
        if spare is not None and spare.launcher is not None:
            spare.launcher.kill()
            self.retire(spare.scratch, spare.launcher)  # removed once it has gone
            spare.discard(scratch=False)
            spare = None
        if process is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_STOP_TIMEOUT):
                    await exited(process.pid)
            process.kill()  # a no-op once it has exited (it is reaped only below)
            process.wait()
        if spare is not None:  # never said it had started: it died with the zygote
            spare.discard()
        loop = asyncio.get_running_loop()
        retiring, self._retiring = self._retiring, {}
        for watched in retiring:
            loop.remove_reader(watched)  # waited for here instead
        for watched, scratch in retiring.items():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_STOP_TIMEOUT):
                    await readable(watched)
            os.close(watched)
            scratch.remove()


def _spawn(control_fd: int) -> subprocess.Popen[bytes]:
    """Start a zygote. Synchronously, from the event loop's thread (a few milliseconds,
    once a run): its parent-death signal follows the thread that forks it, and that thread
    lives as long as the run."""
    return subprocess.Popen(
        [_PYTHON, "-I", "-S", _ZYGOTE, str(control_fd), str(os.getpid())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        pass_fds=(control_fd,),
        cwd="/",
        env={"LANG": "C.UTF-8"},
        start_new_session=True,
    )
