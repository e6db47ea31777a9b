"""Agent steps and natural-language fallbacks: the task an agent runner is handed, its tools,
and what it did (transcripts for the summary)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from engine._support.eager import as_task
from engine.agent import AgentRunner, AgentTask, ToolSpec
from engine.capability import Registry
from engine.errors import StepError, StepFailed, StepTimeout
from engine.executor._compiled import CompiledAction
from engine.model import AgentSpec, Step
from engine.sandbox import Sandbox

__all__ = ["AgentSteps"]


@dataclass
class AgentSteps:
    """Runs a run's agent tasks through its sandbox.

    Attributes:
        runner: the agent runner (the ReAct loop); None when the run has no model.
        registry: where tool descriptions and schemas come from.
        sandbox: every tool call an agent makes passes it, like a step's own.
        granted: the families the plan grants (a fallback's agent may use their tools).
        primary: a running step's own action, told to its fallback's agent with the failure.
        transcripts: each step's agent tool calls, in order.
    """

    runner: AgentRunner | None
    registry: Registry
    sandbox: Sandbox
    granted: Iterable[str]
    primary: Callable[[str], CompiledAction]
    transcripts: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    async def run(
        self,
        step: Step,
        action: CompiledAction,
        context: dict[str, Any],
        attempt: int,
        failure: str | None,
    ) -> Any:
        """Hand the task to the agent runner; its tool calls pass the same sandbox gate.

        `failure` is what made the step's own action fail, for a natural-language fallback.
        """
        if self.runner is None:
            raise StepFailed(
                f"step '{step.id}' needs a model (an agent step or a natural-language "
                "fallback): pass --model and --base-url, or set PLANLOOM_MODEL and "
                "OPENAI_API_KEY"
            )
        if action.instructions is not None:
            goal = str(action.instructions.render(context))
            names = self._granted_actions()
            facts = self._failure_context(step, context, failure)
            spec = AgentSpec(goal=goal or "recover", tools=names)
        else:
            assert action.agent is not None
            assert action.goal is not None
            spec, names, facts = action.agent, action.agent.tools, None
            goal = str(action.goal.render(context))

        # A model chooses these calls: `confirm: never` waives only a step's own action.
        confirm: Literal["auto", "always"] = "always" if step.confirm == "always" else "auto"

        async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
            return await self.sandbox.call(
                name,
                arguments,
                step_id=step.id,
                attempt=attempt,
                confirm=confirm,
                idempotent=step.idempotent,
            )

        task = AgentTask(
            goal=goal,
            tools=[self._tool_spec(name) for name in names],
            call_tool=call_tool,
            max_iterations=spec.max_iterations,
            output_schema=spec.output_schema,
            context=facts,
            min_tool_calls=spec.min_tool_calls,
        )
        await as_task()  # (the runner's model and tool calls, and the timeout, need one)
        try:
            if action.timeout is None:
                return await self.runner.run(task)
            try:
                async with asyncio.timeout(action.timeout):
                    return await self.runner.run(task)
            except TimeoutError:
                raise StepTimeout(f"agent timed out after {action.timeout:g} s") from None
        finally:
            self.transcripts.setdefault(step.id, []).extend(
                {"tool": e.tool, "arguments": e.arguments, "status": e.status, "detail": e.detail}
                for e in task.transcript
            )

    def _tool_spec(self, name: str) -> ToolSpec:
        action = self.registry.actions[name]
        return ToolSpec(name, action.description, action.params_model.model_json_schema())

    def _granted_actions(self) -> list[str]:
        return self.registry.agent_tools(self.granted)

    def _failure_context(self, step: Step, context: dict[str, Any], failure: str | None) -> str:
        try:
            params = json.dumps(self.primary(step.id).params.render(context), default=repr)
        except StepError:
            params = "(could not be rendered)"
        return (
            f"You are the fallback of step '{step.id}', which ran "
            f"{step.tool or 'an agent task'} with params {params[:4000]} and failed: "
            f"{failure or 'unknown error'}"
        )
