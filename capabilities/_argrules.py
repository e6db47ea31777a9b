"""Per-program argument rules for `shell.run`: refuse known ways to run other programs.

An allow-list of programs is not enough: `find -exec`, `sed e`, `tar --checkpoint-action`,
`git -c alias.x=!cmd`, `awk 'BEGIN{system("id")}'`, `sqlite3 .shell`, wrappers such as `env`,
`xargs` or `setarch` and interpreters such as `sh -c` all turn one allowed program into any
program (ATTACKS B2-B6). Output flags (`sort -o`, `curl -o`, `tee`, `dd of=`) are held to
the granted folder (B5), and arguments that come from templates are never read as options
(B7, `protect_data_arguments`).

Which rule applies to which program is data: the table in `_programs`, keyed by the
basename of the program's *real* path, so a symlink or a copy under another name meets the
rules of what it really is. This module applies the table (git's config-driven programs are
reset by `_gitconfig`). Parsing is conservative: when an argument cannot be understood, it
is refused. A grant lifts every rule for a program by
naming it in both `allow` and `unsafe_args`; Landlock and the namespaces still apply.

Rule ids: `shell.argument` (an exec-escape, wrapper, interpreter or unreadable script),
`shell.output-path` (a file the program would write lies outside the granted folder) and
`shell.option-from-data` (a templated argument would be read as an option).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from capabilities._programs import Options, Program, lookup
from engine.errors import CapabilityDenied

__all__ = [
    "ArgContext",
    "check_arguments",
    "final_arguments",
    "protect_data_arguments",
    "rule_family",
]

_INFO_ONLY = frozenset({"--version", "--help", "-V", "-h", "-?"})
_MULTI_CALL_INFO = frozenset({*_INFO_ONLY, "--list", "--list-full"})
_SHOWN = 200  # characters of an argument quoted in a message


@dataclass(frozen=True, slots=True)
class ArgContext:
    """What the rules need besides the arguments.

    Attributes:
        program: the program's real path.
        root: the granted folder (a real path).
        workdir: the folder the program runs in (a real path inside `root`).
        step_id: the calling step, for errors.
        applet: the applet a multi-call binary (`busybox`) is asked to run, if any.
    """

    program: str
    root: str
    workdir: str
    step_id: str | None = None
    applet: str | None = None

    @property
    def name(self) -> str:
        """The name the rules judge: the applet, else the real path's basename."""
        return self.applet or os.path.basename(self.program)

    def deny(self, arg: str, why: str) -> CapabilityDenied:
        grant = os.path.basename(self.program)
        return CapabilityDenied(
            f"{self.name} ({self.program}): argument {_show(arg)} {why}; if this recipe "
            f"really needs it, grant it with `capabilities: shell: {{allow: [{grant}], "
            f"unsafe_args: [{grant}]}}`",
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
                f"{self.name} ({self.program}): argument {_show(arg)} writes to {real}, "
                f"outside the granted folder {self.root}; write to a path inside it",
                rule="shell.output-path",
                step_id=self.step_id,
            )


def _show(arg: str) -> str:
    """An argument quoted for a message: escaped (repr) and cut to a readable length."""
    if len(arg) > _SHOWN:
        return repr(arg[:_SHOWN]) + f"... ({len(arg)} characters)"
    return repr(arg)


def rule_family(name: str) -> str | None:
    """The kind of rule the table gives a program basename (None when it is not listed)."""
    entry = lookup(name)
    return entry.rule if entry is not None else None


def check_arguments(args: Sequence[str], ctx: ArgContext) -> None:
    """Raise `CapabilityDenied` if `args` (argv without argv[0]) could escape the grant."""
    entry = lookup(ctx.name)
    if entry is None:
        return
    if entry.rule == "runs-code":
        raise ctx.deny(" ".join(args) or ctx.name, f"cannot be checked: {ctx.name} {entry.why}")
    if entry.rule in ("wrapper", "interpreter"):
        for arg in args:
            if arg not in _INFO_ONLY:
                raise ctx.deny(arg, f"is refused: {ctx.name} {entry.why} ({entry.rule})")
        return
    for arg in args:
        for pattern, why in entry.deny:
            if re.search(pattern, arg):
                raise ctx.deny(arg, why)
    options = entry.options
    if options is not None and (
        options.jail_short or options.jail_long or options.deny_short or options.deny_long
    ):
        _scan_options(args, ctx, options)
    _PARSERS.get(entry.rule, _nothing)(args, ctx, entry)


