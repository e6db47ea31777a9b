"""The argument rule for `awk`: no `system()`, pipe, output redirection or loaded code."""

from __future__ import annotations

import re
from collections.abc import Sequence

from capabilities.shell.argrules._context import ArgContext
from capabilities.shell.programs import Program

__all__ = ["check_awk"]

_AWK_DANGER = (
    (re.compile(r"\bsystem\s*\("), "calls system()"),
    (re.compile(r"(?<!\|)\|(?!\|)"), "uses a pipe to or from a command"),
    (re.compile(r"\bprintf?\b[^;{}\n]*>"), "redirects print output to a file"),
    (re.compile(r"@"), "uses @load, @include or an indirect call"),
)


def check_awk(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
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
