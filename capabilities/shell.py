"""The `shell` family: run an allowed program with an argv list, never through a shell.

Each call is checked before anything runs:

* the program is resolved the way the kernel will see it (a name on a fixed safe PATH, or a
  path relative to the working folder) and judged by its *real* path, so `./rm` or a
  symlink `ls -> /bin/rm` counts as `/bin/rm` (ATTACKS B8). The resolved real path is what
  gets executed, and it is also the child's `argv[0]`, so the check and the exec agree even
  for multi-call binaries that change behaviour with their name;
* the working folder must stay inside the grant's folder, checked on real paths;
* the child gets a scrubbed environment: a fixed PATH, `HOME` set to the working folder,
  a UTF-8 locale and only the variables the grant names. Loader, interpreter and secret
  variables are refused even when a grant asks for them (B9).

While it runs, the child leads its own process group with stdin on `/dev/null` (B20); each
output stream is capped (B11); on timeout, cancellation or once the main child exits, the
whole group is killed (B12-B14).

Resource limits are applied with `resource.prlimit(pid, ...)` right after spawn rather than
with `preexec_fn`, which is unsafe when the process has threads (the event loop's executor,
the child watcher). The window between exec and the limit taking effect is a few
microseconds (a descendant forked inside it would not inherit them); the limits are
backstops to the wall-clock timeout and the process-group kill, not the main defence.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import io
import math
import os
import resource
import shutil
import signal
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from capabilities._base import Action, CallContext, Family, Registry
from engine.diagnostics import did_you_mean
from engine.errors import CapabilityDenied, StepFailed, StepTimeout

__all__ = ["ShellGrant", "ShellParams", "ShellResult", "register", "run"]

_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_ACTION = "shell.run"
_CHUNK = 64 * 1024
_EXIT_GRACE = 0.1  # seconds the pipes may stay open after the main child exits
_DRAIN_GRACE = 1.0  # seconds to collect what is left in the pipes once the group is killed
_REAP_TIMEOUT = 5.0  # seconds to wait for a SIGKILLed child to be reaped
_FSIZE_LIMIT = 1 << 30  # largest file a child may write, in bytes
_STDERR_TAIL_LINES = 20

# Variables a child never receives, whatever the grant says (matched case-insensitively).
# Loader and interpreter hooks run code before the program's own; the fixed PATH and HOME
# keep lookups and dotfiles where the check expects them; the rest look like secrets.
_REFUSED_ENV = (
    "LD_*",
    "DYLD_*",
    "PYTHON*",
    "BASH_ENV",
    "ENV",
    "BASH_FUNC_*",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "IFS",
    "CDPATH",
    "PAGER",
    "GIT_*",
    "NODE_OPTIONS",
    "PERL5OPT",
    "PERL5LIB",
    "RUBYOPT",
    "JAVA_TOOL_OPTIONS",
    "PATH",
    "HOME",
    "*_KEY",
    "*TOKEN*",
    "*SECRET*",
    "*PASSWORD*",
)


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
    """

    model_config = ConfigDict(extra="forbid")

    allow: list[str] = []
    cwd: str = "."
    env: dict[str, str] = {}
    pass_env: list[str] = []
    max_output: int = Field(default=1_000_000, ge=0)

    @field_validator("allow")
    @classmethod
    def _no_nul_in_allow(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not entry or "\x00" in entry:
                raise ValueError(f"allow entry {entry!r} must be a non-empty program name")
        return value

    @field_validator("cwd")
    @classmethod
    def _no_nul_in_cwd(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("cwd must not contain NUL bytes")
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
        check: raise `StepFailed` on a non-zero exit instead of returning the result. A run
            cut short by the output cap is returned either way (`truncated` is true).
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
        truncated: an output stream passed `max_output` and the command was killed (its
            `exit_code` is then usually -9, from that kill).
    """

    model_config = ConfigDict(extra="forbid")

    exit_code: int
    stdout: str
    stderr: str
    truncated: bool


def register(registry: Registry) -> None:
    """Add the `shell` family and its `shell.run` action to `registry`."""
    registry.add_family(
        Family("shell", "run allowed programs with an argv list (no shell)", ShellGrant)
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
        CapabilityDenied: the program, folder or environment is not allowed
            (rules `shell.not-allowed`, `shell.cwd`, `shell.env`).
        StepTimeout: the command ran past `ctx.timeout` seconds; its process group is killed.
        StepFailed: the program could not be started, or exited non-zero with `check`.
    """
    grant = ctx.grant
    if not isinstance(grant, ShellGrant):
        grant = ShellGrant.model_validate(grant.model_dump())
    root = _grant_root(grant, ctx)
    workdir = _workdir(root, params.cwd, ctx)
    program = _resolve_program(params.argv[0], workdir, root, grant, ctx)
    env = _child_env(grant, workdir, ctx)
    name = params.argv[0]

    # Our own pipes rather than asyncio's PIPE: with PIPE, Python 3.11's `Process.wait()`
    # also waits for EOF, which a backgrounded descendant can hold off forever.
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    started = False
    try:
        proc = await asyncio.create_subprocess_exec(
            program,
            *params.argv[1:],
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out_w,
            stderr=err_w,
            cwd=workdir,
            env=env,
            start_new_session=True,
        )
        started = True
    except OSError as exc:
        raise StepFailed(
            f"{_ACTION}: cannot execute {name!r} ({program}): {exc.strerror or exc}",
            step_id=ctx.step_id,
        ) from exc
    finally:
        os.close(out_w)
        os.close(err_w)
        if not started:
            os.close(out_r)
            os.close(err_r)

    _apply_rlimits(proc.pid, ctx.timeout)
    result = await _supervise(proc, (out_r, err_r), name, grant.max_output, ctx)
    if params.check and result.exit_code != 0 and not result.truncated:
        raise StepFailed(_failure_message(name, result), step_id=ctx.step_id)
    return result


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
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in _REFUSED_ENV)


def _child_env(grant: ShellGrant, workdir: str, ctx: CallContext) -> dict[str, str]:
    refused = sorted({n for n in [*grant.pass_env, *grant.env] if _is_refused_env(n)})
    if refused:
        raise CapabilityDenied(
            f"the shell grant names environment variables that are never passed to programs "
            f"(loader/interpreter hooks, PATH/HOME, or secrets): {', '.join(refused)}; "
            "remove them from `pass_env`/`env`",
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


def _apply_rlimits(pid: int, timeout: float) -> None:
    """Cap the child's CPU seconds and file size, never above the current hard limits."""
    limits: list[tuple[int, int]] = [(resource.RLIMIT_FSIZE, _FSIZE_LIMIT)]
    if math.isfinite(timeout) and timeout >= 0:
        limits.append((resource.RLIMIT_CPU, math.ceil(timeout) + 1))
    for kind, wanted in limits:
        _soft, hard = resource.getrlimit(kind)
        soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        # One more second before SIGKILL, so SIGXCPU can end the program first.
        new_hard = soft + 1 if kind == resource.RLIMIT_CPU else soft
        if hard != resource.RLIM_INFINITY:
            new_hard = min(new_hard, hard)
        # The child may already have exited; the limits are a backstop, so go on.
        with contextlib.suppress(OSError):
            resource.prlimit(pid, kind, (soft, new_hard))


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
    fds: tuple[int, int],
    name: str,
    max_output: int,
    ctx: CallContext,
) -> ShellResult:
    """Collect output under the timeout; whatever happens, leave no process of the group.

    Owns `fds` (the read ends of stdout and stderr) and closes them.
    """
    pgid = proc.pid  # start_new_session: the child leads a group with its own pid
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ctx.timeout if math.isfinite(ctx.timeout) else None
    out, err = (_Capture(max_output, lambda: _kill_group(pgid)) for _ in fds)
    # Opening an existing descriptor does not block; from here the file objects own them.
    pipes = [io.FileIO(fd, "rb") for fd in fds]
    transports: list[asyncio.ReadTransport] = []
    try:
        for pipe, capture in zip(pipes, (out, err), strict=True):
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
        # Descendants may hold the pipes open (`sleep 600 &`): allow a short grace for
        # late writes, then end the group and collect what is already in the pipes.
        closed = [out.closed, err.closed]
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
    return ShellResult(
        exit_code=code if code is not None else -signal.SIGKILL,
        stdout=out.text(),
        stderr=err.text(),
        truncated=out.truncated or err.truncated,
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
