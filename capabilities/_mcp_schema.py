"""An MCP tool's `inputSchema` as a params model, so its calls are checked like any action's.

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

__all__ = ["SchemaParams", "params_model"]

_MAX_ERRORS = 20


class SchemaParams(BaseModel):
    """Params checked against a JSON schema; the values are kept as given."""

    model_config = ConfigDict(extra="allow")
    schema_: ClassVar[dict[str, Any]] = {}
    checker_: ClassVar[Any] = None

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        problems = [detail for error in cls.checker_.iter_errors(obj) for detail in _details(error)]
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
    checker_class = jsonschema.validators.validator_for(
        schema, default=jsonschema.Draft202012Validator
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
        known = set(error.schema.get("properties", {})) if isinstance(error.schema, dict) else set()
        return [
            InitErrorDetails(type="extra_forbidden", loc=(*where, key), input=instance[key])
            for key in instance
            if key not in known
        ]
    return [
        InitErrorDetails(
            type=PydanticCustomError("json_schema", "{message}", {"message": error.message}),
            loc=where,
            input=instance,
        )
    ]
