"""`planloom run RECIPE`: validate a recipe and run it (a goal-only recipe is planned first)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.app.launch import RunSettings, launch, recorded_registry
from engine.app.loading import load
from engine.capability import Registry
from engine.validation import recipe_warnings


def main(args: argparse.Namespace, registry: Registry) -> int:
    settings = RunSettings.from_args(args)
    registry, tape = recorded_registry(settings, registry)
    loaded = load(args.recipe, registry, as_json=args.json, wrap=True)
    if isinstance(loaded, int):
        return loaded
    _, warnings = recipe_warnings(args.recipe, loaded)
    sys.stderr.write(warnings)  # before the run: what it will run into
    base_dir = Path(args.recipe).resolve().parent
    return launch(
        settings, registry, loaded, loaded.to_data(), base_dir, tape, recipe=Path(args.recipe)
    )
