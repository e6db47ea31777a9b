"""`planloom schema`: print the recipe JSON Schema, for editors and CI."""

from __future__ import annotations

import argparse

from engine.app.output import EXIT_OK, print_json
from engine.capability import Registry
from engine.schema import recipe_schema


def main(args: argparse.Namespace, registry: Registry) -> int:
    print_json(recipe_schema(registry))
    return EXIT_OK
