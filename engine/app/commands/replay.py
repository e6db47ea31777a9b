"""`planloom replay CASSETTE`: replay a cassette's own plan (or goal) offline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.app.launch import RunSettings, launch, recorded_registry
from engine.app.output import EXIT_INVALID, invalid, print_json
from engine.capability import Registry
from engine.diagnostics import render_diagnostics
from engine.errors import PlanValidationError
from engine.recording.cassette import Cassette
from planners.replay import plan_from_cassette


def main(args: argparse.Namespace, registry: Registry) -> int:
    cassette = Cassette.load(args.cassette)
    settings = RunSettings.from_args(args, replay=args.cassette, record_mode="none")
    registry, tape = recorded_registry(settings, registry)
    base_dir = Path(args.cassette).resolve().parent
    if cassette.goal is not None:
        return launch(settings, registry, cassette.goal, cassette.base or {}, base_dir, tape)
    try:
        plan = plan_from_cassette(cassette, args.cassette, registry, base_dir)
    except PlanValidationError as exc:
        sys.stderr.write(render_diagnostics(exc.diagnostics, None) + "\n")
        sys.stderr.write(f"{args.cassette}: the recorded plan is not valid here\n")
        if args.json:
            print_json(invalid([d.model_dump() for d in exc.diagnostics]))
        return EXIT_INVALID
    return launch(settings, registry, plan, plan.to_data(), base_dir, tape)
