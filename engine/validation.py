"""Validation of plans before anything runs: every problem, located, with a hint.

Works on plain data plus a `SourceMap`, so recipes (with real positions) and LLM plans go
through the same rules. Structural checks use the pydantic models; semantic checks
(ids, grants, tools, params, templates, references, cycles) run on every step that is
structurally sound, so one bad step does not hide the problems of the others.
"""

from __future__ import annotations

import difflib
import functools
import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jinja2
import networkx as nx
from pydantic import BaseModel, ValidationError

from engine._gc import collector_paused
from engine._graph import build_graph, step_templates
from engine.capability import Registry
from engine.diagnostics import Diagnostic, NodePath, SourceMap, did_you_mean
from engine.errors import PlanValidationError
from engine.model import (
    AgentSpec,
    FallbackAction,
    InputSpec,
    Limits,
    LLMSettings,
    Plan,
    RetryPolicy,
    Step,
)
from engine.templating import Template, filter_names, find_templates, test_names

__all__ = ["validate_plan"]

STEP_FIELDS = ("output", "status", "error", "attempts")
_SECTIONS = ("steps", "finally")


def validate_plan(
    data: Any,
    source: SourceMap,
    registry: Registry,
    *,
    base_dir: Path | None = None,
    require_version: bool = True,
) -> Plan:
    """Check `data` against every rule and return the typed `Plan`.

    Raises:
        PlanValidationError: with every problem found, sorted by position.
    """
    checker = _Checker(source, registry)
    checker.problems.extend(source.problems)
    with collector_paused():
        plan = checker.check(data, require_version=require_version)
    if checker.problems or plan is None:
        problems = sorted(checker.problems, key=lambda d: (d.line, d.column, d.rule))
        raise PlanValidationError(_unique(problems))
    return plan


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
    def __init__(self, source: SourceMap, registry: Registry) -> None:
        self.raw_ids: dict[str, set[str]] = {}
        self.graphs: dict[str, nx.DiGraph[str]] = {}
        self.source = source
        self.registry = registry
        self.problems: list[Diagnostic] = []

    def report(
        self, path: NodePath, rule: str, message: str, hint: str | None = None, *, key: bool = False
    ) -> None:
        if self.source.broken and self.source.is_broken(path):
            return  # the loader already reported why this value is unreadable
        self.problems.append(self.source.at(path, rule, message, hint, key=key))

    # -- structure -----------------------------------------------------------------------

    def check(self, data: Any, *, require_version: bool) -> Plan | None:
        if not isinstance(data, dict):
            self.report(
                (),
                "not-a-mapping",
                "a recipe is a mapping of keys (version, name, steps, ...)",
                "start the file with 'version: 1'",
            )
            return None
        if require_version and "version" not in data:
            self.report((), "missing-key", "missing 'version'", "add 'version: 1' at the top")
        data = self._unknown_keys(data)
        head = {k: v for k, v in data.items() if k not in _SECTIONS}
        top = self._model(Plan, head, ()) or _salvage(head)
        steps: list[tuple[NodePath, Step]] = []
        self.raw_ids = {
            section: {
                raw["id"]
                for raw in data.get(section) or []
                if isinstance(raw, dict) and isinstance(raw.get("id"), str)
            }
            for section in _SECTIONS
            if isinstance(data.get(section), list)
        }
        for section in _SECTIONS:
            raw_steps = data.get(section, [])
            if raw_steps is None:
                raw_steps = []
            if not isinstance(raw_steps, list):
                self.report((section,), "bad-type", f"'{section}' must be a list of steps")
                continue
            for index, raw in enumerate(raw_steps):
                step = self._model(Step, raw, (section, index))
                if isinstance(step, Step):
                    steps.append(((section, index), step))
        if not isinstance(top, Plan):
            return None
        self._semantics(top, data, steps)
        if self.problems:
            return None
        main = [s for p, s in steps if p[0] == "steps"]
        final = [s for p, s in steps if p[0] == "finally"]
        plan = top.model_copy(update={"steps": main, "finally_": final})
        plan._graphs.update(self.graphs)  # built for the cycle check: the executor reuses them
        return plan

    def _model(self, model: type[BaseModel], raw: Any, path: NodePath) -> BaseModel | None:
        try:
            return model.model_validate(raw)
        except ValidationError as exc:
            self._pydantic_errors(exc, raw, path)
            return None

    def _pydantic_errors(self, exc: ValidationError, raw: Any, path: NodePath) -> None:
        groups: dict[NodePath, list[Any]] = {}
        for error in exc.errors(include_url=False):
            if error["type"] == "extra_forbidden":
                continue  # reported by _unknown_keys, with a did-you-mean
            loc = tuple(p for p in error["loc"] if not _is_union_tag(p))
            groups.setdefault(loc, []).append(error)
        for loc, errors in groups.items():
            full = (*path, *loc)
            message, rule = _describe(loc, errors, _get(raw, loc), path)
            self.report(full, rule, message, key=rule == "missing-key")

    def _unknown_keys(self, data: dict[str, Any]) -> dict[str, Any]:
        """Report unknown keys everywhere; return the data without them, so every other
        rule still runs on the rest."""
        data = self._keys(data, (), Plan)
        for name, model in (("limits", Limits), ("llm", LLMSettings)):
            if isinstance(data.get(name), dict):
                data[name] = self._keys(data[name], (name,), model)
        if isinstance(data.get("inputs"), dict):
            data["inputs"] = {
                key: self._keys(spec, ("inputs", key), InputSpec)
                if isinstance(spec, dict)
                else spec
                for key, spec in data["inputs"].items()
            }
        for section in _SECTIONS:
            if isinstance(data.get(section), list):
                data[section] = [
                    self._step_keys(raw, (section, index)) if isinstance(raw, dict) else raw
                    for index, raw in enumerate(data[section])
                ]
        return data

    def _step_keys(self, raw: dict[str, Any], base: NodePath) -> dict[str, Any]:
        raw = self._keys(raw, base, Step)
        for sub, model in (("retry", RetryPolicy), ("agent", AgentSpec)):
            if isinstance(raw.get(sub), dict):
                raw[sub] = self._keys(raw[sub], (*base, sub), model)
        fallback = raw.get("fallback")
        if isinstance(fallback, dict):
            fallback = self._keys(fallback, (*base, "fallback"), FallbackAction)
            if isinstance(fallback.get("agent"), dict):
                fallback["agent"] = self._keys(
                    fallback["agent"], (*base, "fallback", "agent"), AgentSpec
                )
            raw["fallback"] = fallback
        return raw

    def _keys(
        self, mapping: dict[str, Any], path: NodePath, model: type[BaseModel]
    ) -> dict[str, Any]:
        allowed = _allowed_keys(model)
        kept = {}
        for key, value in mapping.items():
            if key in allowed:
                kept[key] = value
                continue
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            if close and close[0] not in mapping:
                # `parms:` is a typo for `params`: say so once, not also "params missing"
                self.source.broken.add((*path, close[0]))
            hint = did_you_mean(key, allowed) or f"allowed keys: {', '.join(allowed)}"
            where = f" in {_dotted(path)}" if path else ""
            self.report((*path, key), "unknown-key", f"unknown key '{key}'{where}", hint, key=True)
        return kept

    # -- meaning -------------------------------------------------------------------------

    def _semantics(
        self, plan: Plan, data: dict[str, Any], steps: list[tuple[NodePath, Step]]
    ) -> None:
        self._inputs(plan)
        granted = self._grants(plan)
        # with a goal and no steps, the LLM planner writes them
        if not steps and not plan.steps and "steps" not in data and not plan.goal:
            self.report(
                (),
                "missing-key",
                "the recipe has no 'steps'",
                "add a 'steps:' list, each step with an 'id' and a 'tool'",
            )
        ids: dict[str, NodePath] = {}
        for path, step in steps:
            if step.id in ids:
                first = self.source.locate((*ids[step.id], "id"))[0]
                self.report(
                    (*path, "id"),
                    "duplicate-id",
                    f"duplicate step id '{step.id}' (first used on line {first})",
                    "give every step, 'finally' steps included, its own id",
                )
            else:
                ids[step.id] = path
        # Ids of steps that failed structural checks count too: no cascade of unknown-step.
        main_ids = self.raw_ids.get("steps", set()) | {s.id for p, s in steps if p[0] == "steps"}
        final_ids = self.raw_ids.get("finally", set()) | {
            s.id for p, s in steps if p[0] == "finally"
        }
        for path, step in steps:
            self._action(path, step.tool, step.params, granted, step.agent)
            self._step_shape(path, step)
            if isinstance(step.fallback, FallbackAction):
                fb = step.fallback
                self._action((*path, "fallback"), fb.tool, fb.params, granted, fb.agent)
            visible = main_ids if path[0] == "steps" else main_ids | final_ids
            self._references(path, step, plan, visible, final_ids if path[0] == "steps" else set())
        for section in _SECTIONS:
            self.graphs[section] = self._cycles([(p, s) for p, s in steps if p[0] == section], ids)
        self._outputs(plan, main_ids | final_ids)

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

    def _grants(self, plan: Plan) -> set[str]:
        granted: set[str] = set()
        for family_name, grant in plan.capabilities.items():
            path = ("capabilities", family_name)
            family = self.registry.families.get(family_name)
            if family is None:
                hint = did_you_mean(family_name, self.registry.families) or (
                    "known capabilities: " + ", ".join(sorted(self.registry.families))
                )
                self.report(
                    path,
                    "unknown-capability",
                    f"unknown capability '{family_name}'",
                    hint,
                    key=True,
                )
                continue
            try:
                family.grant_model.model_validate(grant or {})
            except ValidationError as exc:
                for error in exc.errors(include_url=False):
                    loc = tuple(error["loc"])
                    if error["type"] == "extra_forbidden":
                        allowed = list(family.grant_model.model_fields)
                        self.report(
                            (*path, *loc),
                            "bad-grant",
                            f"unknown key '{loc[-1]}' in the '{family_name}' grant",
                            did_you_mean(str(loc[-1]), allowed)
                            or f"allowed keys: {', '.join(allowed)}",
                            key=True,
                        )
                    else:
                        self.report(
                            (*path, *loc),
                            "bad-grant",
                            f"{family_name} grant {_dotted(loc)}: {_lower(error['msg'])}",
                        )
                continue
            granted.add(family_name)
        return granted

    def _action(
        self,
        path: NodePath,
        tool: str | None,
        params: dict[str, Any],
        granted: set[str],
        agent: AgentSpec | None,
    ) -> None:
        if agent is not None:
            for index, name in enumerate(agent.tools):
                self._tool((*path, "agent", "tools", index), name, granted)
            return
        if tool is None:
            return
        action = self._tool((*path, "tool"), tool, granted)
        if action is not None:
            self._params(path, tool, action.params_model, params)

    def _tool(self, path: NodePath, tool: str, granted: set[str]) -> Any:
        """The action named `tool`, reporting it when unknown or not granted."""
        action = self.registry.get(tool)
        if action is None:
            hint = self.registry.suggest(tool) or "run 'planloom tools' to list the actions"
            self.report(path, "unknown-tool", f"unknown tool '{tool}'", hint)
            return None
        if action.family not in granted:
            self.report(
                path,
                "not-granted",
                f"'{tool}' needs the '{action.family}' capability, which this recipe "
                "does not grant",
                f"add it under 'capabilities:', e.g. capabilities: {{{action.family}: {{}}}}",
            )
        return action

    def _params(
        self, path: NodePath, tool: str, model: type[BaseModel], params: dict[str, Any]
    ) -> None:
        templated = [p for p, _ in find_templates(params)]
        try:
            model.model_validate(params)
        except ValidationError as exc:
            accepted = ", ".join(
                f"{name}{'' if f.is_required() else '?'}" for name, f in model.model_fields.items()
            )
            for error in exc.errors(include_url=False):
                loc = tuple(error["loc"])
                if any(loc[: len(t)] == t for t in templated):
                    continue  # the value is known only at run time
                if error["type"] == "extra_forbidden":
                    self.report(
                        (*path, "params", *loc),
                        "bad-params",
                        f"{tool} has no param '{loc[-1]}'",
                        did_you_mean(str(loc[-1]), model.model_fields)
                        or f"{tool} takes: {accepted}",
                        key=True,
                    )
                elif error["type"] == "missing":
                    self.report(
                        (*path, "params"),
                        "bad-params",
                        f"{tool} needs param '{_dotted(loc)}'",
                        f"{tool} takes: {accepted} (? = optional)",
                    )
                else:
                    self.report(
                        (*path, "params", *loc),
                        "bad-params",
                        f"{tool} param '{_dotted(loc)}': {_lower(error['msg'])}",
                    )

    def _step_shape(self, path: NodePath, step: Step) -> None:
        for name in ("when", "for_each"):
            value = getattr(step, name)
            if isinstance(value, str):
                try:
                    whole = Template.parse(value).expression is not None
                except jinja2.TemplateSyntaxError:
                    continue  # reported with the other template errors
                if not whole:
                    self.report(
                        (*path, name),
                        "bad-expression",
                        f"'{name}' must be one whole expression, like {name}: ${{{{ ... }}}}",
                        "drop the text around the ${{ }}"
                        if "${{" in value
                        else "write it as ${{ ... }}",
                    )
        if step.max_parallel is not None and step.for_each is None:
            self.report(
                (*path, "max_parallel"),
                "bad-value",
                "'max_parallel' on a step applies only with 'for_each'",
                "set limits.max_parallel for the whole run instead",
            )

    def _references(
        self, path: NodePath, step: Step, plan: Plan, visible: set[str], later: set[str]
    ) -> None:
        for dep_index, dep in enumerate(step.depends_on):
            if dep not in visible:
                self._unknown_step((*path, "depends_on", dep_index), dep, visible, later)
        allowed_roots = {"inputs", "steps"}
        for sub, source in step_templates(step):
            names = set(allowed_roots)
            if step.for_each is not None and sub[0] != "for_each":
                names |= {"item", "index"}
            if path[0] == "finally":
                names.add("run")
            self._template((*path, *sub), source, plan, names, visible, later)

    def _template(
        self,
        path: NodePath,
        source: str,
        plan: Plan,
        names: set[str],
        visible: set[str],
        later: set[str],
    ) -> None:
        try:
            template = Template.parse(source)
        except jinja2.TemplateSyntaxError as exc:
            self.report(
                path,
                "template-syntax",
                f"template syntax error: {exc.message}",
                "templates look like ${{ steps.ID.output }} or ${{ inputs.NAME }}",
            )
            return
        for kind, unknown, known in (
            ("filter", template.unknown_filters, filter_names()),
            ("test", template.unknown_tests, test_names()),
        ):
            for name in unknown:
                self.report(
                    path,
                    f"unknown-{kind}",
                    f"unknown {kind} '{name}'",
                    did_you_mean(name, known) or f"{kind}s: {', '.join(known)}",
                )
        for ref in template.references:
            root = str(ref[0])
            if root not in names:
                where = {
                    "item": "only inside a step with 'for_each'",
                    "index": "only inside a step with 'for_each'",
                    "run": "only in 'finally' steps and 'outputs'",
                }.get(root)
                message = f"'{root}' is not defined here" + (f" ({where})" if where else "")
                hint = did_you_mean(root, names) or "names: " + ", ".join(sorted(names))
                self.report(path, "undefined-name", message, hint)
            elif root == "inputs" and len(ref) >= 2 and ref[1] not in plan.inputs:
                hint = did_you_mean(str(ref[1]), plan.inputs) or (
                    f"declare it under 'inputs:', e.g. inputs: {{{ref[1]}: {{type: string}}}}"
                )
                self.report(path, "unknown-input", f"unknown input '{ref[1]}'", hint)
            elif root == "steps" and len(ref) >= 2:
                target = str(ref[1])
                if target not in visible:
                    self._unknown_step(path, target, visible, later)
                elif len(ref) >= 3 and ref[2] not in STEP_FIELDS:
                    hint = did_you_mean(str(ref[2]), STEP_FIELDS) or (
                        "a step has: " + ", ".join(STEP_FIELDS)
                    )
                    self.report(
                        path, "bad-reference", f"steps.{target} has no field '{ref[2]}'", hint
                    )

    def _unknown_step(
        self, path: NodePath, target: str, visible: set[str], later: set[str]
    ) -> None:
        if target in later:
            self.report(
                path,
                "not-a-dependency",
                f"step '{target}' is a 'finally' step; main steps cannot read it",
                "move the reading step into 'finally', or the read step into 'steps'",
            )
            return
        hint = did_you_mean(target, visible) or (
            "steps: " + ", ".join(sorted(visible)) if len(visible) <= 20 else None
        )
        self.report(path, "unknown-step", f"unknown step '{target}'", hint)

    def _cycles(
        self, steps: list[tuple[NodePath, Step]], ids: dict[str, NodePath]
    ) -> nx.DiGraph[str]:
        graph = build_graph([s for _, s in steps])
        if nx.is_directed_acyclic_graph(graph):
            return graph
        for cycle in itertools.islice(nx.simple_cycles(graph), 10):
            start = min(cycle, key=lambda sid: self.source.locate(ids[sid]))
            order = cycle[cycle.index(start) :] + cycle[: cycle.index(start)]
            ring = " → ".join([*order, order[0]])
            self.report(
                (*ids[start], "id"),
                "cycle",
                f"dependency cycle: {ring}",
                "remove one of these dependencies (a 'steps.X' reference or a 'depends_on' entry)",
            )
        return graph

    def _outputs(self, plan: Plan, visible: set[str]) -> None:
        for name, value in plan.outputs.items():
            for sub, source in find_templates(value, ("outputs", name)):
                self._template(sub, source, plan, {"inputs", "steps", "run"}, visible, set())


