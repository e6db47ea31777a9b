"""Load recipes (YAML, or JSON for a `*.json` file) into a validated `Plan`: read with
locations (`engine.yaml`), then validated against the capability registry."""

from __future__ import annotations

from pathlib import Path

from engine.capability import Registry
from engine.diagnostics import SourceMap
from engine.model import Plan
from engine.validation import validate_plan
from engine.yaml import parse_recipe_text, read_recipe

__all__ = ["load_recipe", "parse_recipe_text", "read_recipe"]


def load_recipe(path: str | Path, registry: Registry) -> tuple[Plan, SourceMap]:
    """Read, parse and validate a recipe file.

    Raises:
        RecipeSyntaxError: the file is unreadable, binary, not YAML (not JSON, for a
            `*.json` file), or passes a cap of `engine.limits`.
        PlanValidationError: the recipe has problems; every one of them is listed.
    """
    data, source = read_recipe(path)
    base_dir = Path(path).resolve().parent
    return validate_plan(data, source, registry, base_dir=base_dir, owned=True), source
