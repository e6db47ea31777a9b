"""`planloom validate RECIPE`: check a recipe without running it."""

from __future__ import annotations

import argparse

from engine.app.loading import load
from engine.app.output import EXIT_OK, print_json
from engine.capability import Registry


def main(args: argparse.Namespace, registry: Registry) -> int:
    loaded = load(args.recipe, registry, as_json=args.json)
    if isinstance(loaded, int):
        return loaded
    if args.json:
        print_json([])
    else:
        total = len(loaded.all_steps())
        print(f"{args.recipe}: ok ({total} step{'s' if total != 1 else ''})")
    return EXIT_OK
