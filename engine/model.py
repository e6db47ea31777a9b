"""The typed plan: what a recipe or an LLM planner produces, and what the executor runs.

Every model forbids unknown keys, so a typo in a recipe is an error, not a silent default.
The recipe JSON Schema (`planloom schema`) is generated from these models.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Annotated, Any, Literal, NewType

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from engine._support.fields import MaySharedFields, share_fields_set

__all__ = [
    "ID_PATTERN",
    "MAX_LLM_RETRIES",
    "MAX_LLM_TIMEOUT",
    "MAX_LLM_TOKENS",
    "NAME_PATTERN",
    "AgentSpec",
    "FallbackAction",
    "InputSpec",
    "LLMSettings",
    "Limits",
    "Plan",
    "PlannerSettings",
    "ReplanPolicy",
    "RetryPolicy",
    "Step",
    "StepId",
    "plan_json_schema",
]

StepId = NewType("StepId", str)
"""A step's id (`Step.id`), for annotating code that handles them."""

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]*$"
# Step ids are names inside templates (`steps.fetch_docs.output`), so no hyphens.
ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"

Seconds = Annotated[float, Field(gt=0, le=86_400)]


class _Model(MaySharedFields):  # (a validated plan's steps share theirs: `compact`)
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def __eq__(self, other: object) -> bool:
        # Equal when the fields are: private attributes only cache what the fields imply.
        if not isinstance(other, BaseModel):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable models, as pydantic's own


def compact(step: Step, raw: Any = None) -> None:
    """Make a step of a large plan smaller, not different: its set of set fields shared
    (`share_fields_set`), and its id, tool and `depends_on` names interned, so that the
    100,000 steps naming `fs.read` or a step they wait for hold one string for it.

    `raw`: the mapping the step was validated from, when its owner gives it up: the step
    keeps its `params` mapping and `depends_on` list, equal to the copies validation made,
    so that one of each is held, not two, while a large plan is checked.
    """
    share_fields_set(step)
    fields = step.__dict__
    if raw is not None:
        params, depends_on = raw.get("params"), raw.get("depends_on")
        if type(params) is dict and _all_str(params):
            fields["params"] = params  # (dict[str, Any]: the same keys, the same values)
        if type(depends_on) is list and _all_str(depends_on):
            fields["depends_on"] = depends_on
    fields["id"] = sys.intern(step.id)
    if step.tool is not None:
        fields["tool"] = sys.intern(step.tool)
    if step.depends_on:
        step.depends_on[:] = [sys.intern(name) for name in step.depends_on]


def _all_str(items: Iterable[object]) -> bool:
    for item in items:  # noqa: SIM110  # (not all() of a generator: a frame more per step)
        if type(item) is not str:
            return False
    return True


def _default_retry_on() -> list[Literal["error", "timeout"]]:
    return ["error", "timeout"]


class RetryPolicy(_Model):
    """How a failed attempt is retried before the fallback is tried."""

    attempts: int = Field(1, ge=1, le=100, description="Total attempts, the first included.")
    backoff: Literal["fixed", "exponential"] = Field(
        "exponential", description="`exponential` doubles the wait each attempt; `fixed` keeps it."
    )
    initial: float = Field(1.0, ge=0, le=3600, description="Seconds before the 2nd attempt.")
    max: float = Field(30.0, ge=0, le=3600, description="Longest wait between attempts.")
    on: list[Literal["error", "timeout"]] = Field(
        default_factory=_default_retry_on,
        description="Which failures are retried. Denials and template errors never are.",
    )


class AgentSpec(_Model):
    """An open-ended task handed to a ReAct tool-calling sub-loop."""

    goal: str = Field(min_length=1, description="The task, in words, for the model.")
    tools: list[str] = Field(
        default_factory=list, description="The granted actions the model may call."
    )
    max_iterations: int = Field(
        10, ge=1, le=100, description="Model turns before the agent gives up."
    )
    output_schema: dict[str, Any] | None = Field(
        None, description="A JSON Schema the agent's final answer must fit."
    )
    min_tool_calls: int = Field(
        0,
        ge=0,
        le=100,
        description="Successful tool calls the agent must make before its answer counts "
        "(an answer before them is sent back once, then the step fails).",
    )


class FallbackAction(_Model):
    """What runs when a step's primary action has failed for good."""

    tool: str | None = Field(None, description="The action called instead.")
    agent: AgentSpec | None = Field(None, description="Or an agent task instead.")
    params: dict[str, Any] = Field(
        default_factory=dict, description="The action's params; values may be templates."
    )
    timeout: Seconds | None = Field(None, description="Seconds the fallback may take.")

    @model_validator(mode="after")
    def _one_action(self) -> FallbackAction:
        if (self.tool is None) == (self.agent is None):
            raise ValueError("a fallback has exactly one of 'tool' or 'agent'")
        return self


