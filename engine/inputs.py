"""Run inputs: `-i key=value` strings and Python values checked against `inputs:`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from engine.diagnostics import did_you_mean
from engine.errors import InputError
from engine.limits import TooDeep, loads_json
from engine.model import InputSpec, Plan

__all__ = ["input_text", "parse_assignments", "resolve_inputs"]

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def input_text(value: Any) -> str:
    """A value as `-i` text: strings as they are, anything else as JSON (so it is parsed
    back by the input's declared type)."""
    return value if isinstance(value, str) else json.dumps(value)


def parse_assignments(pairs: list[str]) -> dict[str, str]:
    """`["a=1", "b=x=y"]` → `{"a": "1", "b": "x=y"}`.

    Raises:
        InputError: a pair has no `=` or an empty name, or a name repeats.
    """
    values: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise InputError(f"-i {pair!r}: expected key=value, e.g. -i since='2 weeks ago'")
        name = name.strip()
        if name in values:
            raise InputError(f"-i {name}: given twice")
        values[name] = value
    return values


def resolve_inputs(plan: Plan, given: Mapping[str, Any], *, from_text: bool) -> dict[str, Any]:
    """Every declared input with its value: given, else default.

    Args:
        plan: the plan whose `inputs:` declare names and types.
        given: values by name; strings from the CLI when `from_text` is true.
        from_text: parse string values by the input's type (JSON for arrays/objects).

    Raises:
        InputError: an unknown name, a missing required input, or a value of the wrong type.
    """
    for name in given:
        if name not in plan.inputs:
            hint = did_you_mean(name, plan.inputs)
            known = ", ".join(plan.inputs) or "none"
            raise InputError(
                f"unknown input '{name}'" + (f"; {hint}" if hint else f" (declared: {known})")
            )
    values: dict[str, Any] = {}
    for name, spec in plan.inputs.items():
        if name in given:
            raw = given[name]
            value = _parse(name, spec, raw) if from_text and isinstance(raw, str) else raw
            _check(name, spec, value)
            values[name] = value
        elif spec.required:
            raise InputError(
                f"missing input '{name}' ({spec.type}"
                + (f": {spec.description}" if spec.description else "")
                + f"); pass it with -i {name}=VALUE"
            )
        else:
            values[name] = spec.default
    return values


def _parse(name: str, spec: InputSpec, raw: str) -> Any:
    text = raw.strip()
    try:
        if spec.type == "string":
            return raw
        if spec.type == "integer":
            return int(text)
        if spec.type == "number":
            return float(text)
        if spec.type == "boolean":
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ValueError(text)
        return loads_json(text)
    except TooDeep as exc:
        raise InputError(f"input '{name}': {exc.message}; pass a flatter value") from None
    except ValueError as exc:
        example = {
            "integer": "42",
            "number": "0.5",
            "boolean": "true",
            "array": '\'["a", "b"]\'',
            "object": "'{\"k\": 1}'",
        }[spec.type]
        raise InputError(
            f"input '{name}' is {spec.type}, got {raw!r}; e.g. -i {name}={example}"
        ) from exc


def _check(name: str, spec: InputSpec, value: Any) -> None:
    ok = spec.accepts(value)
    if not ok:
        raise InputError(f"input '{name}' must be {spec.type}, got {type(value).__name__}")
    if spec.enum is not None and value not in spec.enum:
        choices = ", ".join(map(repr, spec.enum))
        raise InputError(f"input '{name}' must be one of {choices}, got {value!r}")
