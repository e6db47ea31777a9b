"""The schema of a plan for a grant (`planners._plan_schema`), as the planner sends it: it
says what a plan is for that grant (a granted tool and its params, or an agent over the
granted tools), and it compiles with llama.cpp's JSON-schema-to-grammar converter and GBNF
parser, for the shipped recipes' grants and for an MCP server's tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from ruamel.yaml import YAML

from capabilities import default_registry
from engine.app.registry import build_registry
from planners._plan_schema import plan_schema

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
GRANTS: dict[str, tuple[dict[str, Any], Path]] = {
    "main-job": (
        YAML(typ="safe").load(RECIPES / "main-job" / "capabilities.yaml")["capabilities"],
        RECIPES / "main-job",
    ),
    "mcp-notes": (
        YAML(typ="safe").load(RECIPES / "mcp-notes" / "notes.yaml")["capabilities"],
        RECIPES / "mcp-notes",
    ),
    **{
        name: (YAML(typ="safe").load(RECIPES / name)["capabilities"], RECIPES)
        for name in ("project-report.yaml", "resilient.yaml", "word-count.yaml")
    },
}


def _schema(name: str) -> dict[str, Any]:
    grants, folder = GRANTS[name]
    registry = build_registry().bind(grants, folder)  # every installed family: mcp too
    return plan_schema(registry, grants)


@pytest.mark.parametrize("name", sorted(GRANTS))
def test_the_plan_schema_of_each_shipped_grant_compiles_to_a_grammar(name: str) -> None:
    grammar = pytest.importorskip("llama_cpp.llama_grammar")
    schema = _schema(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    text = grammar.json_schema_to_gbnf(json.dumps(schema))
    grammar.LlamaGrammar.from_string(text, verbose=False)
    tools = {
        choice["properties"]["tool"]["const"]
        for choice in schema["properties"]["steps"]["items"]["anyOf"]
        if "tool" in choice["properties"]
    }
    assert tools, name
    if name == "mcp-notes":  # the server's tools, as its grant names them; `clear` is not
        assert tools == {"mcp.notes.search", "mcp.notes.list_notes", "mcp.notes.add_note"}


def test_the_plan_schema_admits_a_plan_of_granted_tools_and_nothing_else() -> None:
    schema = _schema("word-count.yaml")
    validator = jsonschema.Draft202012Validator(schema)
    grants, _ = GRANTS["word-count.yaml"]
    assert "fs" in grants
    good = {
        "goal": "count",
        "steps": [
            {"id": "read", "tool": "fs.read", "params": {"path": "notes.txt"}},
            {
                "id": "list",
                "tool": "fs.list",
                "params": {"path": ".", "recursive": "${{ steps.read.output.size > 0 }}"},
                "depends_on": ["read"],
                "can_fail": True,
                "retry": {"attempts": 2},
            },
        ],
    }
    assert list(validator.iter_errors(good)) == []
    for bad in (
        {"id": "x", "tool": "http.request", "params": {"url": "https://a.example/"}},  # ungranted
        {"id": "x", "tool": "fs.read", "params": {"path": "a", "pth": "b"}},  # a typo
        {"id": "x", "tool": "fs.read", "params": {}},  # its required param
        {"id": "x", "tool": "fs.read", "params": {"path": "a"}, "name": "read"},  # no such key
        {"tool": "fs.read", "params": {"path": "a"}},  # no id
        {"id": "./src.txt", "tool": "fs.read", "params": {"path": "a"}},  # not a name
    ):
        assert list(validator.iter_errors({"steps": [bad]})), bad


def test_an_agent_step_may_use_only_granted_tools() -> None:
    schema = _schema("word-count.yaml")
    validator = jsonschema.Draft202012Validator(schema)
    agent = {"id": "a", "agent": {"goal": "look around", "tools": ["fs.list"]}}
    assert list(validator.iter_errors({"steps": [agent]})) == []
    agent["agent"]["tools"] = ["http.request"]  # type: ignore[index]  # not granted
    assert list(validator.iter_errors({"steps": [agent]}))


def test_with_nothing_granted_a_step_is_any_object() -> None:
    schema = plan_schema(default_registry(), {})
    assert schema["properties"]["steps"]["items"] == {"type": "object"}


def test_a_step_id_is_a_name_in_the_grammar_too() -> None:
    """The id's pattern is plain enough to be sent: the grammar llama.cpp makes of the plan
    schema can write `read_1` as an id and cannot write `./src.txt` (an id SmolLM2-135M
    wrote when the pattern was left out)."""
    grammar = pytest.importorskip("llama_cpp.llama_grammar")
    schema = _schema("word-count.yaml")
    ids = {
        json.dumps(choice["properties"]["id"], sort_keys=True)
        for choice in schema["properties"]["steps"]["items"]["anyOf"]
    }
    assert len(ids) == 1
    id_schema = json.loads(ids.pop())
    assert id_schema["pattern"] == "^[A-Za-z_][A-Za-z0-9_]*$"
    text = grammar.json_schema_to_gbnf(json.dumps(id_schema))
    assert "[A-Za-z_]" in text
    assert "[A-Za-z0-9_]" in text
