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
  to the granted folder) (B2-B6);
* the working folder must stay inside the grant's folder, checked on real paths;
* the child gets a scrubbed environment: a fixed PATH, `HOME` set to the working folder,
  a private `TMPDIR`, a UTF-8 locale and only the variables the grant names. Loader,
  interpreter and secret variables are refused even when a grant asks for them (B9).

The program is started by `_launcher.py` (a `python -I -S` script), which puts it in new
user, PID, mount and network namespaces, a pids cgroup, `no_new_privs`, rlimits (address
space, file size, CPU, core) and Landlock (writes only beneath the granted folder, reads
only from system folders, the /etc files programs need and that folder, no TCP) before
`exec`. Layers the kernel does not offer are skipped and listed as unavailable in
`ShellResult.confinement` and in `confinement_report()`, never silently.

Protected paths (`.git` folders, `.env*` files; see `_protected`) beneath the granted
folder are bind-mounted read-only in the child's mount namespace, unless the grant's
`protected:` globs open them; protected entries that appear during the call (which no
mount could cover) are removed afterwards and the call fails (rule `shell.protected`).
The launcher dies with the engine (`PR_SET_PDEATHSIG`), and with it the PID namespace;
pids cgroups of engines that died anyway are emptied and removed at the next start.

While it runs, stdin is `/dev/null` (B20); each output stream is capped (B11); on
timeout, cancellation or once the program exits, the launcher's process group is killed
and with it the PID namespace's init, whose end makes the kernel kill every process left
in the namespace, `setsid` and double-forked ones included (B12-B15). Without a PID
namespace, the pids cgroup (when writable) is swept instead.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fnmatch
import functools
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from capabilities import _protected
from capabilities._argrules import (
    ArgContext,
    check_arguments,
    final_arguments,
    protect_data_arguments,
)
from capabilities._confine import (
    DEVICE_READ_PATHS,
    DEVICE_WRITE_PATHS,
    SYSTEM_READ_PATHS,
    etc_read_paths,
)
from capabilities._gitconfig import git_env
from engine._globs import compile_glob
from engine._secrets import is_secret_env_name
from engine.capability import Action, CallContext, Family, Registry
from engine.diagnostics import did_you_mean
from engine.errors import CapabilityDenied, StepFailed, StepTimeout

__all__ = ["ShellGrant", "ShellParams", "ShellResult", "confinement_report", "register", "run"]

_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_ACTION = "shell.run"
_CHUNK = 64 * 1024
_EXIT_GRACE = 0.1  # seconds the pipes may stay open after the main child exits
_DRAIN_GRACE = 1.0  # seconds to collect what is left in the pipes once the group is killed
_REAP_TIMEOUT = 5.0  # seconds to wait for a SIGKILLed child to be reaped
_STATUS_LIMIT = 64 * 1024  # bytes kept from the launcher's status pipe
_CGROUP_CLEANUP = 2.0  # seconds to empty and remove a call's pids cgroup
_LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_launcher.py")
_PIDS_V1 = "/sys/fs/cgroup/pids"
_STDERR_TAIL_LINES = 20

