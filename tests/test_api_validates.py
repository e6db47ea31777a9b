"""The Python API checks a plan before running it, as the CLI does: a plan built in Python
(or changed after it was validated) with a cycle or a misspelled tool raises the located
`PlanValidationError` that `planloom validate` prints, and nothing runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from capabilities import default_registry
from engine import Executor, Plan, PlanValidationError, Step, run_plan
from engine.capability import Registry
from engine.validation import ensure_valid, validate_plan
from planners.recipe import parse_recipe_text
from tests._procs import planloom


def writer(step_id: str, name: str, **fields: Any) -> dict[str, Any]:
    """A step writing `name` (gated: `confirm: never` lets it run unattended)."""
    params = {"path": name, "content": step_id}
    return {"id": step_id, "tool": "fs.write", "params": params, "confirm": "never", **fields}


def built(*steps: dict[str, Any]) -> Plan:
    """A plan made in Python, the way an API user makes one: no validation on the way."""
    grants = {"fs": {"root": ".", "write": ["**"]}}
    return Plan.model_validate({"capabilities": grants, "steps": list(steps)})


def run(plan: Plan, registry: Registry, where: Path) -> Any:
    return asyncio.run(run_plan(plan, registry=registry, base_dir=where))


def test_a_cycle_raises_and_runs_nothing(registry: Registry, tmp_path: Path) -> None:
    plan = built(
        writer("a", "a.txt", depends_on=["b"]),
        writer("b", "b.txt", depends_on=["a"]),
        writer("c", "c.txt"),  # free of the cycle: it must not run either
    )

    with pytest.raises(PlanValidationError) as caught:
        run(plan, registry, tmp_path)

    assert [d.rule for d in caught.value.diagnostics] == ["cycle"]
    assert "a → b → a" in caught.value.diagnostics[0].message
    assert list(tmp_path.iterdir()) == [], "a step of an invalid plan ran"


def test_a_misspelled_tool_is_found_before_anything_runs(
    registry: Registry, tmp_path: Path
) -> None:
    plan = built(writer("first", "first.txt"), {"id": "typo", "tool": "fs.raed", "params": {}})

    with pytest.raises(PlanValidationError) as caught:
        asyncio.run(Executor(plan, registry=registry, base_dir=tmp_path).run())

    (problem,) = caught.value.diagnostics
    assert problem.rule == "unknown-tool"
    assert "did you mean 'fs.read'" in str(problem.hint)
    assert not (tmp_path / "first.txt").exists()
    # The error's text is the report `planloom validate` prints: the line, and a caret.
    text = str(caught.value)
    assert "error[unknown-tool]: unknown tool 'fs.raed'" in text
    assert '"tool": "fs.raed"' in text
    assert "^" in text


def test_the_api_reports_what_planloom_validate_reports(registry: Registry, tmp_path: Path) -> None:
    plan = built(
        writer("a", "a.txt", depends_on=["b"]),
        writer("b", "b.txt", depends_on=["a"]),
        {"id": "c", "tool": "fs.raed", "params": {"path": "x"}},
        {"id": "d", "tool": "fs.read", "params": {"paht": "x"}},
        writer("e", "${{ steps.nowhere.output }}"),
    )
    with pytest.raises(PlanValidationError) as caught:
        run(plan, registry, tmp_path)
    recipe = tmp_path / "plan.yaml"
    with recipe.open("w", encoding="utf-8") as out:
        YAML(typ="safe").dump(plan.to_data(), out)

    proc = planloom("validate", "--json", recipe.name, cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    cli = {(d["rule"], d["message"]) for d in json.loads(proc.stdout)}
    api = {(d.rule, d.message) for d in caught.value.diagnostics}
    assert api == cli
    assert {"cycle", "unknown-tool", "bad-params", "unknown-step"} <= {r for r, _ in api}


def test_a_validated_plan_changed_afterwards_is_checked_again(
    registry: Registry, tmp_path: Path
) -> None:
    recipe = {"version": 1, "capabilities": {"fs": {"root": ".", "write": ["*"]}}}
    recipe["steps"] = [writer("w", "w.txt")]
    data, source = parse_recipe_text(json.dumps(recipe), "r.yaml")
    plan = validate_plan(data, source, registry, base_dir=tmp_path)

    plan.steps.append(Step.model_validate({"id": "x", "tool": "shell.rn", "params": {}}))
    with pytest.raises(PlanValidationError, match=r"unknown tool 'shell\.rn'"):
        run(plan, registry, tmp_path)

    del plan.steps[1]  # one step again, as when validated, but not the step validated
    plan.steps[0] = Step.model_validate({"id": "w", "tool": "fs.read", "params": {"paht": "x"}})
    with pytest.raises(PlanValidationError) as caught:
        run(plan, registry, tmp_path)
    assert {d.rule for d in caught.value.diagnostics} == {"bad-params"}  # paht, and no path
    assert list(tmp_path.iterdir()) == []


def test_a_validated_plan_is_not_checked_twice(registry: Registry, tmp_path: Path) -> None:
    recipe = {"version": 1, "capabilities": {"fs": {"root": ".", "write": ["*"]}}}
    recipe["steps"] = [writer("w", "w.txt")]
    data, source = parse_recipe_text(json.dumps(recipe), "r.yaml")
    plan = validate_plan(data, source, registry, base_dir=tmp_path)

    assert ensure_valid(plan, registry, base_dir=tmp_path) is plan
    # Another registry may lack its tools: the plan is checked against that one.
    assert ensure_valid(plan, default_registry(), base_dir=tmp_path) is not plan

    result = run(plan, registry, tmp_path)
    assert result.status == "succeeded", result.errors
    assert (tmp_path / "w.txt").read_text() == "w"


def test_a_valid_plan_built_in_python_runs(registry: Registry, tmp_path: Path) -> None:
    plan = built(writer("a", "a.txt"), writer("b", "${{ steps.a.output.path }}.copy"))

    result = run(plan, registry, tmp_path)

    assert result.status == "succeeded", result.steps
    assert (tmp_path / "a.txt").exists()
