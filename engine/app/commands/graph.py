"""`planloom graph RECIPE`: draw a recipe's dependency graph (ascii, mermaid or dot), or
give it as data (`--json`)."""

from __future__ import annotations

import argparse
import sys

from engine.app.loading import load
from engine.app.output import EXIT_INVALID, EXIT_OK, print_json
from engine.capability import Registry
from engine.render import graph_data, render_graph


def main(args: argparse.Namespace, registry: Registry) -> int:
    if args.json and args.format is not None:
        sys.stderr.write(
            "planloom graph: --json and --format do not go together: --json gives the graph "
            "as data, --format draws it; pass one of them\n"
        )
        return EXIT_INVALID
    loaded = load(args.recipe, registry, as_json=args.json)
    if isinstance(loaded, int):
        return loaded
    if args.json:
        print_json(graph_data(loaded))
    else:
        sys.stdout.write(render_graph(loaded, args.format or "ascii"))
    return EXIT_OK
