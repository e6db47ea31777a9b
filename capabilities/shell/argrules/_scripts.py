"""The argument rule for interpreters that may run a script file from the granted folder.

`python3 tools/build.py` runs: what the script does is held by the confinement like
anything another allowed program does. The rule reads the interpreter's options the way
the interpreter does (its `Script` entry in `_programs_scripts`), refuses every option
that entry does not list as harmless (inline code, modules, standard input, start-up files,
search paths, and any option it does not know), and requires a script: the first operand,
or the one after `--`, must be a regular file whose real path lies inside the granted
folder (not `-`, `/dev/stdin`, a FIFO, a folder, a path outside the folder or a symlink
out of it). What follows the script is the script's own, and is not read here.

The file check is the early, explained refusal; Landlock is what holds the reads: a
script swapped for a symlink after the check still cannot be read from outside the
folder's and the system's readable paths.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence

from capabilities.shell.argrules._context import ArgContext, show
from capabilities.shell.programs import Script

__all__ = ["INFO_ONLY", "check_script"]

INFO_ONLY = frozenset({"--version", "--help", "-V", "-h", "-?"})
"""Arguments that only ask a program for help or its version (allowed alone)."""
_STDIN = "names standard input, not a script file"


def check_script(args: Sequence[str], ctx: ArgContext, spec: Script) -> None:
    """Raise `CapabilityDenied` unless `args` run a script from the granted folder with
    options `spec` lists as harmless (or only ask the interpreter for help or its version).
    """
    if args and all(arg in INFO_ONLY or arg in spec.info for arg in args):
        return
    reader = _Reader(args, ctx, spec)
    script = reader.script()
    if script is None:
        raise ctx.deny_call(
            f"no script file is named, so {ctx.label} would read its program from standard "
            "input; give the path of a script inside the granted folder as the first "
            "argument after the options"
        )
    _check_script_file(args[script], ctx)


class _Reader:
    """One pass over an interpreter's options, as `spec` says the interpreter reads them."""

    def __init__(self, args: Sequence[str], ctx: ArgContext, spec: Script) -> None:
        self.args = args
        self.ctx = ctx
        self.spec = spec
        self.index = 0
        self.refused = dict(spec.refused)
        self.values = dict(spec.values)
        self.long = dict(spec.long)
        self.attached = dict(spec.attached)

    def script(self) -> int | None:
        """The index of the script in `args` (None when there is none); each option is
        checked on the way."""
        while self.index < len(self.args):
            arg = self.args[self.index]
            self.index += 1
            if arg == "--":
                if self.args[self.index : self.index + 1] == ["-"]:
                    self._refuse_stdin()
                return self.index if self.index < len(self.args) else None
            if arg == "-":
                self._refuse_stdin()
            if arg.startswith("--"):
                self._long(arg)
            elif len(arg) > 1 and (arg[0] == "-" or (arg[0] == "+" and self.spec.plus)):
                self._cluster(arg)
            else:
                return self.index - 1
        return None

    def _next_value(self) -> str:
        value = self.args[self.index] if self.index < len(self.args) else ""
        self.index += 1
        return value

    def _long(self, arg: str) -> None:
        name, eq, value = arg[2:].partition("=")
        if self.spec.underscores:
            name = name.replace("_", "-")
        option = f"--{name}"
        self._refuse_option(arg, option)
        takes_value = self.long.get(name)
        if takes_value is None:
            raise self.ctx.deny(arg, self._unknown(option))
        if not takes_value:
            if eq:
                raise self.ctx.deny(arg, f"gives a value to {option}, which takes none")
            return
        if eq and self.spec.long_value == "next":
            raise self.ctx.deny(
                arg, f"is not how {self.ctx.label} reads {option} (`{option} VALUE`)"
            )
        if not eq:
            if self.spec.long_value == "equals":
                raise self.ctx.deny(arg, f"is not how {self.ctx.label} reads {option}=VALUE")
            value = self._next_value()
        self._check_value(arg, option, value)

    def _cluster(self, arg: str) -> None:
        """Short options, clustered (`-Bu`, `+ex`), each with its value if it takes one."""
        body = arg[1:]
        pos = 0
        while pos < len(body):
            letter = body[pos]
            pos += 1
            option = f"-{letter}"
            self._refuse_option(arg, option)
            if letter in self.spec.flags:
                continue
            if letter in self.spec.value_next:
                self._check_value(arg, option, self._next_value())
                continue
            if letter in self.spec.value:
                value = body[pos:] or self._next_value()
                self._check_value(arg, option, value)
                return
            pattern = self.attached.get(letter)
            if pattern is None:
                raise self.ctx.deny(arg, self._unknown(option))
            found = re.match(pattern, body[pos:], re.DOTALL)
            value = found.group(0) if found else ""
            pos += len(value)
            self._check_value(arg, option, value)

    def _refuse_stdin(self) -> None:
        raise self.ctx.deny("-", self.refused.get("-", _STDIN))

    def _refuse_option(self, arg: str, option: str) -> None:
        why = self.refused.get(option)
        if why is not None:
            where = "" if arg == option else f"(option {option}) "
            raise self.ctx.deny(arg, f"{where}{why}")

    def _check_value(self, arg: str, option: str, value: str) -> None:
        pattern = self.values.get(option)
        if pattern is not None and re.fullmatch(pattern, value, re.DOTALL) is None:
            raise self.ctx.deny(
                arg,
                f"gives {option} the value {show(value)}, which is not one {self.ctx.label} "
                "is known to take without running code from elsewhere",
            )

    def _unknown(self, option: str) -> str:
        return (
            f"is a {self.ctx.label} option these rules do not know (only options known not "
            "to run inline code, modules or start-up files are allowed)"
        )


def _check_script_file(path: str, ctx: ArgContext) -> None:
    """Refuse a script that is not a regular file inside the granted folder."""
    real = os.path.realpath(os.path.join(ctx.workdir, path))
    if os.path.commonpath([ctx.root, real]) != ctx.root:
        where = f"resolves to {real}" if real != os.path.normpath(path) else "is"
        raise ctx.deny(
            path,
            f"is the script, and it {where} outside the granted folder {ctx.root}; "
            f"{ctx.label} runs scripts from inside that folder only: move or copy the "
            "script there",
        )
    try:
        info = os.stat(real)
    except OSError as exc:
        if ctx.before_run:
            return  # an earlier step may make it
        raise ctx.deny(
            path,
            f"is the script, and it cannot be read ({exc.strerror or exc}); give the path "
            f"of a script file inside the granted folder {ctx.root}",
        ) from exc
    if not stat.S_ISREG(info.st_mode):
        raise ctx.deny(
            path,
            f"is the script, and it is not a regular file (a folder, FIFO or device); give "
            f"the path of a script file inside the granted folder {ctx.root}",
        )
