"""`planloom plan GOAL`: have the model plan a goal, show the plan, approve it, run it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from engine._support.problems import validation_problems
from engine.app.launch import RunSettings, launch
from engine.app.output import EXIT_INVALID, invalid, print_json
from engine.capability import Registry
from engine.diagnostics import render_diagnostics
from engine.errors import ConfigurationError, PlanValidationError
from engine.model import Limits, LLMSettings
from engine.yaml import read_recipe


def main(args: argparse.Namespace, registry: Registry) -> int:
    if args.output and Path(args.output).exists() and not args.force:
        # Said before the model is asked: a plan that cannot be saved is a wasted call.
        raise ConfigurationError(
            f"-o {args.output}: the file exists; pass --force to replace it, or name another"
        )
    base: dict[str, Any] = {"version": 1, "name": "plan"}
    base_dir = Path.cwd()
    if args.capabilities:
        try:
            data, _ = read_recipe(args.capabilities)
        except PlanValidationError as exc:
            sys.stderr.write(render_diagnostics(exc.diagnostics, None) + "\n")
            if args.json:
                print_json(invalid([d.model_dump() for d in exc.diagnostics]))
            return EXIT_INVALID
        if not isinstance(data, dict) or not isinstance(data.get("capabilities"), dict):
            raise ConfigurationError(
                f"--capabilities {args.capabilities}: expected YAML with a 'capabilities:' "
                "mapping, as in recipes"
            )
        for key, model in (("llm", LLMSettings), ("limits", Limits)):
            try:
                model.model_validate(data.get(key) or {})
            except ValidationError as exc:
                problems = validation_problems(exc, prefix=(key,))
                where = f"--capabilities {args.capabilities}"
                raise ConfigurationError(f"{where}: {problems}") from None
        base.update({k: v for k, v in data.items() if k not in ("steps", "finally", "goal")})
        base_dir = Path(args.capabilities).resolve().parent
    return launch(RunSettings.from_args(args), registry, args.goal, base, base_dir)
