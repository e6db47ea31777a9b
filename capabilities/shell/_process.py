"""Running the launcher for a `shell.run` call: output captured and capped, nothing left.

Within a run, the run's resident launcher (`capabilities/confine/_zygote.py`, through
`capabilities.confine.zygote.Zygote`) starts the call: a spare it prepared takes it, or a
child it forks for it. Otherwise (a call made outside a run, e.g. an action called
directly, or from another event loop) a fresh `python -I -S confine/_launcher.py` does.
All set up the same layers with the same code.

stdin is `/dev/null` (ATTACKS B20); each output stream is capped (B11); on timeout,
cancellation or once the program exits, the launcher's process group and the PID
namespace's init are killed, whose end makes the kernel kill every process left in the
namespace, `setsid` and double-forked ones included (B12-B15). The end is waited for, never
polled: the one-shot launcher is our child; a resident call's end is its init's (a pidfd,
readable once the kernel has emptied the namespace), or sooner, the init's word that it
was alone in the namespace once the program ended (then it has closed the pipes).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import math
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from capabilities.confine.launch import (
    STATUS_LIMIT,
    config_memfd,
    launcher_command,
    parse_status,
)
from capabilities.confine.scratch import Scratch
from capabilities.confine.zygote import ResidentCall, Spare, Zygote, ZygoteError, ZygoteLost
from capabilities.shell._launch import Outcome
from capabilities.shell._models import ACTION
from engine.capability import CallContext
from engine.errors import StepFailed, StepTimeout

__all__ = ["launch"]

_EXIT_GRACE = 0.1  # seconds the pipes may stay open after the main child exits
_DRAIN_GRACE = 1.0  # seconds to collect what is left in the pipes once the group is killed
_REAP_TIMEOUT = 5.0  # seconds to wait for a SIGKILLed child to be reaped
_END = frozenset({"exit", "signal", "setup_error", "exec_error"})  # status messages that end


class _Launcher(Protocol):
    """The launcher process of a call, however it was started."""

    @property
    def returncode(self) -> int | None:
        """Its exit code, if known yet."""

    @property
    def ended(self) -> bool:
        """Whether it has exited."""

    async def wait(self) -> None:
        """Until it has exited."""

    def kill(self) -> None:
        """SIGKILL its process group."""


class _OneShot:
    """A one-shot launcher: our child, leading a process group of its own."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    @property
    def ended(self) -> bool:
        return self._process.returncode is not None

    async def wait(self) -> None:
        await self._process.wait()

    def kill(self) -> None:
        # The group may already be empty (ESRCH); nothing else can fail for our own child.
        with contextlib.suppress(OSError):
            os.killpg(self._process.pid, signal.SIGKILL)


async def launch(
    argv: list[str],
    config: dict[str, Any],
    workdir: str,
    env: dict[str, str],
    max_output: int,
    name: str,
    ctx: CallContext,
    resident: tuple[Zygote, Spare | None, Scratch] | None = None,
) -> Outcome:
    """Run `argv` under the launcher `config` describes; what it printed and how it ended.

    With `resident` (the run's resident launcher, a spare of its, and the call's
    scratch), the call goes to the spare if there is one (it waits in the scratch's
    cgroup), else to a child the zygote forks; the scratch is then handed over to the
    zygote if the launcher may still be in its cgroup when the call is over.

    Raises:
        StepFailed: the launcher could not be started (or the zygote ended mid-call).
        StepTimeout: the program ran past `ctx.timeout`; its process tree is killed.
    """
    if resident is not None:
        call = {**config, "argv": argv, "env": env, "cwd": workdir}
        return await _launch_resident(*resident, call, max_output, name, ctx)
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
    return await _supervise(_OneShot(proc), (out_r, err_r, status_r), name, max_output, ctx)


