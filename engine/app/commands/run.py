"""`planloom run RECIPE`: validate a recipe and run it (a goal-only recipe is planned first)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from engine.app.flags import run_flags
from engine.app.launch import RunSettings, launch, recorded_registry
from engine.app.output import load
from engine.capability import Registry

NAME = "run"


def add(sub: Any) -> None:
    run = sub.add_parser("run", help="validate and run a recipe")
    run.add_argument("recipe")
    run_flags(run, yes="approve every confirmation gate", no="deny every confirmation gate")


def main(args: argparse.Namespace, registry: Registry) -> int:
    settings = RunSettings.from_args(args)
    registry, tape = recorded_registry(settings, registry)
    loaded = load(args.recipe, registry, as_json=args.json, wrap=True)
    if isinstance(loaded, int):
        return loaded
    base_dir = Path(args.recipe).resolve().parent
    return launch(
        settings, registry, loaded, loaded.to_data(), base_dir, tape, recipe=Path(args.recipe)
    )
