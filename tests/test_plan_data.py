"""A plan a program holds as data (the planner's answer, a journaled or recorded plan) is
read as a JSON recipe's data is (`engine.yaml.read_recipe_data`), not written as YAML and
parsed back: the same plans and the same located problems as that round trip gave, the
YAML a person sees written only when it is wanted, and what JSON cannot hold refused where
it stands (the round trip let NaN through and turned a lone surrogate into a YAML error
in no step)."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest
from _procs import planloom
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from capabilities import Registry, default_registry
from engine.errors import PlanValidationError, RecipeSyntaxError
from engine.limits import MAX_DEPTH
from engine.llm import Budget, LLMClient, LLMConfig
from engine.testing import (
    ChatRequest,
    FakeOpenAIServer,
    ScriptedModel,
    ScriptedTools,
    instant_sleep,
)
from engine.validation import validate_plan
from engine.yaml import parse_recipe_text, read_recipe_data
from planners.llm import LLMPlanner, PlanOutcome, plan_to_yaml

GOAL = "Look a value up"
BASE: dict[str, Any] = {"version": 1, "name": "plan", "capabilities": {"test": {}}}
VALID = {"goal": GOAL, "steps": [{"id": "look", "tool": "test.run", "params": {"key": "k"}}]}


def _outcome(data: Any, source: Any, registry: Registry) -> Any:
    try:
        return validate_plan(data, source, registry, base_dir=Path("."), planned=True)
    except PlanValidationError as exc:
        return [(d.line, d.column, d.rule, d.message) for d in exc.diagnostics]


# (no NEL: the round trip read U+0085 back as a line break; no NaN or lone surrogate)
_words = st.text(st.characters(codec="utf-8", exclude_characters="\x85"), max_size=10)
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
    _words, st.sampled_from(["${{ steps.s0.output }}", "{{ x }}", "yes", "1e3", "- a", ""]),
)  # fmt: skip
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_words, inner, max_size=3),
    max_leaves=10,
)


@st.composite
def _recipes(draw: st.DrawFn) -> dict[str, Any]:
    """A model's answer inside its recipe, good and bad."""
    steps: list[Any] = []
    for index in range(draw(st.integers(0, 4))):
        step: dict[str, Any] = {
            "id": draw(st.sampled_from([f"s{index}", "s0", "bad id", 7])),
            "tool": draw(st.sampled_from(["fs.read", "fs.list", "fs.red", "fs.write"])),
            "params": draw(st.sampled_from([{"path": "a"}, {"path": 3}, {"pth": "a"}]) | _values),
        }
        if draw(st.booleans()):
            key = draw(st.sampled_from(["depends_on", "when", "confirm", "retry", "extra"]))
            step[key] = draw(_values)
        steps.append(step if draw(st.integers(0, 9)) else draw(_values))
    recipe: dict[str, Any] = {"version": 1, "name": "plan", "goal": draw(_words)}
    recipe["capabilities"] = {"fs": {"root": ".", "write": ["out/**"]}}
    recipe["steps"] = steps
    if draw(st.booleans()):
        recipe[draw(st.sampled_from(["outputs", "limits", "inputs", "nonsense"]))] = draw(_values)
    return recipe


@settings(max_examples=300)
@given(_recipes())
def test_plan_data_validates_as_its_yaml_round_trip_did(recipe: dict[str, Any]) -> None:
    """Equal plans, or the same problems at the same lines and columns of the same YAML."""
    registry = default_registry()
    text = plan_to_yaml(recipe)
    before = _outcome(*parse_recipe_text(text, "plan.yaml"), registry)
    data, source = read_recipe_data(recipe, "plan.yaml", plan_to_yaml)
    assert _outcome(data, source, registry) == before
    assert source.text == text


def test_the_yaml_is_written_only_when_wanted() -> None:
    written: list[Any] = []

    def show(data: Any) -> str:
        written.append(data)
        return plan_to_yaml(data)

    recipe = {**BASE, "capabilities": {"fs": {}}, "steps": [{"id": "a", "tool": "fs.list"}]}
    data, source = read_recipe_data(recipe, "plan.yaml", show)
    validate_plan(data, source, default_registry(), base_dir=Path("."), planned=True)
    assert written == []  # valid: nobody asked
    recipe["steps"][0]["tool"] = "fs.lst"
    data, source = read_recipe_data(recipe, "plan.yaml", show)
    with pytest.raises(PlanValidationError) as caught:
        validate_plan(data, source, default_registry(), base_dir=Path("."), planned=True)
    [problem] = caught.value.diagnostics
    assert (problem.line, problem.column, problem.rule) == (7, 9, "unknown-tool")
    assert source.lines[6] == "  tool: fs.lst"
    assert written == [recipe]  # once, for the position and the line


