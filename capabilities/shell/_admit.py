"""The grant's rules for a `shell.run` call: the folder, the program, its arguments and its
environment, checked before anything runs (and, as far as they are written out, on a
recipe's params at validation)."""

from __future__ import annotations

import os

from capabilities.shell._env import child_env
from capabilities.shell._gitconfig import git_env
from capabilities.shell._models import ShellGrant, ShellParams
from capabilities.shell._paths import grant_root, real_program, resolve_program, workdir_of
from engine.capability import CallContext
from engine.errors import CapabilityDenied, StepFailed

__all__ = ["admit", "prepared", "shell_grant"]


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
        prepared(params, ctx)


def _admit_written(params: ShellParams, ctx: CallContext) -> None:
    """The rules a recipe's own params can be held to before the run: the program it
    names in `argv[0]` against `allow`, and, when no template gives `cwd` or an argument,
    the folder and the arguments, as `run` checks them. What an earlier step may make
    (the folder, a program, a script) is not refused for not being there yet."""
    grant = shell_grant(ctx)
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


def shell_grant(ctx: CallContext) -> ShellGrant:
    grant = ctx.grant
    return grant if isinstance(grant, ShellGrant) else ShellGrant.model_validate(grant.model_dump())


def prepared(params: ShellParams, ctx: CallContext) -> tuple[str, str, list[str], dict[str, str]]:
    """The granted folder, the working folder, the argv to execute and its environment.

    Raises:
        CapabilityDenied: the grant does not allow the call.
        StepFailed: the granted folder is not there.
    """
    grant = shell_grant(ctx)
    root = grant_root(grant, ctx)
    workdir = workdir_of(root, params.cwd, ctx)
    program = resolve_program(params.argv[0], workdir, root, grant, ctx)
    argv = _checked_argv(params.argv, program, root, workdir, grant, ctx)
    env = child_env(grant, workdir, ctx)
    if os.path.basename(program) == "git":
        env.update(git_env(argv[1:], workdir, root, ctx.step_id))
    return root, workdir, argv, env


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
    from capabilities.shell.argrules import (
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
