"""The `--` rule for `shell.run`: arguments that come from templates are never read as options.

ATTACKS B7: a file name or model output such as `--output=/etc/x` must reach the program as
an operand. The `programs` table says which programs accept `--` and which of their
options take a value.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Literal

from capabilities.shell.argrules._context import ArgContext, show
from capabilities.shell.programs import Options, lookup
from engine.errors import CapabilityDenied

__all__ = ["protect_data_arguments"]

_Slot = Literal["operand", "value", "unknown"]


def protect_data_arguments(
    argv: Sequence[str], data: Collection[int], ctx: ArgContext
) -> list[str]:
    """`argv` with `--` inserted so that templated arguments are never read as options.

    `data` holds the argv indexes whose text came from a template (file names, model
    output). For a program that accepts `--` (the `programs` table), `--` goes just before
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
    name = ctx.label
    entry = lookup(ctx.name)
    if entry is not None and entry.script is not None:
        why = (
            f"{name} reads what comes before its script as options, and the script may "
            "read what follows it as options too, so nothing can mark it as a file name"
        )
    elif not accepts:
        why = f"{name} is not known to accept `--`, so nothing can mark it as a file name"
    elif slot == "unknown":
        why = (
            f"it follows {show(argv[index - 1])}, and whether that option takes a value is "
            "not known, so `--` cannot be inserted there"
        )
    else:
        why = (
            f"the recipe's own option {show(argv[follows or 0])} (argv[{follows}]) comes "
            "after it, so `--` cannot be inserted before it"
        )
    fix = 'prefix the template with `./` (e.g. "./${{ item }}") so it reads as a path'
    if follows is not None:
        fix = f"put the recipe's own options before the templated arguments, or {fix}"
    return CapabilityDenied(
        f"{name}: argv[{index}] {show(argv[index])} comes from a template "
        f"and starts with '-', so {name} would read it as an option; {why}. To fix: {fix}",
        rule="shell.option-from-data",
        step_id=ctx.step_id,
    )
