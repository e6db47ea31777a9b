"""An MCP tool's `inputSchema` as a params model, so its calls are checked like any action's.

The schema is the server's, so it is not trusted to be cheap: `pattern`,
`patternProperties` and the regexes `additionalProperties` consults run with planloom's
bounded matcher (`engine.regex`: a time limit, the GIL released), not `re`, which a
pattern such as `^(a|a)*$` would hold for ever; a `$ref` that refers to itself endlessly is
a schema error, not a crash.

The model validates with `jsonschema` (a schema with `properties` that says nothing of
other keys refuses them, as every action's params do) and reports each problem as pydantic
does (`missing`, `extra_forbidden`, or the schema's own message), at its place in the
params, so validation and the sandbox locate a bad param the same way for an MCP tool as
for `fs.read`.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar, Self

import jsonschema
from jsonschema.exceptions import SchemaError
from jsonschema.exceptions import ValidationError as SchemaViolation
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from engine.regex import RegexTimeout
from engine.regex import search as bounded_search

__all__ = ["SchemaParams", "params_model"]

_MAX_ERRORS = 20


class SchemaParams(BaseModel):
    """Params checked against a JSON schema; the values are kept as given."""

    model_config = ConfigDict(extra="allow")
    schema_: ClassVar[dict[str, Any]] = {}
    checker_: ClassVar[Any] = None

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        try:
            problems = [
                detail for error in cls.checker_.iter_errors(obj) for detail in _details(error)
            ]
        except (RecursionError, _Unmatchable) as exc:
            why = str(exc) if isinstance(exc, _Unmatchable) else "it refers to itself endlessly"
            problems = [
                InitErrorDetails(
                    type=PydanticCustomError(
                        "json_schema",
                        "the tool's inputSchema cannot be checked: {why}",
                        {"why": why},
                    ),
                    loc=(),
                    input=obj,
                )
            ]
        if problems:
            raise ValidationError.from_exception_data(cls.__name__, problems[:_MAX_ERRORS])
        return super().model_validate(obj if isinstance(obj, dict) else {}, *args, **kwargs)

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return copy.deepcopy(cls.schema_)

    def arguments(self) -> dict[str, Any]:
        return dict(self.__pydantic_extra__ or {})


def params_model(name: str, schema: dict[str, Any]) -> type[SchemaParams]:
    """A params model for the tool `name` from its `inputSchema`.

    Raises:
        ValueError: the schema is not a valid JSON schema for an object.
    """
    if schema.get("type", "object") != "object":
        raise ValueError(f"its inputSchema has type {schema.get('type')!r}, not 'object'")
    checker_class = _bounded(
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    )
    try:
        checker_class.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"its inputSchema is not a valid JSON schema: {exc.message}") from None
    checked = schema
    if "properties" in schema and not {"additionalProperties", "patternProperties"} & set(schema):
        # Silence is not consent here: an unknown key is a typo, refused as for any action.
        checked = {**schema, "additionalProperties": False}
    model_name = "".join(part.title() for part in name.replace("-", "_").split(".")) + "Params"
    return type(
        model_name,
        (SchemaParams,),
        {
            "schema_": copy.deepcopy(schema),
            "checker_": checker_class(checked),
            "__module__": __name__,
        },
    )


def _details(error: SchemaViolation) -> list[InitErrorDetails]:
    where = tuple(error.absolute_path)
    instance = error.instance
    if error.validator == "required" and isinstance(instance, dict):
        required = error.validator_value if isinstance(error.validator_value, list) else []
        return [
            InitErrorDetails(type="missing", loc=(*where, key), input=instance)
            for key in required
            if key not in instance
        ]
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        schema = error.schema if isinstance(error.schema, dict) else {}
        return [
            InitErrorDetails(type="extra_forbidden", loc=(*where, key), input=instance[key])
            for key in _extras(instance, schema)
        ]
    return [
        InitErrorDetails(
            type=PydanticCustomError("json_schema", "{message}", {"message": error.message}),
            loc=where,
            input=instance,
        )
    ]


class _Unmatchable(Exception):
    """A schema regex that is invalid, or ran out of time."""


def _matches(pattern: str, text: str) -> bool:
    try:
        return bounded_search(pattern, text) is not None
    except (ValueError, RegexTimeout) as exc:
        raise _Unmatchable(str(exc)) from None


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Any:
    if validator.is_type(instance, "string") and not _matches(str(pattern), instance):
        yield SchemaViolation(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _matches(str(pattern), key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, allowed: Any, instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "object"):
        return
    extras = _extras(instance, schema)
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        listed = ", ".join(repr(extra) for extra in sorted(extras))
        yield SchemaViolation(f"Additional properties are not allowed ({listed} unexpected)")


def _extras(instance: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """The keys neither `properties` nor `patternProperties` covers."""
    known = schema.get("properties", {})
    patterns = [str(p) for p in schema.get("patternProperties", {})]
    return [
        key
        for key in instance
        if key not in known and not any(_matches(pattern, key) for pattern in patterns)
    ]


def _bounded(checker_class: Any) -> Any:
    """The validator class with the regex keywords on the bounded matcher."""
    return jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        checker_class,
        {
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
        },
    )
