"""`planloom graph RECIPE`: draw a recipe's dependency graph (ascii, mermaid or dot)."""

from __future__ import annotations

import argparse
import sys

from engine.app.loading import load
from engine.app.output import EXIT_OK
from engine.capability import Registry
from engine.render import render_graph


def main(args: argparse.Namespace, registry: Registry) -> int:
    loaded = load(args.recipe, registry, as_json=False)
    if isinstance(loaded, int):
        return loaded
    sys.stdout.write(render_graph(loaded, args.format))
    return EXIT_OK
