"""The dependency graph of a plan: explicit `depends_on` plus every `steps.X` reference."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import jinja2

from engine.model import FallbackAction, Plan, Step
from engine.templating import Template, find_templates

if TYPE_CHECKING:  # networkx costs ~0.1 s to import: validation does without it
    import networkx as nx

__all__ = [
    "Edges",
    "build_graph",
    "derived",
    "is_acyclic",
    "plan_edges",
    "step_dependencies",
    "step_parsed",
    "template_step_refs",
]


Parsed = tuple[tuple[tuple[str | int, ...], str, Template | None], ...]


def step_parsed(step: Step) -> Parsed:
    """Every template of a step, parsed once: its path, its text, and the parsed template
    (None when it does not parse; validation reports it). Kept with the step, so a large
    plan does not parse each template again for the graph and the run (until a common
    step's call holds them: `engine._step_call`)."""
    cache = derived(step)
    parsed: Parsed | None = cache.get("_parsed")
    if parsed is None:
        parsed = cache["_parsed"] = tuple(
            (_shared_path(path), src, _parsed(src)) for path, src in _scan(step)
        )
    return parsed


def _shared_path(path: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """Steps of one shape have their templates at the same paths: one tuple for all."""
    return _PATHS.setdefault(path, path) if len(_PATHS) < 4096 else path


_PATHS: dict[tuple[str | int, ...], tuple[str | int, ...]] = {}


def _parsed(source: str) -> Template | None:
    try:
        return Template.parse(source)
    except jinja2.TemplateSyntaxError:
        return None


def derived(step: Step) -> dict[str, Any]:
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
    cache = derived(step)
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


@dataclass(frozen=True, slots=True)
class Edges:
    """Who waits for whom among one section's steps: what the scheduler needs to start a
    step the moment its last dependency ends.

    `dependencies` maps every step to the steps of the same section it waits for;
    `dependents` maps a step to the steps waiting for it. Steps outside the section (a
    `finally` step reading a main step) are left out: they have ended before it starts.
    `in_order`: as found, every step comes after all it waits for (so there is no cycle);
    plans are mostly written, and planned, in that order.
    """

    dependencies: dict[str, list[str]]
    dependents: dict[str, list[str]]
    in_order: bool = False

    @classmethod
    def of(cls, steps: list[Step]) -> Edges:
        return cls._in_order(steps) or cls._any_order(steps)

    @classmethod
    def _in_order(cls, steps: list[Step]) -> Edges | None:
        """The edges of steps each listed after all it waits for, or None if one is not
        (or an id is used twice, or a step waits for one outside `steps`). A step's
        dependencies are then those already seen: no set of every id is needed."""
        dependencies: dict[str, list[str]] = {}
        dependents: dict[str, list[str]] = {}
        for step in steps:
            step_id = step.id
            if step_id in dependencies:
                return None
            deps = step_dependencies(step)
            for dep in deps:
                later = dependents.get(dep)
                if later is not None:
                    later.append(step_id)
                elif dep in dependencies:
                    dependents[dep] = [step_id]
                else:  # itself, one further on, or none of these
                    return None
            dependencies[step_id] = deps  # (the step's own cached list)
        return cls(dependencies, dependents, in_order=True)

    @classmethod
    def _any_order(cls, steps: list[Step]) -> Edges:
        ids = {step.id for step in steps}
        dependencies: dict[str, list[str]] = {}
        dependents: dict[str, list[str]] = {}
        in_order = True
        for step in steps:
            step_id = step.id
            deps = step_dependencies(step)
            if not ids.issuperset(deps):
                deps = [dep for dep in deps if dep in ids]
            known = dependencies.get(step_id)
            if known is not None:  # an id used twice (reported apart): one node, as in a graph
                in_order = False
                deps = [dep for dep in deps if dep not in known]
            for dep in deps:
                if in_order and dep not in dependencies:  # (itself, or one further on)
                    in_order = False
                dependents.setdefault(dep, []).append(step_id)
            # (the step's own cached list when nothing is left out)
            dependencies[step_id] = deps if known is None else [*known, *deps]
        # (The lists keep the room appending left: made to fit, a 100,000-step plan's
        # would save 2 MB and cost 0.1 s.)
        return cls(dependencies, dependents, in_order)

    def without(self, ended: Collection[str]) -> Edges:
        """These edges with the `ended` steps gone: their dependents wait only for the rest."""
        return Edges(
            {
                step_id: [dep for dep in deps if dep not in ended]
                for step_id, deps in self.dependencies.items()
                if step_id not in ended
            },
            {
                step_id: [later for later in waiting if later not in ended]
                for step_id, waiting in self.dependents.items()
                if step_id not in ended
            },
        )

    def descendants(self, step_id: str) -> set[str]:
        """Every step that waits for `step_id`, directly or not."""
        found: set[str] = set()
        todo = [step_id]
        while todo:
            for later in self.dependents.get(todo.pop(), ()):
                if later not in found:
                    found.add(later)
                    todo.append(later)
        found.discard(step_id)  # only through a cycle, which validation refuses
        return found

    def is_acyclic(self) -> bool:
        """Whether no step waits for itself, directly or not (Kahn's algorithm)."""
        if self.in_order:
            return True
        waiting = {step_id: len(deps) for step_id, deps in self.dependencies.items()}
        ready = [step_id for step_id, count in waiting.items() if count == 0]
        done = 0
        while ready:
            done += 1
            for later in self.dependents.get(ready.pop(), ()):
                waiting[later] -= 1
                if waiting[later] == 0:
                    ready.append(later)
        return done == len(waiting)


def is_acyclic(steps: list[Step]) -> bool:
    """Whether the dependencies among `steps` have no cycle.

    Validation asks this of every plan, so it needs no graph library; only a plan with a
    cycle builds the graph, to name its cycles.
    """
    return Edges.of(steps).is_acyclic()


def build_graph(steps: list[Step]) -> nx.DiGraph[str]:
    """A graph with an edge dependency → dependent for every dependency among `steps`.

    References to steps outside `steps` (e.g. a `finally` step reading a main step) are
    left out: those steps have ended before these start.
    """
    import networkx as nx  # drawing and naming cycles: validation and runs do without it

    graph: nx.DiGraph[str] = nx.DiGraph()
    ids = {step.id for step in steps}
    graph.add_nodes_from([step.id for step in steps])
    graph.add_edges_from(
        [(dep, step.id) for step in steps for dep in step_dependencies(step) if dep in ids]
    )
    return graph


def plan_edges(plan: Plan, section: Literal["steps", "finally"]) -> Edges:
    """The edges of the plan's main steps or `finally` steps, found once per plan."""
    edges: Edges | None = plan._edges.get(section)
    if edges is None:
        edges = Edges.of(plan.steps if section == "steps" else plan.finally_)
        plan._edges[section] = edges
    return edges