@functools.cache
def _allowed_keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


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


def _is_union_tag(part: str | int) -> bool:
    if not isinstance(part, str):
        return False
    return (
        part[:1].isupper()
        or part in {"str", "bool", "int", "float", "list", "dict", "none"}
        or part.startswith(("function-", "list[", "dict[", "literal["))
    )


_TYPE_ERRORS = {
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "none_required": "null",
}


def _describe(loc: NodePath, errors: list[Any], value: Any, base: NodePath = ()) -> tuple[str, str]:
    where = _dotted(loc) or _dotted(base) or "recipe"
    kinds = [e["type"] for e in errors]
    if all(kind in _TYPE_ERRORS for kind in kinds):
        wanted = list(dict.fromkeys(_TYPE_ERRORS[k] for k in kinds))
        return f"{where}: expected {' or '.join(wanted)}, got {_kind(value)}", "bad-type"
    error = next(e for e in errors if e["type"] not in _TYPE_ERRORS)
    kind, msg = error["type"], _lower(error["msg"])
    if kind == "missing":
        return f"missing '{where}'", "missing-key"
    if kind == "string_pattern_mismatch":
        if loc and loc[-1] == "id":
            return (
                f"bad step id {value!r}: use letters, digits and '_', not starting "
                "with a digit (ids are names in templates)",
                "bad-id",
            )
        return f"bad {where} {value!r}: use lowercase letters, digits, '-' and '_'", "bad-name"
    if kind == "value_error":
        return msg.removeprefix("value error, "), "invalid-step" if not loc else "bad-value"
    return f"{where}: {msg}", "bad-value"


def _get(raw: Any, loc: Iterable[str | int]) -> Any:
    for part in loc:
        if isinstance(raw, list) and isinstance(part, int) and part < len(raw):
            raw = raw[part]
        elif not isinstance(raw, dict) or part not in raw:
            return None
        else:
            raw = raw[part]
    return raw


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)


def _dotted(loc: Iterable[str | int]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _lower(message: str) -> str:
    return message[:1].lower() + message[1:]
