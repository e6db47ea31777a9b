"""The strict version of a schema planloom sends a model (`engine.model_schema`), for
OpenAI's `strict` structured outputs: every object closed and every property required, an
optional one nullable; and an answer to it made back into an answer to the schema it came
from (`without_added_nulls`). Checked with jsonschema, and with llama.cpp's converter and
GBNF parser, as servers like llama-server take the strict schema too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from capabilities import default_registry
from engine.agent import ToolSpec
from engine.model_schema import ANY, for_model, strict_schema, without_added_nulls
from planners._plan_schema import plan_schema

GRANTS = {"fs": {"root": ".", "read": True, "write": ["out/**"]}, "shell": {"allow": ["wc"]}}
SCALAR = ["string", "number", "boolean", "null"]
STRICT_KEYWORDS = {"type", "properties", "required", "additionalProperties", "items", "anyOf"}
STRICT_KEYWORDS |= {
    "enum",
    "description",
    "pattern",
}  # OpenAI's strict mode takes a string's pattern
NULLS = {"depends_on": None, "when": None, "can_fail": None, "retry": None, "timeout": None}
NULLS |= {"for_each": None}


def _grammar(schema: dict[str, Any]) -> str:
    """The GBNF grammar llama.cpp makes of `schema`, parsed by its C parser."""
    grammar = pytest.importorskip("llama_cpp.llama_grammar")
    text: str = grammar.json_schema_to_gbnf(json.dumps(schema))
    grammar.LlamaGrammar.from_string(text, verbose=False)
    return text


def _tools() -> list[tuple[str, dict[str, Any]]]:
    registry = default_registry()
    out = []
    for name, action in sorted(registry.actions.items()):
        raw = action.params_model.model_json_schema()
        sent = ToolSpec(name, action.description, raw).for_model()["function"]["parameters"]
        out.append((name, sent))
    return out


def _schemas(schema: Any) -> Iterator[dict[str, Any]]:
    """Every schema in `schema`, itself included (not the values of `enum` or `default`)."""
    if not isinstance(schema, dict):
        return
    yield schema
    for name in schema.get("properties", {}):
        yield from _schemas(schema["properties"][name])
    for key in ("items", "additionalProperties"):
        yield from _schemas(schema.get(key))
    for choice in schema.get("anyOf", []):
        yield from _schemas(choice)


def _not_strict(schema: dict[str, Any]) -> Iterator[str]:
    """What strict mode would refuse in `schema`, each said once where it is."""
    for node in _schemas(schema):
        if set(node) - STRICT_KEYWORDS:
            yield f"keywords {sorted(set(node) - STRICT_KEYWORDS)} in {node}"
        kinds = node.get("type")
        if "object" in (kinds if isinstance(kinds, list) else [kinds]) or "properties" in node:
            if "properties" not in node:
                yield f"a free-form object: {node}"
            elif node.get("additionalProperties") is not False:
                yield f"an open object: {node}"
            elif node.get("required") != list(node["properties"]):
                yield f"an object not requiring every property: {node}"


def _free_form(schema: dict[str, Any]) -> bool:
    return any(
        "properties" not in node
        and (node.get("type") == "object" or isinstance(node.get("additionalProperties"), dict))
        for node in _schemas(schema)
    )


@pytest.fixture
def plan(tmp_path: Path) -> dict[str, Any]:
    """The schema of a plan for `GRANTS`, as the planner sends it."""
    return plan_schema(default_registry().bind(GRANTS, tmp_path), GRANTS)


def _step(**fields: Any) -> dict[str, Any]:
    return {**NULLS, **fields}


def test_a_free_form_map_cannot_be_said_strictly_and_a_plan_has_none(
    plan: dict[str, Any],
) -> None:
    """A plan's `outputs` (a map of any names) could not be strict: the plan schema has
    none (the model writes the steps; the outputs are the recipe's)."""
    assert set(plan["properties"]) == {"goal", "steps"}
    outputs = {"type": "object", "additionalProperties": {"type": "string"}}
    with_outputs = {**plan, "properties": {**plan["properties"], "outputs": outputs}}
    assert strict_schema(with_outputs) is None
    assert strict_schema(plan) is not None


def test_the_plan_schema_is_strict_and_takes_a_plan_with_nulls(
    plan: dict[str, Any],
) -> None:
    strict = strict_schema(plan)
    assert strict is not None
    assert list(_not_strict(strict)) == []
    assert list(_not_strict(plan))  # what was sent before was not strict
    tools = [choice["properties"] for choice in strict["properties"]["steps"]["items"]["anyOf"]]
    assert {"enum": ["fs.read"]} in [step.get("tool") for step in tools]
    answer = {"goal": None, "steps": [_step(id="a", tool="fs.read", params={"path": "x"})]}
    validator = jsonschema.Draft202012Validator(strict)
    assert list(validator.iter_errors(answer)) == []
    assert list(validator.iter_errors({"steps": answer["steps"]}))  # goal is required now
    assert list(jsonschema.Draft202012Validator(plan).iter_errors(answer))  # goal: null
    _grammar(strict)


def test_the_nulls_strict_mode_added_are_taken_back(plan: dict[str, Any]) -> None:
    """A null the plan's schema does not allow goes; one it allows (`when`) stays."""
    answer = {
        "goal": None,
        "steps": [
            _step(id="a", tool="fs.read", params={"path": "x"}),
            _step(
                id="b",
                tool="fs.write",
                params={
                    "path": "out/b",
                    "content": "${{ steps.a.output.text }}",
                    "create_dirs": None,
                },
                depends_on=["a"],
                retry={"attempts": 2, "backoff": None, "initial": None, "max": None, "on": None},
            ),
            _step(
                id="c", tool="fs.list", params={"path": None, "recursive": True, "max_depth": None}
            ),
            _step(id="d", agent={"goal": "look", "tools": ["fs.list"], "max_iterations": None}),
        ],
    }
    kept = {"when": None, "timeout": None, "for_each": None}  # each allows null
    assert without_added_nulls(answer, plan) == {
        "steps": [
            {"id": "a", "tool": "fs.read", "params": {"path": "x"}, **kept, "retry": None},
            {
                "id": "b",
                "tool": "fs.write",
                "params": {"path": "out/b", "content": "${{ steps.a.output.text }}"},
                "depends_on": ["a"],
                **kept,
                "retry": {"attempts": 2},
            },
            {"id": "c", "tool": "fs.list", "params": {"recursive": True}, **kept, "retry": None},
            {"id": "d", "agent": {"goal": "look", "tools": ["fs.list"]}, **kept, "retry": None},
        ]
    }
    validator = jsonschema.Draft202012Validator(plan)
    assert list(validator.iter_errors(answer))
    assert list(validator.iter_errors(without_added_nulls(answer, plan))) == []


def test_a_value_the_schema_does_not_describe_is_left_as_it_is() -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "tags": {"type": "array"}},
        "anyOf": [{"type": "object", "properties": {"kind": {"const": "a"}}}],
    }
    value = {"name": None, "tags": [None, {"x": None}], "other": None, "kind": None}
    assert without_added_nulls(value, schema) == {
        "tags": [None, {"x": None}],
        "other": None,
        "kind": None,
    }
    # a dict no choice of an anyOf fits (an unknown key, another const) stays whole
    choices = {"anyOf": [{"type": "object", "properties": {"kind": {"const": "a"}}}]}
    for odd in ({"kind": "b", "x": None}, {"kind": "a", "y": 1, "x": None}):
        assert without_added_nulls(odd, choices) == odd
    odd_schemas: list[dict[str, Any]] = [{"anyOf": 3}, {"properties": []}, {"items": "x"}]
    for odd_schema in [*odd_schemas, {"required": 1, "properties": {"a": 1}}]:
        for odd_value in ([None, {"a": None}], {"a": None}, None, 3):
            assert without_added_nulls(odd_value, odd_schema) == odd_value
    deep: Any = None
    for _ in range(5_000):
        deep = [deep]
    endless: dict[str, Any] = {"type": "array"}
    endless["items"] = endless  # deeper than Python recurses: given back as it is
    assert without_added_nulls(deep, endless) is deep


