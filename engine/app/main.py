"""The `planloom` command: parse the command line, build the registry, run the command.

Exit codes: 0 run succeeded; 1 run failed; 2 invalid recipe, usage or configuration;
3 plan rejected; 130 interrupted. `--json` prints one JSON object on stdout; progress,
prompts and summaries go to stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from engine._gc import heap_frozen
from engine.app.commands import COMMANDS
from engine.app.output import EXIT_INVALID, invalid, print_json
from engine.app.registry import build_registry
from engine.errors import ConfigurationError

__all__ = ["main"]

_SESSIONS = ("run", "plan", "replay")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        sys.stderr.write(f"planloom: error: {message}\n")
        raise SystemExit(EXIT_INVALID)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="planloom",
        description="The `planloom` command.",
    )
    parser.add_argument(
        "-p",
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE and call its register(registry) to add capabilities (repeatable)",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add, _ in COMMANDS.values():
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `planloom` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        registry = build_registry(args.plugin)
        # Everything imported so far lives for the whole command: keep the cyclic collector
        # from rescanning it on every collection.
        with heap_frozen():
            _, command = COMMANDS[args.command]
            return command(args, registry)
    except ConfigurationError as exc:
        sys.stderr.write(f"planloom: error: {exc}\n")
        if args.command in _SESSIONS and args.json:
            print_json(invalid([{"rule": "configuration", "message": str(exc)}]))
        return EXIT_INVALID
