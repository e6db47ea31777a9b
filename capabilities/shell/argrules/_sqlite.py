"""The argument rule for SQL shells (`sqlite3`, `duckdb`): only read-only dot-commands pass."""

from __future__ import annotations

import re
from collections.abc import Sequence

from capabilities.shell.argrules._context import ArgContext
from capabilities.shell.programs import Program

__all__ = ["check_sqlite"]

# A dot-command: `.name` at the start of an argument or of a line in it. The shell also runs
# abbreviations (`.sh` is `.shell`), so only whole names from the allowed list pass.
_DOT_COMMAND = re.compile(r"(?:^|[\n;])[ \t]*\.([A-Za-z_0-9]*)")


def check_sqlite(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
    """sqlite3 runs its arguments as SQL and dot-commands: only listed dot-commands pass."""
    for arg in args:
        for match in _DOT_COMMAND.finditer(arg):
            if match.group(1) not in entry.dot_commands:
                raise ctx.deny(
                    arg,
                    f"uses the dot-command .{match.group(1)}, which is not one of the "
                    "read-only ones allowed (.shell, .system, .import, .output, .once, .load "
                    "and .read can run programs or code)",
                )
