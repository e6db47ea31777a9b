"""`planloom graph RECIPE`: draw a recipe's dependency graph (ascii, mermaid or dot)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from engine.app.output import EXIT_OK, load
from engine.capability import Registry
from engine.render import render_graph

NAME = "graph"


def add(sub: Any) -> None:
    graph = sub.add_parser("graph", help="draw a recipe's dependency graph")
    graph.add_argument("recipe")
    graph.add_argument("--format", choices=["mermaid", "dot", "ascii"], default="ascii")


def main(args: argparse.Namespace, registry: Registry) -> int:
    loaded = load(args.recipe, registry, as_json=False)
    if isinstance(loaded, int):
        return loaded
    sys.stdout.write(render_graph(loaded, args.format))
    return EXIT_OK
