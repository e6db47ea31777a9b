"""The handles of what the zygote starts: one call (`ResidentCall`) and a spare (`Spare`).

`ResidentCall` is one call's handle: its launcher's pid and pidfd, and the pidfd of the
sandbox's init. The call has ended when the init has (the kernel has then emptied its PID
namespace); the kill is aimed through the pidfds (the init, and the launcher's process
group), so a recycled pid is never hit.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
from dataclasses import dataclass, field
from typing import Any

from capabilities.confine._wire import (
    PIDFD_SIGNAL_PROCESS_GROUP,
    close_all,
    readable,
    receive,
)
from capabilities.confine.scratch import Scratch

__all__ = ["ResidentCall", "Spare", "ZygoteError", "ZygoteLost", "started_call"]


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
            self._take(*await receive(self.reply))
        await readable(self.init_pidfd if self.init_pidfd >= 0 else self.pidfd)
        self.ended = True

    async def exit_code(self) -> int:
        """The launcher's exit code, once the zygote has reaped it.

        Raises:
            ZygoteLost: the zygote ended before it could say (the launcher died with it).
        """
        while self.returncode is None:
            message, fds = await receive(self.reply)
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
        close_all(fds)

    def kill(self) -> None:
        """SIGKILL the sandbox's init (the kernel then kills its PID namespace) and the
        launcher's process group, through their pidfds: never a recycled pid."""
        if self._closed:
            return
        if self.init_pidfd >= 0:
            with contextlib.suppress(OSError):  # ESRCH: it has ended
                signal.pidfd_send_signal(self.init_pidfd, signal.SIGKILL)
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL, None, PIDFD_SIGNAL_PROCESS_GROUP)
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
                self.launcher = await started_call(self.reply)
            except (ZygoteError, ZygoteLost):
                return None
        while not self.launcher.init_known:
            self.launcher._take(*await receive(self.reply))
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


async def started_call(reply: socket.socket) -> ResidentCall:
    """The handle of the child the zygote forked, from its messages on `reply`: the
    zygote's `{"pid"}` (with the child's pidfd); the child's `{"init"}` (with the init's
    pidfd) may come before it, as the two are written by different processes.

    Raises:
        ZygoteError: the zygote could not fork it.
        ZygoteLost: the zygote ended before it said.
    """
    early: list[tuple[dict[str, Any], list[int]]] = []
    while True:
        message, fds = await receive(reply)
        if "pid" in message and len(fds) == 1:
            call = ResidentCall(int(message["pid"]), fds[0], reply)
            for taken in early:
                call._take(*taken)
            return call
        if "init" in message:
            early.append((message, fds))
            continue
        close_all(fds)
        for _message, held in early:
            close_all(held)
        reply.close()
        if "error" in message:
            raise ZygoteError(f"it could not start the call: {message['error']}")
        raise ZygoteLost("the resident sandbox launcher ended before starting the call")
