"""`planloom plan GOAL`: have the model plan a goal, show the plan, approve it, run it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from engine._yaml import read_recipe
from engine.app.flags import cassette_flags, model_flags
from engine.app.launch import RunSettings, launch
from engine.app.output import EXIT_INVALID
from engine.capability import Registry
from engine.diagnostics import render_diagnostics
from engine.errors import ConfigurationError, PlanValidationError

NAME = "plan"


def add(sub: Any) -> None:
    plan = sub.add_parser("plan", help="plan a goal with the model, show it, approve, run")
    plan.add_argument("goal")
    plan.add_argument(
        "--capabilities",
        metavar="FILE",
        help="YAML with a 'capabilities:' block (and limits), as in recipes",
    )
    plan.add_argument("-o", "--output", metavar="RECIPE", help="save the plan as a recipe")
    plan.add_argument("-i", "--input", action="append", default=[], metavar="KEY=VALUE")
    plan_who = plan.add_mutually_exclusive_group()
    plan_who.add_argument("--yes", action="store_true", help="approve the plan and every gate")
    plan_who.add_argument("--no", action="store_true", help="reject the plan")
    plan.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    plan.add_argument("-v", "--verbose", action="store_true")
    plan.add_argument("--log-file", metavar="FILE")
    plan.add_argument("--dry-run", action="store_true")
    plan.add_argument("--policy", metavar="FILE")
    model_flags(plan)
    cassette_flags(plan)


def main(args: argparse.Namespace, registry: Registry) -> int:
    base: dict[str, Any] = {"version": 1, "name": "plan"}
    base_dir = Path.cwd()
    if args.capabilities:
        try:
            data, _ = read_recipe(args.capabilities)
        except PlanValidationError as exc:
            sys.stderr.write(render_diagnostics(exc.diagnostics, None) + "\n")
            return EXIT_INVALID
        if not isinstance(data, dict) or not isinstance(data.get("capabilities"), dict):
            raise ConfigurationError(
                f"--capabilities {args.capabilities}: expected YAML with a 'capabilities:' "
                "mapping, as in recipes"
            )
        base.update({k: v for k, v in data.items() if k not in ("steps", "finally", "goal")})
        base_dir = Path(args.capabilities).resolve().parent
    return launch(RunSettings.from_args(args), registry, args.goal, base, base_dir)
