"""JSON Schemas as a model is sent them: what a grammar compiler can take.

Servers that honour a schema (llama.cpp's, vLLM, Ollama, OpenAI with `strict`) compile it
into a grammar for constrained decoding. Some keywords make that grammar explode or fail:
llama.cpp turns `maxLength: 4096` into a 4,096-fold repetition and its server crashes
("number of rules ... exceeds sane defaults"); a regex `pattern` it cannot read is refused.
The sandbox checks every call's params against the full schema anyway, so a model needs
only the shape: names, types, enums, what is required, and the descriptions.

`for_model` keeps that and drops the rest: titles, length and size bounds, numeric bounds,
formats, examples, and patterns but the plainest (`^[A-Za-z_][A-Za-z0-9_]*$`: anchored
characters and classes, each at most once or repeated, which every grammar compiler
reads and which keep a step's id a name); `$ref`s are inlined (to `MAX_DEPTH` levels: deeper is any
value), `oneOf` is read as `anyOf`, and choices of an `anyOf` that say the same once
simplified are kept once. A schema of any value names every JSON type, as llama.cpp's
converter wants.

`strict_schema` goes further, for OpenAI's `strict` structured outputs (and servers that
take the same schema): every object closed and every property required, an optional one
nullable instead. `without_added_nulls` makes an answer to it an answer to the schema it
was made from again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_DEPTH", "for_model", "strict_schema", "without_added_nulls"]

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
_PLAIN_PATTERN = re.compile(
    r"\^(?:(?:\[\^?(?:[A-Za-z0-9_ .:/-]|\\[^A-Za-z0-9])+\]|[A-Za-z0-9_ :/-]|\\[^A-Za-z0-9])"
    r"[*+?]?)+\$"
)
"""A `pattern` a grammar can take as it is: from `^` to `$`, literal characters and
character classes (no groups, alternatives, counted repeats or backslash classes), each
optionally followed by `*`, `+` or `?`."""
_SMALL = frozenset({"minItems", "minLength"})
"""Kept when 1 (a plan has a step; an id is not empty): one repetition costs a grammar
nothing, and says what an empty value cannot."""
_NAMES = frozenset({"properties", "$defs", "definitions", "dependentSchemas"})
"""Keywords whose value maps names (kept as they are) to schemas."""
_VALUES = frozenset({"default", "const", "enum"})
"""Keywords whose value is JSON data, kept as it is (never read as a schema)."""
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
        if (key in _DROPPED and not _kept(key, value)) or key in ("$defs", "definitions"):
            continue
        key = "anyOf" if key == "oneOf" else key
        deeper = depth + 1 if key in _NESTING else depth
        if key in _NAMES and isinstance(value, Mapping):
            out[key] = {name: _simplify(sub, defs, deeper, seen) for name, sub in value.items()}
        elif key in _VALUES:  # data, not a schema: `default: {}` is an empty object
            out[key] = value
        else:
            out[key] = _simplify(value, defs, deeper, seen)
    choices = out.get("anyOf")
    if isinstance(choices, list):
        out = _one_of_each(out, choices)
    return _any(out)


def _kept(key: str, value: Any) -> bool:
    """Whether a keyword a model mostly does without is kept all the same: a bound of 1
    (`minItems`, `minLength`), or a plain pattern."""
    if key == "pattern":
        return isinstance(value, str) and len(value) <= 64 and bool(_PLAIN_PATTERN.fullmatch(value))
    return key in _SMALL and value == 1


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


SCALAR = ["string", "number", "boolean", "null"]
"""What a value of any type is in a strict schema: an object cannot be written there."""
_STRICT_KEPT = frozenset({"type", "properties", "items", "anyOf", "enum", "description", "pattern"})
"""The keywords a strict schema keeps (`const` becomes an `enum`; objects get `required`
and `additionalProperties` anew); the rest, annotations and bounds such as `default` or
`minLength` that strict mode refuses, are dropped."""
_NOT_STRICT = frozenset(
    {
        "allOf",
        "not",
        "if",
        "then",
        "else",
        "prefixItems",
        "contains",
        "dependentSchemas",
        "dependentRequired",
        "propertyNames",
        "unevaluatedProperties",
        "unevaluatedItems",
        "$ref",
        "$dynamicRef",
    }
)
"""Keywords that constrain a value in a way strict mode cannot say."""
_NULL = {"type": "null"}


class _NotStrict(Exception):
    """A schema strict mode cannot express (a free-form object, `allOf`, ...)."""


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """The OpenAI-strict version of `schema` (one `for_model` made: no `$ref`s), or None.

    Each object with `properties` is closed (`additionalProperties: false`) and requires
    every property; a property that was not required may be null instead (its `type` list
    gains `"null"`, or it becomes `anyOf` it and null), unless it already allows null.
    `const: v` becomes `enum: [v]`; annotations and bounds strict mode refuses (`default`,
    `minLength`, `minItems`, ...) are dropped. A value of any type (every type named, or
    no shape at all) becomes a scalar, `{"type": ["string", "number", "boolean", "null"]}`:
    strict mode has no free-form object, so an object cannot be written there, but a
    template (a string) can.

    Args:
        schema: a schema as `for_model` returns it.

    Returns:
        The strict schema, or None when strict mode cannot express `schema`: its root is
        not an object with `properties`, or somewhere an object has no `properties` (a
        free-form object, such as a map of `additionalProperties`), or it uses a keyword
        such as `allOf` or `not`.
    """
    try:
        strict = _strict(schema)
    except (_NotStrict, RecursionError):
        return None
    if strict.get("type") != "object" or not isinstance(strict.get("properties"), dict):
        return None  # strict mode's root is an object, not a choice of shapes
    return strict


def _strict(node: Any) -> dict[str, Any]:
    if not isinstance(node, Mapping) or node.keys() & _NOT_STRICT:
        raise _NotStrict
    kinds = node.get("type")
    if not node.keys() & _SHAPE or (isinstance(kinds, list) and set(kinds) >= set(ANY)):
        described = {k: v for k, v in node.items() if k == "description"}
        return {"type": SCALAR, **described}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "const":
            out["enum"] = [value]
        elif key == "properties" and isinstance(value, Mapping):
            needed = _listed(node.get("required"))
            out[key] = {
                name: _strict(sub) if name in needed else _nullable(_strict(sub))
                for name, sub in value.items()
            }
        elif key == "items":
            out[key] = _strict(value)
        elif key == "anyOf":
            out[key] = [_strict(choice) for choice in _listed(value)]
        elif key in _STRICT_KEPT:
            out[key] = value
    types = kinds if isinstance(kinds, list) else [kinds]
    if "object" in types or node.keys() & {"properties", "additionalProperties"}:
        if "properties" not in out:
            raise _NotStrict  # a free-form object: strict mode closes every object
        out["additionalProperties"] = False
        out["required"] = list(out["properties"])
    if "array" in types and "items" not in out:
        out["items"] = {"type": SCALAR}
    return out


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema`, or null: its `type` list gains "null" when it is a plain typed schema; a
    choice gains a null choice; anything else is a choice of it and null."""
    if _allows_null(schema):
        return schema
    kinds = schema.get("type")
    if kinds is not None and not schema.keys() & {"anyOf", "enum", "properties"}:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        return {**schema, "type": [*kinds, "null"]}
    if isinstance(schema.get("anyOf"), list) and schema.keys() <= {"anyOf", "description"}:
        return {**schema, "anyOf": [*schema["anyOf"], _NULL]}
    return {"anyOf": [schema, _NULL]}


