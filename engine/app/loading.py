"""A recipe loaded for a command: validated, or its problems printed (with the exit code)."""

from __future__ import annotations

import sys

from engine.app.output import EXIT_INVALID, invalid, print_json
from engine.capability import Registry
from engine.diagnostics import render_diagnostics
from engine.errors import PlanValidationError
from engine.model import Plan
from engine.yaml import read_recipe
from planners.recipe import load_recipe

__all__ = ["load"]


def load(path: str, registry: Registry, *, as_json: bool, wrap: bool = False) -> Plan | int:
    """Load and validate; on problems print them (JSON on stdout or text on stderr) and
    return the exit code. With `wrap`, JSON problems are printed inside a run-shaped object
    (for `run --json`)."""
    try:
        plan, _ = load_recipe(path, registry)
    except PlanValidationError as exc:
        if as_json:
            problems = [d.model_dump() for d in exc.diagnostics]
            print_json(invalid(problems) if wrap else problems)
        else:
            try:
                _, source = read_recipe(path)
            except PlanValidationError:
                source = None
            sys.stderr.write(render_diagnostics(exc.diagnostics, source) + "\n")
            count = len(exc.diagnostics)
            sys.stderr.write(f"{path}: {count} problem{'s' if count != 1 else ''}\n")
        return EXIT_INVALID
    return plan
