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
import select
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from capabilities._shell_scratch import Scratch

__all__ = ["ResidentCall", "Spare", "Zygote", "ZygoteError", "ZygoteLost"]

_ZYGOTE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_zygote.py")
_PYTHON = os.path.realpath(sys.executable)
_START_TIMEOUT = 30.0  # seconds for a new zygote to say it is ready (a loaded machine)
_STOP_TIMEOUT = 2.0  # seconds for it, and the launchers of calls, to exit at the end
_MESSAGE_LIMIT = 4096
_STDERR_LIMIT = 4096  # bytes of a failed zygote's stderr kept for the error message
# pidfd_send_signal(2) flag (Linux 6.9): signal the process group the pidfd's process
# leads, even once that process has been reaped (the group is named by the pidfd's pid).
_PIDFD_SIGNAL_PROCESS_GROUP = 1 << 2
# A send to a zygote that has died fails with one of these: start a new one and retry.
_GONE = (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ECONNREFUSED, errno.EBADF)


class ZygoteError(Exception):
    """The resident launcher could not be started or asked; the message says why."""


class ZygoteLost(Exception):
    """The resident launcher ended while a call it had started was still running."""


@dataclass
class ResidentCall:
    """One call started by the zygote: its launcher process and the sandbox's init.

    `pidfd` is the launcher's (the zygote's child, leading the call's process group);
    `init_pidfd` the init's once known (-1 while not, or without a PID namespace, where
    the launcher is the init). `reply` carries the messages about it: the init's pidfd
    from the launcher, the launcher's exit code from the zygote.
    """

    pid: int
    pidfd: int
    reply: socket.socket
    init_pidfd: int = -1
    init_known: bool = False
    returncode: int | None = None
    ended: bool = False
    _closed: bool = field(default=False, repr=False)

    def over(self) -> None:
        """The call is over without waiting for its init's end: it said it was alone in its
        PID namespace and has let go of the call's pipes (`_launcher._alone`)."""
        self.ended = True

    async def wait(self) -> None:
        """Until the call's init has ended (or its launcher, when there is no init): then
        the kernel has killed everything left in its PID namespace."""
        if self.ended:
            return
        while not self.init_known:
            self._take(*await _receive(self.reply))
        await _readable(self.init_pidfd if self.init_pidfd >= 0 else self.pidfd)
        self.ended = True

    async def exit_code(self) -> int:
        """The launcher's exit code, once the zygote has reaped it.

        Raises:
            ZygoteLost: the zygote ended before it could say (the launcher died with it).
        """
        while self.returncode is None:
            message, fds = await _receive(self.reply)
            if not message:
                raise ZygoteLost("the resident sandbox launcher ended during the call")
            self._take(message, fds)
        return self.returncode

    def _take(self, message: dict[str, Any], fds: list[int]) -> None:
        """One message from `reply`: the init's pidfd, or the launcher's exit code (then
        there will be no init: it ended before)."""
        if "init" in message and not self.init_known:
            self.init_known = True
            if fds:
                self.init_pidfd = fds.pop(0)
        elif "exit" in message:
            self.returncode = int(message["exit"])
            self.init_known = True
        elif not message:  # the zygote has gone, and the launcher with it
            self.init_known = True
        _close_all(fds)

    def kill(self) -> None:
        """SIGKILL the sandbox's init (the kernel then kills its PID namespace) and the
        launcher's process group, through their pidfds: never a recycled pid."""
        if self._closed:
            return
        if self.init_pidfd >= 0:
            with contextlib.suppress(OSError):  # ESRCH: it has ended
                signal.pidfd_send_signal(self.init_pidfd, signal.SIGKILL)
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL, None, _PIDFD_SIGNAL_PROCESS_GROUP)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # ESRCH: the group is already empty
                return
            # A kernel before 6.9: the launcher alone; its init follows (parent-death
            # signal), and the kernel then empties the PID namespace.
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self.pidfd)
            if self.init_pidfd >= 0:
                os.close(self.init_pidfd)
            self.reply.close()


