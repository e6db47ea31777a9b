"""What a run spends and gives: model calls, tokens and tool calls per step and in all, and
the plan's outputs rendered at its end."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from engine.errors import TemplateError
from engine.llm import LLMClient
from engine.model import Plan
from engine.results import StepUsage, Usage
from engine.templating import ValueTemplate, compile_value


class Spending:
    """Model calls and tokens per running step, and usages made, shared by value (a
    100,000-step run makes a few distinct ones)."""

    def __init__(self) -> None:
        self._model_spent: dict[str, list[int]] = {}
        self._usages: dict[tuple[int, ...], StepUsage] = {}

    def spend_model(self, step_id: str, prompt_tokens: int, completion_tokens: int) -> None:
        spent = self._model_spent.get(step_id)
        if spent is None:
            spent = self._model_spent[step_id] = [0, 0, 0]
        spent[0] += 1
        spent[1] += prompt_tokens
        spent[2] += completion_tokens

    def step_usage(self, step_id: str, tools: int) -> StepUsage | None:
        """What the step spent (its model calls taken from the counters, `tools` its tool
        calls), or None if it made no call. Equal usages share one frozen instance."""
        model = self._model_spent.pop(step_id, None) if self._model_spent else None
        if model is None:
            if not tools:
                return None
            key: tuple[int, ...] = (0, 0, 0, tools)
        else:
            key = (*model, tools)
        usage = self._usages.get(key)
        if usage is None:
            usage = self._usages[key] = StepUsage(
                llm_calls=key[0], prompt_tokens=key[1], completion_tokens=key[2], tool_calls=tools
            )
        return usage

    @staticmethod
    def usage(tool_calls: int, llm: LLMClient | None) -> Usage:
        """The run's usage: its tool calls, and its model client's budget spent."""
        usage = Usage(tool_calls=tool_calls)
        if llm is not None:
            budget = llm.budget
            usage.llm_calls = budget.calls
            usage.prompt_tokens = budget.prompt_tokens
            usage.completion_tokens = budget.completion_tokens
        return usage


def plan_outputs(
    plan: Plan,
    context: dict[str, Any],
    unknown_steps: Collection[str] | None,
    errors: list[str],
) -> tuple[dict[str, Any], dict[str, str] | None]:
    """The plan's outputs; in a dry run (`unknown_steps`: the steps whose outputs it left
    unknown), those reading such a step are null, each with the reason. An output that
    fails to render is null, its error added to `errors`."""
    outputs: dict[str, Any] = {}
    unknown: dict[str, str] | None = {} if unknown_steps is not None else None
    for name, value in plan.outputs.items():
        try:
            compiled = compile_value(value)
            needs = _unknown_output(compiled, unknown_steps) if unknown_steps is not None else None
            if unknown is not None and needs is not None:
                outputs[name] = None
                unknown[name] = f"needs the output of '{needs}', unknown in a dry run"
                continue
            outputs[name] = compiled.render(context)
        except (TemplateError, ValueError) as exc:
            outputs[name] = None
            errors.append(f"output '{name}': {exc}")
    return outputs, unknown


def _unknown_output(compiled: ValueTemplate, unknown_steps: Collection[str]) -> str | None:
    """The first step whose output `compiled` reads and a dry run left unknown (a step's
    status and error are known; its output is not)."""
    for template in compiled.templates:
        for ref in template.references:
            reads_output = ref[:1] == ("steps",) and ref[2:3] in ((), ("output",))
            if reads_output and len(ref) >= 2 and ref[1] in unknown_steps:
                return str(ref[1])
    return None
