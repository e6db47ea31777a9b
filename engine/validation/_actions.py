"""Checking a plan's grants, tools and params against the capability registry."""

from __future__ import annotations

from collections.abc import Set
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from engine.capability import Action, CallContext, Registry
from engine.diagnostics import NodePath, did_you_mean
from engine.errors import CapabilityDenied, StepError
from engine.model import AgentSpec, Plan
from engine.templating import find_templates
from engine.validation._params import check_params
from engine.validation._pydantic import dotted, lower
from engine.validation._report import Report

__all__ = ["Admission", "bind_grants", "check_action", "check_grants"]


def check_grants(report: Report, registry: Registry, plan: Plan) -> set[str]:
    """Check each capability grant against its family's model; the families granted."""
    granted: set[str] = set()
    for family_name, grant in plan.capabilities.items():
        path = ("capabilities", family_name)
        family = registry.families.get(family_name)
        if family is None:
            hint = did_you_mean(family_name, registry.families) or (
                "known capabilities: " + ", ".join(sorted(registry.families))
            )
            report(
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
                    report(
                        (*path, *loc),
                        "bad-grant",
                        f"unknown key '{loc[-1]}' in the '{family_name}' grant",
                        did_you_mean(str(loc[-1]), allowed)
                        or f"allowed keys: {', '.join(allowed)}",
                        key=True,
                    )
                else:
                    report(
                        (*path, *loc),
                        "bad-grant",
                        f"{family_name} grant {dotted(loc)}: {lower(error['msg'])}",
                    )
            continue
        granted.add(family_name)
    return granted


def bind_grants(
    report: Report, registry: Registry, plan: Plan, granted: set[str], base_dir: Path
) -> tuple[Registry, set[str]]:
    """The registry with the actions the granted families discover (an MCP server's tools),
    and the action-name prefixes nothing can be said of: a discovering family's whose grant
    did not validate (`mcp.`), and what a failed discovery could not list (`mcp.notes.`),
    each failure reported where its grant says."""
    grants = {name: plan.capabilities[name] for name in granted}
    bound, failures = registry.bind_all(grants, base_dir)
    unknown = {  # a discovering family's grant that did not validate: its tools are unknown
        f"{name}."
        for name in plan.capabilities
        if name not in granted
        and (family := registry.families.get(name)) is not None
        and family.discovery is not None
    }
    for failure in failures:
        for path, message, hint in failure.problems:
            report(("capabilities", failure.family, *path), failure.code, message, hint)
        unknown.update(failure.unavailable or (f"{failure.family}.",))
    return bound, unknown


class Admission:
    """The grant rules of actions (`Action.admit`) run on a recipe's own params: a call
    the sandbox is sure to refuse (a program not in `allow`) is a validation error."""

    def __init__(self, registry: Registry, plan: Plan, granted: set[str], base_dir: Path):
        self.registry = registry
        self.plan = plan
        self.granted = granted
        self.base_dir = base_dir
        self._grants: dict[str, BaseModel] = {}

    def check(
        self,
        report: Report,
        path: NodePath,
        action: Action[Any],
        model: BaseModel,
        params: dict[str, Any],
    ) -> None:
        if action.admit is None or action.family not in self.granted:
            return
        grant = self._grants.get(action.family)
        if grant is None:
            family = self.registry.families[action.family]
            raw = self.plan.capabilities.get(action.family)
            grant = self._grants[action.family] = family.grant_model.model_validate(raw or {})
        ctx = CallContext(
            grant=grant,
            base_dir=self.base_dir,
            timeout=0.0,
            data_paths=frozenset(p for p, _ in find_templates(params)),
            unrendered=True,
        )
        try:
            action.admit(model, ctx)
        except CapabilityDenied as exc:
            report((*path, "params", *(exc.param or ())), exc.rule, exc.reason)
        except StepError:
            pass  # a folder or file that is not there yet: an earlier step may make it


def check_action(
    report: Report,
    registry: Registry,
    path: NodePath,
    tool: str | None,
    params: dict[str, Any],
    granted: set[str],
    agent: AgentSpec | None,
    unavailable: Set[str] = frozenset(),
    admission: Admission | None = None,
) -> None:
    """Check the tool a step (or its fallback) calls and its params, or an agent's tools.

    `unavailable`: action-name prefixes whose tools are not checked (see `bind_grants`);
    `admission`: runs the action's grant rules on params that validated.
    """
    if agent is not None:
        for index, name in enumerate(agent.tools):
            _tool(report, registry, (*path, "agent", "tools", index), name, granted, unavailable)
        return
    if tool is None:
        return
    action = _tool(report, registry, (*path, "tool"), tool, granted, unavailable)
    if action is not None:
        model = check_params(report, path, tool, action.params_model, params)
        if model is not None and admission is not None:
            admission.check(report, path, action, model, params)


def _tool(
    report: Report,
    registry: Registry,
    path: NodePath,
    tool: str,
    granted: set[str],
    unavailable: Set[str],
) -> Any:
    """The action named `tool`, reporting it when unknown or not granted.

    Nothing is said of the tools of a family whose discovery failed (that failure is
    reported at its grant): nothing is known about them.
    """
    if any(tool.startswith(prefix) for prefix in unavailable):
        return None  # its grant's problem is reported; nothing is known of its tools
    action = registry.get(tool)
    family = tool.split(".", 1)[0]
    if action is None and tool in registry.withheld:
        report(path, "not-granted", registry.withheld[tool], "add it to the grant's tools globs")
        return None
    known = registry.families.get(family)
    discovers = known is not None and known.discovery is not None
    if action is None and discovers and family not in granted:
        _not_granted(report, path, tool, family)
        return None
    if action is None:
        hint = registry.suggest(tool) or "run 'planloom tools' to list the actions"
        report(path, "unknown-tool", f"unknown tool '{tool}'", hint)
        return None
    if action.family not in granted:
        _not_granted(report, path, tool, action.family)
    return action


def _not_granted(report: Report, path: NodePath, tool: str, family: str) -> None:
    report(
        path,
        "not-granted",
        f"'{tool}' needs the '{family}' capability, which this recipe does not grant",
        f"add it under 'capabilities:', e.g. capabilities: {{{family}: {{}}}}",
    )
