"""What each step spent (`StepResult.usage`, `steps.<id>.usage` in `--json`): its model
calls and tokens and its tool calls, across attempts, items, fallbacks and agent turns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from capabilities import default_registry
from engine.approval import ApproveAll
from engine.events import EventBus
from engine.results import NO_USAGE, RunResult, StepUsage
from engine.testing import (
    ChatReply,
    ChatRequest,
    Fail,
    ScriptedTools,
    ToolCall,
    run_recipe_text,
)


def _model(request: ChatRequest) -> ChatReply | str:
    """The agent asks for two tool calls, then answers; anything else is answered."""
    asked = json.dumps(request.messages)
    if "rank them" not in asked:
        return "plain answer"
    if any(m.get("role") == "tool" for m in request.messages):
        return "ranked"
    return ChatReply(
        tool_calls=[
            ToolCall("test__run", {"key": "x", "value": 1}),
            ToolCall("test__run", {"key": "y", "value": 2}),
        ]
    )


def _run(base_dir: Path) -> RunResult:
    registry = default_registry()
    tools = ScriptedTools(registry)
    tools.script("flaky", Fail("down"), Fail("down"), "up")
    tools.script("broken", Fail("always"))
    text = json.dumps(
        {
            "version": 1,
            "name": "usage",
            "capabilities": {"test": {}, "llm": {}},
            "on_failure": "continue",
            "steps": [
                {"id": "plain", "tool": "test.run", "params": {"key": "p", "value": 0}},
                {
                    "id": "flaky",
                    "tool": "test.run",
                    "params": {"key": "flaky"},
                    "retry": {"attempts": 3, "backoff": "fixed", "initial": 0.1},
                },
                {
                    "id": "each",
                    "for_each": [1, 2, 3],
                    "tool": "test.run",
                    "params": {"key": "e", "value": "${{ item }}"},
                },
                {
                    "id": "saved",
                    "tool": "test.run",
                    "params": {"key": "broken"},
                    "fallback": {"tool": "test.run", "params": {"key": "f", "value": 9}},
                },
                {"id": "ask", "tool": "llm.complete", "params": {"prompt": "say hi"}},
                {"id": "think", "agent": {"goal": "rank them", "tools": ["test.run"]}},
                {"id": "never", "tool": "test.run", "params": {"key": "n"}, "when": False},
            ],
        }
    )
    return run_recipe_text(
        text, registry, base_dir=base_dir, approver=ApproveAll(), model=_model, events=EventBus("r")
    )


def _counts(usage: StepUsage) -> tuple[int, int]:
    return usage.llm_calls, usage.tool_calls


def test_each_step_counts_its_own_calls_and_the_steps_add_up_to_the_run(tmp_path: Path) -> None:
    result = _run(tmp_path)
    steps = result.steps
    assert {k: s.status for k, s in steps.items()} == {
        "plain": "succeeded",
        "flaky": "succeeded",
        "each": "succeeded",
        "saved": "fallback",
        "ask": "succeeded",
        "think": "succeeded",
        "never": "skipped",
    }
    assert {k: _counts(s.usage) for k, s in steps.items()} == {
        "plain": (0, 1),
        "flaky": (0, 3),  # every attempt's call
        "each": (0, 3),  # every item's
        "saved": (0, 2),  # the primary's and the fallback's
        "ask": (1, 1),  # the tool call, and the model call it made
        "think": (2, 2),  # the agent's two turns and the two calls it asked for
        "never": (0, 0),
    }
    assert steps["never"].usage is NO_USAGE
    for step_id in ("ask", "think"):
        usage = steps[step_id].usage
        assert usage.prompt_tokens > 0
        assert usage.completion_tokens > 0
    for step_id in ("plain", "flaky", "each", "saved"):
        assert steps[step_id].usage.prompt_tokens == 0
    total = result.usage
    assert sum(s.usage.tool_calls for s in steps.values()) == total.tool_calls
    assert sum(s.usage.llm_calls for s in steps.values()) == total.llm_calls
    assert sum(s.usage.prompt_tokens for s in steps.values()) == total.prompt_tokens
    assert sum(s.usage.completion_tokens for s in steps.values()) == total.completion_tokens
    # In the JSON of `--json` and the snapshot, as the run's usage is.
    dumped: dict[str, Any] = result.model_dump(mode="json")
    assert dumped["steps"]["think"]["usage"] == {
        "llm_calls": 2,
        "prompt_tokens": steps["think"].usage.prompt_tokens,
        "completion_tokens": steps["think"].usage.completion_tokens,
        "tool_calls": 2,
    }
    assert json.loads(result.snapshot())["steps"]["each"]["usage"]["tool_calls"] == 3


def test_steps_that_spent_the_same_share_one_frozen_usage(tmp_path: Path) -> None:
    result = _run(tmp_path)
    assert result.steps["flaky"].usage is result.steps["each"].usage  # (0 model, 3 tools)
    with pytest.raises(ValidationError, match="frozen"):
        result.steps["flaky"].usage.tool_calls = 5  # type: ignore[misc]
    assert result.steps["each"].usage.tool_calls == 3
