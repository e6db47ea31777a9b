"""The `shell` family: run an allowed program with an argv list, never through a shell.

Each call is checked before anything runs:

* the program is resolved the way the kernel will see it (a name on a fixed safe PATH, or a
  path relative to the working folder) and judged by its *real* path, so `./rm` or a
  symlink `ls -> /bin/rm` counts as `/bin/rm` (ATTACKS B8). The resolved real path is what
  gets executed, and it is also the child's `argv[0]`, so the check and the exec agree even
  for multi-call binaries that change behaviour with their name;
* arguments whose recipe text began with a template (`CallContext.data_paths`) are never
  read as options: `--` is inserted before them for programs that accept it, and one that
  starts with `-` and is still unprotected is refused (B7);
* the arguments pass the program's rules in `_argrules`, from the table in `_programs` (no
  `find -exec`, `sed e`, `git -c`, `sqlite3 .shell`, wrappers such as `setarch` or
  interpreter code unless the grant lists the program in `unsafe_args`; output files held
  to the granted folder) (B2-B6); an interpreter whose command line the table knows may
  run a script file from inside the granted folder, since the confinement below holds what
  the script does, but never code from its arguments, standard input or a start-up file;
* the working folder must stay inside the grant's folder, checked on real paths;
* the child gets a scrubbed environment: a fixed PATH, `HOME` set to the working folder,
  a private `TMPDIR`, a UTF-8 locale and only the variables the grant names. Loader,
  interpreter and secret variables are refused even when a grant asks for them (B9).

The program is started by the code of `_launcher.py` (a `python -I -S` script), which puts
it in new user, PID, mount and network namespaces, a pids cgroup, `no_new_privs`, rlimits
(address space, file size, CPU, core) and Landlock (writes only beneath the granted folder,
reads only from system folders, the /etc files programs need and that folder, no TCP)
before `exec`. Layers the kernel does not offer are skipped and listed as unavailable in
`ShellResult.confinement` and in `confinement_report()`, never silently. Within a run, the
family's scope keeps a resident launcher (`_zygote.py`, started by the run's first call,
stopped when the run ends) that forks each call's launcher instead of starting an
interpreter per call, and prepares a spare for the next call without network (see
`_zygote.py` for what is shared and what is per call); a call from outside a run starts
the launcher as a script.

Protected paths (`.git` folders, `.env*` files; see `_protected`) beneath the granted
folder are bind-mounted read-only in the child's mount namespace, unless the grant's
`protected:` globs open them; protected entries that appear during the call (which no
mount could cover) are removed afterwards and the call fails (rule `shell.protected`).
The launcher (and the resident one) dies with the engine (`PR_SET_PDEATHSIG`), and with
it the PID namespace; pids cgroups of engines that died anyway are emptied and removed at
the next start.

While it runs, stdin is `/dev/null` (B20); each output stream is capped (B11); on
timeout, cancellation or once the program exits, the launcher's process group and the PID
namespace's init are killed, whose end makes the kernel kill every process left in the
namespace, `setsid` and double-forked ones included (B12-B15). Without a PID
namespace, the pids cgroup (when writable) is swept instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import os
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from capabilities import _protected
from capabilities._gitconfig import git_env
from capabilities._shell_env import child_env
from capabilities._shell_launch import STATUS_LIMIT, flatten, launcher_config, parse_status
from capabilities._shell_launch import launcher_command as _launcher_command
from capabilities._shell_models import ACTION, ShellGrant, ShellParams, ShellResult
from capabilities._shell_paths import (
    SAFE_PATH,
    grant_root,
    real_program,
    resolve_program,
    workdir_of,
)
from capabilities._shell_scratch import Scratch

# Tests read the pids cgroup base through this module, as `shell._pids_cgroup_base`.
from capabilities._shell_scratch import pids_cgroup_base as _pids_cgroup_base  # noqa: F401
from engine.capability import Action, CallContext, Family, Registry
from engine.errors import CapabilityDenied, StepFailed

if TYPE_CHECKING:
    from capabilities._zygote_client import Zygote

__all__ = ["ShellGrant", "ShellParams", "ShellResult", "confinement_report", "register", "run"]

_STDERR_TAIL_LINES = 20


def _facts(grant: ShellGrant) -> str:
    """`programs: wc, grep; argv is a list: [program, arg, ...]`."""
    programs = ", ".join(grant.allow) or "none"
    return f"programs {programs} only; argv is a list [program, arg, ...], no shell syntax"


def register(registry: Registry) -> None:
    """Add the `shell` family and its `shell.run` action to `registry`."""
    registry.add_family(
        Family(
            "shell",
            "run allowed programs with an argv list (no shell)",
            ShellGrant,
            confinement_report,
            scope=_scope,
            # Each call is a confined process tree: more at once than CPUs only queue up
            # (a recipe's `limits.per_family: {shell: N}` says otherwise).
            max_parallel=os.cpu_count() or 1,
            facts=_facts,
        )
    )
    registry.add(
        Action(
            ACTION,
            "Run an allowed program with arguments in the granted folder; returns its output.",
            ShellParams,
            run,
            result_model=ShellResult,
            side_effects=True,
            admit=admit,
            truncated_note="an output stream passed the grant's max_output, and the program "
            "was stopped there",
        )
    )


def admit(params: ShellParams, ctx: CallContext) -> None:
    """The grant's rules for a call: the folder, the program, its arguments and the
    environment, as `run` checks them. On a recipe's unrendered params (validation), what
    the recipe writes out: the program it names, and the folder and arguments of a call
    it writes out whole.

    Raises:
        CapabilityDenied: as `run` does, before it starts anything.
    """
    if ctx.unrendered:
        _admit_written(params, ctx)
    else:
        _prepared(params, ctx)


def _admit_written(params: ShellParams, ctx: CallContext) -> None:
    """The rules a recipe's own params can be held to before the run: the program it
    names in `argv[0]` against `allow`, and, when no template gives `cwd` or an argument,
    the folder and the arguments, as `run` checks them. What an earlier step may make
    (the folder, a program, a script) is not refused for not being there yet."""
    grant = _grant(ctx)
    root = os.path.realpath(os.path.join(ctx.base_dir, grant.cwd))
    if not os.path.isdir(root) or ctx.templated(("argv", 0)):
        return
    workdir = None  # known only at run time: templated, or not made yet
    if params.cwd is None or not ctx.templated(("cwd",)):
        try:
            workdir = workdir_of(root, params.cwd, ctx)
        except CapabilityDenied as exc:
            exc.param = ("cwd",)
            raise
        except StepFailed:
            pass
    program = _written_program(params.argv[0], root, workdir, grant, ctx)
    argv = params.argv
    if (
        program is None
        or workdir is None
        or any(ctx.templated(("argv", i)) for i in range(1, len(argv)))
    ):
        return
    _checked_argv(argv, program, root, workdir, grant, ctx)


def _written_program(
    name: str, root: str, workdir: str | None, grant: ShellGrant, ctx: CallContext
) -> str | None:
    """The real path of the allowed program `name`, or None when that is not known yet
    (a path relative to a folder known at run time, or a program an earlier step makes).

    Raises:
        CapabilityDenied: the program is certainly not allowed (rule `shell.not-allowed`).
    """
    if "/" in name and workdir is None:
        return None
    base = workdir if workdir is not None else root  # a bare name: the safe PATH
    allowed = [real_program(entry, root) for entry in grant.allow]
    real = real_program(name, base)
    if real is not None and real in allowed:
        return real
    if name in grant.allow or (real is None and None in allowed):
        return None  # maybe the allowed program an earlier step makes
    try:
        resolve_program(name, base, root, grant, ctx)  # the run's own refusal
    except CapabilityDenied as exc:
        exc.param = ("argv", 0)
        raise
    return None


def _grant(ctx: CallContext) -> ShellGrant:
    grant = ctx.grant
    return grant if isinstance(grant, ShellGrant) else ShellGrant.model_validate(grant.model_dump())


def _prepared(params: ShellParams, ctx: CallContext) -> tuple[str, str, list[str], dict[str, str]]:
    """The granted folder, the working folder, the argv to execute and its environment.

    Raises:
        CapabilityDenied: the grant does not allow the call.
        StepFailed: the granted folder is not there.
    """
    grant = _grant(ctx)
    root = grant_root(grant, ctx)
    workdir = workdir_of(root, params.cwd, ctx)
    program = resolve_program(params.argv[0], workdir, root, grant, ctx)
    argv = _checked_argv(params.argv, program, root, workdir, grant, ctx)
    env = child_env(grant, workdir, ctx)
    if os.path.basename(program) == "git":
        env.update(git_env(argv[1:], workdir, root, ctx.step_id))
    return root, workdir, argv, env


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
            or, with `check`, it exited non-zero or its output passed `max_output`.
    """
    from capabilities._shell_process import launch  # a call's, not every command's

    grant = _grant(ctx)
    root, workdir, argv, env = _prepared(params, ctx)
    program = argv[0]
    name = params.argv[0]

    who = f"{ACTION}: {name!r}"
    zygote = _zygote(ctx)
    async with _guard_protected(root, grant.protected, who, ctx) as protected:
        # A spare (a process of the zygote's already in a cgroup and namespaces of its
        # own) serves only calls without network: its network namespace is empty.
        spare = zygote.take_spare() if zygote is not None and not grant.network else None
        made = Scratch(grant.max_processes) if spare is None else spare.scratch
        with made.limit(grant.max_processes) as scratch:
            env["TMPDIR"] = scratch.tmpdir
            config = launcher_config(grant, ctx, root, program, scratch, protected)
            resident = None if zygote is None else (zygote, spare, scratch)
            limit = grant.max_output
            outcome = await launch(argv, config, workdir, env, limit, name, ctx, resident)
            if not scratch.handed_over:
                await scratch.empty_cgroup()
    result = outcome.result(scratch.cgroup_state)
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
    if params.check and result.exit_code != 0:
        raise StepFailed(_failure_message(name, result), step_id=ctx.step_id)
    return result


