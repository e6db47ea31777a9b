"""What the executor hands an agent runner: the task, its tools, and a way to call them.

The executor knows nothing of models; it builds an `AgentTask` for an `agent` step or a
natural-language fallback, whose `call_tool` goes through the same sandbox gate as any
step, and awaits an `AgentRunner` (the ReAct loop in `planners.react`). A runner that makes
each tool call in a task of its own marks it with the id the model gave it
(`enter_tool_call`), so traces can name the call the model asked for.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine._support.scope import enter_tool_call
from engine.model_schema import for_model

__all__ = [
    "AgentRunner",
    "AgentTask",
    "CallTool",
    "ToolSpec",
    "TranscriptEntry",
    "enter_tool_call",
    "tool_name_for",
]

CallTool = Callable[[str, dict[str, Any]], Awaitable[Any]]


def tool_name_for(action: str) -> str:
    """OpenAI function names allow [a-zA-Z0-9_-]: `fs.read` → `fs__read`."""
    return action.replace(".", "__")


@dataclass(frozen=True)
class ToolSpec:
    """A tool offered to the model."""

    action: str
    description: str
    parameters: dict[str, Any]

    def for_model(self) -> dict[str, Any]:
        """The tool as a model is sent it: its params schema simplified for grammar
        compilers (`engine.model_schema`; the sandbox checks calls against the whole)."""
        return {
            "type": "function",
            "function": {
                "name": tool_name_for(self.action),
                "description": self.description,
                "parameters": for_model(self.parameters),
            },
        }


@dataclass
class TranscriptEntry:
    """One tool call as it really went."""

    tool: str
    arguments: Any
    status: str  # ok | error | invalid
    detail: str | None = None


@dataclass
class AgentTask:
    """What the loop is asked to do.

    Attributes:
        goal: the task, in natural language (already rendered).
        tools: the tools it may call.
        call_tool: runs one tool call through the sandbox; raises `StepError` on refusal.
        max_iterations: model turns before giving up.
        output_schema: a JSON Schema the final answer must satisfy (then it is an object).
        context: extra facts for the model (e.g. the failed step and its error).
        min_tool_calls: successful tool calls to make before an answer counts.
    """

    goal: str
    tools: list[ToolSpec]
    call_tool: CallTool
    max_iterations: int = 10
    output_schema: dict[str, Any] | None = None
    context: str | None = None
    min_tool_calls: int = 0
    transcript: list[TranscriptEntry] = field(default_factory=list)


class AgentRunner(Protocol):
    """Carries out an `AgentTask`; returns the final answer or raises `StepError`."""

    async def run(self, task: AgentTask) -> Any: ...