@pytest.mark.parametrize(
    ("value", "message", "line"),
    [
        (math.nan, "NaN is not a JSON number", "value: .nan"),
        (-math.inf, "-Infinity is not a JSON number", "value: -.inf"),
        (10**5000, "an integer longer than Python reads", "value: (a very long integer)"),
        ("caf\udce9", "this string holds \\udce9, half of a UTF-16 surrogate pair", "value: caf?"),
    ],
    ids=["nan", "infinity", "long-int", "lone-surrogate"],
)
def test_what_json_cannot_hold_is_refused_where_it_stands(
    value: Any, message: str, line: str
) -> None:
    recipe = {**BASE, "steps": [{"id": "a", "tool": "test.run", "params": {"value": value}}]}
    with pytest.raises(RecipeSyntaxError) as caught:
        read_recipe_data(recipe, "plan.yaml", plan_to_yaml)
    [problem] = caught.value.diagnostics
    assert (problem.rule, problem.message[: len(message)]) == ("json-value", message)
    source = caught.value.source
    assert source is not None  # the YAML the problem is located in (shown as writable)
    assert (problem.line, problem.column) == (9, 12)
    assert source.lines[8] == f"    {line}"


def test_nesting_past_the_cap_is_refused_at_the_value_that_passes_it() -> None:
    deep: Any = "x"
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    recipe = {**BASE, "steps": [{"id": "a", "tool": "test.run", "params": {"value": deep}}]}
    with pytest.raises(RecipeSyntaxError) as caught:
        read_recipe_data(recipe, "plan.yaml", plan_to_yaml)
    [problem] = caught.value.diagnostics
    assert problem.rule == "too-deep"
    # the steps list, a step, its params and `value` are four levels of the hundred
    assert caught.value.source is not None
    shown = caught.value.source.lines[problem.line - 1]
    assert shown[problem.column - 1 :].startswith("(nested")  # (wrapped at 100 columns)
    assert shown[: problem.column - 1].count("- ") == MAX_DEPTH - 4


# -- the planner --------------------------------------------------------------------------------


def _plan(server: FakeOpenAIServer, registry: Registry, base_dir: Path) -> PlanOutcome:
    async def scenario() -> PlanOutcome:
        config = LLMConfig(model="m", base_url=server.base_url, api_key=SecretStr("k"))
        client = LLMClient(config, budget=Budget(), sleep=instant_sleep)
        try:
            return await LLMPlanner(client, registry).plan(GOAL, base=BASE, base_dir=base_dir)
        finally:
            await client.aclose()

    return asyncio.run(scenario())


def test_a_plan_is_not_written_as_yaml_until_someone_wants_it(
    registry: Registry, tmp_path: Path
) -> None:
    ScriptedTools(registry)
    with FakeOpenAIServer(ScriptedModel.sequence(VALID)) as server:
        outcome = _plan(server, registry, tmp_path)
    assert callable(outcome.shown)  # planned and validated, no YAML written
    text = outcome.text
    assert text == plan_to_yaml({**BASE, "goal": GOAL, "steps": VALID["steps"]})
    assert outcome.shown == text  # written once


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("NaN", "NaN is not a JSON number"),
        ("1e400", "Infinity is not a JSON number"),  # (the client reads it as infinity)
        ('"\\ud800"', "this string holds \\ud800"),
    ],
)
def test_a_model_answer_json_cannot_hold_is_sent_back_naming_its_step(
    registry: Registry, tmp_path: Path, written: str, said: str
) -> None:
    ScriptedTools(registry)
    bad = (
        '{"goal": "g", "steps": [{"id": "look", "tool": "test.run", "params": {"key": "k"}},'
        f' {{"id": "other", "tool": "test.run", "params": {{"key": "k", "value": {written}}}}}]}}'
    )
    replies: list[str | dict[str, Any]] = [bad, VALID]
    requests: list[ChatRequest] = []

    def answer(request: ChatRequest) -> str | dict[str, Any]:
        requests.append(request)
        return replies[len(requests) - 1]

    with FakeOpenAIServer(ScriptedModel(answer), supports_json_schema=False) as server:
        outcome = _plan(server, registry, tmp_path)
    assert outcome.repairs == 1
    [[problem]] = outcome.problems
    assert problem.rule == "json-value"
    repair = requests[1].last_user_text()
    assert f'- step 2 (id "other"): {said}' in repair, repair
    assert "(json-value)" in repair


def test_a_goal_plan_saved_with_o_and_its_located_problems_read_as_before(
    tmp_path: Path,
) -> None:
    """What a person sees of a repaired plan, the rejected plan's problems at their lines
    in its YAML and the saved plan's YAML, is what the round trip through YAML gave."""
    (tmp_path / "caps.yaml").write_text("capabilities: {fs: {root: ., read: true}}\n")
    (tmp_path / "x").write_text("x")
    bad = {"goal": "g", "steps": [{"id": "read", "tool": "fs.reed", "params": {"path": "x"}}]}
    good = {"goal": "g", "steps": [{"id": "read", "tool": "fs.read", "params": {"path": "x"}}]}
    with FakeOpenAIServer(ScriptedModel.sequence(bad, good)) as server:
        done = planloom(
            "plan", "g", "--capabilities", "caps.yaml", "--base-url", server.base_url,
            "--model", "m", "-o", "plan.yaml", "--json", cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    recipe = {"version": 1, "name": "plan", "capabilities": {"fs": {"root": ".", "read": True}}}
    before = _outcome(
        *parse_recipe_text(plan_to_yaml({**recipe, **bad}), "plan.yaml"), default_registry()
    )
    [(line, column, rule, message)] = before
    assert f"plan.yaml:{line}:{column}: error[{rule}]: {message}" in done.stderr
    assert (tmp_path / "plan.yaml").read_text() == plan_to_yaml({**recipe, **good})
    assert json.loads(done.stdout)["status"] == "succeeded"