def _allows_null(schema: Any) -> bool:
    """Whether `schema` admits null (no schema, or one of any value, does)."""
    if not isinstance(schema, Mapping) or not schema.keys() & _SHAPE:
        return True
    kinds = schema.get("type")
    if kinds == "null" or (isinstance(kinds, list) and "null" in kinds):
        return "enum" not in schema or None in _listed(schema["enum"])
    if "const" in schema:
        return schema["const"] is None
    if "enum" in schema and "type" not in schema:
        return None in _listed(schema["enum"])
    choices = schema.get("anyOf")
    if isinstance(choices, list) and "type" not in schema:
        return any(_allows_null(choice) for choice in choices)
    return False


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def without_added_nulls(value: Any, schema: Mapping[str, Any]) -> Any:
    """`value`, an answer to `strict_schema(schema)`, made an answer to `schema` again.

    Strict mode makes every property required, an optional one nullable: a model writes
    `"retry": null` where it means no retry. Each key whose value is null is dropped
    where `schema` neither requires it nor allows null there. Objects, arrays and `anyOf`
    are walked with the value: a dict goes by the object choice whose properties hold all
    its non-null keys and whose `const`/`enum` properties it matches; another value by the
    first choice that fits it. What `schema` does not describe is left as it is.

    Args:
        value: the answer, as parsed from JSON.
        schema: the schema `strict_schema` was given (a `for_model` schema).

    Returns:
        `value`, without the nulls strict mode added; never raises on odd input.
    """
    try:
        return _restored(value, schema)
    except RecursionError:
        return value


def _restored(value: Any, schema: Any) -> Any:
    if not isinstance(schema, Mapping):
        return value
    if isinstance(value, dict):
        schema = _object_for(value, schema)
        properties = schema.get("properties") if schema is not None else None
        if not isinstance(properties, Mapping):
            return value
        needed = _listed(schema.get("required") if schema is not None else None)
        return {
            key: _restored(item, properties.get(key))
            for key, item in value.items()
            if not (
                item is None
                and key in properties
                and key not in needed
                and not _allows_null(properties[key])
            )
        }
    if isinstance(value, list):
        array = _array_for(schema)
        items = array.get("items") if array is not None else None
        return [_restored(item, items) for item in value]
    return value


def _object_for(value: dict[Any, Any], schema: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The part of `schema` that describes the dict `value`: itself, or its choice."""
    if isinstance(schema.get("properties"), Mapping):
        return schema
    for choice in _listed(schema.get("anyOf")):
        if isinstance(choice, Mapping):
            found = _object_for(value, choice)
            if found is not None and _fits(value, found):
                return found
    return None


def _fits(value: dict[Any, Any], schema: Mapping[str, Any]) -> bool:
    properties = schema["properties"]
    for key, item in value.items():
        if item is None:
            continue
        if key not in properties:
            return False
        sub = properties[key]
        if isinstance(sub, Mapping):
            if "const" in sub and item != sub["const"]:
                return False
            if isinstance(sub.get("enum"), list) and item not in sub["enum"]:
                return False
    return True


def _array_for(schema: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The part of `schema` that describes a list: itself, or its first array choice."""
    kinds = schema.get("type")
    if "items" in schema or kinds == "array" or (isinstance(kinds, list) and "array" in kinds):
        return schema
    for choice in _listed(schema.get("anyOf")):
        if isinstance(choice, Mapping):
            found = _array_for(choice)
            if found is not None:
                return found
    return None
