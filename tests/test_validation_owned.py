"""`validate_plan(..., owned=True)`: the caller gives its data up, and the plan's steps keep
its `params` mappings and `depends_on` lists instead of copies (a large plan's peak memory
held both); without it the plan is the caller's data's copy, whatever the caller does next."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from capabilities import Registry, default_registry
from engine.validation import validate_plan
from engine.yaml import parse_json_text, parse_recipe_text
from planners.recipe import load_recipe

RECIPE: dict[str, Any] = {
    "version": 1,
    "name": "owned",
    "capabilities": {"t": {}},
    "steps": [
        {"id": "a", "tool": "t.echo", "params": {"value": 1}},
        {"id": "b", "tool": "t.echo", "params": {"value": "${{ steps.a.output }}"}},
        {"id": "c", "tool": "t.echo", "params": {"value": [1, 2]}, "depends_on": ["a", "b"]},
    ],
}


def _registry() -> Registry:
    registry = default_registry()

    @registry.function("t.echo", side_effects=False, blocking=False)
    def echo(value: Any = None) -> Any:
        """Return `value`."""
        return value

    return registry


REGISTRY = _registry()


def test_an_owned_plan_keeps_the_datas_params_and_depends_on() -> None:
    data, source = parse_json_text(json.dumps(RECIPE), "r.json")
    raw = data["steps"]
    plan = validate_plan(data, source, REGISTRY, base_dir=Path.cwd(), owned=True)
    assert [step.params is r["params"] for step, r in zip(plan.steps, raw, strict=True)] == [
        True
    ] * 3
    assert plan.steps[2].depends_on is raw[2]["depends_on"]
    copied = validate_plan(*parse_json_text(json.dumps(RECIPE), "r.json"), REGISTRY)
    assert plan == copied
    assert plan.to_data() == copied.to_data()


def test_a_plan_not_owned_is_a_copy_the_callers_changes_do_not_reach() -> None:
    data, source = parse_json_text(json.dumps(RECIPE), "r.json")
    plan = validate_plan(data, source, REGISTRY, base_dir=Path.cwd())
    data["steps"][0]["params"]["value"] = 99
    data["steps"][2]["depends_on"].append("zzz")
    assert plan.steps[0].params == {"value": 1}
    assert plan.steps[2].depends_on == ["a", "b"]


def test_steps_sharing_one_mapping_through_a_yaml_alias_validate_alike() -> None:
    """An alias makes two steps' params one mapping: kept as it is, each step reads it."""
    text = """\
version: 1
name: alias
capabilities: {t: {}}
steps:
  - {id: a, tool: t.echo, params: &same {value: 3}}
  - {id: b, tool: t.echo, params: *same}
"""
    owned = validate_plan(*parse_recipe_text(text, "r.yaml"), REGISTRY, owned=True)
    copied = validate_plan(*parse_recipe_text(text, "r.yaml"), REGISTRY)
    assert owned == copied
    assert [step.params for step in owned.steps] == [{"value": 3}, {"value": 3}]


def test_a_recipe_file_loaded_owned_is_the_plan_a_copy_gives(tmp_path: Path) -> None:
    """`load_recipe` (what `planloom run` reads a file with) gives its data up."""
    path = tmp_path / "r.json"
    path.write_text(json.dumps(RECIPE), encoding="utf-8")
    plan, _ = load_recipe(path, REGISTRY)
    copied = validate_plan(*parse_json_text(json.dumps(RECIPE), "r.json"), REGISTRY)
    assert plan == copied
    assert plan.steps[2].depends_on == ["a", "b"]
