"""Finding unknown keys anywhere in a plan, each reported with a did-you-mean."""

from __future__ import annotations

import difflib
import functools
from typing import Any

from pydantic import BaseModel

from engine.diagnostics import NodePath, did_you_mean
from engine.model import (
    AgentSpec,
    FallbackAction,
    InputSpec,
    Limits,
    LLMSettings,
    Plan,
    RetryPolicy,
    Step,
)
from engine.validation._pydantic import dotted
from engine.validation._report import Report

__all__ = ["SECTIONS", "without_unknown_keys"]

SECTIONS = ("steps", "finally")
"""The keys of a plan that hold its steps."""


def without_unknown_keys(report: Report, data: dict[str, Any]) -> dict[str, Any]:
    """Report unknown keys everywhere; return the data without them, so every other
    rule still runs on the rest."""
    data = _keys(report, data, (), Plan)
    for name, model in (("limits", Limits), ("llm", LLMSettings)):
        if isinstance(data.get(name), dict):
            data[name] = _keys(report, data[name], (name,), model)
    if isinstance(data.get("inputs"), dict):
        data["inputs"] = {
            key: _keys(report, spec, ("inputs", key), InputSpec) if isinstance(spec, dict) else spec
            for key, spec in data["inputs"].items()
        }
    for section in SECTIONS:
        if isinstance(data.get(section), list):
            data[section] = [
                _step_keys(report, raw, (section, index)) if isinstance(raw, dict) else raw
                for index, raw in enumerate(data[section])
            ]
    return data


def _step_keys(report: Report, raw: dict[str, Any], base: NodePath) -> dict[str, Any]:
    kept = _keys(report, raw, base, Step)
    for sub, model in (("retry", RetryPolicy), ("agent", AgentSpec)):
        value = kept.get(sub)
        if isinstance(value, dict):
            kept = _replaced(raw, kept, sub, _keys(report, value, (*base, sub), model))
    fallback = kept.get("fallback")
    if isinstance(fallback, dict):
        path = (*base, "fallback")
        cleaned = _keys(report, fallback, path, FallbackAction)
        agent = cleaned.get("agent")
        if isinstance(agent, dict):
            cleaned = _replaced(
                fallback, cleaned, "agent", _keys(report, agent, (*path, "agent"), AgentSpec)
            )
        kept = _replaced(raw, kept, "fallback", cleaned)
    return kept


def _replaced(raw: dict[str, Any], kept: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """`kept` with `key` set to `value`, never changing `raw` (the caller's data)."""
    if value is kept[key]:
        return kept
    if kept is raw:
        kept = dict(raw)
    kept[key] = value
    return kept


def _keys(
    report: Report, mapping: dict[str, Any], path: NodePath, model: type[BaseModel]
) -> dict[str, Any]:
    """`mapping` without the keys `model` does not know (itself when it has none), each
    one reported."""
    allowed = _allowed_keys(model)
    if mapping.keys() <= allowed.keys():  # the usual case: the mapping itself
        return mapping
    kept = {}
    for key, value in mapping.items():
        if key in allowed:
            kept[key] = value
            continue
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        if close and close[0] not in mapping:
            # `parms:` is a typo for `params`: say so once, not also "params missing"
            report.source.broken.add((*path, close[0]))
        hint = did_you_mean(key, allowed) or f"allowed keys: {', '.join(allowed)}"
        where = f" in {dotted(path)}" if path else ""
        report((*path, key), "unknown-key", f"unknown key '{key}'{where}", hint, key=True)
    return kept


@functools.cache
def _allowed_keys(model: type[BaseModel]) -> dict[str, None]:
    """The keys `model` takes, in order (a dict: ordered, and quick to look a key up in)."""
    return dict.fromkeys(f.alias or name for name, f in model.model_fields.items())
