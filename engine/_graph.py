"""The dependency graph of a plan: explicit `depends_on` plus every `steps.X` reference."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

import jinja2

from engine.model import FallbackAction, Plan, Step
from engine.templating import Template, find_templates

if TYPE_CHECKING:  # networkx costs ~0.1 s to import: validation does without it
    import networkx as nx

__all__ = [
    "build_graph",
    "is_acyclic",
    "plan_graph",
    "step_dependencies",
    "step_parsed",
    "template_step_refs",
]


def step_parsed(step: Step) -> list[tuple[tuple[str | int, ...], str, Template | None]]:
    """Every template of a step, parsed once: its path, its text, and the parsed template
    (None when it does not parse; validation reports it). Kept with the step, so a large
    plan does not parse each template again for the graph and the run."""
    cache = _cache(step)
    parsed: list[tuple[tuple[str | int, ...], str, Template | None]] | None = cache.get("_parsed")
    if parsed is None:
        parsed = []
        for path, source in _scan(step):
            try:
                parsed.append((path, source, Template.parse(source)))
            except jinja2.TemplateSyntaxError:
                parsed.append((path, source, None))
        cache["_parsed"] = parsed
    return parsed


def _cache(step: Step) -> dict[str, Any]:
    """What is derived from `step`, made on first use (see `Step`)."""
    cache = step.__pydantic_private__
    if cache is None:
        cache = {}
        object.__setattr__(step, "__pydantic_private__", cache)
    return cache


def _scan(step: Step) -> Iterator[tuple[tuple[str | int, ...], str]]:
    yield from find_templates(step.params, ("params",))
    if isinstance(step.when, str):
        yield from find_templates(step.when, ("when",))
    if step.for_each is not None:
        yield from find_templates(step.for_each, ("for_each",))
    if step.agent is not None:
        yield from find_templates(step.agent.goal, ("agent", "goal"))
    if isinstance(step.fallback, FallbackAction):
        yield from find_templates(step.fallback.params, ("fallback", "params"))
        if step.fallback.agent is not None:
            yield from find_templates(step.fallback.agent.goal, ("fallback", "agent", "goal"))
    elif isinstance(step.fallback, str):
        yield from find_templates(step.fallback, ("fallback",))


def template_step_refs(template: Template) -> Iterator[str]:
    """Step ids a parsed template reads (`steps.X...`)."""
    for ref in template.references:
        if len(ref) >= 2 and ref[0] == "steps" and isinstance(ref[1], str):
            yield ref[1]


def step_dependencies(step: Step) -> list[str]:
    """`depends_on` plus every step the step's templates read, in first-seen order."""
    cache = _cache(step)
    known: list[str] | None = cache.get("_dependencies")
    if known is not None:
        return known
    deps = dict.fromkeys(step.depends_on)
    for _, _, template in step_parsed(step):
        if template is not None:  # one that does not parse: validation reports it
            for ref in template_step_refs(template):
                deps[ref] = None
    known = cache["_dependencies"] = list(deps)
    return known


def is_acyclic(steps: list[Step]) -> bool:
    """Whether the dependencies among `steps` have no cycle (Kahn's algorithm).

    Validation asks this of every plan, so it needs no graph library; only a plan with a
    cycle builds the graph, to name its cycles.
    """
    ids = {step.id for step in steps}
    waiting: dict[str, int] = {}
    dependents: dict[str, list[str]] = {}
    for step in steps:
        deps = [dep for dep in step_dependencies(step) if dep in ids]
        waiting[step.id] = len(deps)
        for dep in deps:
            dependents.setdefault(dep, []).append(step.id)
    ready = [step_id for step_id, count in waiting.items() if count == 0]
    done = 0
    while ready:
        done += 1
        for dependent in dependents.get(ready.pop(), ()):
            waiting[dependent] -= 1
            if waiting[dependent] == 0:
                ready.append(dependent)
    return done == len(waiting)


def build_graph(steps: list[Step]) -> nx.DiGraph[str]:
    """A graph with an edge dependency → dependent for every dependency among `steps`.

    References to steps outside `steps` (e.g. a `finally` step reading a main step) are
    left out: those steps have ended before these start.
    """
    import networkx as nx  # the scheduler's and the cycle report's, not validation's

    graph: nx.DiGraph[str] = nx.DiGraph()
    ids = {step.id for step in steps}
    graph.add_nodes_from([step.id for step in steps])
    graph.add_edges_from(
        [(dep, step.id) for step in steps for dep in step_dependencies(step) if dep in ids]
    )
    return graph


def plan_graph(plan: Plan, section: Literal["steps", "finally"]) -> nx.DiGraph[str]:
    """The graph of the plan's main steps or `finally` steps, built once per plan."""
    graph = plan._graphs.get(section)
    if graph is None:
        graph = build_graph(plan.steps if section == "steps" else plan.finally_)
        plan._graphs[section] = graph
    return graph