async def _launch_resident(
    zygote: Zygote,
    spare: Spare | None,
    scratch: Scratch,
    config: dict[str, Any],
    max_output: int,
    name: str,
    ctx: CallContext,
) -> Outcome:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    status_r, status_w = os.pipe()
    ours = [out_w, err_w, status_w]
    started = False
    try:
        ours.append(config_memfd(config))
        ours.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        call = await zygote.call([ours[3], status_w, ours[4], out_w, err_w], spare)
        started = True
    except (OSError, ZygoteError, ZygoteLost) as exc:
        why = exc.strerror or exc if isinstance(exc, OSError) else exc
        raise StepFailed(
            f"{ACTION}: cannot start the sandbox for {name!r} through the run's resident "
            f"launcher: {why}",
            step_id=ctx.step_id,
        ) from exc
    finally:
        for fd in ours:
            os.close(fd)
        if not started:
            for fd in (out_r, err_r, status_r):
                os.close(fd)
            if spare is not None:  # not given the call: nobody else will let it go
                spare.discard(scratch=False)
    # While the call runs: a spare for the next one, for calls without network (its
    # cgroups get this call's limits until a call adopts them).
    spare_limits = int(config["rlimits"]["nproc"]), int(config["rlimits"]["as"])

    async def prepare() -> None:
        if not config["network"]:
            await zygote.prepare_spare(*spare_limits)

    try:
        outcome = await _supervise(call, (out_r, err_r, status_r), name, max_output, ctx, prepare)
        if not any(_END.intersection(message) for message in outcome.messages):
            # The status pipe did not say how the program ended: the launcher's own exit
            # code does (it was killed, or the zygote ended and took it along).
            try:
                outcome.exit_code = await asyncio.wait_for(call.exit_code(), _REAP_TIMEOUT)
            except (ZygoteLost, TimeoutError) as exc:
                raise StepFailed(
                    f"{ACTION}: the run's resident sandbox launcher ended while {name!r} "
                    "ran, so the call was stopped; the next call starts a new one",
                    step_id=ctx.step_id,
                ) from exc
    finally:
        if call.ended and call.init_pidfd >= 0:
            # The init has ended; its launcher leaves the cgroup a moment later.
            zygote.retire(scratch, call)
            scratch.hand_over()
        call.close()
    return outcome


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
    proc: _Launcher,
    fds: tuple[int, int, int],
    name: str,
    max_output: int,
    ctx: CallContext,
    meanwhile: Callable[[], Awaitable[None]] | None = None,
) -> Outcome:
    """Collect output under the timeout; whatever happens, leave no process of the group.

    `meanwhile` is awaited once the output is being collected, before the wait.

    Owns `fds` (the read ends of stdout, stderr and the launcher's status pipe) and closes
    them. Killing the launcher's group also kills the sandbox's init (it stays in the
    group), and the kernel then kills everything left in the PID namespace.

    Raises:
        StepTimeout: past `ctx.timeout`.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ctx.timeout if math.isfinite(ctx.timeout) else None
    out, err = (_Capture(max_output, proc.kill) for _ in range(2))
    status = _Capture(STATUS_LIMIT, lambda: None)
    captures = (out, err, status)
    # Opening an existing descriptor does not block; from here the file objects own them.
    pipes = [io.FileIO(fd, "rb") for fd in fds]
    transports: list[asyncio.ReadTransport] = []
    try:
        for pipe, capture in zip(pipes, captures, strict=True):
            transports.append(await _connect(pipe, capture))
        if meanwhile is not None:
            await meanwhile()
        try:
            async with asyncio.timeout_at(deadline):
                alone = await _end(proc, status) if isinstance(proc, ResidentCall) else False
                if not alone:
                    await proc.wait()
        except TimeoutError:
            proc.kill()
            raise StepTimeout(
                f"{ACTION}: {name!r} timed out after {float(ctx.timeout)!r} s",
                step_id=ctx.step_id,
            ) from None
        if alone:  # nothing left to kill, and the pipes are closed
            await asyncio.wait([capture.closed for capture in captures], timeout=_DRAIN_GRACE)
            return _outcome(proc, out, err, status)
        # Without a PID namespace, descendants may hold the pipes open (`sleep 600 &`):
        # allow a short grace for late writes, then end the group and collect what is
        # already in the pipes.
        closed = [capture.closed for capture in captures]
        await asyncio.wait(closed, timeout=_EXIT_GRACE)
        proc.kill()
        await asyncio.wait(closed, timeout=_DRAIN_GRACE)
    finally:
        if not proc.ended:
            proc.kill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), _REAP_TIMEOUT)
        for transport in transports:
            transport.close()
        for pipe in pipes:
            pipe.close()  # a no-op for those a transport has closed

    return _outcome(proc, out, err, status)


async def _end(call: ResidentCall, status: _Capture) -> bool:
    """Until the call's init has ended, or said it was alone in its PID namespace and closed
    the status pipe (then the call is over: `over()`); whether it said so."""
    ended = asyncio.ensure_future(call.wait())
    try:
        await asyncio.wait([ended, status.closed], return_when=asyncio.FIRST_COMPLETED)
        if not ended.done() and any(m.get("alone") for m in parse_status(bytes(status.data))):
            call.over()
            return True
        await ended
        return False
    finally:
        ended.cancel()


def _outcome(proc: _Launcher, out: _Capture, err: _Capture, status: _Capture) -> Outcome:
    code = proc.returncode
    return Outcome(
        exit_code=code if code is not None else -signal.SIGKILL,
        stdout=out.text(),
        stderr=err.text(),
        truncated=out.truncated or err.truncated,
        messages=parse_status(bytes(status.data)),
    )
