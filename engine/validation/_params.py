"""A step's params against its action's params model, once per shape.

A value under a template (`${{ ... }}`) is known only at run time, so its own problems are
not reported. Params with templates often fail the model anyway (a template is a string
where the action takes an integer): then what is reported is the problems of the literal
values alone, and those depend only on the params' *shape* (the literal values, and where
the templates are), not on what the templates say, whenever each problem under a template
is one any `${{ ... }}` string has there (it is not a number, a list...). Large plans repeat
a few shapes thousands of times (a fan of steps each reading another step's output): such
a shape is validated once, and its problems are reported again for every step that has it.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable
from typing import Any

from pydantic import BaseModel, ValidationError

from engine.diagnostics import NodePath, did_you_mean
from engine.templating import MARK, find_templates
from engine.validation._pydantic import dotted, lower
from engine.validation._report import Report

__all__ = ["check_params"]

Problem = tuple[tuple[str | int, ...], str, str, str | None, bool]
"""Where under the step's `params`, the rule, the message, the hint, whether at the key."""

# Problems a template has wherever it is, whatever it says: every `${{ ... }}` string is
# not a number, a boolean, a list, a mapping, None or a date, and is not shorter than the
# `${{` it holds. A problem under a template of another type (a pattern, a length, one
# of some strings) may depend on its text, and the params that have it are not shared.
_ANY_TEMPLATE = frozenset(
    {
        "int_type", "int_parsing", "int_from_float", "float_type", "float_parsing",
        "bool_type", "bool_parsing", "decimal_type", "decimal_parsing", "list_type",
        "tuple_type", "set_type", "frozen_set_type", "dict_type", "model_type",
        "model_attributes_type", "dataclass_type", "none_required", "date_type",
        "date_parsing", "date_from_datetime_parsing", "datetime_type", "datetime_parsing",
        "time_type", "time_parsing", "timedelta_type", "timedelta_parsing", "uuid_type",
        "uuid_parsing", "callable_type", "is_instance_of",
    }
)  # fmt: skip

_SHAPES_KEPT = 4096
_shapes: dict[tuple[type[BaseModel], Hashable], tuple[Problem, ...]] = {}


def check_params(
    report: Report, path: NodePath, tool: str, model: type[BaseModel], params: dict[str, Any]
) -> BaseModel | None:
    """The params as `model`, or None when they do not fit it (the problems reported,
    but for those under templates, which are known only at run time)."""
    shape, templated = _shape(params)  # (params with no template are validated as they are)
    known = None
    if templated:
        try:
            known = _shapes.get((model, shape))
        except TypeError:  # a literal that is not hashable (a set, from the Python API)
            templated = False
    if known is None:
        try:
            return model.model_validate(params)
        except ValidationError as exc:
            known, shared = _problems(exc, tool, model, params)
        if templated and shared and len(_shapes) < _SHAPES_KEPT:
            _shapes[(model, shape)] = known
    for where, rule, message, hint, key in known:
        report((*path, "params", *where), rule, message, hint, key=key)
    return None


def _problems(
    exc: ValidationError, tool: str, model: type[BaseModel], params: dict[str, Any]
) -> tuple[tuple[Problem, ...], bool]:
    """What is wrong with the literal values, and whether every step of the params' shape
    has just these problems (see `_ANY_TEMPLATE`)."""
    templated = [p for p, _ in find_templates(params)]
    problems: list[Problem] = []
    shared = True
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        if any(loc[: len(t)] == t for t in templated):
            shared = shared and error["type"] in _ANY_TEMPLATE
            continue  # the value is known only at run time
        if error["type"] == "extra_forbidden":
            names, accepted = _accepted(model)
            hint = did_you_mean(str(loc[-1]), names) or f"{tool} takes: {accepted}"
            problems.append((loc, "bad-params", f"{tool} has no param '{loc[-1]}'", hint, True))
        elif error["type"] == "missing":
            message = f"{tool} needs param '{dotted(loc)}'"
            hint = f"{tool} takes: {_accepted(model)[1]} (? = optional)"
            problems.append(((), "bad-params", message, hint, False))
        else:
            message = f"{tool} param '{dotted(loc)}': {lower(error['msg'])}"
            problems.append((loc, "bad-params", message, None, False))
    return tuple(problems), shared


class _Template:
    """Where a template stands in a shape (whatever it says)."""


_TEMPLATE = _Template()


def _shape(value: Any) -> tuple[Hashable, bool]:
    """`value` with every template the same marker, and each literal with its type (`1`,
    `1.0` and `True` are equal keys, but not the same param); whether it holds a template.
    (Not a closure over a flag: a recursive closure is a reference cycle, left for the
    cyclic collector at every call.)"""
    if isinstance(value, str):
        return (_TEMPLATE, True) if MARK in value else (value, False)
    if isinstance(value, dict):
        items = []
        templated = False
        for key, item in value.items():
            shape, has = _shape(item)
            items.append((key, shape))
            templated = templated or has
        return (dict, tuple(items)), templated
    if isinstance(value, list):
        shapes = []
        templated = False
        for item in value:
            shape, has = _shape(item)
            shapes.append(shape)
            templated = templated or has
        return (list, tuple(shapes)), templated
    return (type(value), value), False


@functools.lru_cache(maxsize=1024)
def _accepted(model: type[BaseModel]) -> tuple[tuple[str, ...], str]:
    """A params model's param names, and them as a hint (`path, limit?`), from its JSON
    schema (an MCP tool's model has no fields of its own). Only on the error path: most
    errors are under templated values, which are skipped."""
    schema = model.model_json_schema()
    required = set(schema.get("required", []))
    names = tuple(schema.get("properties", {}))
    return names, ", ".join(f"{name}{'' if name in required else '?'}" for name in names)