# Variables a child never receives, whatever the grant says (matched case-insensitively),
# by class rather than by program, since any program may read its own: loader and libc hooks;
# interpreter hooks and code search paths; variables that hold a program's options or name a
# program to run (an option refused in argv must not come back through `TAR_OPTIONS` or
# `ZIPOPT`); shell start-up hooks; the fixed PATH, HOME and TMPDIR; and secret-looking ones.
_REFUSED_ENV = (
    # the loader and libc: shared objects and code paths
    "LD_*",
    "DYLD_*",
    "GLIBC_TUNABLES",
    "MALLOC_*",
    "GCONV_PATH",
    "LOCPATH",
    "NLSPATH",
    "HOSTALIASES",
    "RES_OPTIONS",
    # interpreters: start-up code, options and module search paths
    "PYTHON*",
    "PERL*",
    "RUBY*",
    "NODE_*",
    "*JAVA_*OPTIONS",
    "JDK_*",
    "LUA_*",
    "TCL*",
    "*PATH",
    # program options and programs named by variables
    "*OPT",
    "*OPTS",
    "*OPTION*",
    "MAKEFLAGS",
    "MFLAGS",
    "GZIP",
    "BZIP*",
    "XZ_*",
    "ZSTD_*",
    "LESS*",
    "MORE",
    "*PAGER",
    "EDITOR",
    "VISUAL",
    "SHELL",
    "BROWSER",
    "*_RSH",
    "RSYNC_*",
    "SSH_*",
    "*ASKPASS*",
    "XDG_*",
    "WGETRC",
    "INPUTRC",
    "SCREENRC",
    "VIMINIT",
    "EXINIT",
    "MYVIMRC",
    "CURL_HOME",
    "SQLITE_*",
    "GIT_*",
    # shells
    "BASH_ENV",
    "ENV",
    "BASH_*",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "IFS",
    # fixed by planloom
    "HOME",
    "TMPDIR",
)
# Secrets are the engine's one rule (`is_secret_env_name`): a variable the engine redacts as
# a secret is never handed to a child either.


def _check_env_name(name: str) -> str:
    if not name or "=" in name or "\x00" in name:
        raise ValueError(f"{name!r} is not a valid environment variable name")
    return name


