"""`planloom validate RECIPE`: check a recipe without running it.

A valid recipe may still have warnings (tool calls sure to pass `limits.max_tool_calls`):
they are printed on stderr, located like errors, and the exit code stays 0; `--json`
prints them (each with `"severity": "warning"`) where the errors of an invalid recipe go.
"""

from __future__ import annotations

import argparse
import sys

from engine.app.loading import load
from engine.app.output import EXIT_OK, print_json
from engine.capability import Registry
from engine.validation import recipe_warnings


def main(args: argparse.Namespace, registry: Registry) -> int:
    loaded = load(args.recipe, registry, as_json=args.json)
    if isinstance(loaded, int):
        return loaded
    warnings, shown = recipe_warnings(args.recipe, loaded)
    if args.json:
        print_json([warning.model_dump() for warning in warnings])
    else:
        sys.stderr.write(shown)
        total = len(loaded.all_steps())
        noted = f", {len(warnings)} warning{'s' if len(warnings) != 1 else ''}" if warnings else ""
        print(f"{args.recipe}: ok ({total} step{'s' if total != 1 else ''}{noted})")
    return EXIT_OK