@contextlib.asynccontextmanager
async def _scope(grant: BaseModel, base_dir: Path) -> AsyncIterator[Zygote]:
    """The run's resident launcher: started by its first call, stopped when the run ends."""
    from capabilities._zygote_client import Zygote  # a run's, not every command's

    zygote = Zygote()
    try:
        yield zygote
    finally:
        await zygote.aclose()


def _zygote(ctx: CallContext) -> Zygote | None:
    """The run's resident launcher, if this call has one it may use (a call from another
    event loop than the run's, or outside a run, starts a one-shot launcher instead)."""
    from capabilities._zygote_client import Zygote

    zygote = ctx.scope
    return zygote if isinstance(zygote, Zygote) and zygote.usable() else None


def _checked_argv(
    argv: list[str], program: str, root: str, workdir: str, grant: ShellGrant, ctx: CallContext
) -> list[str]:
    """The argv to execute: templated arguments kept from being options, then checked.

    Raises:
        CapabilityDenied: rules `shell.option-from-data`, `shell.argument`,
            `shell.output-path`.
    """
    # Here, not at the top: the argument rules' tables are for calls, and the registry loads
    # this family for every command (`planloom validate` too).
    from capabilities._argrules import (
        ArgContext,
        check_arguments,
        final_arguments,
        protect_data_arguments,
        runs_scripts,
    )

    rules = ArgContext(
        program,
        root,
        workdir,
        ctx.step_id,
        written=argv[0],
        argv=tuple(argv),
        before_run=ctx.unrendered,
    )
    unsafe = {real for entry in grant.unsafe_args if (real := real_program(entry, root))}
    if grant.end_of_options:
        args = ["--", *argv[1:]]
        if program not in unsafe:
            # Checked without the `--`, so every option is seen; but an interpreter reads
            # the first argument after `--` as its script, which must be checked as such.
            check_arguments(args if runs_scripts(rules.name) else argv[1:], rules)
    else:
        protected = protect_data_arguments([program, *argv[1:]], _data_indexes(argv, ctx), rules)
        args = protected[1:]
        if program not in unsafe:
            check_arguments(args, rules)
    return [program, *final_arguments(args, rules)]


