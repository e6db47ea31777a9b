"""Per-program argument rules for `shell.run`: refuse known ways to run other programs.

An allow-list of programs is not enough: `find -exec`, `sed e`, `tar --checkpoint-action`,
`git -c alias.x=!cmd`, `awk 'BEGIN{system("id")}'`, wrappers such as `env` or `xargs` and
interpreters such as `sh -c` all turn one allowed program into any program (ATTACKS B2-B6).
Output flags (`sort -o`, `curl -o`, `tee`, `dd of=`) are held to the granted folder (B5, B7).

Rules are keyed by the basename of the program's *real* path, so a symlink or a copy under
another name meets the rules of what it really is. Parsing is conservative: when an
argument cannot be understood, it is refused. A grant lifts every rule for a program by
naming it in both `allow` and `unsafe_args`; Landlock and the namespaces still apply.

Rule ids: `shell.argument` (an exec-escape, wrapper, interpreter or unreadable script) and
`shell.output-path` (a file the program would write lies outside the granted folder).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.errors import CapabilityDenied

__all__ = ["ArgContext", "check_arguments", "git_env", "rule_family"]

_INFO_ONLY = frozenset({"--version", "--help", "-V", "-h", "-?"})

# Programs that run another program named in their arguments.
_WRAPPERS = re.compile(
    r"(xargs|timeout|nice|nohup|setsid|stdbuf|chroot|sudo|su|doas|runuser|pkexec|unshare|"
    r"nsenter|ionice|taskset|chrt|flock|watch|script|strace|ltrace|gdb|valgrind|time|parallel|"
    r"setpriv|capsh|prlimit|firejail|bwrap|systemd-run|start-stop-daemon|expect|socat|nc|"
    r"ncat|netcat|ssh|scp|sftp|rsh|telnet|ftp|busybox|toybox|sg|newgrp|chpst|dbus-launch|"
    r"xvfb-run|catchsegv|eatmydata|fakeroot|proot|faketime|torsocks|proxychains\d*|entr|"
    r"ld-linux.*|ld\.so|ld-.*\.so.*|coreutils)"
)
# Programs whose arguments are code (or name a script).
_INTERPRETERS = re.compile(
    r"(sh|bash|dash|zsh|ksh|ksh93|mksh|ash|csh|tcsh|fish|yash|rbash|"
    r"python[\d.]*|pypy[\d.]*|perl[\d.]*|ruby[\d.]*|irb|node|nodejs|deno|bun|php[\d.]*|"
    r"lua[\d.]*|luajit|tclsh[\d.]*|wish[\d.]*|Rscript|R|julia|pwsh|guile[\d.]*|java|jshell|"
    r"jrunscript|scala|groovy|osascript)"
)
# Programs that run code whatever their arguments (editors and pagers with shell escapes,
# build tools and package managers that run recipe or package scripts).
_ALWAYS_UNSAFE = re.compile(
    r"(vi|vim|nvim|rvim|gvim|view|ex|emacs|nano|pico|ed|red|less|more|most|man|pg|joe|mc|"
    r"make|gmake|bmake|ninja|npm|npx|yarn|pnpm|pip[\d.]*|cargo|go|rake|bundle|gradle|mvn|ant)"
)
_AWKS = re.compile(r"(awk|gawk|mawk|nawk|original-awk|busybox-awk)")
# Programs whose every path operand is written (or removed): all must be in the folder.
_WRITES_ALL_OPERANDS = frozenset(
    {
        "rm",
        "rmdir",
        "mv",
        "touch",
        "mkdir",
        "chmod",
        "chown",
        "chgrp",
        "truncate",
        "shred",
        "unlink",
        "mkfifo",
        "mknod",
        "ln",
        "tee",
        "chattr",
        "setfacl",
    }
)
# Programs that write to their last operand (or `-t DIR`).
_WRITES_LAST_OPERAND = frozenset({"cp", "install"})


@dataclass(frozen=True, slots=True)
class ArgContext:
    """What the rules need besides the arguments.

    Attributes:
        program: the program's real path.
        root: the granted folder (a real path).
        workdir: the folder the program runs in (a real path inside `root`).
        step_id: the calling step, for errors.
    """

    program: str
    root: str
    workdir: str
    step_id: str | None = None

    @property
    def name(self) -> str:
        return os.path.basename(self.program)

    def deny(self, arg: str, why: str) -> CapabilityDenied:
        return CapabilityDenied(
            f"{self.name} ({self.program}): argument {arg!r} {why}; if this recipe really "
            f"needs it, grant it with `capabilities: shell: {{allow: [{self.name}], "
            f"unsafe_args: [{self.name}]}}`",
            rule="shell.argument",
            step_id=self.step_id,
        )

    def jail(self, path: str, arg: str) -> None:
        """Refuse `path` (from argument `arg`) unless it resolves inside the folder."""
        if path in ("-", "/dev/null", "/dev/stdout", "/dev/stderr"):
            return
        real = os.path.realpath(os.path.join(self.workdir, path))
        if os.path.commonpath([self.root, real]) != self.root:
            raise CapabilityDenied(
                f"{self.name} ({self.program}): argument {arg!r} writes to {real}, outside "
                f"the granted folder {self.root}; write to a path inside it",
                rule="shell.output-path",
                step_id=self.step_id,
            )


def rule_family(name: str) -> str | None:
    """Which rule family applies to a program basename (for messages and `planloom tools`)."""
    for family, pattern in (
        ("wrapper", _WRAPPERS),
        ("interpreter", _INTERPRETERS),
        ("always-unsafe", _ALWAYS_UNSAFE),
        ("awk", _AWKS),
    ):
        if pattern.fullmatch(name):
            return family
    if name in _RULES:
        return name
    if name in _WRITES_ALL_OPERANDS or name in _WRITES_LAST_OPERAND:
        return "writes-paths"
    return None


def check_arguments(args: Sequence[str], ctx: ArgContext) -> None:
    """Raise `CapabilityDenied` if `args` (argv without argv[0]) could escape the grant."""
    name = ctx.name
    if name == "env":
        _env(args, ctx)
    elif _ALWAYS_UNSAFE.fullmatch(name):
        raise ctx.deny(" ".join(args) or name, "may run other programs whatever it is given")
    elif _WRAPPERS.fullmatch(name) or _INTERPRETERS.fullmatch(name):
        for arg in args:
            if arg not in _INFO_ONLY:
                what = "runs another program" if _WRAPPERS.fullmatch(name) else "runs code"
                raise ctx.deny(arg, f"{what} ({name} is a wrapper or interpreter)")
    elif _AWKS.fullmatch(name):
        _awk(args, ctx)
    elif name in _RULES:
        _RULES[name](args, ctx)
    elif name in _WRITES_ALL_OPERANDS:
        for value, arg in _path_operands(args):
            ctx.jail(value, arg)
    elif name in _WRITES_LAST_OPERAND:
        _writes_last(args, ctx)


def git_env() -> dict[str, str]:
    """Config that keeps a repository's own settings from running programs.

    Passed as `GIT_CONFIG_COUNT`/`KEY_n`/`VALUE_n`, which override the repository's config.
    """
    settings = {
        "core.hooksPath": "/dev/null",
        "core.fsmonitor": "false",
        "core.pager": "cat",
        "core.sshCommand": "false",
        "protocol.ext.allow": "never",
        "credential.helper": "",
        "diff.external": "",
    }
    env = {"GIT_CONFIG_COUNT": str(len(settings)), "GIT_TERMINAL_PROMPT": "0"}
    for index, (key, value) in enumerate(settings.items()):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


# --- helpers -------------------------------------------------------------------------------


def _path_operands(args: Sequence[str]) -> list[tuple[str, str]]:
    """(path, argument) pairs: non-option operands plus `--target-directory`/`-t` values."""
    found: list[tuple[str, str]] = []
    options_done = False
    it = iter(args)
    for arg in it:
        if options_done or not arg.startswith("-") or arg == "-":
            found.append((arg, arg))
        elif arg == "--":
            options_done = True
        elif arg.startswith(("--target-directory=", "--reference=")):
            found.append((arg.split("=", 1)[1], arg))
        elif arg in ("-t", "--target-directory"):
            value = next(it, "")
            found.append((value, f"{arg} {value}"))
        elif arg.startswith("-t") and not arg.startswith("--"):
            found.append((arg[2:], arg))
    return found


def _writes_last(args: Sequence[str], ctx: ArgContext) -> None:
    operands = _path_operands(args)
    targeted = [pair for pair in operands if pair[1].startswith(("-t", "--target-directory"))]
    for value, arg in targeted or operands[-1:]:
        ctx.jail(value, arg)


def _scan_options(
    args: Sequence[str],
    ctx: ArgContext,
    *,
    jail_short: str = "",
    jail_long: Sequence[str] = (),
    deny_short: str = "",
    deny_long: Sequence[str] = (),
    value_short: str = "",
    stop_at_ddash: bool = True,
) -> None:
    """Check getopt-style options: jail the values of output options, refuse denied ones.

    A value after a short option in `value_short` ends that cluster; the next argument is
    still scanned (a false refusal is better than a missed option).
    """
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--" and stop_at_ddash:
            return
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if any(name == d or (len(name) > 3 and d.startswith(name)) for d in deny_long):
                raise ctx.deny(arg, "runs another program or reads options from a file")
            if any(name == j or (len(name) > 3 and j.startswith(name)) for j in jail_long):
                if not eq:
                    value = args[index] if index < len(args) else ""
                    index += 1
                ctx.jail(value, arg)
        elif arg.startswith("-") and len(arg) > 1:
            for pos, letter in enumerate(arg[1:], start=2):
                if letter in deny_short:
                    raise ctx.deny(arg, f"(option -{letter}) runs another program")
                if letter in jail_short:
                    value = arg[pos:]
                    if not value:
                        value = args[index] if index < len(args) else ""
                        index += 1
                    ctx.jail(value, arg)
                    break
                if letter in value_short:
                    break


# --- program rules -------------------------------------------------------------------------


def _env(args: Sequence[str], ctx: ArgContext) -> None:
    """`env` alone prints the environment; with a command it is a wrapper."""
    harmless = {"-0", "--null", "-i", "--ignore-environment", "-", *_INFO_ONLY}
    it = iter(args)
    for arg in it:
        if arg in harmless or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", arg, re.DOTALL):
            continue
        if arg in ("-u", "--unset"):
            next(it, None)
            continue
        if arg.startswith(("--unset=", "-u")):
            continue
        raise ctx.deny(arg, "runs another program (env is a wrapper)")


_FIND_DENIED = frozenset(
    {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}
)


def _find(args: Sequence[str], ctx: ArgContext) -> None:
    for arg in args:
        if arg in _FIND_DENIED:
            raise ctx.deny(arg, "runs a program, deletes or writes files")


def _sort(args: Sequence[str], ctx: ArgContext) -> None:
    _scan_options(
        args,
        ctx,
        jail_short="oT",
        jail_long=("--output", "--temporary-directory"),
        deny_long=("--compress-program",),
        value_short="kStz",
    )


def _curl(args: Sequence[str], ctx: ArgContext) -> None:
    _scan_options(
        args,
        ctx,
        jail_short="oDc",
        jail_long=(
            "--output",
            "--output-dir",
            "--dump-header",
            "--cookie-jar",
            "--trace",
            "--trace-ascii",
            "--stderr",
            "--libcurl",
            "--etag-save",
            "--hsts",
            "--alt-svc",
        ),
        deny_short="K",
        deny_long=("--config",),
        stop_at_ddash=False,
    )


def _wget(args: Sequence[str], ctx: ArgContext) -> None:
    _scan_options(
        args,
        ctx,
        jail_short="OoaP",
        jail_long=(
            "--output-document",
            "--output-file",
            "--append-output",
            "--directory-prefix",
            "--save-cookies",
            "--warc-file",
            "--save-headers",
        ),
        deny_short="e",
        deny_long=("--execute", "--config", "--use-askpass"),
    )


def _dd(args: Sequence[str], ctx: ArgContext) -> None:
    for arg in args:
        if arg.startswith("of="):
            ctx.jail(arg[3:], arg)


def _tar(args: Sequence[str], ctx: ArgContext) -> None:
    denied = (
        "--checkpoint-action",
        "--to-command",
        "--use-compress-program",
        "--info-script",
        "--new-volume-script",
        "--rsh-command",
        "--rmt-command",
        "--index-file",
    )
    force_local = "--force-local" in args
    for index, arg in enumerate(args):
        if arg.startswith("--"):
            name, _, value = arg.partition("=")
            if any(d.startswith(name) and len(name) > 4 for d in denied):
                raise ctx.deny(arg, "runs another program")
            if name in ("--file", "--directory") or (name.startswith("--fil") and "=" in arg):
                _tar_path(name, value, arg, ctx, force_local)
        elif arg.startswith("-") or index == 0:  # a short cluster, or old style `tar xzf`
            letters = arg.lstrip("-")
            for letter in letters:
                if letter in "IF":
                    raise ctx.deny(arg, f"(option -{letter}) runs another program")
            if letters.endswith("f") and index + 1 < len(args):
                _tar_path("-f", args[index + 1], arg, ctx, force_local)
            if letters.endswith("C") and index + 1 < len(args):
                ctx.jail(args[index + 1], f"{arg} {args[index + 1]}")


def _tar_path(name: str, value: str, arg: str, ctx: ArgContext, force_local: bool) -> None:
    if name.startswith("--d") or name == "-C":
        ctx.jail(value, arg)
    elif ":" in value.split("/", 1)[0] and not force_local:
        raise ctx.deny(f"{arg} {value}", "names a remote archive, which tar opens with rsh")


_GIT_GLOBAL_FLAGS = frozenset(
    {
        "--no-pager",
        "--bare",
        "--no-replace-objects",
        "--literal-pathspecs",
        "--glob-pathspecs",
        "--noglob-pathspecs",
        "--icase-pathspecs",
        "--no-optional-locks",
        "--version",
        "--help",
        "--exec-path",
        "--html-path",
        "--man-path",
        "--info-path",
        "--no-advice",
    }
)
_GIT_SUBCOMMANDS = frozenset(
    (
        "add",
        "annotate",
        "apply",
        "archive",
        "blame",
        "branch",
        "bundle",
        "cat-file",
        "check-attr",
        "check-ignore",
        "check-mailmap",
        "checkout",
        "cherry",
        "cherry-pick",
        "clean",
        "clone",
        "commit",
        "commit-tree",
        "config",
        "count-objects",
        "describe",
        "diff",
        "diff-files",
        "diff-index",
        "diff-tree",
        "fetch",
        "for-each-ref",
        "format-patch",
        "fsck",
        "gc",
        "grep",
        "hash-object",
        "init",
        "log",
        "ls-files",
        "ls-remote",
        "ls-tree",
        "merge",
        "merge-base",
        "mktree",
        "mv",
        "name-rev",
        "notes",
        "pull",
        "push",
        "range-diff",
        "read-tree",
        "rebase",
        "reflog",
        "remote",
        "reset",
        "restore",
        "rev-list",
        "rev-parse",
        "revert",
        "rm",
        "shortlog",
        "show",
        "show-ref",
        "sparse-checkout",
        "stash",
        "status",
        "submodule",
        "switch",
        "symbolic-ref",
        "tag",
        "update-index",
        "update-ref",
        "var",
        "verify-commit",
        "verify-tag",
        "version",
        "whatchanged",
        "worktree",
        "write-tree",
    )
)
_GIT_DENIED_TEXT = (
    "sshcommand",
    "core.pager",
    "fsmonitor",
    "hookspath",
    "alias.",
    "credential.helper",
    "ext::",
    "fd::",
    "--upload-pack",
    "--receive-pack",
    "--exec",
    "--config-env",
    "--open-files-in-pager",
    "--ext-diff",
    "--extcmd",
)
_GIT_CONFIG_READ = frozenset(
    {
        "--get",
        "--get-all",
        "--get-regexp",
        "--get-urlmatch",
        "-l",
        "--list",
        "--show-origin",
        "--show-scope",
        "--name-only",
        "-z",
        "--null",
        "--local",
        "--global",
        "--system",
        "--worktree",
        "--bool",
        "--int",
        "--path",
        "--type=bool",
        "--type=int",
        "--type=path",
        "get",
        "list",
    }
)


def _git(args: Sequence[str], ctx: ArgContext) -> None:
    for arg in args:
        lowered = arg.lower()
        for text in _GIT_DENIED_TEXT:
            if text in lowered:
                raise ctx.deny(arg, "can make git run another program")
    index = 0
    while index < len(args) and args[index].startswith("-"):
        arg = args[index]
        index += 1
        if arg in _GIT_GLOBAL_FLAGS:
            continue
        if arg == "-C" and index < len(args):
            ctx.jail(args[index], f"-C {args[index]}")
            index += 1
        elif arg.startswith(("--git-dir=", "--work-tree=")):
            ctx.jail(arg.split("=", 1)[1], arg)
        else:  # -c, --exec-path=DIR, -p and anything unknown before the subcommand
            raise ctx.deny(arg, "is a global git option that can change what git runs")
    if index >= len(args):
        return
    sub, rest = args[index], args[index + 1 :]
    if sub not in _GIT_SUBCOMMANDS:
        raise ctx.deny(sub, "is not a built-in git command (aliases and helpers may run programs)")
    if sub in ("clone", "fetch", "pull", "ls-remote", "archive") and "-u" in rest:
        raise ctx.deny("-u", "sets the upload-pack program")
    if sub == "rebase" and any(a == "-x" or a.startswith("-x") for a in rest):
        raise ctx.deny("-x", "runs a command after each commit")
    if sub == "submodule" and "foreach" in rest:
        raise ctx.deny("foreach", "runs a command in each submodule")
    if sub == "grep" and any(a.startswith("-O") for a in rest):
        raise ctx.deny("-O", "opens files in a pager program")
    if sub == "config":
        positional = [a for a in rest if not a.startswith("-") and a not in ("get", "list")]
        options = [a for a in rest if a.startswith("-") or a in ("get", "list")]
        if len(positional) > 1 or any(a not in _GIT_CONFIG_READ for a in options):
            raise ctx.deny(" ".join(rest), "changes git configuration (aliases, hooks, helpers)")
    for pos, arg in enumerate(rest):
        if arg.startswith("--output="):
            ctx.jail(arg.split("=", 1)[1], arg)
        elif arg in ("--output", "-o", "--output-directory") and pos + 1 < len(rest):
            ctx.jail(rest[pos + 1], f"{arg} {rest[pos + 1]}")
        elif arg.startswith("--output-directory="):
            ctx.jail(arg.split("=", 1)[1], arg)


def _rsync(args: Sequence[str], ctx: ArgContext) -> None:
    _scan_options(
        args,
        ctx,
        jail_long=("--log-file", "--write-batch", "--only-write-batch"),
        deny_short="e",
        deny_long=("--rsh", "--rsync-path", "--server"),
        value_short="fBT",
    )
    for arg in args:
        if not arg.startswith("-") and re.match(r"^[^/]*:", arg):
            raise ctx.deny(arg, "names a remote host, which rsync reaches through a shell")


def _split(args: Sequence[str], ctx: ArgContext) -> None:
    _scan_options(args, ctx, deny_long=("--filter",))
    operands = [a for a in args if not a.startswith("-")]
    if len(operands) >= 2:
        ctx.jail(operands[1], operands[1])


def _zip(args: Sequence[str], ctx: ArgContext) -> None:
    for arg in args:
        if arg == "-TT" or arg.startswith(("--unzip-command", "-TT")):
            raise ctx.deny(arg, "runs another program")


def _diff_program(args: Sequence[str], ctx: ArgContext) -> None:
    _scan_options(args, ctx, deny_long=("--diff-program",))


# --- sed -----------------------------------------------------------------------------------


class _Unsure(Exception):
    """The sed script could not be parsed with certainty."""


def _sed(args: Sequence[str], ctx: ArgContext) -> None:
    scripts: list[str] = []
    files: list[str] = []
    in_place = False
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            files.extend(args[index:])
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if name in ("--expression",):
                if not eq:
                    value = args[index] if index < len(args) else ""
                    index += 1
                scripts.append(value)
            elif name == "--file":
                raise ctx.deny(arg, "reads a sed script from a file, which cannot be checked")
            elif name == "--in-place":
                in_place = True
            elif name == "--line-length" and not eq:
                index += 1
            elif name not in (
                "--quiet",
                "--silent",
                "--regexp-extended",
                "--separate",
                "--unbuffered",
                "--null-data",
                "--posix",
                "--debug",
                "--sandbox",
                "--follow-symlinks",
                "--binary",
                "--line-length",
                "--version",
                "--help",
            ):
                raise ctx.deny(arg, "is a sed option this sandbox does not know")
        elif arg.startswith("-") and len(arg) > 1:
            for pos, letter in enumerate(arg[1:], start=2):
                if letter in "nsErRuzb":
                    continue
                if letter == "i":
                    in_place = True
                    break  # the rest of the cluster is a backup suffix
                if letter in "ef":
                    if letter == "f":
                        raise ctx.deny(arg, "reads a sed script from a file (cannot be checked)")
                    value = arg[pos:]
                    if not value:
                        value = args[index] if index < len(args) else ""
                        index += 1
                    scripts.append(value)
                    break
                if letter == "l":
                    if not arg[pos:]:
                        index += 1
                    break
                raise ctx.deny(arg, "is a sed option this sandbox does not know")
        else:
            files.append(arg)
    if not scripts and files:
        scripts.append(files.pop(0))
    for script in scripts:
        try:
            problem = _sed_problem(script)
        except _Unsure:
            problem = "could not be parsed with certainty (refused to be safe)"
        if problem:
            raise ctx.deny(script, problem)
    if in_place:
        for path in files:
            ctx.jail(path, path)


_SED_SIMPLE = set("=dDgGhHnNpPxzFlLqQ")


def _sed_problem(script: str) -> str | None:
    """Why a sed script is unsafe (`e`, `w`, `W`, `s///e`, `s///w`), or None."""
    i, n = 0, len(script)

    def delimited(i: int, delim: str) -> int:
        while i < n:
            if script[i] == "\\":
                i += 2
                continue
            if script[i] == "\n":
                raise _Unsure
            if script[i] == delim:
                return i + 1
            i += 1
        raise _Unsure

    def address(i: int) -> int:
        if i < n and script[i].isdigit():
            while i < n and (script[i].isdigit() or script[i] == "~"):
                i += 1
        elif i < n and script[i] == "$":
            i += 1
        elif i < n and script[i] in "/\\":
            if script[i] == "\\":
                i += 1
                if i >= n:
                    raise _Unsure
            i = delimited(i + 1, script[i])
            while i < n and script[i] in "IM":
                i += 1
        return i

    def to_eol(i: int) -> int:
        while i < n and script[i] != "\n":
            i += 2 if script[i] == "\\" else 1
        return i

    while i < n:
        c = script[i]
        if c in " \t\n;}":
            i += 1
            continue
        if c == "#":
            i = to_eol(i)
            continue
        i = address(i)
        if i < n and script[i] == ",":
            i += 1
            if i < n and script[i] in "+~":
                i += 1
                while i < n and script[i].isdigit():
                    i += 1
            else:
                i = address(i)
        while i < n and script[i] in " \t!":
            i += 1
        if i >= n:
            raise _Unsure
        c = script[i]
        i += 1
        if c == "{":
            continue
        if c in "ewW":
            return f"uses the sed command {c!r}, which runs a program or writes a file"
        if c == "s":
            if i >= n or script[i] in "\\\n":
                raise _Unsure
            delim = script[i]
            i = delimited(delimited(i + 1, delim), delim)
            while i < n and script[i] not in ";\n}":
                flag = script[i]
                if flag in "ew":
                    return f"uses the s///{flag} flag, which runs a program or writes a file"
                if flag not in "gpiImM0123456789 \t":
                    raise _Unsure
                i += 1
        elif c == "y":
            if i >= n or script[i] in "\\\n":
                raise _Unsure
            delim = script[i]
            i = delimited(delimited(i + 1, delim), delim)
        elif c in "aicrR:":
            i = to_eol(i)
        elif c in "btT":
            while i < n and script[i] not in ";\n}":
                i += 1
        elif c in _SED_SIMPLE:
            while i < n and script[i] in " \t0123456789":
                i += 1
        else:
            raise _Unsure
    return None


# --- awk -----------------------------------------------------------------------------------

_AWK_DANGER = (
    (re.compile(r"\bsystem\s*\("), "calls system()"),
    (re.compile(r"(?<!\|)\|(?!\|)"), "uses a pipe to or from a command"),
    (re.compile(r"\bprintf?\b[^;{}\n]*>"), "redirects print output to a file"),
    (re.compile(r"@"), "uses @load, @include or an indirect call"),
)


def _awk(args: Sequence[str], ctx: ArgContext) -> None:
    programs: list[str] = []
    operands: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if operands or not arg.startswith("-") or arg == "-":
            operands.append(arg)
        elif arg == "--":
            operands.extend(args[index:])
            break
        elif arg in ("-F", "-v", "--field-separator", "--assign"):
            index += 1
        elif arg.startswith(("-F", "-v", "--field-separator=", "--assign=")):
            continue
        elif arg in ("-e", "--source"):
            programs.append(args[index] if index < len(args) else "")
            index += 1
        elif arg.startswith("--source="):
            programs.append(arg.split("=", 1)[1])
        elif arg in ("-S", "--sandbox", "-P", "--posix", "--version", "-V", "--"):
            continue
        else:  # -f/-E (program files), -i/-l (includes, extensions), -W, dump/profile files
            raise ctx.deny(arg, "is an awk option that loads code or writes files")
    if not programs:
        if not operands:
            return
        programs.append(operands[0])
    for program in programs:
        code = _awk_code(program)
        for pattern, why in _AWK_DANGER:
            if pattern.search(code):
                raise ctx.deny(program, why)


# After these characters awk cannot be dividing (there is no left operand), so `/` opens a
# regular expression. Anywhere else `/` is kept as code, which can only cause a refusal.
_AWK_REGEX_AFTER = frozenset("(,~!{;&|\n")


def _awk_code(program: str) -> str:
    """`program` with the insides of string and regex literals blanked out.

    Blanking never hides code: a literal is only blanked where awk itself reads one, and
    a literal that does not close on its line is kept as it is.
    """
    out: list[str] = []
    i, n = 0, len(program)
    previous = "\n"
    while i < n:
        c = program[i]
        is_regex = c == "/" and previous in _AWK_REGEX_AFTER
        if c == '"' or is_regex:
            j = i + 1
            while j < n and program[j] not in (c, "\n"):
                j += 2 if program[j] == "\\" else 1
            if j < n and program[j] == c:
                out.append(c + " " * (j - i - 1) + c)
                i = j + 1
                previous = c
                continue
        out.append(c)
        if not c.isspace():
            previous = c
        i += 1
    return "".join(out)


_Rule = Callable[[Sequence[str], ArgContext], None]
_RULES: dict[str, _Rule] = {
    "find": _find,
    "sed": _sed,
    "tar": _tar,
    "git": _git,
    "sort": _sort,
    "curl": _curl,
    "wget": _wget,
    "dd": _dd,
    "rsync": _rsync,
    "split": _split,
    "zip": _zip,
    "sdiff": _diff_program,
    "diff3": _diff_program,
}
