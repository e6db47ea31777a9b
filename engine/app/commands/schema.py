"""`planloom schema`: print the recipe JSON Schema."""

from __future__ import annotations

import argparse

from engine.app.output import EXIT_OK, print_json
from engine.capability import Registry
from engine.model import plan_json_schema


def main(args: argparse.Namespace, registry: Registry) -> int:
    print_json(plan_json_schema())
    return EXIT_OK
