"""The LLM planner: a goal and the granted tools in, a validated `Plan` out.

The model answers with JSON in recipe shape (`{"goal", "steps": [...]}`), through structured
output where the endpoint supports it, asked for by the schema of a plan for the grant
(`planners._plan_schema`: a server compiling it into a grammar cannot write a tool that is
not granted). The answer, inside the recipe it plans for, is read as a JSON recipe's data
is (`engine.yaml.read_recipe_data`: not written as YAML and parsed back) and goes through
exactly the validation a hand-written recipe does; its problems are located in the plan's
YAML, which is written only when a problem, a person or `-o` wants it. The problems go
back to the model as the JSON error list, up to `MAX_REPAIRS` times. A plan still invalid
after that falls back to a single ReAct agent step with the granted tools; so does one the
model gave again in answer to its repair at temperature 0 (the next request would be the one
just answered: greedy decoding answers it the same).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from engine.capability import Registry
from engine.diagnostics import Diagnostic, SourceMap
from engine.errors import PlanValidationError, RecipeSyntaxError, StepFailed
from engine.llm import LLMClient, NoJSON, PromptTooLong, streaming_to
from engine.model import Plan, Step
from engine.model_schema import for_model
from engine.planning import PlanOutcome
from engine.validation import validate_plan
from engine.yaml import read_recipe_data
from planners._goal_checks import plan_problems
from planners._plan_schema import plan_schema
from planners._prompt import example, problem_lines, system_prompt
from planners._streamed import StreamedSteps

__all__ = ["MAX_REPAIRS", "LLMPlanner", "PlanOutcome", "model_written", "plan_to_yaml"]

MAX_REPAIRS = 2


class LLMPlanner:
    """Turns goals into plans with one model client."""

    def __init__(self, client: LLMClient, registry: Registry) -> None:
        self.client = client
        self.registry = registry

    def catalogue(
        self, grants: dict[str, Any], base_dir: Path | None = None
    ) -> list[dict[str, Any]]:
        """The granted tools: name, description, params JSON Schema (with the tools of the
        MCP servers the grants name, which are asked for them).

        Raises:
            DiscoveryFailed: a granted server could not be listed (a configuration error).
        """
        return self._catalogue(self.registry.bind(grants, base_dir or Path.cwd()), grants)

    def _catalogue(self, registry: Registry, grants: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {
                "name": tool.name,
                "description": tool.description,
                "side_effects": "depends on params"
                if tool.side_effects is None
                else tool.side_effects,
                "params": for_model(tool.params),
            }
            for tool in registry.catalogue(grants)
        ]

    async def plan(
        self,
        goal: str,
        *,
        base: dict[str, Any],
        base_dir: Path,
        file: str = "plan.yaml",
        context: str | None = None,
        keep: list[dict[str, Any]] | None = None,
        on_step: Callable[[Plan, Step], None] | None = None,
    ) -> PlanOutcome:
        """Plan `goal` within `base` (the recipe's capabilities, limits, inputs...).

        `keep` holds steps that already succeeded (replanning): they stay in the plan as
        they are, the model's steps may read their outputs, and a model step reusing one
        of their ids is dropped, so nothing that succeeded runs again.

        `on_step`: the answers are read as they stream, and each complete step, valid
        among the steps so far (the same validation and per-step goal checks), is handed
        to it at once with the plan of those steps (`planners._streamed`). The plan
        returned is still the whole answer's, validated and repaired as without it.

        Raises:
            BudgetExceeded / ConfigurationError / StepTimeout: from the model client.
            StepFailed: the plan stayed invalid and no tools are granted for a fallback.
        """
        grants = base.get("capabilities") or {}
        registry = self.registry.bind(grants, base_dir)
        # What a plan is for this grant: a server that compiles it into a grammar cannot
        # write a tool that is not granted, nor a param the tool does not take.
        schema = plan_schema(registry, grants)
        granted = [entry.name for entry in registry.catalogue(grants)]
        prompt = goal if context is None else f"{goal}\n\nContext:\n{context}"
        _, shown = example(registry.catalogue(grants), grants)
        roots = _roots(base_dir, grants)
        compact = False  # each tool its name and params only, when the whole does not fit

        def partial(steps: list[Any]) -> Plan | None:
            """The plan of a streaming answer's steps so far, if it is valid."""
            recipe = _recipe({"steps": steps}, goal, base, keep or [])
            try:
                data, source = read_recipe_data(recipe, file, plan_to_yaml)
                plan = validate_plan(data, source, self.registry, base_dir=base_dir, planned=True)
            except PlanValidationError:
                return None
            checks = plan_problems(goal, plan, file, roots=roots, example=shown, whole=False)
            return None if checks else plan

        async def ask(repair: list[dict[str, Any]]) -> Any:
            """The model's answer to the opening and `repair`; the tools listed compactly
            from the first request that would not fit the context window on."""
            nonlocal compact
            while True:
                system = system_prompt(registry, grants, compact=compact)
                opening = [
                    {"role": "system", "content": system},
                    {"role": "user", "content": prompt},
                ]
                messages = opening + repair
                try:
                    if on_step is None:
                        return await self.client.chat_json(messages, schema, name="plan")
                    with streaming_to(StreamedSteps(partial, on_step)):
                        return await self.client.chat_json(messages, schema, name="plan")
                except PromptTooLong:
                    if compact:
                        raise
                    compact = True

        problems: list[list[Diagnostic]] = []
        # The goal, the last answer and its problems: not every round before (a small
        # model's context fills, and it copies what it is shown).
        repair: list[dict[str, Any]] = []
        for attempt in range(MAX_REPAIRS + 1):
            source: SourceMap | None = None
            try:
                answer = await ask(repair)
            except NoJSON as exc:  # an answer with no (usable) JSON is a problem to repair too
                answer, diagnostics = None, [_no_json(file, exc.message, exc.rule)]
            else:
                diagnostics = []
            if answer is not None:
                recipe = _recipe(answer, goal, base, keep or [])
                try:
                    data, source = read_recipe_data(recipe, file, plan_to_yaml)
                    plan = validate_plan(
                        data, source, self.registry, base_dir=base_dir, planned=True
                    )
                except RecipeSyntaxError as exc:  # a value JSON cannot hold, too deep...
                    diagnostics, source = exc.diagnostics, exc.source
                except PlanValidationError as exc:
                    diagnostics = exc.diagnostics
                else:
                    diagnostics = plan_problems(goal, plan, file, roots=roots, example=shown)
                    if not diagnostics:
                        return PlanOutcome(plan, _text(source), repairs=attempt, problems=problems)
            problems.append(diagnostics)
            text = source.text if source is not None else None
            asked = repair
            repair = [
                {"role": "assistant", "content": json.dumps(answer, default=repr)},
                {"role": "user", "content": _repair_request(diagnostics, text, granted)},
            ]
            if repair == asked and self.client.config.temperature == 0:
                # The model answered the repair with the plan it was asked to repair: the
                # next request would be the one just answered, and greedy decoding gives
                # the same answer to the same request. Asking again only costs time.
                return self._fallback(goal, base, base_dir, file, problems, repeated=True)
        return self._fallback(goal, base, base_dir, file, problems)

    def _fallback(
        self,
        goal: str,
        base: dict[str, Any],
        base_dir: Path,
        file: str,
        problems: list[list[Diagnostic]],
        *,
        repeated: bool = False,
    ) -> PlanOutcome:
        """One agent step with the granted tools, for a goal the model could not plan:
        `problems` are its plans' (the first, then one a repair); `repeated` when it
        answered the last repair with the same plan at temperature 0."""
        grants = base.get("capabilities") or {}
        names = self.registry.bind(grants, base_dir).agent_tools(grants)
        if not names:  # an agent with no tools could only talk: that is not the goal done
            last = problems[-1] if problems else []
            shown = "; ".join(d.headline() for d in last[:5])
            more = f" (and {len(last) - 5} more)" if len(last) > 5 else ""
            repairs = len(problems) - 1
            raise StepFailed(
                f"the model's plan was still invalid after {repairs} "
                f"repair{'' if repairs == 1 else 's'} ({shown}{more}),"
                " and no capabilities are granted, so no agent can carry the goal out either: "
                "grant tools with --capabilities FILE, a YAML file with a 'capabilities:' "
                "block as in recipes (e.g. capabilities: {fs: {root: ., read: true}})"
            )
        # An agent that only talks has not carried the goal out: it must use a tool.
        agent = {"goal": goal, "tools": names, "max_iterations": 10, "min_tool_calls": 1}
        recipe = _recipe({"goal": goal, "steps": [{"id": "goal", "agent": agent}]}, goal, base)
        data, source = read_recipe_data(recipe, file, plan_to_yaml)
        plan = validate_plan(data, source, self.registry, base_dir=base_dir, planned=True)
        return PlanOutcome(
            plan,
            _text(source),
            repairs=len(problems) - 1,
            fell_back=True,
            problems=problems,
            repeated=repeated,
        )


def _recipe(
    answer: Any, goal: str, base: dict[str, Any], keep: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The model's answer inside the recipe it plans for (grants and limits are ours)."""
    steps = answer.get("steps") if isinstance(answer, dict) else answer
    if isinstance(steps, list):
        steps = [model_written(step) for step in steps]
    if keep:
        kept = {step["id"] for step in keep}
        fresh = [s for s in steps or [] if not (isinstance(s, dict) and s.get("id") in kept)]
        steps = [*keep, *fresh]
    recipe: dict[str, Any] = {"version": 1, "name": base.get("name", "plan")}
    for key in (
        "description", "inputs", "llm", "planner", "capabilities", "limits", "on_failure",
        "replan",
    ):  # fmt: skip
        if key in base:
            recipe[key] = base[key]
    recipe["goal"] = goal
    recipe["steps"] = steps if isinstance(steps, list) else []
    if isinstance(answer, dict) and isinstance(answer.get("outputs"), dict):
        recipe["outputs"] = answer["outputs"]
    return recipe


def model_written(step: Any) -> Any:
    """A step as a model may write it: it may not waive a gate (`confirm: never`) nor say
    its calls may be made twice (`idempotent: true`, which waives the question a resume
    asks about a call in flight); those are for people writing recipes."""
    if not isinstance(step, dict):
        return step
    # A field a strict schema made the model write as null is one it left out.
    step = {key: value for key, value in step.items() if value is not None}
    if step.get("confirm") == "never":
        step = {**step, "confirm": "auto"}
    if "idempotent" in step:
        step = {k: v for k, v in step.items() if k != "idempotent"}
    return step


def plan_to_yaml(recipe: dict[str, Any]) -> str:
    """A recipe as YAML text, keys in recipe order, templates quoted."""
    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = 100
    buffer = io.StringIO()
    yaml.dump(json.loads(json.dumps(recipe, default=repr)), buffer)
    return buffer.getvalue()


def _text(source: SourceMap) -> Callable[[], str]:
    """What writes the plan's YAML when it is first wanted: its map's text."""
    return lambda: source.text or ""


def _repair_request(diagnostics: list[Diagnostic], text: str | None, granted: list[str]) -> str:
    return (
        "That plan cannot run. Fix these problems and answer with the whole corrected plan "
        f"as JSON:\n{problem_lines(diagnostics, text, granted)}"
    )


def _roots(base_dir: Path, grants: dict[str, Any]) -> list[Path]:
    """The folders a goal's paths may be relative to: the recipe's, and each grant's root."""
    roots = [base_dir]
    for grant in grants.values():
        root = grant.get("root") if isinstance(grant, dict) else None
        if isinstance(root, str):
            roots.append(base_dir / root)
    return roots


def _no_json(file: str, message: str, rule: str) -> Diagnostic:
    hint = 'answer with one JSON object: {"goal": ..., "steps": [...]}'
    if rule == "too-deep":
        hint = "keep params flat: a plan needs only a few levels of nesting"
    return Diagnostic(file=file, line=1, column=1, rule=rule, message=message, hint=hint)
