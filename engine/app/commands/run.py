"""`planloom run RECIPE`: validate a recipe and run it (a goal-only recipe is planned first)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from engine.app.flags import cassette_flags, model_flags
from engine.app.launch import RunSettings, launch
from engine.app.output import load
from engine.capability import Registry

NAME = "run"


def add(sub: Any) -> None:
    run = sub.add_parser("run", help="validate and run a recipe")
    run.add_argument("recipe")
    run.add_argument(
        "-i",
        "--input",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a run input, parsed by its declared type (JSON for arrays/objects)",
    )
    who = run.add_mutually_exclusive_group()
    who.add_argument("--yes", action="store_true", help="approve every confirmation gate")
    who.add_argument("--no", action="store_true", help="deny every confirmation gate")
    run.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    run.add_argument("-v", "--verbose", action="store_true", help="log every event on stderr")
    run.add_argument("--log-file", metavar="FILE", help="write every event as JSON lines")
    run.add_argument(
        "--policy", metavar="FILE", help="allow/ask/deny rules for gated calls (first match wins)"
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="run read-only actions; report side effects instead of making them",
    )
    model_flags(run)
    cassette_flags(run)


def main(args: argparse.Namespace, registry: Registry) -> int:
    loaded = load(args.recipe, registry, as_json=args.json, wrap=True)
    if isinstance(loaded, int):
        return loaded
    base_dir = Path(args.recipe).resolve().parent
    start = loaded.goal if not loaded.steps and loaded.goal is not None else loaded
    return launch(RunSettings.from_args(args), registry, start, loaded.to_data(), base_dir)
