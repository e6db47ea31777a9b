"""Argument rules for programs that write files: the paths they write stay in the folder.

`rm`, `mv` and kin write every path operand; `cp` and `install` their last one (or the
`-t` folder); `dd` its `of=`; `split` its output prefix; `tar` its archive and `-C` folder,
and `tar` options that run another program are refused.
"""

from __future__ import annotations

from collections.abc import Sequence

from capabilities.shell.argrules._context import ArgContext
from capabilities.shell.argrules._options import operands, path_operands
from capabilities.shell.programs import Program

__all__ = [
    "check_dd",
    "check_split",
    "check_tar",
    "check_writes_last",
    "check_writes_operands",
]


def check_writes_operands(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
    for value, arg in path_operands(args):
        ctx.jail(value, arg)


def check_writes_last(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
    found = path_operands(args)
    targeted = [pair for pair in found if pair[1].startswith(("-t", "--target-directory"))]
    for value, arg in targeted or found[-1:]:
        ctx.jail(value, arg)


def check_dd(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
    for arg in args:
        if arg.startswith("of="):
            ctx.jail(arg[3:], arg)


def check_split(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
    """`split [OPTION]... [INPUT [PREFIX]]`: the output files start with PREFIX."""
    found = operands(args, entry.options)
    if len(found) >= 2:
        ctx.jail(found[1], found[1])


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


def check_tar(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
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
