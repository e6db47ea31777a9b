"""The public API is exactly what the packages' `__all__` promise, and every name resolves."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "engine": {
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
    },
    "capabilities": {
        "Action",
        "CallContext",
        "EmptyGrant",
        "Family",
        "Gate",
        "Registry",
        "Sandbox",
        "default_registry",
    },
    "planners": {"load_recipe", "parse_recipe_text", "read_recipe"},
    # the model client, and the hook that reads its answers as they stream
    "engine.llm": {
        "Answers",
        "Budget",
        "ChatResult",
        "ContentSink",
        "LLMClient",
        "LLMConfig",
        "LLMError",
        "ModelCallCancelled",
        "NoJSON",
        "PromptTooLong",
        "ToolCallRequest",
        "estimate_tokens",
        "extract_json",
        "resolve_llm_config",
        "streaming_to",
    },
    # the test kit users write tests with (fakes, scripted models and tools, replay)
    "engine.testing": {
        "Call",
        "CassetteRef",
        "ChatReply",
        "ChatRequest",
        "Fail",
        "FakeClock",
        "FakeOpenAIServer",
        "Fault",
        "Hang",
        "ModelFunction",
        "Raise",
        "ScriptedApprover",
        "ScriptedModel",
        "ScriptedTools",
        "Sleep",
        "ToolCall",
        "UnusedRecordingWarning",
        "Wait",
        "instant_sleep",
        "replay",
        "run_recipe_text",
    },
}


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_all_lists_exactly_the_public_names(package: str) -> None:
    module = importlib.import_module(package)
    assert set(module.__all__) == PUBLIC[package]


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_every_public_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name


def test_unknown_engine_attribute_is_an_attribute_error() -> None:
    engine = importlib.import_module("engine")
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = engine.Nope


def test_capabilities_import_without_the_executor_first() -> None:
    """`capabilities` uses engine's errors; importing it alone must not cycle."""
    import subprocess
    import sys

    code = "import capabilities, engine; print(engine.Executor.__name__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Executor"
