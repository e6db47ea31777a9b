"""The recipe JSON Schema for editors and CI (`planloom schema`), built from a registry.

Beyond the plan model's own schema (`engine.model.plan_json_schema`), it knows the
registry: `tool` is one of its actions (or a tool a discovering family such as `mcp` finds
at run time), each action's `params` are checked against that action's params schema
(chosen by `tool`, with `if`/`then`), and each granted family's block against its grant
model. Every field has a description: a model's own, else its class docstring's
`Attributes:` entry, else the action's `param_docs`.

A param's value may be a template (`${{ ... }}`) that gives its value at run time, so
wherever a params schema expects something other than plain text, a template is accepted
too. What only validation can tell (dependency cycles, template references, a program
not in `allow`) is left to `planloom validate`.
"""

from __future__ import annotations

import copy
import inspect
import re
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel

from engine.capability import Action, Registry
from engine.model import Plan, plan_json_schema

__all__ = ["SCHEMA_ID", "params_schema", "recipe_schema"]

SCHEMA_ID = "https://planloom.dev/schemas/recipe-v1.json"
"""The schema's `$id`: stable for recipe version 1."""

_TEMPLATE: dict[str, Any] = {
    "type": "string",
    "pattern": r"\$\{\{",
    "description": "A template (`${{ ... }}`), whose value is known when the step runs.",
}
_ENTRY = re.compile(r"^(\s*)([\w /`.]+?):\s+(.*)$")


def recipe_schema(registry: Registry) -> dict[str, Any]:
    """The schema of a recipe whose steps use `registry`'s actions and families."""
    schema = plan_json_schema()
    schema["$id"] = SCHEMA_ID
    defs: dict[str, Any] = schema["$defs"]
    _describe(schema, Plan)
    for name, model in _models(Plan).items():
        if name in defs:
            _describe(defs[name], model)
    schema["properties"]["capabilities"] = _grants(registry, defs)
    tool = _tool_names(registry)
    checks = [
        _params_check(name, action, defs) for name, action in sorted(registry.actions.items())
    ]
    for holder in ("Step", "FallbackAction"):
        defs[holder]["properties"]["tool"] = tool
        defs[holder]["allOf"] = checks
    return schema


# -- tools and their params --------------------------------------------------------------


def _tool_names(registry: Registry) -> dict[str, Any]:
    """`tool`: a registered action, or one a discovering family finds at run time."""
    known: dict[str, Any] = {
        "enum": sorted(registry.actions),
        "description": "The action this step calls (`planloom tools` lists them).",
    }
    found = sorted(name for name, f in registry.families.items() if f.discovery is not None)
    if not found:
        return known
    pattern = "^(" + "|".join(re.escape(name) for name in found) + r")\.[^.]+\..+$"
    discovered = {
        "type": "string",
        "pattern": pattern,
        "description": f"A tool the granted servers list at run time, as `{found[0]}.SERVER.TOOL`.",
    }
    return {"anyOf": [known, discovered], "description": known["description"]}


def _params_check(name: str, action: Action[Any], defs: dict[str, Any]) -> dict[str, Any]:
    """`if tool is NAME then params fit its schema` (templates accepted in values); the
    params schema itself in `defs`, as `params.NAME`."""
    params = _hoisted(action.params_model, f"params.{name}", defs, action.param_docs)
    params["description"] = f"Params of {name}: {action.description}"
    defs[f"params.{name}"] = _templatable(params)
    return {
        "if": {"properties": {"tool": {"const": name}}, "required": ["tool"]},
        "then": {"properties": {"params": {"$ref": f"#/$defs/params.{name}"}}},
    }


def params_schema(name: str, action: Action[Any]) -> dict[str, Any]:
    """The params of action `name` as a step writes them (a template accepted wherever
    something other than any text is), described, with the `$defs` its refs point to."""
    defs: dict[str, Any] = {}
    params = _hoisted(action.params_model, f"params.{name}", defs, action.param_docs)
    schema: dict[str, Any] = _templatable(params)
    if defs:
        schema["$defs"] = defs
    return schema


