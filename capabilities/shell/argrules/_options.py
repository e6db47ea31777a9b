"""Reading getopt-style command lines for the argument rules: options, operands, paths.

`scan_options` checks a program's options against its `Options` entry (refused options,
output options held to the granted folder); `operands` and `path_operands` pick out what
the program takes as operands.
"""

from __future__ import annotations

from collections.abc import Sequence

from capabilities.shell.argrules._context import ArgContext
from capabilities.shell.programs import Options

__all__ = ["operands", "path_operands", "scan_options"]


def path_operands(args: Sequence[str]) -> list[tuple[str, str]]:
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


def _long_matches(name: str, names: Sequence[str]) -> bool:
    """`--name` is one of `names`, or an abbreviation of one (getopt accepts those)."""
    return bool(name) and any(n.startswith(name) for n in names)


def scan_options(args: Sequence[str], ctx: ArgContext, options: Options) -> None:
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


def operands(args: Sequence[str], options: Options | None) -> list[str]:
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