class Step(_Model):
    """One node of the plan: a capability action or an agent task, with its policies."""

    id: str = Field(
        pattern=ID_PATTERN,
        max_length=128,
        description="The step's name in templates (`steps.ID.output`): letters, digits, _.",
    )
    description: str | None = Field(None, description="What the step is for, for people.")
    tool: str | None = Field(None, description="The action this step calls.")
    agent: AgentSpec | None = Field(
        None, description="Or an open-ended task for a tool-calling model (instead of `tool`)."
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="The action's params; a value may be a template (`${{ steps.a.output }}`).",
    )
    depends_on: list[str] = Field(
        default_factory=list,
        description="Steps that must end first, besides those its templates read.",
    )
    can_fail: bool = Field(
        False, description="A failure of this step does not fail the run (`failed_acceptable`)."
    )
    fallback: FallbackAction | str | None = Field(
        None,
        description="What runs when the step failed for good: an action, an agent, or words "
        "for an agent.",
    )
    confirm: Literal["auto", "always", "never"] = Field(
        "auto",
        description="Ask a person first: `auto` when the call has side effects, `always`, or "
        "`never` (this step's own action only).",
    )
    retry: RetryPolicy | None = Field(None, description="How a failed attempt is retried.")
    timeout: Seconds | None = Field(
        None, description="Seconds per attempt (default: `limits.timeout`)."
    )
    when: bool | str | None = Field(
        None, description="Run the step only if this (a template) is true; else `skipped`."
    )
    for_each: str | list[Any] | None = Field(
        None,
        description="Run the step once per item (a list, or a template giving one); each "
        "run sees `item`.",
    )
    max_parallel: int | None = Field(
        None, ge=1, le=1024, description="`for_each` items running at once."
    )
    idempotent: bool = Field(
        False,
        description="Making this step's calls twice has the effect of making them once: a "
        "resumed run makes a call that was in flight when the run stopped again without "
        "asking.",
    )

    @model_validator(mode="after")
    def _one_action(self) -> Step:
        if (self.tool is None) == (self.agent is None):
            raise ValueError("a step has exactly one of 'tool' or 'agent'")
        if self.agent is not None and self.params:
            raise ValueError("an agent step takes no 'params'; describe the task in agent.goal")
        return self

    # What engine._graph derives from the fields above (a validated plan is not mutated)
    # is kept in `__pydantic_private__`, made on first use: declared private attributes
    # would cost every step a dict at validation (a 100,000-step plan: ~8 MB and ~2 µs a
    # step), used or not.


JsonType = Literal["string", "integer", "number", "boolean", "array", "object"]
_JSON_KINDS: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


class InputSpec(_Model):
    """A run input, in a subset of JSON Schema. An input with no default is required."""

    type: JsonType = Field("string", description="The input's JSON type.")
    default: Any = Field(None, description="Its value when not given; without one it is required.")
    description: str | None = Field(None, description="What the input is, for people.")
    enum: list[Any] | None = Field(None, description="The only values it may take.")

    @property
    def required(self) -> bool:
        return "default" not in self.model_fields_set

    def accepts(self, value: Any) -> bool:
        """Whether `value` is of this input's JSON type (a boolean is not a number)."""
        kinds = _JSON_KINDS[self.type]
        if isinstance(value, bool) and bool not in kinds:
            return False
        return isinstance(value, kinds)


MAX_LLM_TIMEOUT = 86_400.0
"""The longest wait for one model answer, in seconds: a day."""
MAX_LLM_TOKENS = 1_000_000
"""The largest `max_tokens` a request may carry."""
MAX_LLM_RETRIES = 10
"""The most retries of one model call."""
MIN_LLM_CONTEXT = 256
"""The smallest context window a recipe may say a model has."""
StructuredOutput = Literal["json_schema", "json_object_schema", "json_object", "none"]
"""How JSON is asked for: OpenAI's `json_schema`; llama-cpp-python's own `{"type":
"json_object", "schema": ...}`; plain JSON mode; nothing but the prompt."""


class LLMSettings(_Model):
    """Which model serves the plan; the CLI and environment override these."""

    model: str | None = Field(None, description="The model's name (`--model` overrides it).")
    base_url: str | None = Field(
        None, description="An OpenAI-compatible endpoint (`--base-url` overrides it)."
    )
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature.")
    timeout: float | None = Field(
        None,
        gt=0,
        le=MAX_LLM_TIMEOUT,
        description="Seconds to wait for one answer (`--llm-timeout`, `PLANLOOM_LLM_TIMEOUT` "
        "override it); 30, or 600 for a base URL on loopback.",
    )
    max_tokens: int | None = Field(
        None,
        ge=1,
        le=MAX_LLM_TOKENS,
        description="The longest answer, in tokens, sent with every request "
        "(`--llm-max-tokens`, `PLANLOOM_LLM_MAX_TOKENS` override it); 2048.",
    )
    retries: int | None = Field(
        None,
        ge=0,
        le=MAX_LLM_RETRIES,
        description="Retries of a call that failed on the way (429, 5xx, timeout; "
        "`PLANLOOM_LLM_RETRIES` overrides it); 3, and a timeout on loopback is not retried "
        "unless this is set.",
    )
    structured_output: StructuredOutput | None = Field(
        None,
        description="The one way to ask for JSON (`PLANLOOM_LLM_STRUCTURED_OUTPUT` overrides "
        "it): json_schema (strict where the schema allows), json_object_schema "
        '(llama-cpp-python\'s {"type": "json_object", "schema": ...}), json_object, or none '
        "(the prompt alone). Unset, each is tried in that order as the endpoint refuses it.",
    )
    context_window: int | None = Field(
        None,
        ge=MIN_LLM_CONTEXT,
        le=MAX_LLM_TOKENS,
        description="The model's context, in tokens (`--llm-context`, `PLANLOOM_LLM_CONTEXT` "
        "override it): a request that would not fit with max_tokens is not sent; the planner "
        "then lists its tools compactly, or says what does not fit.",
    )