def _templatable(schema: Any) -> Any:
    """`schema` with a template accepted wherever something other than any text is."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: _or_template(v) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = _or_template(out["items"])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _or_template(out["additionalProperties"])
    return out


def _or_template(schema: Any) -> Any:
    if not isinstance(schema, dict) or _any_text(schema) or not schema:
        return _templatable(schema)
    description = schema.get("description")
    either = {"anyOf": [_templatable(schema), _TEMPLATE]}
    if description:
        either["description"] = description
    return either


def _any_text(schema: dict[str, Any]) -> bool:
    """A schema every string fits: a template is already accepted."""
    constraints = {"pattern", "enum", "const", "maxLength", "minLength", "format"}
    return schema.get("type") == "string" and not constraints & schema.keys()


# -- grants ------------------------------------------------------------------------------


def _grants(registry: Registry, defs: dict[str, Any]) -> dict[str, Any]:
    properties = {}
    for name, family in sorted(registry.families.items()):
        grant = _hoisted(family.grant_model, f"grant.{name}", defs, {})
        grant["description"] = f"Grants `{name}`: {family.description}."
        properties[name] = grant
    return {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
        "description": "Grants, by capability family: anything not granted is denied.",
    }


# -- models, their $defs and their docs ---------------------------------------------------


def _hoisted(
    model: type[BaseModel], prefix: str, defs: dict[str, Any], docs: Mapping[str, str]
) -> dict[str, Any]:
    """`model`'s schema, described, its own `$defs` moved into `defs` under `prefix`."""
    schema = copy.deepcopy(
        model.model_json_schema(by_alias=True, ref_template=f"#/$defs/{prefix}.{{model}}")
    )
    inner = schema.pop("$defs", {})
    classes = _models(model)
    for name, sub in inner.items():
        if name in classes:
            _describe(sub, classes[name])
        defs[f"{prefix}.{name}"] = sub
    _describe(schema, model, docs)
    return schema


def _describe(
    schema: dict[str, Any], model: type[BaseModel], extra: Mapping[str, str] | None = None
) -> None:
    """Give each property of `model`'s schema without a description the one its docs give."""
    docs = {**_attribute_docs(model), **(extra or {})}
    for name, prop in (schema.get("properties") or {}).items():
        field = _field_name(model, name)
        text = docs.get(name) or docs.get(field)
        if isinstance(prop, dict) and "description" not in prop and text:
            prop["description"] = text


def _field_name(model: type[BaseModel], alias: str) -> str:
    for name, info in model.model_fields.items():
        if info.alias == alias:
            return name
    return alias


def _attribute_docs(model: type[BaseModel]) -> dict[str, str]:
    """The `Attributes:` entries of the docstrings of `model` and its bases, by name
    (`yes / no: ...` documents both)."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        text = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
        docs.update(_entries(text))
    return docs


def _entries(text: str) -> Iterator[tuple[str, str]]:
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Attributes:")
    except StopIteration:
        return
    names: list[str] = []
    words: list[str] = []
    indent = None
    for line in [*lines[start + 1 :], ""]:
        match = _ENTRY.match(line)
        deeper = indent is not None and len(line) - len(line.lstrip()) > indent
        if match and (indent is None or len(match.group(1)) == indent):
            yield from ((name, " ".join(words)) for name in names)
            indent = len(match.group(1))
            names = [n.strip(" `") for n in match.group(2).split("/")]
            words = [match.group(3).strip()]
        elif line.strip() and deeper:
            words.append(line.strip())
        else:
            yield from ((name, " ".join(words)) for name in names)
            return


def _models(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """The model classes reachable from `model`'s fields, by class name."""
    found: dict[str, type[BaseModel]] = {}

    def visit(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation.__name__ not in found:
                found[annotation.__name__] = annotation
                for info in annotation.model_fields.values():
                    visit(info.annotation)
            return
        if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
            for arg in typing.get_args(annotation):
                visit(arg)

    visit(model)
    return found
