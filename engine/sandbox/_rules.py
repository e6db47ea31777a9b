"""The rules of one call besides its grant and schema: the action's own grant rules, the check of
params a person edits at the gate, which data paths an edit leaves as data, and the rule a
refusal names."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from engine._support.problems import validation_problems
from engine.capability import Action, CallContext, ParamPath
from engine.errors import (
    ApprovalDenied,
    BudgetExceeded,
    CapabilityDenied,
    StepError,
)

_MISSING = object()


def grant_rules(action: Action[Any], model: Any, ctx: CallContext) -> None:
    """The action's own grant rules for this call (`Action.admit`).

    Raises:
        CapabilityDenied: the grant does not allow it.
    """
    if action.admit is not None:
        action.admit(model, ctx)


def checker(action: Action[Any], ctx: CallContext, asked: Any) -> Callable[[Any], str | None]:
    """Checks params a person edited (from `asked`) against the action's schema and its
    grant rules, as the call will be checked: None, or what is wrong."""

    def check(params: Any) -> str | None:
        try:
            model = action.params_model.model_validate(params)
        except ValidationError as exc:
            return validation_problems(exc, root="params")
        edited = dataclasses.replace(ctx, data_paths=unchanged(ctx.data_paths, asked, params))
        try:
            grant_rules(action, model, edited)
        except CapabilityDenied as exc:
            return exc.message
        return None

    return check


def unchanged(paths: frozenset[ParamPath], before: Any, after: Any) -> frozenset[ParamPath]:
    """The paths whose value is the same in both params trees."""
    return frozenset(p for p in paths if _value_at(before, p) == _value_at(after, p))


def _value_at(tree: Any, path: ParamPath) -> Any:
    for key in path:
        in_dict = isinstance(tree, dict) and key in tree
        in_list = isinstance(tree, list) and isinstance(key, int) and 0 <= key < len(tree)
        if not (in_dict or in_list):
            return _MISSING
        tree = tree[key]
    return tree


def gate_reason(side_effects: bool, note: str | None) -> str:
    reason = "has side effects" if side_effects else "confirm: always"
    return f"{reason}; {note}" if note else reason


def rule(error: StepError) -> str:
    if isinstance(error, CapabilityDenied):
        return error.rule
    if isinstance(error, ApprovalDenied):
        return "gate"
    if isinstance(error, BudgetExceeded):
        return f"budget.{error.limit}"
    return "runtime"
