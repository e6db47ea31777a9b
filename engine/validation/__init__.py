"""Validation of plans before anything runs: every problem, located, with a hint.

Works on plain data plus a `SourceMap`, so recipes (with real positions) and LLM plans go
through the same rules. Structural checks use the pydantic models; semantic checks
(ids, grants, tools, params, templates, references, cycles) run on every step that is
structurally sound, so one bad step does not hide the problems of the others.
"""

from __future__ import annotations

import functools
import json
import operator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from engine._graph import Edges, step_dependencies
from engine._step_call import step_call
from engine._support.gc import collector_paused
from engine.capability import Registry
from engine.diagnostics import (
    Diagnostic,
    NodePath,
    SourceMap,
    did_you_mean,
    render_diagnostics,
)
from engine.errors import PlanValidationError
from engine.model import FallbackAction, Plan, Step, compact
from engine.validation._actions import Admission, bind_grants, check_action, check_grants
from engine.validation._budget import recipe_warnings
from engine.validation._graph import check_cycles, check_depends_on, step_ids
from engine.validation._keys import SECTIONS, without_unknown_keys
from engine.validation._outputs import Outputs
from engine.validation._pydantic import report_model_errors
from engine.validation._report import Report
from engine.validation._templates import (
    STEP_FIELDS,
    check_outputs,
    check_step_shape,
    check_step_templates,
)
from engine.yaml import parse_recipe_text

__all__ = ["STEP_FIELDS", "ensure_valid", "recipe_warnings", "validate_plan"]


def validate_plan(
    data: Any,
    source: SourceMap,
    registry: Registry,
    *,
    base_dir: Path | None = None,
    require_version: bool = True,
    planned: bool = False,
    owned: bool = False,
) -> Plan:
    """Check `data` against every rule and return the typed `Plan`.

    `planned`: the plan a planner wrote for its `goal`; it must have steps (a recipe's goal
    with no steps is one to plan). `owned`: the caller gives `data` up (it was read for
    this call and is not used after, nor changed): the plan's steps keep its `params`
    mappings and `depends_on` lists instead of copies, which a large plan's peak memory
    would hold twice.

    Raises:
        PlanValidationError: with every problem found, sorted by position.
    """
    checker = _Checker(
        source,
        registry,
        base_dir if base_dir is not None else Path.cwd(),
        planned=planned,
        owned=owned,
    )
    checker.report.add(source.problems)
    with collector_paused():
        plan = checker.check(data, require_version=require_version)
    if checker.report.problems or plan is None:
        problems = sorted(checker.report.problems, key=lambda d: (d.line, d.column, d.rule))
        raise PlanValidationError(_unique(problems))
    plan._validated = (registry, tuple(plan.all_steps()))
    return plan


def ensure_valid(plan: Plan, registry: Registry, *, base_dir: Path) -> Plan:
    """`plan`, if `validate_plan` made it with `registry` and its steps are still the ones
    it checked; otherwise the plan checked as a recipe would be (a plan built in Python,
    or changed since), and that checked copy.

    Raises:
        PlanValidationError: every problem, located in the plan as JSON (`<plan>`); its
            text shows each problem with its line, as `planloom validate` does.
    """
    checked = plan._validated
    if checked is not None:
        against, steps = checked
        now = plan.all_steps()
        if against is registry and len(now) == len(steps) and all(map(operator.is_, now, steps)):
            return plan
    data = plan.to_data()
    # The positions come from the plan's JSON, which is what a problem's line points into.
    text = json.dumps(data, indent=2, default=repr)
    _, source = parse_recipe_text(text, "<plan>")
    try:
        return validate_plan(
            data, source, registry, base_dir=base_dir, require_version=False, owned=True
        )
    except PlanValidationError as exc:
        report = render_diagnostics(exc.diagnostics, source)
        head = "the plan is invalid (lines are in the plan as JSON):"
        raise PlanValidationError(exc.diagnostics, f"{head}\n{report}") from None


_BATCH = 256  # steps validated in one call, then made smaller while still in the cache


@functools.cache
def _step_list() -> TypeAdapter[list[Step]]:
    """Validates a section's steps in one call (made on first use: `planloom --help` and
    the like never build it)."""
    return TypeAdapter(list[Step])


def _unique(problems: list[Diagnostic]) -> list[Diagnostic]:
    seen: set[tuple[int, int, str, str]] = set()
    result = []
    for diag in problems:
        key = (diag.line, diag.column, diag.rule, diag.message)
        if key not in seen:
            seen.add(key)
            result.append(diag)
    return result