class Limits(_Model):
    """Run-wide bounds. Every wait is finite."""

    max_parallel: int = Field(64, ge=1, le=1024, description="Steps running at once.")
    per_family: dict[str, Annotated[int, Field(ge=1, le=1024)]] = Field(
        default_factory=dict,
        description="Calls into one capability family at once, e.g. {shell: 4}; a family "
        "may have its own default (shell: the number of CPUs).",
    )
    timeout: Seconds = Field(30.0, description="Default seconds per attempt.")
    max_duration: Seconds = Field(3600.0, description="Seconds for the whole run.")
    max_llm_calls: int = Field(50, ge=0, description="Model calls for the whole run.")
    max_llm_tokens: int | None = Field(None, ge=0, description="Prompt + completion tokens.")
    max_tool_calls: int = Field(1000, ge=0, description="Tool calls for the whole run.")


class ReplanPolicy(_Model):
    """After a planned run fails, ask the planner again (keeping what succeeded)."""

    max: int = Field(1, ge=0, le=5, description="How many times to replan.")


class PlannerSettings(_Model):
    """How the planner plans a goal recipe's goal."""

    stream: bool = Field(
        False,
        description="Read the model's plan as it streams: read-only steps start as soon as "
        "they arrive; steps with side effects wait for the whole plan to be validated and "
        "approved (as `planloom plan --stream`).",
    )


class Plan(_Model):
    """A whole workflow: a recipe as written, or a plan written by the LLM planner."""

    version: Literal[1] = Field(1, description="The recipe format's version: 1.")
    name: str = Field(
        "plan", pattern=NAME_PATTERN, max_length=128, description="The recipe's name."
    )
    description: str | None = Field(None, description="What the recipe does, for people.")
    inputs: dict[str, InputSpec] = Field(
        default_factory=dict,
        description="Run inputs by name (`-i NAME=VALUE`), read as `${{ inputs.NAME }}`.",
    )
    llm: LLMSettings | None = Field(None, description="The model for agent and llm steps.")
    capabilities: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Grants: anything not granted is denied."
    )
    limits: Limits = Field(default_factory=Limits, description="Run-wide bounds.")
    on_failure: Literal["stop", "continue"] = Field(
        "stop",
        description="After a step fails: `stop` starts nothing more, `continue` runs what "
        "does not need it.",
    )
    goal: str | None = Field(
        None, description="A goal for the planner to plan (a recipe with no steps)."
    )
    replan: ReplanPolicy | None = Field(
        None, description="Ask the planner again after a planned run fails."
    )
    planner: PlannerSettings | None = Field(None, description="How the goal is planned.")
    steps: list[Step] = Field(default_factory=list, description="The steps, in any order.")
    finally_: list[Step] = Field(
        default_factory=list,
        alias="finally",
        description="Steps that run after the others, however they ended.",
    )
    outputs: dict[str, Any] = Field(
        default_factory=dict, description="The run's results by name; values are templates."
    )

    # The dependency edges of `steps` and `finally`, once found (engine._graph.plan_edges).
    _edges: dict[str, Any] = PrivateAttr(default_factory=dict)
    # What `engine.validation.validate_plan` checked: the registry, and the steps themselves
    # (held, so a replaced step cannot reuse an id), so a run does not check it again.
    _validated: tuple[object, tuple[object, ...]] | None = PrivateAttr(default=None)

    def all_steps(self) -> list[Step]:
        """Main steps, then `finally` steps."""
        return [*self.steps, *self.finally_]

    def to_data(self) -> dict[str, Any]:
        """The plan as plain data in recipe shape: what was written, defaults left out.

        An explicit `default: null` on an input is kept (it makes the input optional).
        """
        data: dict[str, Any] = self.model_dump(by_alias=True, exclude_unset=True)
        if not data.get("finally"):
            data.pop("finally", None)
        return {"version": 1, **data}


def plan_json_schema() -> dict[str, Any]:
    """The plan model's JSON Schema, knowing no registry (`engine.schema.recipe_schema`
    adds the registry's tools, params and grants: what `planloom schema` prints)."""
    schema = Plan.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "planloom recipe"
    return json.loads(json.dumps(schema))  # type: ignore[no-any-return]  # plain JSON copy
