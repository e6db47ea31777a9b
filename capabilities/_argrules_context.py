"""What an argument rule knows about a `shell.run` call, and how it refuses an argument.

`ArgContext.deny` is the refusal of an argument (rule `shell.argument`); `ArgContext.jail`
holds a path the program would write to the granted folder (rule `shell.output-path`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

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
            f"{self.name} ({self.program}): argument {show(arg)} {why}; if this recipe "
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
                f"{self.name} ({self.program}): argument {show(arg)} writes to {real}, "
                f"outside the granted folder {self.root}; write to a path inside it",
                rule="shell.output-path",
                step_id=self.step_id,
            )


def show(arg: str) -> str:
    """An argument quoted for a message: escaped (repr) and cut to a readable length."""
    if len(arg) > _SHOWN:
        return repr(arg[:_SHOWN]) + f"... ({len(arg)} characters)"
    return repr(arg)