class _Checker:
    def __init__(
        self,
        source: SourceMap,
        registry: Registry,
        base_dir: Path,
        *,
        planned: bool = False,
        owned: bool = False,
    ) -> None:
        self.raw_ids: dict[str, set[str]] = {}
        self.registry = registry
        self.base_dir = base_dir
        self.planned = planned
        self.owned = owned
        self.report = Report(source)
        self.edges: dict[str, Edges] = {}  # each section's, once it has no cycle

    # -- structure -----------------------------------------------------------------------

    def check(self, data: Any, *, require_version: bool) -> Plan | None:
        report = self.report
        if not isinstance(data, dict):
            report(
                (),
                "not-a-mapping",
                "a recipe is a mapping of keys (version, name, steps, ...)",
                "start the file with 'version: 1'",
            )
            return None
        if require_version and "version" not in data:
            report((), "missing-key", "missing 'version'", "add 'version: 1' at the top")
        data = without_unknown_keys(report, data)
        head = {k: v for k, v in data.items() if k not in SECTIONS}
        top = self._model(Plan, head, ()) or _salvage(head)
        steps: list[tuple[NodePath, Step]] = []
        # steps whose other fields are broken, kept to check their actions and params
        partial: list[tuple[NodePath, Step]] = []
        self.raw_ids = {
            section: {
                raw["id"]
                for raw in data.get(section) or []
                if isinstance(raw, dict) and isinstance(raw.get("id"), str)
            }
            for section in SECTIONS
            if isinstance(data.get(section), list)
        }
        for section in SECTIONS:
            raw_steps = data.get(section, [])
            if raw_steps is None:
                raw_steps = []
            if not isinstance(raw_steps, list):
                report((section,), "bad-type", f"'{section}' must be a list of steps")
                continue
            for start in range(0, len(raw_steps), _BATCH):
                self._steps(section, start, raw_steps[start : start + _BATCH], steps, partial)
        if not isinstance(top, Plan):
            return None
        self._semantics(top, data, steps, partial)
        if report:
            return None
        main = [s for p, s in steps if p[0] == "steps"]
        final = [s for p, s in steps if p[0] == "finally"]
        plan = top.model_copy(update={"steps": main, "finally_": final})
        plan._edges = dict(self.edges)  # found among these very steps
        return plan

    def _steps(
        self,
        section: str,
        start: int,
        batch: list[Any],
        steps: list[tuple[NodePath, Step]],
        partial: list[tuple[NodePath, Step]],
    ) -> None:
        """The steps of a batch of raw ones (from index `start`), each made smaller at once
        (`compact`, while it is in the cache), or reported and salvaged."""
        try:  # all of them in one call: the usual case, and ~20% cheaper a step
            made: list[Step] | None = _step_list().validate_python(batch)
        except ValidationError:  # each on its own, to report and salvage what it can
            made = None
        for offset, raw in enumerate(batch):
            path = (section, start + offset)
            if made is not None:
                step = made[offset]
            else:
                try:
                    step = Step.model_validate(raw)
                except ValidationError as exc:
                    report_model_errors(self.report, exc, raw, path)
                    if (salvaged := _salvage_step(raw, exc)) is not None:
                        partial.append((path, salvaged))
                    continue
            compact(step, raw if self.owned else None)
            steps.append((path, step))

    def _model(self, model: type[BaseModel], raw: Any, path: NodePath) -> BaseModel | None:
        try:
            return model.model_validate(raw)
        except ValidationError as exc:
            report_model_errors(self.report, exc, raw, path)
            return None

    # -- meaning -------------------------------------------------------------------------

    def _semantics(
        self,
        plan: Plan,
        data: dict[str, Any],
        steps: list[tuple[NodePath, Step]],
        partial: list[tuple[NodePath, Step]],
    ) -> None:
        report = self.report
        self._inputs(plan)
        granted = check_grants(report, self.registry, plan)
        self._family_limits(plan)
        registry, unavailable = bind_grants(report, self.registry, plan, granted, self.base_dir)
        # with a goal and no steps, the LLM planner writes them
        if not steps and not plan.steps and "steps" not in data and not plan.goal:
            report(
                (),
                "missing-key",
                "the recipe has no 'steps'",
                "add a 'steps:' list, each step with an 'id' and a 'tool'",
            )
        elif "steps" in data and not data["steps"] and (self.planned or not plan.goal):
            self._empty(data)
        ids = step_ids(report, steps)
        # Every raw step's id (a step keeps its raw id): those of steps that failed their
        # structural checks count too, so they cause no cascade of unknown-step.
        main_ids = self.raw_ids.get("steps", set())
        final_ids = self.raw_ids.get("finally", set())
        outputs = Outputs([step for _, step in steps], registry, plan.inputs)
        admission = Admission(registry, plan, granted, self.base_dir)
        # A grant that did not validate is reported at the grant, not again at each use.
        declared = {name for name in plan.capabilities if name in registry.families}
        for path, step in partial:
            self._actions(path, step, registry, declared, unavailable, admission)
        for path, step in steps:
            self._actions(path, step, registry, declared, unavailable, admission)
            check_step_shape(report, path, step)
            visible = main_ids if path[0] == "steps" else main_ids | final_ids
            later = final_ids if path[0] == "steps" else set()
            check_depends_on(report, path, step, visible, later)
            check_step_templates(report, path, step, plan, visible, later, outputs)
            # Found while the step is at hand (on a large plan, passes over every step
            # meet each one out of the cache): what a run reads of a common step, and the
            # steps it waits for (the cycle check's edges, below).
            step_call(step)
            step_dependencies(step)
        for section in SECTIONS:
            section_steps = [(p, s) for p, s in steps if p[0] == section]
            edges = check_cycles(report, section_steps, ids)
            if edges is not None:  # the run's graph: the plan keeps it (`plan_edges`)
                self.edges[section] = edges
        check_outputs(report, plan, main_ids | final_ids, outputs)

    def _actions(
        self,
        path: NodePath,
        step: Step,
        registry: Registry,
        declared: set[str],
        unavailable: set[str],
        admission: Admission,
    ) -> None:
        """Check the tool (or agent's tools) of `step` and of its fallback, and params: a
        tool of a family not `declared` under `capabilities:` is not granted."""
        check_action(
            self.report,
            registry,
            path,
            step.tool,
            step.params,
            declared,
            step.agent,
            unavailable,
            admission,
        )
        if isinstance(step.fallback, FallbackAction):
            fb = step.fallback
            check_action(
                self.report,
                registry,
                (*path, "fallback"),
                fb.tool,
                fb.params,
                declared,
                fb.agent,
                unavailable,
                admission,
            )

    def _empty(self, data: dict[str, Any]) -> None:
        """A plan whose `steps` is empty does nothing: unless its `finally` steps are what
        it is for (a recipe's, not a planner's)."""
        if self.planned:
            self.report(
                ("steps",),
                "empty-plan",
                "the plan has no steps: it would do nothing towards the goal",
                "write the steps that reach the goal, each with an 'id' and a 'tool' (or "
                "an 'agent')",
            )
        elif not data.get("finally"):
            self.report(
                ("steps",),
                "empty-plan",
                "the recipe has no steps: it would do nothing and report success",
                "add steps, each with an 'id' and a 'tool'",
            )

    def _family_limits(self, plan: Plan) -> None:
        """`limits.per_family` names granted families: a limit on anything else is a typo
        or a leftover, and would bound nothing."""
        for name in plan.limits.per_family:
            if name in plan.capabilities:
                continue
            hint = did_you_mean(name, plan.capabilities) or (
                "granted: " + ", ".join(sorted(plan.capabilities))
                if plan.capabilities
                else "grant it under 'capabilities' or remove the limit"
            )
            self.report(
                ("limits", "per_family", name),
                "unknown-capability",
                f"limits.per_family names '{name}', which the recipe does not grant",
                hint,
                key=True,
            )

    def _inputs(self, plan: Plan) -> None:
        for name, spec in plan.inputs.items():
            path = ("inputs", name)
            if not spec.required and spec.default is not None and not spec.accepts(spec.default):
                self.report(
                    (*path, "default"),
                    "bad-default",
                    f"default of input '{name}' is not of type {spec.type}",
                )
            for value in spec.enum or []:
                if not spec.accepts(value):
                    self.report(
                        (*path, "enum"),
                        "bad-value",
                        f"enum value {value!r} of input '{name}' is not of type {spec.type}",
                    )
            if spec.enum and not spec.required and spec.default not in spec.enum:
                self.report(
                    (*path, "default"),
                    "bad-default",
                    f"default {spec.default!r} of input '{name}' is not one of its enum",
                )


