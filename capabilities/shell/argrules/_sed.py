"""The argument rule for `sed`: no script command or flag that runs a program or writes a file.

The script is parsed; one that cannot be parsed with certainty is refused. With `-i`, the
files edited in place must lie in the granted folder.
"""

from __future__ import annotations

from collections.abc import Sequence

from capabilities.shell.argrules._context import ArgContext
from capabilities.shell.programs import Program

__all__ = ["check_sed"]


class _Unsure(Exception):
    """The sed script could not be parsed with certainty."""


def check_sed(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
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
