"""The schema of a plan for one grant, as the planner asks the model for it.

A server that honours a schema compiles it into a grammar (llama.cpp, vLLM, Ollama, OpenAI
with `strict`): then a plan naming a tool that is not granted, a param the tool does not
take, or a key no step has cannot be written at all. So the schema says what a plan is for
this grant: each step is one of the granted tools (`tool` a constant, its `params` that
tool's params, a template accepted wherever something other than text is), or an agent over
the granted tools, with the step fields of the contract (`depends_on`, `when`, `can_fail`,
`retry`, `timeout`, `for_each`). Simplified for grammar compilers (`engine.model_schema`).
"""

from __future__ import annotations

from typing import Any

from engine.capability import Registry
from engine.model import plan_json_schema
from engine.model_schema import for_model
from engine.schema import params_schema

__all__ = ["STEP_FIELDS", "plan_schema"]

STEP_FIELDS = ("depends_on", "when", "can_fail", "retry", "timeout", "for_each")
"""The step fields a planned step may have besides its action, as the contract has them."""
_ID_TEXT = "Unique; letters, digits and _ (e.g. read_notes)."


def plan_schema(registry: Registry, grants: dict[str, Any]) -> dict[str, Any]:
    """The schema of a plan whose steps use the tools `grants` give in `registry` (a
    registry bound to the grants: MCP servers' tools included)."""
    contract = plan_json_schema()
    defs: dict[str, Any] = dict(contract["$defs"])
    fields = {name: contract["$defs"]["Step"]["properties"][name] for name in STEP_FIELDS}
    step_id = {  # the contract's pattern makes the grammar write a name
        "type": "string",
        "pattern": contract["$defs"]["Step"]["properties"]["id"]["pattern"],
        "description": _ID_TEXT,
    }
    shapes: list[dict[str, Any]] = []
    for entry in registry.catalogue(grants):
        params = params_schema(entry.name, registry.actions[entry.name])
        defs |= params.pop("$defs", {})
        shapes.append(
            _step(
                {"tool": {"const": entry.name}, "params": params},
                ["tool", "params"],
                step_id,
                fields,
            )
        )
    tools = registry.agent_tools(grants)
    if tools:
        agent = {
            "type": "object",
            "description": "An open-ended task carried out by a model calling these tools.",
            "properties": {
                "goal": {"type": "string"},
                "tools": {"type": "array", "items": {"enum": tools}},
                "max_iterations": {"type": "integer"},
            },
            "required": ["goal", "tools"],
            "additionalProperties": False,
        }
        shapes.append(_step({"agent": agent}, ["agent"], step_id, fields))
    step = {"anyOf": shapes} if shapes else {"type": "object"}
    schema = {
        "type": "object",
        "properties": {
            "goal": {"type": "string"},
            "steps": {"type": "array", "items": step, "minItems": 1},
        },
        "required": ["steps"],
        "additionalProperties": False,
        "$defs": defs,
    }
    return for_model(schema)


def _step(
    action: dict[str, Any], required: list[str], step_id: dict[str, Any], fields: dict[str, Any]
) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"id": step_id, **action, **fields},
        "required": ["id", *required],
        "additionalProperties": False,
    }