def final_arguments(args: Sequence[str], ctx: ArgContext) -> list[str]:
    """The arguments to run with, once checked: the table's `prepend` first, and for git
    the flags that switch off the repository's external diff drivers and textconv."""
    entry = lookup(ctx.name)
    if entry is None:
        return list(args)
    if entry.rule == "git":
        args = _git_arguments(args)
    return [*entry.prepend, *args]


# --- arguments from templates (ATTACKS B7) ---------------------------------------------------

_Slot = Literal["operand", "value", "unknown"]


def protect_data_arguments(
    argv: Sequence[str], data: Collection[int], ctx: ArgContext
) -> list[str]:
    """`argv` with `--` inserted so that templated arguments are never read as options.

    `data` holds the argv indexes whose text came from a template (file names, model
    output). For a program that accepts `--` (the `_programs` table), `--` goes just before
    the first templated argument that is not an option's value, unless a literal option
    comes after that point or a `--` already precedes it. A templated argument that starts
    with `-` and is still not protected (no `--` before it, not the value of an option the
    table knows takes one) is refused.

    Raises:
        CapabilityDenied: rule `shell.option-from-data`, naming the argument and the fix.
    """
    out = list(argv)
    data = {index for index in data if 0 < index < len(out)}
    if not data:
        return out
    entry = lookup(ctx.name)
    options = entry.options if entry is not None else None
    accepts = entry is not None and entry.end_of_options

    def slot(index: int) -> _Slot:
        return _slot(out, index, data, options)

    marker = next(
        (
            i
            for i in range(1, len(out))
            if out[i] == "--" and i not in data and slot(i) == "operand"
        ),
        None,
    )
    open_data = sorted(i for i in data if marker is None or i < marker)
    first = next((i for i in open_data if slot(i) != "value"), None)
    follows = None
    if first is not None:
        follows = next(
            (j for j in range(first + 1, len(out)) if j not in data and _is_option(out[j])),
            None,
        )
    if accepts and first is not None and slot(first) == "operand" and follows is None:
        out.insert(first, "--")
        return out
    for index in open_data:
        if _is_option(out[index]) and slot(index) != "value":
            raise _from_data(out, index, ctx, accepts, slot(index), follows)
    return out


def _is_option(arg: str) -> bool:
    return arg.startswith("-") and arg != "-"


def _slot(argv: Sequence[str], index: int, data: Collection[int], options: Options | None) -> _Slot:
    """Whether `argv[index]` is an operand, the value of the option before it, or unknown."""
    before = index - 1
    if before == 0 or before in data:
        return "operand"
    previous = argv[before]
    if previous == "--" or not _is_option(previous):
        return "operand"
    if options is None:
        return "unknown"
    if previous.startswith("--"):
        name, eq, _ = previous[2:].partition("=")
        if eq:
            return "operand"
        if options.long_takes_value(name):
            return "value"
        # getopt accepts unique abbreviations: one of a value option is not known for sure.
        if any(o.startswith(name) for o in (*options.value_long, *options.jail_long)):
            return "unknown"
        return "operand"
    for position, letter in enumerate(previous[1:], start=2):
        if options.short_takes_value(letter):
            return "value" if position == len(previous) else "operand"
    return "operand"


