"""The dependency graph of a plan: explicit `depends_on` plus every `steps.X` reference."""

from __future__ import annotations

from collections.abc import Iterator

import jinja2
import networkx as nx

from engine.model import FallbackAction, Step
from engine.templating import Template, find_templates

__all__ = ["build_graph", "step_dependencies", "step_templates", "template_step_refs"]


def step_templates(step: Step) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Every template string of a step, with its path inside the step."""
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
    deps = dict.fromkeys(step.depends_on)
    for _, source in step_templates(step):
        try:
            template = Template.parse(source)
        except jinja2.TemplateSyntaxError:
            continue  # validation reports it; a plan that runs has none
        for ref in template_step_refs(template):
            deps[ref] = None
    return list(deps)


def build_graph(steps: list[Step]) -> nx.DiGraph[str]:
    """A graph with an edge dependency → dependent for every dependency among `steps`.

    References to steps outside `steps` (e.g. a `finally` step reading a main step) are
    left out: those steps have ended before these start.
    """
    graph: nx.DiGraph[str] = nx.DiGraph()
    ids = {step.id for step in steps}
    graph.add_nodes_from(step.id for step in steps)
    for step in steps:
        for dep in step_dependencies(step):
            if dep in ids:
                graph.add_edge(dep, step.id)
    return graph
