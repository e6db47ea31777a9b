"""The replay planner: the plan a cassette recorded, validated as a recipe would be."""

from __future__ import annotations

from pathlib import Path

from engine.capability import Registry
from engine.errors import ConfigurationError
from engine.model import Plan
from engine.recording import Cassette
from engine.validation import validate_plan
from engine.yaml import read_recipe_data
from planners.llm import plan_to_yaml

__all__ = ["plan_from_cassette"]


def plan_from_cassette(
    cassette: Cassette, name: str | Path, registry: Registry, base_dir: Path
) -> Plan:
    """The recorded plan, checked against every validation rule.

    Problems are located in the plan's YAML text (as `CASSETTE#plan:LINE:COL`), which is
    written only if there is one.

    Raises:
        ConfigurationError: the cassette holds no plan.
        PlanValidationError: the plan is not valid with these capabilities.
    """
    if cassette.plan is None:
        raise ConfigurationError(
            f"cassette {name}: it holds no plan (the recorded run was rejected or never "
            "planned); record it again with --record"
        )
    data, source = read_recipe_data(cassette.plan, f"{name}#plan", plan_to_yaml)
    return validate_plan(data, source, registry, base_dir=base_dir)