class ShellGrant(BaseModel):
    """What a recipe allows under `capabilities: shell:`.

    Attributes:
        allow: programs that may run: names looked up on `/usr/local/bin:/usr/bin:/bin`,
            absolute paths, or paths relative to `cwd`. Compared by real path.
        cwd: the folder commands run in and are confined to; relative to the recipe folder.
        env: extra variables set for children.
        pass_env: names of variables copied from the engine's environment, when set.
        max_output: bytes kept per output stream; past it the command is killed.
        unsafe_args: programs (also in `allow`) whose argument rules are lifted: exec-escape
            flags, wrappers (`env CMD`, `xargs`), interpreter code (`sh -c`, `python -c`),
            output files outside `cwd`. Compared by real path. Kernel confinement stays, and
            templated arguments are still kept from being read as options.
        end_of_options: put `--` right after the program, so every argument is an operand
            (the recipe's own options too). When false (the default), arguments whose text
            begins with a template (`"${{ item }}"`, file names, model output) are kept from
            being read as options: for programs known to accept `--`, it is inserted before
            the first of them; one that starts with `-` and is still unprotected is refused
            (rule `shell.option-from-data`) (ATTACKS B7).
        network: let children use the network (no network namespace, no Landlock TCP rule).
        read_paths: extra folders children may read and execute from, besides the system
            folders and `cwd`; relative to the recipe folder.
        protected: globs (relative to `cwd`) of protected entries children may write:
            `.git` folders and `.env*` files beneath `cwd` are otherwise read-only to them,
            and any they create is removed and fails the call (rule `shell.protected`).
            A glob opens a whole entry: `.git/**` (or `sub/.git/**`) a repository, `.env`
            one file.
        max_memory: address-space limit per process, in bytes (RLIMIT_AS).
        max_file_size: largest file a child may write, in bytes (RLIMIT_FSIZE).
        max_processes: most processes (and threads) a call may have at once (pids cgroup).
    """

    model_config = ConfigDict(extra="forbid")

    allow: list[str] = []
    cwd: str = "."
    env: dict[str, str] = {}
    pass_env: list[str] = []
    max_output: int = Field(default=1_000_000, ge=0)
    unsafe_args: list[str] = []
    end_of_options: bool = False
    network: bool = False
    read_paths: list[str] = []
    protected: list[str] = []
    max_memory: int = Field(default=2 << 30, ge=64 << 20)
    max_file_size: int = Field(default=1 << 30, ge=0)
    max_processes: int = Field(default=256, ge=2)

    @field_validator("allow", "unsafe_args", "read_paths")
    @classmethod
    def _no_nul_in_allow(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not entry or "\x00" in entry:
                raise ValueError(f"entry {entry!r} must be a non-empty name without NUL bytes")
        return value

    @field_validator("cwd")
    @classmethod
    def _no_nul_in_cwd(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("cwd must not contain NUL bytes")
        return value

    @field_validator("protected")
    @classmethod
    def _relative_globs(cls, value: list[str]) -> list[str]:
        for pattern in value:
            if not pattern or pattern.startswith("/") or "\x00" in pattern:
                raise ValueError(f"glob {pattern!r} must be relative to the shell cwd")
            compile_glob(pattern)  # a bad glob is a grant error, not a silent literal
        return value

    @field_validator("env")
    @classmethod
    def _valid_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            _check_env_name(name)
            if "\x00" in text:
                raise ValueError(f"the value of {name!r} must not contain NUL bytes")
        return value

    @field_validator("pass_env")
    @classmethod
    def _valid_pass_env(cls, value: list[str]) -> list[str]:
        for name in value:
            _check_env_name(name)
        return value


class ShellParams(BaseModel):
    """The params of `shell.run`.

    Attributes:
        argv: the program and its arguments, passed as-is (no shell, no expansion).
        cwd: a folder inside the grant's `cwd` to run in, relative to it.
        check: raise `StepFailed` instead of returning the result when the program exits
            non-zero, or when its output passed the grant's `max_output` and it was killed.
            With `check: false` such a result is returned: `truncated` true (the output is
            cut at `max_output` bytes per stream) and the exit code (usually -9, the kill).
    """

    model_config = ConfigDict(extra="forbid")

    argv: list[str] = Field(min_length=1)
    cwd: str | None = None
    check: bool = True

    @field_validator("argv")
    @classmethod
    def _valid_argv(cls, value: list[str]) -> list[str]:
        if not value[0]:
            raise ValueError("argv[0] (the program) must not be empty")
        for index, arg in enumerate(value):
            if "\x00" in arg:
                raise ValueError(f"argv[{index}] contains a NUL byte")
        return value

    @field_validator("cwd")
    @classmethod
    def _no_nul_in_cwd(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise ValueError("cwd must not contain NUL bytes")
        return value


class ShellResult(BaseModel):
    """What `shell.run` returns.

    Attributes:
        exit_code: the exit status; negative when a signal ended the program.
        stdout: standard output, decoded as UTF-8 (invalid bytes replaced).
        stderr: standard error, decoded the same way.
        truncated: an output stream passed `max_output`, so the output was cut there and
            the command killed (its `exit_code` is then usually -9, from that kill). Only
            seen with `check: false`: otherwise such a run fails the step.
        confinement: each confinement layer and its state for this call: "active ..." or
            "unavailable: <reason>" (user/pid/mount/network namespaces, proc_mount,
            protected_paths, pids_cgroup, no_new_privs, rlimits, landlock).
    """

    model_config = ConfigDict(extra="forbid")

    exit_code: int
    stdout: str
    stderr: str
    truncated: bool
    confinement: dict[str, str] = Field(default_factory=dict)


def register(registry: Registry) -> None:
    """Add the `shell` family and its `shell.run` action to `registry`."""
    registry.add_family(
        Family(
            "shell",
            "run allowed programs with an argv list (no shell)",
            ShellGrant,
            confinement_report,
        )
    )
    registry.add(
        Action(
            _ACTION,
            "Run an allowed program with arguments in the granted folder; returns its output.",
            ShellParams,
            run,
            result_model=ShellResult,
            side_effects=True,
        )
    )


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
    grant = ctx.grant
    if not isinstance(grant, ShellGrant):
        grant = ShellGrant.model_validate(grant.model_dump())
    root = _grant_root(grant, ctx)
    workdir = _workdir(root, params.cwd, ctx)
    program = _resolve_program(params.argv[0], workdir, root, grant, ctx)
    argv = _checked_argv(params.argv, program, root, workdir, grant, ctx)
    env = _child_env(grant, workdir, ctx)
    if os.path.basename(program) == "git":
        env.update(git_env(argv[1:], workdir, root, ctx.step_id))
    name = params.argv[0]

    who = f"{_ACTION}: {name!r}"
    async with _guard_protected(root, grant.protected, who, ctx) as protected:
        with _Scratch(grant.max_processes) as scratch:
            env["TMPDIR"] = scratch.tmpdir
            config = _launcher_config(grant, ctx, root, program, scratch, protected)
            outcome = await _launch(argv, config, workdir, env, grant.max_output, name, ctx)
            await scratch.empty_cgroup()
    result = outcome.result(scratch.cgroup_state)
    if outcome.setup_error is not None:
        raise StepFailed(
            f"{_ACTION}: the sandbox for {name!r} could not be set up: {outcome.setup_error}",
            step_id=ctx.step_id,
        )
    if outcome.exec_error is not None:
        raise StepFailed(
            f"{_ACTION}: cannot execute {name!r} ({program}): {outcome.exec_error}",
            step_id=ctx.step_id,
        )
    if params.check and result.truncated:
        raise StepFailed(_truncated_message(name, grant.max_output), step_id=ctx.step_id)
    if params.check and result.exit_code != 0:
        raise StepFailed(_failure_message(name, result), step_id=ctx.step_id)
    return result


def _checked_argv(
    argv: list[str], program: str, root: str, workdir: str, grant: ShellGrant, ctx: CallContext
) -> list[str]:
    """The argv to execute: templated arguments kept from being options, then checked.

    Raises:
        CapabilityDenied: rules `shell.option-from-data`, `shell.argument`,
            `shell.output-path`.
    """
    rules = ArgContext(program, root, workdir, ctx.step_id)
    unsafe = {real for entry in grant.unsafe_args if (real := _real_program(entry, root))}
    if grant.end_of_options:
        if program not in unsafe:  # checked without the `--`: every option is seen
            check_arguments(argv[1:], rules)
        args = ["--", *argv[1:]]
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
        f"{_ACTION}: the output of {name!r} passed max_output ({limit} bytes), so it was cut "
        "there and the program killed; raise `max_output` in the `shell` grant, narrow the "
        "output (fewer files, a filter such as `head -n 100`, a quieter option), or set "
        "`check: false` on the step to keep what was read (with `truncated: true`)"
    )


@functools.cache
def confinement_report() -> dict[str, str]:
    """Which confinement layers this machine gives `shell.run` children, probed once.

    Each entry is "active ..." or "unavailable: <reason>"; for `planloom tools` and audits.
    """
    grant = ShellGrant(allow=["true"])
    program = _real_program("true", "/") or "/bin/true"
    with tempfile.TemporaryDirectory(prefix="planloom-probe-") as folder:
        ctx = CallContext(grant=grant, base_dir=Path(folder), timeout=10.0)
        real = os.path.realpath(folder)
        # One protected file, so the probe mounts one read-only as a real call would.
        Path(real, ".env").touch()
        protected = _protected.scan(real, [])
        with _Scratch(grant.max_processes) as scratch:
            config = _launcher_config(grant, ctx, real, program, scratch, protected)
            status_r, status_w = os.pipe()
            command, config_fd = _launcher_command(config, status_w, [program])
            try:
                proc = subprocess.run(
                    command,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    pass_fds=(status_w, config_fd),
                    cwd=folder,
                    env={"PATH": _SAFE_PATH, "LANG": "C.UTF-8"},
                    timeout=10.0,
                    check=False,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                return {"launcher": f"unavailable: {exc}"}
            finally:
                os.close(status_w)
                os.close(config_fd)
            with io.FileIO(status_r, "rb") as pipe:
                messages = _parse_status(pipe.read(_STATUS_LIMIT))
            report = _flatten(messages, scratch.cgroup_state)
    if report.get("protected_paths", "").startswith("active"):
        report["protected_paths"] = f"active (read-only bind mounts of {_protected.WHAT})"
    if proc.returncode != 0 and not report:
        report["launcher"] = f"unavailable: exit {proc.returncode}: {proc.stderr[-500:]!r}"
    return report


def _launcher_command(
    config: dict[str, Any], status_fd: int, argv: list[str]
) -> tuple[list[str], int]:
    """The launcher's command line and the memfd holding its config (the caller closes it).

    The config, with the program's argv, travels in a memfd rather than on the command
    line, so only the program itself carries its arguments (`ps`, markers in tests).
    """
    config_fd = os.memfd_create("planloom-launch")  # close-on-exec; pass_fds lets it through
    try:
        os.write(config_fd, json.dumps({**config, "argv": argv}).encode())
        os.lseek(config_fd, 0, os.SEEK_SET)
    except OSError:
        os.close(config_fd)
        raise
    python = os.path.realpath(sys.executable)
    return [python, "-I", "-S", _LAUNCHER, str(config_fd), str(status_fd)], config_fd


def _launcher_config(
    grant: ShellGrant,
    ctx: CallContext,
    root: str,
    program: str,
    scratch: _Scratch,
    protected: _protected.Scan,
) -> dict[str, Any]:
    reads = [
        os.path.realpath(sys.base_prefix),
        os.path.dirname(program),
        *(os.path.realpath(os.path.join(ctx.base_dir, extra)) for extra in grant.read_paths),
    ]
    rlimits = {
        "as": grant.max_memory,
        "fsize": grant.max_file_size,
        "nproc": grant.max_processes,
        "core": 0,
    }
    if math.isfinite(ctx.timeout) and ctx.timeout >= 0:
        rlimits["cpu"] = math.ceil(ctx.timeout) + 1
    return {
        "parent": os.getpid(),
        "network": grant.network,
        "rlimits": rlimits,
        **_files_config(root, scratch.tmpdir, reads, protected),
        "cgroup": scratch.cgroup,
    }


def _files_config(
    write_root: str, tmpdir: str, reads: list[str], protected: _protected.Scan
) -> dict[str, Any]:
    """The file-system part of a launcher config, for any confined child.

    Children may read and execute from the system folders, the /etc files programs need and
    `reads`; read and write beneath `write_root` and `tmpdir` (and /dev/null, /dev/zero,
    /dev/full), except the protected entries `protected` found beneath `write_root`, which
    are mounted read-only.
    """
    return {
        "read_paths": [*_system_reads(), *reads],
        "write_paths": [write_root, tmpdir, *DEVICE_WRITE_PATHS],
        "read_only": protected.mounts(),
        "read_only_note": protected.note(),
    }


@functools.cache
def _system_reads() -> tuple[str, ...]:
    return (*SYSTEM_READ_PATHS, *etc_read_paths(), *DEVICE_READ_PATHS)


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


@dataclass
class _Outcome:
    """What `_launch` saw: the program's end, its output and the launcher's reports."""

    exit_code: int
    stdout: str
    stderr: str
    truncated: bool
    messages: list[dict[str, Any]]
    setup_error: str | None = None
    exec_error: str | None = None

    def __post_init__(self) -> None:
        for message in self.messages:
            if "setup_error" in message:
                self.setup_error = str(message["setup_error"])
            if "exec_error" in message:
                self.exec_error = str(message["exec_error"])
            if "exit" in message:
                self.exit_code = int(message["exit"])
            if "signal" in message:
                self.exit_code = -int(message["signal"])

    def result(self, cgroup_state: str) -> ShellResult:
        return ShellResult(
            exit_code=self.exit_code,
            stdout=self.stdout,
            stderr=self.stderr,
            truncated=self.truncated,
            confinement=_flatten(self.messages, cgroup_state),
        )


def _parse_status(data: bytes) -> list[dict[str, Any]]:
    messages = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            message = json.loads(line)
            if isinstance(message, dict):
                messages.append(message)
    return messages


def _flatten(messages: list[dict[str, Any]], cgroup_state: str) -> dict[str, str]:
    """The launcher's layer report as `{layer: "active ..." | "unavailable: ..."}`."""
    report: dict[str, str] = {}
    for message in messages:
        layers = message.get("layers")
        if not isinstance(layers, dict):
            continue
        for layer, state in layers.items():
            if isinstance(state, dict):  # rlimits: {name: value or "unavailable: ..."}
                parts = [f"{k}={v}" for k, v in state.items()]
                if os.getuid() == 0:  # measured: the kernel exempts (mapped) root
                    parts.append("nproc not enforced for uid 0, see pids_cgroup")
                state = "active (" + ", ".join(parts) + ")"
            report[str(layer)] = str(state)
    if report and report.get("pids_cgroup", "active") == "active":
        report["pids_cgroup"] = cgroup_state
    return report


class _Scratch:
    """A call's private TMPDIR and pids cgroup, removed when the call ends."""

    def __init__(self, max_processes: int) -> None:
        self._max = max_processes
        self.tmpdir = ""
        self.cgroup: str | None = None
        self.cgroup_state = "unavailable: not set up"

    def __enter__(self) -> _Scratch:
        _sweep_stale_scratch()
        self.tmpdir = tempfile.mkdtemp(prefix=f"planloom-shell-{os.getpid()}-")
        _LIVE_SCRATCH.add(self)
        base, why = _pids_cgroup_base()
        if base is None:
            self.cgroup_state = f"unavailable: {why}"
            return self
        path = os.path.join(base, f"planloom-{os.getpid()}-{uuid.uuid4().hex[:12]}")
        try:
            os.mkdir(path)
            with open(os.path.join(path, "pids.max"), "w") as file:
                file.write(str(self._max))
        except OSError as exc:
            self.cgroup_state = f"unavailable: {path}: {exc.strerror}"
            with contextlib.suppress(OSError):
                os.rmdir(path)
            return self
        self.cgroup = path
        self.cgroup_state = f"active (max {self._max})"
        return self

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
        self.remove()

    def remove(self) -> None:
        _LIVE_SCRATCH.discard(self)
        shutil.rmtree(self.tmpdir, ignore_errors=True)
        if self.cgroup is not None:
            for _ in range(100):  # a just-killed process may take a moment to leave
                _sweep_cgroup(self.cgroup)
                try:
                    os.rmdir(self.cgroup)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    # Blocking here is rare and short: only reached if processes survived
                    # the sweep in `empty_cgroup` (e.g. after cancellation).
                    time.sleep(0.005)


# Scratch of calls still running; removed at exit if the process ends mid-call.
_LIVE_SCRATCH: set[_Scratch] = set()


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
    base, _ = _pids_cgroup_base()
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
def _pids_cgroup_base() -> tuple[str | None, str]:
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


async def _launch(
    argv: list[str],
    config: dict[str, Any],
    workdir: str,
    env: dict[str, str],
    max_output: int,
    name: str,
    ctx: CallContext,
) -> _Outcome:
    # Our own pipes rather than asyncio's PIPE: with PIPE, Python 3.11's `Process.wait()`
    # also waits for EOF, which a backgrounded descendant can hold off forever.
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    status_r, status_w = os.pipe()
    started = False
    config_fd = -1
    try:
        command, config_fd = _launcher_command(config, status_w, argv)
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
            f"{_ACTION}: cannot start the sandbox launcher for {name!r}: {exc.strerror or exc}",
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


def _grant_root(grant: ShellGrant, ctx: CallContext) -> str:
    root = os.path.realpath(os.path.join(ctx.base_dir, grant.cwd))
    if not os.path.isdir(root):
        raise StepFailed(
            f"{_ACTION}: the granted folder {grant.cwd!r} ({root}) is not an existing folder",
            step_id=ctx.step_id,
        )
    return root


def _workdir(root: str, cwd: str | None, ctx: CallContext) -> str:
    if cwd is None:
        return root
    if os.path.isabs(cwd):
        raise CapabilityDenied(
            f"cwd {cwd!r} is absolute; give a folder relative to the granted folder {root}",
            rule="shell.cwd",
            step_id=ctx.step_id,
        )
    workdir = os.path.realpath(os.path.join(root, cwd))
    if os.path.commonpath([root, workdir]) != root:
        raise CapabilityDenied(
            f"cwd {cwd!r} resolves to {workdir}, outside the granted folder {root}",
            rule="shell.cwd",
            step_id=ctx.step_id,
        )
    if not os.path.isdir(workdir):
        raise StepFailed(
            f"{_ACTION}: cwd {cwd!r} ({workdir}) is not an existing folder", step_id=ctx.step_id
        )
    return workdir


def _real_program(name: str, base: str) -> str | None:
    """The real path `name` stands for: a path relative to `base`, or a safe-PATH lookup."""
    if "/" in name:
        return os.path.realpath(os.path.join(base, name))
    found = shutil.which(name, path=_SAFE_PATH)
    return os.path.realpath(found) if found else None


def _resolve_program(
    name: str, workdir: str, root: str, grant: ShellGrant, ctx: CallContext
) -> str:
    allowed = {real for entry in grant.allow if (real := _real_program(entry, root))}
    real = _real_program(name, workdir)
    if real is not None and real in allowed:
        return real

    suggestion = did_you_mean(name, grant.allow)
    hint = f" ({suggestion})" if suggestion else ""
    if real is None:
        raise CapabilityDenied(
            f"program {name!r} was not found on the safe PATH {_SAFE_PATH}{hint}; "
            "use an installed program and grant it with `capabilities: shell: {allow: [NAME]}`",
            rule="shell.not-allowed",
            step_id=ctx.step_id,
        )
    grant_as = real if "/" in name else name
    raise CapabilityDenied(
        f"program {name!r} ({real}) is not in the shell allow-list{hint}; "
        f"grant it with `capabilities: shell: {{allow: [{grant_as}]}}`",
        rule="shell.not-allowed",
        step_id=ctx.step_id,
    )


def _is_refused_env(name: str) -> bool:
    upper = name.upper()
    return is_secret_env_name(upper) or any(
        fnmatch.fnmatchcase(upper, pattern) for pattern in _REFUSED_ENV
    )


def _child_env(grant: ShellGrant, workdir: str, ctx: CallContext) -> dict[str, str]:
    refused = sorted({n for n in [*grant.pass_env, *grant.env] if _is_refused_env(n)})
    if refused:
        raise CapabilityDenied(
            f"the shell grant names environment variables that are never passed to programs "
            f"(loader, interpreter and shell hooks, search paths, program options or programs "
            f"named by variables, PATH/HOME/TMPDIR, or secrets): {', '.join(refused)}; "
            "remove them from `pass_env`/`env` (give options as arguments, where the "
            "argument rules check them)",
            rule="shell.env",
            step_id=ctx.step_id,
        )
    env = {"PATH": _SAFE_PATH, "HOME": workdir, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    for name in grant.pass_env:
        value = os.environ.get(name)
        if value is not None:
            env[name] = value
    env.update(grant.env)
    return env


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
) -> _Outcome:
    """Collect output under the timeout; whatever happens, leave no process of the group.

    Owns `fds` (the read ends of stdout, stderr and the launcher's status pipe) and closes
    them. Killing the launcher's group also kills the sandbox's init (it stays in the
    group), and the kernel then kills everything left in the PID namespace.
    """
    pgid = proc.pid  # start_new_session: the launcher leads a group with its own pid
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ctx.timeout if math.isfinite(ctx.timeout) else None
    out, err = (_Capture(max_output, lambda: _kill_group(pgid)) for _ in range(2))
    status = _Capture(_STATUS_LIMIT, lambda: None)
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
                f"{_ACTION}: {name!r} timed out after {float(ctx.timeout)!r} s",
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
    return _Outcome(
        exit_code=code if code is not None else -signal.SIGKILL,
        stdout=out.text(),
        stderr=err.text(),
        truncated=out.truncated or err.truncated,
        messages=_parse_status(bytes(status.data)),
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
    return f"{_ACTION}: {name!r} {how}; last lines of stderr:\n{stderr}"
