"""The zygote client's wire: messages with descriptors on its sockets, and waiting on fds.

Messages are JSON objects on `SOCK_SEQPACKET` sockets, descriptors travel with them as
`SCM_RIGHTS`; waits are the event loop's readers and writers (a pidfd becomes readable when
its process ends).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import json
import os
import select
import signal
import socket
from typing import Any

__all__ = [
    "MESSAGE_LIMIT",
    "PIDFD_SIGNAL_PROCESS_GROUP",
    "abandon",
    "close_all",
    "exited",
    "has_ended",
    "readable",
    "receive",
    "send",
    "writable",
]

MESSAGE_LIMIT = 4096
# pidfd_send_signal(2) flag (Linux 6.9): signal the process group the pidfd's process
# leads, even once that process has been reaped (the group is named by the pidfd's pid).
PIDFD_SIGNAL_PROCESS_GROUP = 1 << 2


def has_ended(pidfd: int) -> bool:
    """Whether the process behind `pidfd` (-1: none) has exited, without waiting."""
    if pidfd < 0:
        return False
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


async def exited(pid: int) -> None:
    """Until the child `pid` (not yet reaped) has exited: its pidfd becomes readable."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        await readable(pidfd)
    finally:
        os.close(pidfd)


async def readable(fd: int) -> None:
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


async def writable(fd: int) -> None:
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


async def send(sock: socket.socket, header: bytes, fds: list[int]) -> None:
    """One request (`header` with `fds`) on the non-blocking control socket."""
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
    while True:
        try:
            sock.sendmsg([header], ancillary, socket.MSG_NOSIGNAL)
            return
        except BlockingIOError:
            await writable(sock.fileno())


async def receive(sock: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One message (a JSON object) and the descriptors it carries; `{}` at end of file."""
    while True:
        try:
            data, ancdata, _flags, _ = sock.recvmsg(
                MESSAGE_LIMIT, socket.CMSG_SPACE(4), socket.MSG_CMSG_CLOEXEC
            )
            break
        except BlockingIOError:
            await readable(sock.fileno())
    fds = array.array("i")
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    try:
        message = json.loads(data) if data else {}
    except ValueError:
        message = {}
    return (message if isinstance(message, dict) else {}), list(fds)


def abandon(reply: socket.socket) -> None:
    """Close the reply socket of a call given up before its start was seen, killing the
    call's child if the zygote has already said it started it (once the socket is closed,
    the zygote's own reply fails, and it kills the child itself)."""
    with contextlib.suppress(OSError):
        _data, ancdata, _flags, _ = reply.recvmsg(
            MESSAGE_LIMIT, socket.CMSG_SPACE(4), socket.MSG_CMSG_CLOEXEC | socket.MSG_DONTWAIT
        )
        fds = array.array("i")
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        for fd in fds:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL, None, PIDFD_SIGNAL_PROCESS_GROUP)
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            os.close(fd)
    reply.close()


def close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