def _from_data(
    argv: Sequence[str],
    index: int,
    ctx: ArgContext,
    accepts: bool,
    slot: _Slot,
    follows: int | None,
) -> CapabilityDenied:
    name = ctx.name
    if not accepts:
        why = f"{name} is not known to accept `--`, so nothing can mark it as a file name"
    elif slot == "unknown":
        why = (
            f"it follows {_show(argv[index - 1])}, and whether that option takes a value is "
            "not known, so `--` cannot be inserted there"
        )
    else:
        why = (
            f"the recipe's own option {_show(argv[follows or 0])} (argv[{follows}]) comes "
            "after it, so `--` cannot be inserted before it"
        )
    fix = 'prefix the template with `./` (e.g. "./${{ item }}") so it reads as a path'
    if follows is not None:
        fix = f"put the recipe's own options before the templated arguments, or {fix}"
    return CapabilityDenied(
        f"{name} ({ctx.program}): argv[{index}] {_show(argv[index])} comes from a template "
        f"and starts with '-', so {name} would read it as an option; {why}. To fix: {fix}",
        rule="shell.option-from-data",
        step_id=ctx.step_id,
    )


# --- git ---------------------------------------------------------------------------------------

# Subcommands that print diffs: external diff drivers (`diff.external`,
# `diff.<driver>.command`) and textconv filters from the repository's config are switched
# off by flags, since no config value can unset them (`_gitconfig` resets the rest).
_GIT_DIFFING = frozenset(
    {
        "diff",
        "log",
        "show",
        "whatchanged",
        "format-patch",
        "diff-files",
        "diff-index",
        "diff-tree",
    }
)
_GIT_LOG_LIKE = {"stash": ("show", "list"), "reflog": ("show",)}
_GIT_NO_TEXTCONV = frozenset({"blame", "annotate"})


def _git_arguments(args: Sequence[str]) -> list[str]:
    """`git` arguments with `--no-ext-diff --no-textconv` after a diff-printing subcommand."""
    out = list(args)
    index = _git_subcommand_index(out)
    if index is None:
        return out
    sub = out[index]
    after = out[index + 1] if index + 1 < len(out) else None
    if sub in _GIT_LOG_LIKE:  # `stash show|list`, `reflog [show]` take log's diff options
        if after in _GIT_LOG_LIKE[sub]:
            out[index + 2 : index + 2] = ["--no-ext-diff", "--no-textconv"]
        elif sub == "reflog" and (after is None or after.startswith("-")):
            out[index + 1 : index + 1] = ["--no-ext-diff", "--no-textconv"]
    elif sub in _GIT_DIFFING:
        out[index + 1 : index + 1] = ["--no-ext-diff", "--no-textconv"]
    elif sub in _GIT_NO_TEXTCONV:
        out[index + 1 : index + 1] = ["--no-textconv"]
    return out


def _git_subcommand_index(args: Sequence[str]) -> int | None:
    index = 0
    while index < len(args) and args[index].startswith("-"):
        index += 2 if args[index] in ("-C", "-c") else 1
    return index if index < len(args) else None


# --- helpers -------------------------------------------------------------------------------


