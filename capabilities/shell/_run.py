"""One `shell.run` call from its checked argv to its result, and the run's resident launcher.

The call's protected entries are watched around it (`_guard_protected`), its scratch made
(or a spare's adopted), its launcher config made and the program launched; a failure to
set up or to execute, a non-zero exit or a cut output (with `check`) fail the step.
"""

from __future__ import annotations

import contextlib
import functools
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from capabilities.confine.scratch import Scratch
from capabilities.protected import Scan, Watch
from capabilities.shell._admit import prepared, shell_grant
from capabilities.shell._launch import launcher_config
from capabilities.shell._models import ACTION, ShellParams, ShellResult
from engine.capability import CallContext
from engine.errors import CapabilityDenied, StepFailed

if TYPE_CHECKING:
    from capabilities.confine.zygote import Zygote

__all__ = ["run", "scope"]

_STDERR_TAIL_LINES = 20


async def run(params: ShellParams, ctx: CallContext) -> ShellResult:
    """Run `params.argv` under the `shell` grant in `ctx`.

    Raises:
        CapabilityDenied: the program, folder, arguments or environment are not allowed
            (rules `shell.not-allowed`, `shell.cwd`, `shell.argument`, `shell.output-path`,
            `shell.option-from-data`, `shell.env`), or the program wrote a protected
            path the grant does not open (`shell.protected`).
        StepTimeout: the command ran past `ctx.timeout` seconds; every process it started
            is killed.
        StepFailed: the program could not be started or the sandbox could not be set up,
            the kernel killed it for going over `max_memory`, or, with `check`, it exited
            non-zero or its output passed `max_output`.
    """
    from capabilities.shell._process import launch  # a call's, not every command's

    grant = shell_grant(ctx)
    root, workdir, argv, env = prepared(params, ctx)
    program = argv[0]
    name = params.argv[0]

    who = f"{ACTION}: {name!r}"
    zygote = _zygote(ctx)
    async with _guard_protected(root, grant.protected, who, ctx) as protected:
        # A spare (a process of the zygote's already in a cgroup and namespaces of its
        # own) serves only calls without network: its network namespace is empty.
        spare = zygote.take_spare() if zygote is not None and not grant.network else None
        made = Scratch(grant.max_processes, grant.max_memory) if spare is None else spare.scratch
        with made.limit(grant.max_processes, grant.max_memory) as scratch:
            env["TMPDIR"] = scratch.tmpdir
            config = launcher_config(grant, ctx, root, program, scratch, protected)
            resident = None if zygote is None else (zygote, spare, scratch)
            limit = grant.max_output
            outcome = await launch(argv, config, workdir, env, limit, name, ctx, resident)
            over_memory = scratch.went_over_memory()
            if not scratch.handed_over:
                await scratch.empty_cgroup()
    result = outcome.result(scratch)
    if outcome.setup_error is not None:
        raise StepFailed(
            f"{ACTION}: the sandbox for {name!r} could not be set up: {outcome.setup_error}",
            step_id=ctx.step_id,
        )
    if outcome.exec_error is not None:
        raise StepFailed(
            f"{ACTION}: cannot execute {name!r} ({program}): {outcome.exec_error}",
            step_id=ctx.step_id,
        )
    if params.check and result.truncated:
        raise StepFailed(_truncated_message(name, grant.max_output), step_id=ctx.step_id)
    if over_memory and result.exit_code != 0:
        # Whatever `check` says: the program did not end by itself, and its output is cut.
        raise StepFailed(_over_memory_message(name, result, grant.max_memory), step_id=ctx.step_id)
    if params.check and result.exit_code != 0:
        raise StepFailed(_failure_message(name, result), step_id=ctx.step_id)
    return result


@contextlib.asynccontextmanager
async def scope(grant: BaseModel, base_dir: Path) -> AsyncIterator[Zygote]:
    """The run's resident launcher: started by its first call, stopped when the run ends."""
    from capabilities.confine.zygote import Zygote  # a run's, not every command's

    zygote = Zygote()
    try:
        yield zygote
    finally:
        await zygote.aclose()


def _zygote(ctx: CallContext) -> Zygote | None:
    """The run's resident launcher, if this call has one it may use (a call from another
    event loop than the run's, or outside a run, starts a one-shot launcher instead)."""
    from capabilities.confine.zygote import Zygote

    zygote = ctx.scope
    return zygote if isinstance(zygote, Zygote) and zygote.usable() else None


@contextlib.asynccontextmanager
async def _guard_protected(
    root: str, allowed: list[str], who: str, ctx: CallContext
) -> AsyncIterator[Scan]:
    """Walk `root` for protected entries before the call; undo what the call did to them.

    Yields the walk (its entries are mounted read-only for the child). When the block ends,
    however it ends, protected entries that appeared are removed; if there were any, the
    call fails with `CapabilityDenied` (rule `shell.protected`), unless it is being
    cancelled, which goes on. A root too large or too deep for the walk to see entirely is
    refused before anything starts (fail closed), and so is a call after which it became so.
    """
    # asyncio is imported where it is used: `planloom validate` imports this module
    # without running it, and asyncio (with ssl, which loads OpenSSL) is much of its start-up.
    import asyncio

    watch = Watch(root, allowed)
    try:
        before = await asyncio.to_thread(watch.start)
    except BaseException:
        watch.abandon()
        raise
    if why := before.refusal():  # fail closed: what the walk did not see, no mount covers
        watch.abandon()
        raise CapabilityDenied(f"{who}: {why}", rule="shell.protected", step_id=ctx.step_id)
    finish = functools.partial(
        watch.finish, who=who, rule="shell.protected", grant="shell", step_id=ctx.step_id
    )
    try:
        yield before
    except Exception:
        finish()  # a refusal outranks the failure (a timeout, say) it chains to
        raise
    except BaseException:
        with contextlib.suppress(CapabilityDenied):
            finish()
        raise
    await asyncio.to_thread(finish)


def _truncated_message(name: str, limit: int) -> str:
    return (
        f"{ACTION}: the output of {name!r} passed max_output ({limit} bytes), so it was cut "
        "there and the program killed; raise `max_output` in the `shell` grant, narrow the "
        "output (fewer files, a filter such as `head -n 100`, a quieter option), or set "
        "`check: false` on the step to keep what was read (with `truncated: true`)"
    )


def _over_memory_message(name: str, result: ShellResult, max_memory: int) -> str:
    tail = result.stderr.rstrip("\n").splitlines()[-_STDERR_TAIL_LINES:]
    stderr = "\n".join(tail) if tail else "(no stderr output)"
    return (
        f"{ACTION}: {name!r} was killed: it went over max_memory ({max_memory >> 20} MiB), "
        "the memory its processes may use together; raise `max_memory` in the `shell` "
        f"grant or make the program use less; last lines of stderr:\n{stderr}"
    )


def _failure_message(name: str, result: ShellResult) -> str:
    code = result.exit_code
    if code < 0:
        try:
            how = f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    tail = result.stderr.rstrip("\n").splitlines()[-_STDERR_TAIL_LINES:]
    stderr = "\n".join(tail) if tail else "(no stderr output)"
    return f"{ACTION}: {name!r} {how}; last lines of stderr:\n{stderr}"