@dataclass
class Spare:
    """A spare the zygote was asked for: it waits, with its namespaces, init and mounts
    made, in the cgroup of `scratch` (made for the call that will adopt it).

    `reply` brings its pid and pidfd (from the zygote) and its init's (from the spare);
    `call` takes the call's descriptors to the init.
    """

    scratch: Scratch
    reply: socket.socket
    call: socket.socket
    launcher: ResidentCall | None = None

    async def ready(self) -> ResidentCall | None:
        """Its handle once the zygote and the spare have said they are there (None if the
        zygote refused or the spare has already ended)."""
        if self.launcher is None:
            try:
                self.launcher = await _started(self.reply)
            except (ZygoteError, ZygoteLost):
                return None
        while not self.launcher.init_known:
            self.launcher._take(*await _receive(self.reply))
        return None if self.launcher.returncode is not None else self.launcher

    def discard(self, *, scratch: bool = True) -> None:
        """Kill it (if it was started): no call will use it; and remove its scratch,
        unless a call has adopted that."""
        self.call.close()
        if self.launcher is not None:
            self.launcher.kill()
            self.launcher.close()
        else:
            self.reply.close()
        if scratch:
            self.scratch.remove()


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
            return await _started(ours)
        except BaseException:
            theirs.close()
            _abandon(ours)
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
                and not _has_ended(launcher.pidfd)
                and not _has_ended(launcher.init_pidfd)
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

    async def prepare_spare(self, max_processes: int) -> None:
        """Ask the running zygote for a spare for the next call, if none is waiting
        (`max_processes` limits its cgroup until a call adopts it).

        Under the lock, and published only once asked for. Meant for just after a call
        has started: its scratch is made while that call runs.
        """
        async with self._locked():
            control = self._control
            if self._spare is not None or self._closed or control is None:
                return
            scratch = Scratch(max_processes).make()
            reply, reply_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            call, call_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            spare = Spare(scratch, reply, call)
            header = json.dumps({"spare": {"cgroup": scratch.cgroup}}).encode()
            try:
                reply.setblocking(False)
                await _send(control, header, [reply_theirs.fileno(), call_theirs.fileno()])
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
                    await _send(control, header, fds)
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
                message, fds = await _receive(ours)
        except TimeoutError:
            message, fds = {}, []
        except BaseException:
            ours.close()
            raise
        _close_all(fds)
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
                    await _exited(process.pid)
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
                    await _readable(watched)
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


def _has_ended(pidfd: int) -> bool:
    """Whether the process behind `pidfd` (-1: none) has exited, without waiting."""
    if pidfd < 0:
        return False
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


async def _exited(pid: int) -> None:
    """Until the child `pid` (not yet reaped) has exited: its pidfd becomes readable."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        await _readable(pidfd)
    finally:
        os.close(pidfd)


async def _readable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def _writable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(fd, wake)
    try:
        await ready
    finally:
        loop.remove_writer(fd)


async def _send(sock: socket.socket, header: bytes, fds: list[int]) -> None:
    """One request (`header` with `fds`) on the non-blocking control socket."""
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
    while True:
        try:
            sock.sendmsg([header], ancillary, socket.MSG_NOSIGNAL)
            return
        except BlockingIOError:
            await _writable(sock.fileno())


async def _receive(sock: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One message (a JSON object) and the descriptors it carries; `{}` at end of file."""
    while True:
        try:
            data, ancdata, _flags, _ = sock.recvmsg(
                _MESSAGE_LIMIT, socket.CMSG_SPACE(4), socket.MSG_CMSG_CLOEXEC
            )
            break
        except BlockingIOError:
            await _readable(sock.fileno())
    fds = array.array("i")
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    try:
        message = json.loads(data) if data else {}
    except ValueError:
        message = {}
    return (message if isinstance(message, dict) else {}), list(fds)


async def _started(reply: socket.socket) -> ResidentCall:
    """The handle of the child the zygote forked, from its messages on `reply`: the
    zygote's `{"pid"}` (with the child's pidfd); the child's `{"init"}` (with the init's
    pidfd) may come before it, as the two are written by different processes.

    Raises:
        ZygoteError: the zygote could not fork it.
        ZygoteLost: the zygote ended before it said.
    """
    early: list[tuple[dict[str, Any], list[int]]] = []
    while True:
        message, fds = await _receive(reply)
        if "pid" in message and len(fds) == 1:
            call = ResidentCall(int(message["pid"]), fds[0], reply)
            for taken in early:
                call._take(*taken)
            return call
        if "init" in message:
            early.append((message, fds))
            continue
        _close_all(fds)
        for _message, held in early:
            _close_all(held)
        reply.close()
        if "error" in message:
            raise ZygoteError(f"it could not start the call: {message['error']}")
        raise ZygoteLost("the resident sandbox launcher ended before starting the call")


def _abandon(reply: socket.socket) -> None:
    """Close the reply socket of a call given up before its start was seen, killing the
    call's child if the zygote has already said it started it (once the socket is closed,
    the zygote's own reply fails, and it kills the child itself)."""
    with contextlib.suppress(OSError):
        _data, ancdata, _flags, _ = reply.recvmsg(
            _MESSAGE_LIMIT, socket.CMSG_SPACE(4), socket.MSG_CMSG_CLOEXEC | socket.MSG_DONTWAIT
        )
        fds = array.array("i")
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        for fd in fds:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL, None, _PIDFD_SIGNAL_PROCESS_GROUP)
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            os.close(fd)
    reply.close()


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
