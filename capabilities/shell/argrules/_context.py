"""What an argument rule knows about a `shell.run` call, and how it refuses an argument.

`ArgContext.deny` is the refusal of an argument (rule `shell.argument`); `ArgContext.jail`
holds a path the program would write to the granted folder (rule `shell.output-path`).
Messages name the program as the recipe wrote it (`python3`), not as the rules found it
(`/usr/bin/python3.11`), unless the file it resolves to is judged as another program.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from capabilities.shell.programs import lookup
from engine.errors import CapabilityDenied

__all__ = ["ArgContext", "show"]

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
        written: the program as the recipe wrote it (`argv[0]`), for messages.
        argv: the call's argv as given, so a refusal names the param it refuses
            (`CapabilityDenied.param`, where validation points).
        before_run: the call is a recipe's, checked at validation: a file it names may be
            made by an earlier step, so a file not there yet is not refused.
    """

    program: str
    root: str
    workdir: str
    step_id: str | None = None
    applet: str | None = None
    written: str | None = None
    argv: tuple[str, ...] = ()
    before_run: bool = False

    @property
    def name(self) -> str:
        """The name the rules judge: the applet, else the real path's basename."""
        return self.applet or os.path.basename(self.program)

    @property
    def label(self) -> str:
        """The program as messages name it: as written (`python3`, `busybox sh`), with the
        file it resolves to only when that file is judged as another program (`./ls`
        that is `/usr/bin/rm`), so the message says why these rules apply."""
        written = self.written or os.path.basename(self.program)
        label = f"{written} {self.applet}" if self.applet else written
        if lookup(os.path.basename(written)) is not lookup(os.path.basename(self.program)):
            label += f" ({self.program})"
        return label

    @property
    def grant_name(self) -> str:
        """What to write in `allow`/`unsafe_args` for this program: the name as written,
        unless it is a relative path that the grant (relative to its `cwd`, not the call's
        folder) would read as another file; then the real path."""
        written = self.written or os.path.basename(self.program)
        if "/" not in written or os.path.isabs(written):
            return written
        same = os.path.realpath(os.path.join(self.root, written)) == self.program
        return written if same else self.program

    def deny(self, arg: str, why: str) -> CapabilityDenied:
        """The refusal of argument `arg`, `why` saying what it would do."""
        refusal = self.deny_call(f"argument {show(arg)} {why}")
        refusal.param = self._param(arg)
        return refusal

    def deny_call(self, why: str) -> CapabilityDenied:
        """The refusal of the call as a whole (rule `shell.argument`), with the grant that
        would lift it."""
        grant = self.grant_name
        refusal = CapabilityDenied(
            f"{self.label}: {why}; if this recipe really needs it, grant it with "
            f"`capabilities: shell: {{allow: [{grant}], unsafe_args: [{grant}]}}`",
            rule="shell.argument",
            step_id=self.step_id,
        )
        refusal.param = ("argv", 0)
        return refusal

    def jail(self, path: str, arg: str) -> None:
        """Refuse `path` (from argument `arg`) unless it resolves inside the folder."""
        if path in ("-", "/dev/null", "/dev/stdout", "/dev/stderr"):
            return
        real = os.path.realpath(os.path.join(self.workdir, path))
        if os.path.commonpath([self.root, real]) != self.root:
            refusal = CapabilityDenied(
                f"{self.label}: argument {show(arg)} writes to {real}, "
                f"outside the granted folder {self.root}; write to a path inside it",
                rule="shell.output-path",
                step_id=self.step_id,
            )
            refusal.param = self._param(path, arg)
            raise refusal

    def _param(self, *args: str) -> tuple[str | int, ...]:
        """Where the first of `args` found in `argv` is in the params (the path an option
        takes, else the option), else the whole `argv`."""
        for arg in args:
            if arg in self.argv[1:]:
                return ("argv", self.argv.index(arg, 1))
        return ("argv",)


def show(arg: str) -> str:
    """An argument quoted for a message: escaped (repr) and cut to a readable length."""
    if len(arg) > _SHOWN:
        return repr(arg[:_SHOWN]) + f"... ({len(arg)} characters)"
    return repr(arg)
