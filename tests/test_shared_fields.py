"""Steps of a validated plan and ended step results share their sets of set fields (one
per shape, not one per model: 21 MB each at 100,000 steps); each still behaves as a model
with its own: dumped without unset fields, copied with changes, changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from capabilities import default_registry
from engine._support.fields import SharedFields
from engine.results import StepResult
from engine.validation import validate_plan
from engine.yaml import parse_json_text

TEXT = """{"version": 1, "name": "x", "capabilities": {"fs": {"root": "."}},
 "steps": [{"id": "a", "tool": "fs.list", "params": {"path": "."}},
           {"id": "b", "tool": "fs.list", "params": {"path": "."}, "depends_on": ["a"]}]}"""


def test_steps_share_a_set_and_still_change_on_their_own() -> None:
    data, source = parse_json_text(TEXT, "r.json")
    a, b = validate_plan(data, source, default_registry(), base_dir=Path(".")).steps
    assert (
        a.__pydantic_fields_set__
        is validate_plan(*parse_json_text(TEXT, "r.json"), default_registry(), base_dir=Path("."))
        .steps[0]
        .__pydantic_fields_set__
    )  # one set for steps of one shape
    assert type(a.__pydantic_fields_set__) is SharedFields
    assert a.model_dump(exclude_unset=True) == {
        "id": "a",
        "tool": "fs.list",
        "params": {"path": "."},
    }
    with pytest.raises(TypeError, match="does not change"):
        a.__pydantic_fields_set__.add("when")  # (pydantic's own changes go through a copy)
    changed = a.model_copy(update={"can_fail": True})
    assert changed.model_fields_set == {"id", "tool", "params", "can_fail"}
    assert a.model_fields_set == {"id", "tool", "params"}
    b.timeout = 5.0
    assert "timeout" in b.model_fields_set
    assert "timeout" not in a.model_fields_set


def test_ended_results_share_a_set_until_one_changes() -> None:
    first = StepResult.ended("failed", None, "no", 1)
    second = StepResult.ended("succeeded", 3, None, 1)
    assert first.__pydantic_fields_set__ is second.__pydantic_fields_set__
    assert first.model_dump(exclude_unset=True) == {
        "status": "failed",
        "output": None,
        "error": "no",
        "attempts": 1,
    }
    first.error = "redacted"
    assert second.model_fields_set == {"status", "output", "error", "attempts"}
    copied = second.model_copy(update={"warnings": ["cut"]})
    assert copied.model_fields_set == {"status", "output", "error", "attempts", "warnings"}
    assert "warnings" not in second.model_fields_set
