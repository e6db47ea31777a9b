"""Per-program argument rules for `shell.run`: refuse known ways to run other programs.

An allow-list of programs is not enough: `find -exec`, `sed e`, `tar --checkpoint-action`,
`git -c alias.x=!cmd`, `awk 'BEGIN{system("id")}'`, `sqlite3 .shell`, wrappers such as `env`,
`xargs` or `setarch` and interpreters such as `sh -c` all turn one allowed program into any
program (ATTACKS B2-B6). Output flags (`sort -o`, `curl -o`, `tee`, `dd of=`) are held to
the granted folder (B5), and arguments that come from templates are never read as options
(B7, `protect_data_arguments` in `_argrules_data`).

Which rule applies to which program is data: the table in `programs`, keyed by the
basename of the program's *real* path, so a symlink or a copy under another name meets the
rules of what it really is. This module applies the table: it refuses wrappers, interpreters
and programs that run code, runs the option scan (`_argrules_options`) and hands programs
whose syntax needs a parser to theirs (`_argrules_git`, `_argrules_sed`, `_argrules_awk`,
`_argrules_sqlite`, `_argrules_writers`, and `_argrules_scripts` for interpreters that
may run a script file from the granted folder); git's config-driven programs are reset by
`_gitconfig`. Parsing is conservative: when an argument cannot be understood, it is refused.
A grant lifts every rule for a program by naming it in both `allow` and `unsafe_args`;
Landlock and the namespaces still apply.

Rule ids: `shell.argument` (an exec-escape, wrapper, interpreter code, a script outside the
folder, or an unreadable script),
`shell.output-path` (a file the program would write lies outside the granted folder) and
`shell.option-from-data` (a templated argument would be read as an option).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Sequence

from capabilities.shell.argrules._awk import check_awk
from capabilities.shell.argrules._context import ArgContext
from capabilities.shell.argrules._data import protect_data_arguments
from capabilities.shell.argrules._git import check_git, git_arguments
from capabilities.shell.argrules._options import scan_options
from capabilities.shell.argrules._scripts import INFO_ONLY, check_script
from capabilities.shell.argrules._sed import check_sed
from capabilities.shell.argrules._sqlite import check_sqlite
from capabilities.shell.argrules._writers import (
    check_dd,
    check_split,
    check_tar,
    check_writes_last,
    check_writes_operands,
)
from capabilities.shell.programs import Program, lookup

__all__ = [
    "ArgContext",
    "check_arguments",
    "final_arguments",
    "protect_data_arguments",
    "rule_family",
    "runs_scripts",
]

_MULTI_CALL_INFO = frozenset({*INFO_ONLY, "--list", "--list-full"})


def rule_family(name: str) -> str | None:
    """The kind of rule the table gives a program basename (None when it is not listed)."""
    entry = lookup(name)
    return entry.rule if entry is not None else None


def runs_scripts(name: str) -> bool:
    """Whether the table lets the program with this basename run a script file."""
    entry = lookup(name)
    return entry is not None and entry.script is not None


def check_arguments(args: Sequence[str], ctx: ArgContext) -> None:
    """Raise `CapabilityDenied` if `args` (argv without argv[0]) could escape the grant."""
    entry = lookup(ctx.name)
    if entry is None:
        return
    if entry.rule == "runs-code":
        why = f"cannot be checked: {ctx.label} {entry.why}"
        raise ctx.deny(" ".join(args), why) if args else ctx.deny_call(why)
    if entry.script is not None:
        check_script(args, ctx, entry.script)
        return
    if entry.rule in ("wrapper", "interpreter"):
        for arg in args:
            if arg not in INFO_ONLY:
                raise ctx.deny(arg, f"is refused: {ctx.label} {entry.why} ({entry.rule})")
        return
    for arg in args:
        for pattern, why in entry.deny:
            if re.search(pattern, arg):
                raise ctx.deny(arg, why)
    options = entry.options
    if options is not None and (
        options.jail_short or options.jail_long or options.deny_short or options.deny_long
    ):
        scan_options(args, ctx, options)
    _PARSERS.get(entry.rule, _nothing)(args, ctx, entry)


def final_arguments(args: Sequence[str], ctx: ArgContext) -> list[str]:
    """The arguments to run with, once checked: the table's `prepend` first, and for git
    the flags that switch off the repository's external diff drivers and textconv."""
    entry = lookup(ctx.name)
    if entry is None:
        return list(args)
    if entry.rule == "git":
        args = git_arguments(args)
    return [*entry.prepend, *args]


def _nothing(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
    """Programs whose table entry is all the rule there is."""


def _env(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
    """`env` alone prints the environment; with a command it is a wrapper."""
    harmless = {"-0", "--null", "-i", "--ignore-environment", "-", *INFO_ONLY}
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
        raise ctx.deny(first, f"is a {ctx.label} option (only --help and --list are allowed)")
    applet = os.path.basename(first)
    known = lookup(applet)
    if known is None or known.rule == "multi-call":
        raise ctx.deny(first, f"names an applet these rules do not know ({entry.why})")
    check_arguments(args[1:], dataclasses.replace(ctx, applet=applet))


_Parser = Callable[[Sequence[str], ArgContext, Program], None]
_PARSERS: dict[str, _Parser] = {
    "writes-operands": check_writes_operands,
    "writes-last-operand": check_writes_last,
    "multi-call": _multi_call,
    "env": _env,
    "sed": check_sed,
    "awk": check_awk,
    "tar": check_tar,
    "git": check_git,
    "dd": check_dd,
    "split": check_split,
    "sqlite": check_sqlite,
}
