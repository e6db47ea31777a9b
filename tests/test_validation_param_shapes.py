"""A step's params checked once per shape (`engine.validation._params`): the same literal
values with templates in the same places fail the same way, so a large plan's thousands of
steps of one shape are validated once, each still reported at its own place; a problem
under a template that depends on what the template says is not shared."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.validation import _params
from engine.validation._params import check_params
from engine.validation._report import Report
from engine.yaml import parse_json_text


class Counted(BaseModel):
    """Params of an action whose validations are counted."""

    model_config = ConfigDict(extra="forbid")
    value: int
    label: str = Field("x", max_length=16)

    @model_validator(mode="before")
    @classmethod
    def _count(cls, data: Any) -> Any:
        VALIDATED.append(data)
        return data


VALIDATED: list[Any] = []


@pytest.fixture(autouse=True)
def _fresh() -> None:
    VALIDATED.clear()
    _params._shapes.clear()  # each test sees its shapes for the first time


def check(steps: list[dict[str, Any]], model: type[BaseModel] = Counted) -> list[Any]:
    """Check each step's params as `steps[i].params` of a JSON recipe; what each step gave
    (the model or None) and the problems, `line: message` each."""
    text = json.dumps({"steps": steps}, indent=1)
    data, source = parse_json_text(text, "r.json")
    report = Report(source)
    given = [
        check_params(report, ("steps", index), "t.run", model, step["params"])
        for index, step in enumerate(data["steps"])
    ]
    return [given, [f"{d.line}: {d.message}" for d in report.problems]]


def test_steps_of_one_shape_are_validated_once_and_each_is_reported_where_it_is() -> None:
    steps = [
        {"params": {"value": "${{ steps.a.output }}", "colour": "red"}},
        {"params": {"value": "${{ steps.b.output | int }}", "colour": "red"}},
        {"params": {"value": "${{ steps.c.output }}", "colour": "red"}},
    ]
    given, problems = check(steps)
    assert given == [None, None, None]
    assert len(VALIDATED) == 1  # the first; the others have its shape
    lines = [int(p.split(":")[0]) for p in problems]
    assert [p.split(": ", 1)[1] for p in problems] == ["t.run has no param 'colour'"] * 3
    assert len(set(lines)) == 3, problems  # each at its own step's key


def test_another_literal_value_is_another_shape() -> None:
    steps = [
        {"params": {"value": "${{ steps.a.output }}", "label": "short"}},
        {"params": {"value": "${{ steps.b.output }}", "label": "far too long for a label"}},
        {"params": {"value": "${{ steps.c.output }}", "label": True}},
        {"params": {"value": "${{ steps.d.output }}", "label": 1}},
    ]
    given, problems = check(steps)
    assert given == [None, None, None, None]
    assert len(VALIDATED) == 4
    assert [p.split(": ", 1)[1] for p in problems] == [
        "t.run param 'label': string should have at most 16 characters",
        "t.run param 'label': input should be a valid string",
        "t.run param 'label': input should be a valid string",
    ]


def test_a_problem_that_depends_on_the_templates_text_is_not_shared() -> None:
    """`label` is a string of at most 16 characters: a long template fails it (not
    reported: known at run time), a short one fits, and the params validate."""
    steps = [
        {"params": {"value": 1, "label": "${{ steps.long_name.output }}"}},
        {"params": {"value": 1, "label": "${{ inputs.a }}"}},
    ]
    given, problems = check(steps)
    assert problems == []
    assert given[0] is None
    assert isinstance(given[1], Counted)
    assert given[1].label == "${{ inputs.a }}"
    assert len(VALIDATED) == 2


def test_params_without_templates_are_validated_each_time() -> None:
    steps = [{"params": {"value": 1}}, {"params": {"value": 1}}, {"params": {"value": "x"}}]
    given, problems = check(steps)
    assert [type(g).__name__ for g in given] == ["Counted", "Counted", "NoneType"]
    assert len(VALIDATED) == 3
    assert [p.split(": ", 1)[1] for p in problems] == [
        "t.run param 'value': input should be a valid integer, unable to parse string as an integer"
    ]


def test_a_literal_that_cannot_be_a_key_is_validated_as_it_is() -> None:
    """From the Python API params may hold any value, a set too."""

    class Tags(BaseModel):
        model_config = ConfigDict(extra="forbid")
        value: int
        tags: set[str]

    _, source = parse_json_text('{"steps": [{"params": {}}]}', "r.json")
    report = Report(source)
    params = {"value": "${{ steps.a.output }}", "tags": {"a", "b"}, "other": 1}
    for _ in range(2):
        assert check_params(report, ("steps", 0), "t.run", Tags, params) is None
    assert [d.message for d in report.problems] == ["t.run has no param 'other'"] * 2
