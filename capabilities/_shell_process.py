"""Running the launcher for a `shell.run` call: output captured and capped, nothing left.

stdin is `/dev/null` (ATTACKS B20); each output stream is capped (B11); on timeout,
cancellation or once the program exits, the launcher's process group is killed and with it
the PID namespace's init, whose end makes the kernel kill every process left in the
namespace, `setsid` and double-forked ones included (B12-B15).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import math
import os
import signal
from collections.abc import Callable
from typing import Any

from capabilities._shell_launch import STATUS_LIMIT, Outcome, launcher_command, parse_status
from capabilities._shell_models import ACTION
from engine.capability import CallContext
from engine.errors import StepFailed, StepTimeout

__all__ = ["launch"]

_EXIT_GRACE = 0.1  # seconds the pipes may stay open after the main child exits
_DRAIN_GRACE = 1.0  # seconds to collect what is left in the pipes once the group is killed
_REAP_TIMEOUT = 5.0  # seconds to wait for a SIGKILLed child to be reaped


async def launch(
    argv: list[str],
    config: dict[str, Any],
    workdir: str,
    env: dict[str, str],
    max_output: int,
    name: str,
    ctx: CallContext,
) -> Outcome:
    # Our own pipes rather than asyncio's PIPE: with PIPE, Python 3.11's `Process.wait()`
    # also waits for EOF, which a backgrounded descendant can hold off forever.
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    status_r, status_w = os.pipe()
    started = False
    config_fd = -1
    try:
        command, config_fd = launcher_command(config, status_w, argv)
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out_w,
            stderr=err_w,
            pass_fds=(status_w, config_fd),
            cwd=workdir,
            env=env,
            start_new_session=True,
        )
        started = True
    except OSError as exc:
        raise StepFailed(
            f"{ACTION}: cannot start the sandbox launcher for {name!r}: {exc.strerror or exc}",
            step_id=ctx.step_id,
        ) from exc
    finally:
        for fd in (out_w, err_w, status_w, config_fd):
            if fd >= 0:
                os.close(fd)
        if not started:
            for fd in (out_r, err_r, status_r):
                os.close(fd)
    return await _supervise(proc, (out_r, err_r, status_r), name, max_output, ctx)


def _kill_group(pgid: int) -> None:
    # The group may already be empty (ESRCH); nothing else can fail for our own child.
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)


class _Capture(asyncio.Protocol):
    """Collects one output pipe, keeping at most `limit` bytes and discarding the rest."""

    def __init__(self, limit: int, overflow: Callable[[], None]) -> None:
        self.data = bytearray()
        self.truncated = False
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._limit = limit
        self._overflow = overflow

    def data_received(self, data: bytes) -> None:
        room = self._limit - len(self.data)
        if len(data) <= room:
            self.data += data
            return
        self.data += data[:room]
        if not self.truncated:
            self.truncated = True
            self._overflow()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


async def _connect(pipe: io.FileIO, capture: _Capture) -> asyncio.ReadTransport:
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(lambda: capture, pipe)
    return transport


async def _supervise(
    proc: asyncio.subprocess.Process,
    fds: tuple[int, int, int],
    name: str,
    max_output: int,
    ctx: CallContext,
) -> Outcome:
    """Collect output under the timeout; whatever happens, leave no process of the group.

    Owns `fds` (the read ends of stdout, stderr and the launcher's status pipe) and closes
    them. Killing the launcher's group also kills the sandbox's init (it stays in the
    group), and the kernel then kills everything left in the PID namespace.
    """
    pgid = proc.pid  # start_new_session: the launcher leads a group with its own pid
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ctx.timeout if math.isfinite(ctx.timeout) else None
    out, err = (_Capture(max_output, lambda: _kill_group(pgid)) for _ in range(2))
    status = _Capture(STATUS_LIMIT, lambda: None)
    captures = (out, err, status)
    # Opening an existing descriptor does not block; from here the file objects own them.
    pipes = [io.FileIO(fd, "rb") for fd in fds]
    transports: list[asyncio.ReadTransport] = []
    try:
        for pipe, capture in zip(pipes, captures, strict=True):
            transports.append(await _connect(pipe, capture))
        try:
            async with asyncio.timeout_at(deadline):
                await proc.wait()
        except TimeoutError:
            _kill_group(pgid)
            raise StepTimeout(
                f"{ACTION}: {name!r} timed out after {float(ctx.timeout)!r} s",
                step_id=ctx.step_id,
            ) from None
        # Without a PID namespace, descendants may hold the pipes open (`sleep 600 &`):
        # allow a short grace for late writes, then end the group and collect what is
        # already in the pipes.
        closed = [capture.closed for capture in captures]
        await asyncio.wait(closed, timeout=_EXIT_GRACE)
        _kill_group(pgid)
        await asyncio.wait(closed, timeout=_DRAIN_GRACE)
    finally:
        if proc.returncode is None:
            _kill_group(pgid)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), _REAP_TIMEOUT)
        for transport in transports:
            transport.close()
        for pipe in pipes:
            pipe.close()  # a no-op for those a transport has closed

    code = proc.returncode
    return Outcome(
        exit_code=code if code is not None else -signal.SIGKILL,
        stdout=out.text(),
        stderr=err.text(),
        truncated=out.truncated or err.truncated,
        messages=parse_status(bytes(status.data)),
    )