def _nothing(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
    """Programs whose table entry is all the rule there is."""


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


def _writes_operands(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
    for value, arg in _path_operands(args):
        ctx.jail(value, arg)


def _writes_last(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
    operands = _path_operands(args)
    targeted = [pair for pair in operands if pair[1].startswith(("-t", "--target-directory"))]
    for value, arg in targeted or operands[-1:]:
        ctx.jail(value, arg)


def _long_matches(name: str, names: Sequence[str]) -> bool:
    """`--name` is one of `names`, or an abbreviation of one (getopt accepts those)."""
    return bool(name) and any(n.startswith(name) for n in names)


def _scan_options(args: Sequence[str], ctx: ArgContext, options: Options) -> None:
    """Check getopt-style options: jail the values of output options, refuse denied ones.

    A value after a short option that takes one ends that cluster; the next argument is
    still scanned (a false refusal is better than a missed option).
    """
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--" and options.stop_at_ddash:
            return
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if _long_matches(name, options.deny_long):
                raise ctx.deny(arg, "runs another program or reads options from a file")
            if _long_matches(name, options.jail_long):
                if not eq:
                    value = args[index] if index < len(args) else ""
                    index += 1
                ctx.jail(value, arg)
        elif arg.startswith("-") and len(arg) > 1:
            for pos, letter in enumerate(arg[1:], start=2):
                if letter in options.deny_short:
                    raise ctx.deny(arg, f"(option -{letter}) runs another program")
                if letter in options.jail_short:
                    value = arg[pos:]
                    if not value:
                        value = args[index] if index < len(args) else ""
                        index += 1
                    ctx.jail(value, arg)
                    break
                if letter in options.value_short:
                    break


# --- program rules -------------------------------------------------------------------------


def _env(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
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


def _multi_call(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
    """`busybox APPLET ARGS`: the applet's own table entry judges its arguments."""
    if not args:
        return
    first = args[0]
    if first.startswith("-"):
        if first in _MULTI_CALL_INFO and len(args) == 1:
            return
        raise ctx.deny(first, f"is a {ctx.name} option (only --help and --list are allowed)")
    applet = os.path.basename(first)
    known = lookup(applet)
    if known is None or known.rule == "multi-call":
        raise ctx.deny(first, f"names an applet these rules do not know ({entry.why})")
    check_arguments(args[1:], dataclasses.replace(ctx, applet=applet))


def _dd(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
    for arg in args:
        if arg.startswith("of="):
            ctx.jail(arg[3:], arg)


def _split(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
    """`split [OPTION]... [INPUT [PREFIX]]`: the output files start with PREFIX."""
    operands = _operands(args, entry.options)
    if len(operands) >= 2:
        ctx.jail(operands[1], operands[1])


def _operands(args: Sequence[str], options: Options | None) -> list[str]:
    """The operands of a getopt command line (option values skipped, `--` honoured)."""
    found: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            found.extend(args[index:])
            break
        if not arg.startswith("-") or arg == "-":
            found.append(arg)
        elif options is not None and arg.startswith("--"):
            if "=" not in arg and options.long_takes_value(arg[2:]):
                index += 1
        elif options is not None:
            for pos, letter in enumerate(arg[1:], start=2):
                if options.short_takes_value(letter):
                    index += pos == len(arg)
                    break
    return found


_TAR_DENIED = (
    "--checkpoint-action",
    "--to-command",
    "--use-compress-program",
    "--info-script",
    "--new-volume-script",
    "--rsh-command",
    "--rmt-command",
    "--index-file",
)


def _tar(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
    force_local = "--force-local" in args
    for index, arg in enumerate(args):
        if arg.startswith("--"):
            name, _, value = arg.partition("=")
            if any(d.startswith(name) and len(name) > 4 for d in _TAR_DENIED):
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


# --- SQL shells ------------------------------------------------------------------------------

# A dot-command: `.name` at the start of an argument or of a line in it. The shell also runs
# abbreviations (`.sh` is `.shell`), so only whole names from the allowed list pass.
_DOT_COMMAND = re.compile(r"(?:^|[\n;])[ \t]*\.([A-Za-z_0-9]*)")


def _sqlite(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
    """sqlite3 runs its arguments as SQL and dot-commands: only listed dot-commands pass."""
    for arg in args:
        for match in _DOT_COMMAND.finditer(arg):
            if match.group(1) not in entry.dot_commands:
                raise ctx.deny(
                    arg,
                    f"uses the dot-command .{match.group(1)}, which is not one of the "
                    "read-only ones allowed (.shell, .system, .import, .output, .once, .load "
                    "and .read can run programs or code)",
                )


# --- git rules -------------------------------------------------------------------------------

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
    "--textconv",
    "--filters",
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


def _git(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
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
    if sub == "range-diff":
        raise ctx.deny(sub, "runs the repository's textconv filters whatever flags it is given")
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


# --- sed -----------------------------------------------------------------------------------


class _Unsure(Exception):
    """The sed script could not be parsed with certainty."""


def _sed(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
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


def _awk(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
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


_Parser = Callable[[Sequence[str], ArgContext, Program], None]
_PARSERS: dict[str, _Parser] = {
    "writes-operands": _writes_operands,
    "writes-last-operand": _writes_last,
    "multi-call": _multi_call,
    "env": _env,
    "sed": _sed,
    "awk": _awk,
    "tar": _tar,
    "git": _git,
    "dd": _dd,
    "split": _split,
    "sqlite": _sqlite,
}
