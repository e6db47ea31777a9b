"""The program table behind `shell.run`'s argument rules, and the lookup of a program in it.

The table is data (`Program` entries, see `_programs_model`), kept by program group:
interpreters that may run a script file (`_programs_scripts`), programs that run other
programs or code (`_programs_runners`), programs checked argument by argument or whose
operands are written (`_programs_checked`) and GNU tools whose entry only says how they
read options (`_programs_gnu`).

A program that is not listed gets no argument rule, and a templated argument that starts
with `-` is refused for it (it is not known to accept `--`). The principle for what must be
listed: a program whose purpose is to run another program or code is refused unless the
grant lists it in `unsafe_args`; an interpreter whose command line is known may run a
script file from the granted folder, since what the script does is held by the confinement.
"""

from __future__ import annotations

import functools
import re

from capabilities.shell.programs._checked import CHECKED, WRITERS
from capabilities.shell.programs._gnu import GNU
from capabilities.shell.programs._model import Options, Program, Rule, Script
from capabilities.shell.programs._runners import INTERPRETERS, RUNS_CODE, WRAPPERS
from capabilities.shell.programs._scripts import SCRIPT_INTERPRETERS

__all__ = ["PROGRAMS", "Options", "Program", "Rule", "Script", "lookup"]

# Earlier entries win: the specific rules come before the GNU `--` list that repeats some
# names (e.g. `rm` is a writer and accepts `--`).
PROGRAMS: tuple[Program, ...] = (
    *WRAPPERS,
    *SCRIPT_INTERPRETERS,
    *INTERPRETERS,
    *RUNS_CODE,
    *CHECKED,
    *WRITERS,
    *GNU,
)


@functools.cache
def _compiled() -> tuple[tuple[re.Pattern[str], Program], ...]:
    return tuple((re.compile(entry.names), entry) for entry in PROGRAMS)


@functools.cache
def lookup(name: str) -> Program | None:
    """The table entry for a program basename, or None when it is not listed."""
    for pattern, entry in _compiled():
        if pattern.fullmatch(name):
            return entry
    return None