def _data_indexes(argv: list[str], ctx: CallContext) -> set[int]:
    """The argv indexes whose text came from a template (`ctx.data_paths`); a template that
    gave the whole `argv` (or the whole params) makes every argument data, except those
    equal to a string the author wrote in the template (`'-l'` in `['wc', '-l'] + files`)."""
    paths = ctx.data_paths
    if () in paths or ("argv",) in paths:
        indexes = set(range(1, len(argv)))
    else:
        indexes = {p[1] for p in paths if len(p) >= 2 and p[0] == "argv" and isinstance(p[1], int)}
    return {i for i in indexes if i < len(argv) and argv[i] not in ctx.data_literals}


def _truncated_message(name: str, limit: int) -> str:
    return (
        f"{ACTION}: the output of {name!r} passed max_output ({limit} bytes), so it was cut "
        "there and the program killed; raise `max_output` in the `shell` grant, narrow the "
        "output (fewer files, a filter such as `head -n 100`, a quieter option), or set "
        "`check: false` on the step to keep what was read (with `truncated: true`)"
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


@functools.cache
def confinement_report() -> dict[str, str]:
    """Which confinement layers this machine gives `shell.run` children, probed once.

    Each entry is "active ..." or "unavailable: <reason>"; for `planloom tools` and audits.
    """
    grant = ShellGrant(allow=["true"])
    program = real_program("true", "/") or "/bin/true"
    with tempfile.TemporaryDirectory(prefix="planloom-probe-") as folder:
        ctx = CallContext(grant=grant, base_dir=Path(folder), timeout=10.0)
        real = os.path.realpath(folder)
        # One protected file, so the probe mounts one read-only as a real call would.
        Path(real, ".env").touch()
        protected = _protected.scan(real, [])
        with Scratch(grant.max_processes) as scratch:
            config = launcher_config(grant, ctx, real, program, scratch, protected)
            status_r, status_w = os.pipe()
            command, config_fd = _launcher_command(config, status_w, [program])
            try:
                proc = subprocess.run(
                    command,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    pass_fds=(status_w, config_fd),
                    cwd=folder,
                    env={"PATH": SAFE_PATH, "LANG": "C.UTF-8"},
                    timeout=10.0,
                    check=False,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                return {"launcher": f"unavailable: {exc}"}
            finally:
                os.close(status_w)
                os.close(config_fd)
            with io.FileIO(status_r, "rb") as pipe:
                messages = parse_status(pipe.read(STATUS_LIMIT))
            report = flatten(messages, scratch.cgroup_state)
    if report.get("protected_paths", "").startswith("active"):
        report["protected_paths"] = f"active (read-only bind mounts of {_protected.WHAT})"
    if proc.returncode != 0 and not report:
        report["launcher"] = f"unavailable: exit {proc.returncode}: {proc.stderr[-500:]!r}"
    return report


@contextlib.asynccontextmanager
async def _guard_protected(
    root: str, allowed: list[str], who: str, ctx: CallContext
) -> AsyncIterator[_protected.Scan]:
    """Walk `root` for protected entries before the call; undo what the call did to them.

    Yields the walk (its entries are mounted read-only for the child). When the block ends,
    however it ends, protected entries that appeared are removed; if there were any, the
    call fails with `CapabilityDenied` (rule `shell.protected`), unless it is being
    cancelled, which goes on. A root too large or too deep for the walk to see entirely is
    refused before anything starts (fail closed), and so is a call after which it became so.
    """
    watch = _protected.Watch(root, allowed)
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