_ACTION_FIELDS = frozenset({"tool", "agent", "params"})


def _salvage_step(raw: Any, exc: ValidationError) -> Step | None:
    """The step with its broken fields left out (already reported), so that its action
    and params are still checked, as an editor checks each field on its own: a bad
    `retry` must not hide a bad param. None when what is broken is the action itself,
    or the step as a whole (both `tool` and `agent`)."""
    if not isinstance(raw, dict):
        return None
    broken: set[Any] = set()
    for error in exc.errors(include_url=False):
        if not error["loc"] or error["loc"][0] in _ACTION_FIELDS:
            return None
        broken.add(error["loc"][0])
    pruned = {key: value for key, value in raw.items() if key not in broken}
    if "id" in broken:
        pruned["id"] = "_"  # reported; the action's checks do not read it
    try:
        return Step.model_validate(pruned)
    except ValidationError:
        return None


def _salvage(head: dict[str, Any]) -> Plan | None:
    """The top level with its broken values dropped (already reported), so the steps are
    still checked against the rest: a bad `on_failure` must not hide an unknown tool."""
    pruned = dict(head)
    for _ in range(3):
        try:
            return Plan.model_validate(pruned)
        except ValidationError as exc:
            for error in exc.errors(include_url=False):
                loc = error["loc"]
                if not loc:
                    return None
                key = loc[0]
                entries = pruned.get(str(key))
                if (
                    key in ("inputs", "capabilities")
                    and len(loc) >= 2
                    and isinstance(entries, dict)
                ):
                    # keep the name known (a plain string input, an empty grant)
                    pruned[key] = {**entries, loc[1]: {}}
                else:
                    pruned.pop(str(key), None)
    return None
