"""The models of `shell.run`: its grant (`capabilities: shell:`), params and result."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.globs import compile_glob

__all__ = ["ACTION", "ShellGrant", "ShellParams", "ShellResult"]

ACTION = "shell.run"


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
            flags, wrappers (`env CMD`, `xargs`), interpreter code (`sh -c`, `python -c`,
            `node -e`, a script from standard input or outside `cwd`, interpreter options
            not known to be harmless), output files outside `cwd`. Compared by real path.
            Kernel confinement stays, and templated arguments are still kept from being
            read as options. An allowed interpreter (sh, bash, python, perl, ruby, node)
            runs a script file inside `cwd` without being listed here.
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
        max_memory: memory the call's processes may use together, in bytes: the limit of
            its memory cgroup (resident memory, swap included), or, on a machine without
            a writable memory cgroup, each process's address space (RLIMIT_AS). A program
            the kernel kills for it fails the step, saying it went over max_memory.
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
            protected_paths, pids_cgroup, memory_cgroup, no_new_privs, rlimits, landlock).
    """

    model_config = ConfigDict(extra="forbid")

    exit_code: int
    stdout: str
    stderr: str
    truncated: bool
    confinement: dict[str, str] = Field(default_factory=dict)
