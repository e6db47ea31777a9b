"""A step compiled once before the run: its templates parsed, its action and fallback
ready, and its retry policy as tenacity's wait and predicate."""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from typing import Any, Literal

from tenacity import wait_exponential, wait_fixed

from engine._graph import Parsed, step_parsed
from engine.errors import StepError
from engine.model import AgentSpec, FallbackAction, RetryPolicy, Step
from engine.templating import (
    Template,
    ValueTemplate,
    begins_with_template,
    compile_value,
    find_templates,
)

__all__ = ["CompiledAction", "CompiledStep", "retry_wait", "retryable"]


@dataclass(slots=True)
class CompiledAction:
    """A compiled primary or fallback action: a tool call, or a task for the agent runner
    (an `agent` spec, or the instructions of a natural-language fallback)."""

    tool: str
    params: ValueTemplate
    timeout: float | None
    agent: AgentSpec | None = None
    goal: ValueTemplate | None = None
    instructions: ValueTemplate | None = None
    confirm: Literal["auto", "always", "never"] = "auto"
    paths: InitVar[frozenset[tuple[str | int, ...]] | None] = None  # `data_paths`, if known
    data_paths: frozenset[tuple[str | int, ...]] = field(init=False)
    data_literals: frozenset[str] = field(init=False)

    def __post_init__(self, paths: frozenset[tuple[str | int, ...]] | None) -> None:
        self.data_paths = _data_paths(self.params.value) if paths is None else paths
        self.data_literals = self.params.constants

    @property
    def is_agent(self) -> bool:
        return self.goal is not None or self.instructions is not None


def _data_paths(raw: Any) -> frozenset[tuple[str | int, ...]]:
    """Paths of the raw params whose text begins with a template: what a call finds there
    is data (a file name, a step's output), not text the recipe's author wrote."""
    return _shared_paths(
        frozenset(path for path, text in find_templates(raw) if begins_with_template(text))
    )


def _params_paths(parsed: Parsed, prefix: tuple[str, ...]) -> frozenset[tuple[str | int, ...]]:
    """`_data_paths` of the params under `prefix` in a step, from its parsed templates."""
    at = len(prefix)
    return _shared_paths(
        frozenset(
            path[at:]
            for path, text, _ in parsed
            if path[:at] == prefix and begins_with_template(text)
        )
    )


def _shared_paths(paths: frozenset[tuple[str | int, ...]]) -> frozenset[tuple[str | int, ...]]:
    """Steps of one shape have the same paths: one set for all of them, not one per step."""
    return _PATHS.setdefault(paths, paths) if len(_PATHS) < 4096 else paths


_PATHS: dict[frozenset[tuple[str | int, ...]], frozenset[tuple[str | int, ...]]] = {}


def _agent_action(spec: AgentSpec, timeout: float | None) -> CompiledAction:
    return CompiledAction("agent", compile_value({}), timeout, spec, compile_value(spec.goal))


class CompiledStep:
    """A step with its templates compiled once."""

    __slots__ = ("fallback", "for_each", "primary", "step", "when")

    def __init__(self, step: Step) -> None:
        self.step = step
        # parsed at validation and kept with the step
        known = step_parsed(step)
        parsed = {source: t for _, source, t in known if t is not None}
        if step.agent is not None:
            self.primary = _agent_action(step.agent, step.timeout)
        else:
            assert step.tool is not None, "validation: a step has a tool or an agent"
            self.primary = CompiledAction(
                step.tool,
                compile_value(step.params, parsed),
                step.timeout,
                confirm=step.confirm,
                paths=_params_paths(known, ("params",)),
            )
        self.fallback: CompiledAction | None = None
        fb = step.fallback
        if isinstance(fb, FallbackAction):
            timeout = fb.timeout or step.timeout
            if fb.agent is not None:
                self.fallback = _agent_action(fb.agent, timeout)
            else:
                # A fallback's gate is its own: `confirm: never` waives only the step's
                # own action, so a fallback with side effects is gated as under `auto`.
                confirm: Literal["auto", "always"] = (
                    "always" if step.confirm == "always" else "auto"
                )
                self.fallback = CompiledAction(
                    fb.tool or "",
                    compile_value(fb.params, parsed),
                    timeout,
                    confirm=confirm,
                    paths=_params_paths(known, ("fallback", "params")),
                )
        elif isinstance(fb, str):
            self.fallback = CompiledAction(
                "agent", compile_value({}), step.timeout, instructions=compile_value(fb)
            )
        self.when = Template.parse(step.when) if isinstance(step.when, str) else None
        self.for_each = (
            Template.parse(step.for_each) if isinstance(step.for_each, str) else step.for_each
        )


def retry_wait(policy: RetryPolicy) -> Any:
    if policy.backoff == "fixed":
        return wait_fixed(policy.initial)
    return wait_exponential(multiplier=policy.initial, max=policy.max)


def retryable(exc: BaseException, policy: RetryPolicy) -> bool:
    return isinstance(exc, StepError) and exc.retryable and exc.kind in policy.on
