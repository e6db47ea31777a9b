"""planloom's engine: typed plans, validation, templating, execution, approvals, results.

Names are imported on first use, so the low-level modules (errors, diagnostics, events)
can be used by `capabilities` without importing the executor.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.approval import ApproveAll, Approver, DenyAll, FailClosed, GateRequest
    from engine.diagnostics import Diagnostic, SourceMap
    from engine.errors import (
        ApprovalDenied,
        BudgetExceeded,
        CapabilityDenied,
        ConfigurationError,
        InputError,
        PlanError,
        PlanloomError,
        PlanValidationError,
        RecipeSyntaxError,
        StepError,
        StepFailed,
        StepTimeout,
        TemplateError,
        UsageError,
    )
    from engine.events import Event, EventBus
    from engine.executor import Executor, run_plan
    from engine.model import (
        AgentSpec,
        FallbackAction,
        InputSpec,
        Limits,
        LLMSettings,
        Plan,
        RetryPolicy,
        Step,
        StepId,
        plan_json_schema,
    )
    from engine.results import Decision, RunResult, RunStatus, StepResult, StepStatus, Usage
    from engine.schema import recipe_schema
    from engine.validation import validate_plan

__all__ = [
    "AgentSpec",
    "ApprovalDenied",
    "ApproveAll",
    "Approver",
    "BudgetExceeded",
    "CapabilityDenied",
    "ConfigurationError",
    "Decision",
    "DenyAll",
    "Diagnostic",
    "Event",
    "EventBus",
    "Executor",
    "FailClosed",
    "FallbackAction",
    "GateRequest",
    "InputError",
    "InputSpec",
    "LLMSettings",
    "Limits",
    "Plan",
    "PlanError",
    "PlanValidationError",
    "PlanloomError",
    "RecipeSyntaxError",
    "RetryPolicy",
    "RunResult",
    "RunStatus",
    "SourceMap",
    "Step",
    "StepError",
    "StepFailed",
    "StepId",
    "StepResult",
    "StepStatus",
    "StepTimeout",
    "TemplateError",
    "Usage",
    "UsageError",
    "plan_json_schema",
    "recipe_schema",
    "run_plan",
    "validate_plan",
]


_WHERE: dict[str, str] = {
    "AgentSpec": "engine.model",
    "ApprovalDenied": "engine.errors",
    "ApproveAll": "engine.approval",
    "Approver": "engine.approval",
    "BudgetExceeded": "engine.errors",
    "CapabilityDenied": "engine.errors",
    "ConfigurationError": "engine.errors",
    "Decision": "engine.results",
    "DenyAll": "engine.approval",
    "Diagnostic": "engine.diagnostics",
    "Event": "engine.events",
    "EventBus": "engine.events",
    "Executor": "engine.executor",
    "FailClosed": "engine.approval",
    "FallbackAction": "engine.model",
    "GateRequest": "engine.approval",
    "InputError": "engine.errors",
    "InputSpec": "engine.model",
    "LLMSettings": "engine.model",
    "Limits": "engine.model",
    "Plan": "engine.model",
    "PlanError": "engine.errors",
    "PlanValidationError": "engine.errors",
    "PlanloomError": "engine.errors",
    "RecipeSyntaxError": "engine.errors",
    "RetryPolicy": "engine.model",
    "RunResult": "engine.results",
    "RunStatus": "engine.results",
    "SourceMap": "engine.diagnostics",
    "Step": "engine.model",
    "StepError": "engine.errors",
    "StepFailed": "engine.errors",
    "StepId": "engine.model",
    "StepResult": "engine.results",
    "StepStatus": "engine.results",
    "StepTimeout": "engine.errors",
    "TemplateError": "engine.errors",
    "Usage": "engine.results",
    "UsageError": "engine.errors",
    "plan_json_schema": "engine.model",
    "recipe_schema": "engine.schema",
    "run_plan": "engine.executor",
    "validate_plan": "engine.validation",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
