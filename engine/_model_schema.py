"""JSON Schemas as a model is sent them: what a grammar compiler can take.

Servers that honour a schema (llama.cpp's, vLLM, Ollama, OpenAI with `strict`) compile it
into a grammar for constrained decoding. Some keywords make that grammar explode or fail:
llama.cpp turns `maxLength: 4096` into a 4,096-fold repetition and its server crashes
("number of rules ... exceeds sane defaults"); a regex `pattern` it cannot read is refused.
The sandbox checks every call's params against the full schema anyway, so a model needs
only the shape: names, types, enums, what is required, and the descriptions.

`for_model` keeps that and drops the rest: titles, length and size bounds, numeric bounds,
patterns and formats, examples; `$ref`s are inlined (to `MAX_DEPTH` levels: deeper is any
value), `oneOf` is read as `anyOf`, and choices of an `anyOf` that say the same once
simplified are kept once. A schema of any value names every JSON type, as llama.cpp's
converter wants.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_DEPTH", "for_model"]

MAX_DEPTH = 6
"""Levels of nested objects and arrays kept; below them a value is any JSON value."""

_DROPPED = frozenset(
    {
        "title",
        "$schema",
        "$id",
        "$comment",
        "examples",
        "maxLength",
        "minLength",
        "maxItems",
        "minItems",
        "maxProperties",
        "minProperties",
        "uniqueItems",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "pattern",
        "patternProperties",
        "format",
        "contentEncoding",
        "contentMediaType",
        "readOnly",
        "writeOnly",
        "deprecated",
        "discriminator",
    }
)
"""Keywords a model does not need (the sandbox checks them) and grammars choke on."""
_SMALL = frozenset({"minItems", "minLength"})
"""Kept when 1 (a plan has a step; an id is not empty): one repetition costs a grammar
nothing, and says what an empty value cannot."""
_NAMES = frozenset({"properties", "$defs", "definitions", "dependentSchemas"})
"""Keywords whose value maps names (kept as they are) to schemas."""
_NESTING = frozenset({"properties", "items", "additionalProperties", "prefixItems"})
"""Where a schema goes one level deeper into the value it describes."""
_SHAPE = frozenset(
    {"type", "anyOf", "allOf", "enum", "const", "properties", "items", "additionalProperties"}
)
"""Keywords that say what a value may be: a schema with none of them allows any."""
ANY = ["string", "number", "boolean", "object", "array", "null"]
"""Every JSON type (`integer` is a `number`)."""


def for_model(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` simplified for a grammar compiler (see the module docstring)."""
    defs = {**(schema.get("definitions") or {}), **(schema.get("$defs") or {})}
    simplified = _simplify(schema, defs, 0, ())
    return simplified if isinstance(simplified, dict) else {}


def _simplify(node: Any, defs: Mapping[str, Any], depth: int, seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_simplify(item, defs, depth, seen) for item in node]
    if not isinstance(node, Mapping):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        target = defs.get(name)
        if target is None or name in seen or depth >= MAX_DEPTH:
            return _any(_described({}, node))  # a cycle, too deep, or unknown: any value
        inlined = _simplify(target, defs, depth, (*seen, name))
        return _described(inlined, node)
    if depth >= MAX_DEPTH:
        return _any(_described({}, node))
    out: dict[str, Any] = {}
    for key, value in node.items():
        if (key in _DROPPED and not (key in _SMALL and value == 1)) or key in (
            "$defs",
            "definitions",
        ):
            continue
        key = "anyOf" if key == "oneOf" else key
        deeper = depth + 1 if key in _NESTING else depth
        if key in _NAMES and isinstance(value, Mapping):
            out[key] = {name: _simplify(sub, defs, deeper, seen) for name, sub in value.items()}
        else:
            out[key] = _simplify(value, defs, deeper, seen)
    choices = out.get("anyOf")
    if isinstance(choices, list):
        out = _one_of_each(out, choices)
    return _any(out)


def _one_of_each(schema: dict[str, Any], choices: list[Any]) -> dict[str, Any]:
    """`schema` with the choices of its `anyOf` that say the same (once what a grammar
    cannot check is gone: a template's `pattern` made it another string) kept once; one
    left stands in the `anyOf`'s place."""
    kept: list[Any] = []
    for choice in choices:
        if not any(_shape(choice) == _shape(other) for other in kept):
            kept.append(choice)
    if len(kept) > 1:
        return {**schema, "anyOf": kept}
    rest = {k: v for k, v in schema.items() if k != "anyOf"}
    only = kept[0] if kept and isinstance(kept[0], dict) else {}
    return {**only, **rest}


def _shape(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: v for k, v in schema.items() if k not in ("description", "default")}
    return schema


def _any(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema`, naming every type when it has no shape (llama.cpp's converter refuses a
    schema of annotations alone, and fails on `items: {}`)."""
    if schema.keys() & _SHAPE:
        return schema
    return {**schema, "type": ANY}


def _described(schema: Any, where: Mapping[str, Any]) -> Any:
    """`schema`, with the description written beside a `$ref` (it says more, there)."""
    text = where.get("description")
    if isinstance(schema, dict) and isinstance(text, str):
        return {**schema, "description": text}
    return schema
