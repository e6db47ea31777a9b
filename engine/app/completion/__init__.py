"""Shell completion of the `planloom` command line, for bash, zsh and fish (argcomplete).

`planloom completion SHELL` prints `script(SHELL)`: a shell function that, on TAB, runs
`planloom` again with `_ARGCOMPLETE` and the line so far (`COMP_LINE`, `COMP_POINT`) in
its environment. `engine.app.main` then hands its parser to `complete` before doing
anything else: argcomplete parses the line with the command's own grammar, asks the
argument at the cursor for its values (`_completers`), writes them to the shell's file
descriptor 8 and ends the process. A command that is not completing imports neither this
package nor argcomplete.

argcomplete, not a generated static script (shtab): the values worth completing are
dynamic (a run's id from the store, the step ids of the recipe a run was made from), so
each TAB has to run planloom's own code; argcomplete is that round trip, with the parser
the command already has, for the three shells alike.

A completer reads and never writes: recipes as YAML events (`_recipes`), the store through
`engine.app.sqlite_store.peek`. One that fails completes nothing for its value, with no
message and no traceback.
"""

from __future__ import annotations

import argparse

import argcomplete
from argcomplete.shell_integration import shellcode

from engine.app.parser import SHELLS

__all__ = ["complete", "script"]


def script(shell: str) -> str:
    """The script that makes `shell` (bash, zsh or fish) complete `planloom`.

    Raises:
        ValueError: `shell` is not one of `SHELLS` (argcomplete would give an empty script).
    """
    if shell not in SHELLS:
        raise ValueError(f"no completion script for {shell!r}: use one of {', '.join(SHELLS)}")
    # No fallback to the shell's own file names: a value that completes to nothing (a run
    # id with no store here) offers nothing, and files are offered where files are asked.
    return shellcode(["planloom"], shell=shell, use_defaults=False)


def complete(parser: argparse.ArgumentParser) -> None:
    """Complete the line in this process's environment (`_ARGCOMPLETE` set by `script`'s
    function) with `parser`, and end the process; return at once if it is not set."""
    # Here, not at the top: printing the script (at every shell's start) needs none of it.
    from engine.app.completion._completers import attach, nothing

    attach(parser)
    argcomplete.autocomplete(
        parser,
        always_complete_options=False,  # flags when a `-` is typed, values before them
        default_completer=nothing,  # free text (a goal, a model) completes to nothing
    )