def test_a_free_form_object_is_not_strict() -> None:
    for free in (
        {"type": "object"},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"additionalProperties": True},
        {"type": ["object", "string"]},
        {"allOf": [{"type": "string"}]},
    ):
        schema = {"type": "object", "properties": {"x": {"type": "string"}, "map": free}}
        assert strict_schema(schema) is None, free
    assert strict_schema({"anyOf": [{"type": "object", "properties": {}}]}) is None  # root
    assert strict_schema({"type": "string"}) is None


def test_a_value_of_any_type_is_a_scalar_and_a_const_an_enum() -> None:
    schema = for_model(
        {
            "type": "object",
            "properties": {
                "json": {"description": "any JSON"},
                "items": {"type": "array"},
                "kind": {"const": "a", "default": "a"},
            },
            "required": ["json", "items", "kind"],
        }
    )
    assert schema["properties"]["json"] == {"description": "any JSON", "type": ANY}
    assert strict_schema(schema) == {
        "type": "object",
        "properties": {
            "json": {"type": SCALAR, "description": "any JSON"},
            "items": {"type": "array", "items": {"type": SCALAR}},
            "kind": {"enum": ["a"]},
        },
        "additionalProperties": False,
        "required": ["json", "items", "kind"],
    }


def test_an_optional_property_is_nullable_once() -> None:
    schema = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "default": ""},
            "count": {"type": ["integer", "null"]},
            "when": {"anyOf": [{"type": "boolean"}, {"type": "null"}], "default": None},
            "mode": {"type": "string", "enum": ["a", "b"]},
            "either": {"anyOf": [{"type": "boolean"}, {"type": "string"}], "description": "d"},
            "any": {"type": ANY},
            "kept": {"type": "string"},
        },
        "required": ["kept"],
    }
    strict = strict_schema(schema)
    assert strict is not None
    assert strict["properties"] == {
        "text": {"type": ["string", "null"]},
        "count": {"type": ["integer", "null"]},
        "when": {"anyOf": [{"type": "boolean"}, {"type": "null"}]},
        "mode": {"anyOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "null"}]},
        "either": {
            "anyOf": [{"type": "boolean"}, {"type": "string"}, {"type": "null"}],
            "description": "d",
        },
        "any": {"type": SCALAR},
        "kept": {"type": "string"},
    }
    validator = jsonschema.Draft202012Validator(strict)
    assert list(validator.iter_errors(dict.fromkeys(strict["properties"]))) != []
    assert list(validator.iter_errors({**dict.fromkeys(strict["properties"]), "kept": "k"})) == []
    _grammar(strict)


@pytest.mark.parametrize(("name", "sent"), _tools(), ids=[t[0] for t in _tools()])
def test_every_builtin_tool_schema_as_sent_is_strict_or_said_not_to_be(
    name: str, sent: dict[str, Any]
) -> None:
    strict = strict_schema(sent)
    assert (strict is None) == _free_form(sent), name
    if strict is not None:
        assert list(_not_strict(strict)) == [], name
        assert strict["properties"].keys() == sent["properties"].keys()
        _grammar(strict)
