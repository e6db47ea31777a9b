"""Finding unknown keys anywhere in a plan, each reported with a did-you-mean."""

from __future__ import annotations

import difflib
import functools
from typing import Any

from pydantic import BaseModel

from engine._validation_pydantic import dotted
from engine._validation_report import Report
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
    raw = _keys(report, raw, base, Step)
    for sub, model in (("retry", RetryPolicy), ("agent", AgentSpec)):
        if isinstance(raw.get(sub), dict):
            raw[sub] = _keys(report, raw[sub], (*base, sub), model)
    fallback = raw.get("fallback")
    if isinstance(fallback, dict):
        fallback = _keys(report, fallback, (*base, "fallback"), FallbackAction)
        if isinstance(fallback.get("agent"), dict):
            fallback["agent"] = _keys(
                report, fallback["agent"], (*base, "fallback", "agent"), AgentSpec
            )
        raw["fallback"] = fallback
    return raw


def _keys(
    report: Report, mapping: dict[str, Any], path: NodePath, model: type[BaseModel]
) -> dict[str, Any]:
    allowed = _allowed_keys(model)
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
def _allowed_keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]
