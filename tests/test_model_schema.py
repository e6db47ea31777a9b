"""Every schema planloom sends a model as a tool's parameters compiles into a grammar:
simplified for grammar compilers (`engine.model_schema`), checked with llama.cpp's own
JSON-schema-to-grammar converter (from llama-cpp-python) and its GBNF parser."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capabilities import default_registry
from engine.agent import ToolSpec
from engine.model_schema import ANY, MAX_DEPTH, for_model
from planners.llm import LLMPlanner

GRAMMAR_CHARS = 4_000
"""The most grammar text a tool's params may take (llama.cpp's own limit is on rules)."""
DROPPED = {"title", "maxLength", "minLength", "maxItems", "pattern", "format", "maximum"}


def _keywords(schema: Any, inside_names: bool = False) -> Iterator[str]:
    """The keywords used anywhere in `schema` (not the names of properties), but for a
    bound of 1 (`minLength: 1`), which costs a grammar nothing."""
    if isinstance(schema, list):
        for item in schema:
            yield from _keywords(item)
    elif isinstance(schema, dict):
        for key, value in schema.items():
            if not inside_names and not (key in ("minLength", "minItems") and value == 1):
                yield key
            yield from _keywords(value, inside_names=key in ("properties", "$defs"))


def _grammar(schema: dict[str, Any]) -> str:
    """The GBNF grammar llama.cpp makes of `schema`, parsed by its C parser."""
    grammar = pytest.importorskip("llama_cpp.llama_grammar")
    text: str = grammar.json_schema_to_gbnf(json.dumps(schema))
    grammar.LlamaGrammar.from_string(text, verbose=False)
    return text


def _tools() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    registry = default_registry()
    out = []
    for name, action in sorted(registry.actions.items()):
        raw = action.params_model.model_json_schema()
        sent = ToolSpec(name, action.description, raw).for_model()["function"]["parameters"]
        out.append((name, raw, sent))
    return out


@pytest.mark.parametrize(("name", "raw", "sent"), _tools(), ids=[t[0] for t in _tools()])
def test_every_builtin_tool_schema_as_sent_compiles_to_a_small_grammar(
    name: str, raw: dict[str, Any], sent: dict[str, Any]
) -> None:
    assert not DROPPED & set(_keywords(sent)), name
    assert sent["properties"].keys() == raw["properties"].keys()  # every param is there
    assert sent.get("required", []) == raw.get("required", [])
    assert len(_grammar(sent)) < GRAMMAR_CHARS


def test_a_length_bound_that_explodes_a_grammar_is_not_sent() -> None:
    raw = {
        "type": "object",
        "properties": {
            "content": {"type": "string", "maxLength": 4096, "title": "Content"},
            "pattern": {"type": "string", "pattern": "^\\d{4}-[a-z]+$", "description": "a regex"},
        },
        "required": ["content"],
    }
    assert len(_grammar(raw)) > 8 * GRAMMAR_CHARS  # llama.cpp's expansion of {0,4096}
    sent = for_model(raw)
    assert sent == {
        "type": "object",
        "properties": {
            "content": {"type": "string"},
            "pattern": {"type": "string", "description": "a regex"},  # a param named so stays
        },
        "required": ["content"],
    }
    assert len(_grammar(sent)) < GRAMMAR_CHARS


def test_refs_are_inlined_and_a_cycle_or_great_depth_is_any_value() -> None:
    raw = {
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"child": {"$ref": "#/$defs/Node"}, "name": {"type": "string"}},
            }
        },
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node", "description": "the top"}},
        "oneOf": [{"required": ["root"]}, {"required": ["other"]}],
    }
    sent = for_model(raw)
    assert "$defs" not in sent
    assert "anyOf" in sent
    root = sent["properties"]["root"]
    assert root["description"] == "the top"
    assert root["properties"]["child"] == {"type": ANY}  # the cycle, cut once: any value
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(MAX_DEPTH + 3):
        deep = {"type": "array", "items": deep}
    flat = for_model(deep)
    for _ in range(MAX_DEPTH):
        flat = flat["items"]
    assert flat == {"type": ANY}
    _grammar(sent)
    _grammar(for_model(deep))


def test_an_any_value_with_a_description_names_every_type() -> None:
    """llama.cpp's converter refuses `{"description": ...}` alone."""
    sent = for_model({"type": "object", "properties": {"json": {"default": None}}})
    assert sent["properties"]["json"] == {"default": None, "type": ANY}
    _grammar(sent)


def test_the_planner_catalogue_sends_simplified_params(tmp_path: Path) -> None:
    planner = LLMPlanner(client=None, registry=default_registry())  # type: ignore[arg-type]
    catalogue = planner.catalogue({"fs": {"write": True}, "shell": {"allow": ["ls"]}}, tmp_path)
    assert {tool["name"] for tool in catalogue} >= {"fs.write", "shell.run"}
    for tool in catalogue:
        assert not DROPPED & set(_keywords(tool["params"])), tool["name"]
        _grammar(tool["params"])


def test_choices_that_say_the_same_once_simplified_are_kept_once() -> None:
    """A param that takes text or a template (a string with a `pattern`) is one string."""
    templated = {
        "anyOf": [
            {"type": "string", "maxLength": 100, "description": "a path"},
            {"type": "string", "pattern": "\\$\\{\\{", "description": "a template"},
        ],
        "description": "where",
    }
    assert for_model(templated) == {"type": "string", "description": "where"}
    kept = for_model({"anyOf": [{"type": "boolean"}, templated["anyOf"][1]]})
    assert kept == {"anyOf": [{"type": "boolean"}, {"type": "string", "description": "a template"}]}


def test_a_default_const_or_enum_value_is_data_not_a_schema() -> None:
    """`default: {}` is an empty object: read as a schema it became "any value" (http.request's
    `headers` went out with `default: {"type": [...]}`)."""
    raw = {
        "type": "object",
        "properties": {
            "headers": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "default": {},
            },
            "mode": {"const": {"title": "kept"}},
            "pick": {"enum": [{"a": 1}, "b"]},
        },
    }
    sent = for_model(raw)["properties"]
    assert sent["headers"]["default"] == {}
    assert sent["mode"] == {"const": {"title": "kept"}}
    assert sent["pick"] == {"enum": [{"a": 1}, "b"]}
