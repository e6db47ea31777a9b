"""The `planloom` command: parse the command line, build the registry, run the command.

Exit codes: 0 run succeeded; 1 run failed; 2 invalid recipe, usage or configuration;
3 plan rejected; 130 interrupted. `--json` prints one JSON object on stdout; progress,
prompts and summaries go to stderr.

Start-up is kept short: this module imports the grammar of the command line and nothing of
the engine, so `--help` and usage errors exit at once; then only the chosen command's
module is imported (`engine.app.commands.command_main`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from engine._gc import collector_paused, heap_frozen
from engine.app.commands import command_main
from engine.app.output import EXIT_INVALID, invalid, print_json
from engine.app.parser import build_parser
from engine.errors import ConfigurationError

__all__ = ["main"]

_SESSIONS = ("run", "plan", "replay")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `planloom` console script; returns the exit code.

    Args:
        argv: the arguments; None reads this process's command line, and is taken to mean
            the process ends when this returns (the console script, `python -m
            engine.app`): what the command imported is then left frozen, so the
            interpreter's collections at exit do not rescan it
            (`engine._gc.heap_frozen(until_exit=True)`).
    """
    args = build_parser().parse_args(argv)
    args.plugin = [*args.plugin, *getattr(args, "plugin_after", ())]
    try:
        # Importing the command and the capability families builds modules, classes and
        # pydantic models that live as long as the process and frees almost nothing: the
        # collector would only rescan them (a full pass costs ~20 ms by the end).
        with collector_paused():
            command = command_main(args.command)
            # Imported here, not at the top: `--help` and usage errors exit before it.
            from engine.app.registry import build_registry

            registry = build_registry(args.plugin)
        # Everything imported so far lives for the whole command: keep the cyclic collector
        # from rescanning it on every collection (nor at exit, when the process ends).
        with heap_frozen(until_exit=argv is None):
            return command(args, registry)
    except ConfigurationError as exc:
        sys.stderr.write(f"planloom: error: {exc}\n")
        if args.command in _SESSIONS and args.json:
            print_json(invalid([{"rule": "configuration", "message": str(exc)}]))
        return EXIT_INVALID
