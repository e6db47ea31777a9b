"""Wording pydantic's validation errors as recipe problems, in the recipe's own terms."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from engine.diagnostics import NodePath
from engine.validation._report import Report

__all__ = ["dotted", "lower", "report_model_errors"]


def report_model_errors(report: Report, exc: ValidationError, raw: Any, path: NodePath) -> None:
    """Report the errors of validating `raw` (at `path`), one problem per location."""
    groups: dict[NodePath, list[Any]] = {}
    for error in exc.errors(include_url=False):
        if error["type"] == "extra_forbidden":
            continue  # reported with the other unknown keys, with a did-you-mean
        loc = tuple(p for p in error["loc"] if not _is_union_tag(p))
        groups.setdefault(loc, []).append(error)
    for loc, errors in groups.items():
        full = (*path, *loc)
        message, rule = _describe(loc, errors, _get(raw, loc), path)
        report(full, rule, message, key=rule == "missing-key")


def _is_union_tag(part: str | int) -> bool:
    if not isinstance(part, str):
        return False
    return (
        part[:1].isupper()
        or part in {"str", "bool", "int", "float", "list", "dict", "none"}
        or part.startswith(("function-", "list[", "dict[", "literal["))
    )


_TYPE_ERRORS = {
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "none_required": "null",
}


def _describe(loc: NodePath, errors: list[Any], value: Any, base: NodePath = ()) -> tuple[str, str]:
    where = dotted(loc) or dotted(base) or "recipe"
    kinds = [e["type"] for e in errors]
    if all(kind in _TYPE_ERRORS for kind in kinds):
        wanted = list(dict.fromkeys(_TYPE_ERRORS[k] for k in kinds))
        return f"{where}: expected {' or '.join(wanted)}, got {_kind(value)}", "bad-type"
    error = next(e for e in errors if e["type"] not in _TYPE_ERRORS)
    kind, msg = error["type"], lower(error["msg"])
    if kind == "missing":
        return f"missing '{where}'", "missing-key"
    if kind == "string_pattern_mismatch":
        if loc and loc[-1] == "id":
            return (
                f"bad step id {value!r}: use letters, digits and '_', not starting "
                "with a digit (ids are names in templates)",
                "bad-id",
            )
        return f"bad {where} {value!r}: use lowercase letters, digits, '-' and '_'", "bad-name"
    if kind == "value_error":
        return msg.removeprefix("value error, "), "invalid-step" if not loc else "bad-value"
    return f"{where}: {msg}", "bad-value"


def _get(raw: Any, loc: Iterable[str | int]) -> Any:
    for part in loc:
        if isinstance(raw, list) and isinstance(part, int) and part < len(raw):
            raw = raw[part]
        elif not isinstance(raw, dict) or part not in raw:
            return None
        else:
            raw = raw[part]
    return raw


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)


def dotted(loc: Iterable[str | int]) -> str:
    """A node path as the recipe spells it: `steps[0].params.path`."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def lower(message: str) -> str:
    """`message` with its first letter in lower case, to follow a colon."""
    return message[:1].lower() + message[1:]
