"""Pictures of a plan: Mermaid, Graphviz DOT and plain ASCII, all offline.

All three draw the same edges: the main steps' dependencies; the `finally` steps (set
apart) and theirs, among them and on the main steps they read; and, dashed, from the main
graph's last steps to the first `finally` steps, which start only once the main graph ends.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from engine._graph import build_graph
from engine._graph import step_dependencies as build_deps
from engine.capability import Registry
from engine.model import Plan, Step
from engine.sanitize import neutralize

if TYPE_CHECKING:  # ~0.1 s to import: only drawing needs it, not a run's progress view
    import networkx as nx

__all__ = [
    "GraphFormat",
    "graph_data",
    "plan_has_side_effects",
    "render_graph",
    "render_plan",
    "step_has_side_effects",
]

GraphFormat = Literal["mermaid", "dot", "ascii"]


def render_graph(plan: Plan, fmt: GraphFormat = "ascii") -> str:
    """Draw the plan's dependency graph; `finally` steps are drawn after the main graph."""
    main = build_graph(plan.steps)
    final = build_graph(plan.finally_)
    if fmt == "mermaid":
        return _mermaid(plan, main, final)
    if fmt == "dot":
        return _dot(plan, main, final)
    return _ascii(plan, main, final)


def graph_data(plan: Plan) -> dict[str, Any]:
    """The graph the pictures draw, as data (`planloom graph --json`).

    `steps`: each step's `id`, `tool` (null for an agent step), `section` (`steps` or
    `finally`) and `flags` (`for_each`, `when`, `can_fail`, `fallback`). `edges`: `from`,
    `to` and `kind`: `needs` (`to` starts once `from` ended: a dependency, or a `finally`
    step reading a main step) or `after` (the first `finally` steps start once the main
    graph ended; drawn dashed).
    """
    main = build_graph(plan.steps)
    final = build_graph(plan.finally_)
    reads, after = _finally_edges(plan, main, final)
    steps = [
        {
            "id": step.id,
            "tool": step.tool,
            "section": "finally" if index >= len(plan.steps) else "steps",
            "flags": _flags(step),
        }
        for index, step in enumerate(plan.all_steps())
    ]
    needs = [*main.edges, *final.edges, *reads]
    edges = [{"from": a, "to": b, "kind": "needs"} for a, b in needs]
    edges += [{"from": a, "to": b, "kind": "after"} for a, b in after]
    return {"name": plan.name, "steps": steps, "edges": edges}


def _finally_edges(
    plan: Plan, main: nx.DiGraph[str], final: nx.DiGraph[str]
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The edges into the `finally` steps from the main ones: each main step a `finally`
    step reads (`build_graph` leaves these out, as the scheduler needs no such edge), and,
    to be drawn dashed, "after the main graph" from its last steps to the first `finally`
    steps (where a read does not already join the two)."""
    reads = [(dep, step.id) for step in plan.finally_ for dep in build_deps(step) if dep in main]
    sinks = [n for n in main if main.out_degree(n) == 0]
    roots = [n for n in final if final.in_degree(n) == 0]
    joined = set(reads)
    after = [(a, b) for a in sinks for b in roots if (a, b) not in joined]
    return reads, after


def _flags(step: Step) -> list[str]:
    return [
        flag
        for flag, on in (
            ("for_each", step.for_each is not None),
            ("when", step.when is not None),
            ("can_fail", step.can_fail),
            ("fallback", step.fallback is not None),
        )
        if on
    ]


def _label(step: Step) -> str:
    kind = step.tool or "agent"
    extras = _flags(step)
    return kind + (f" [{', '.join(extras)}]" if extras else "")


def _mermaid(plan: Plan, main: nx.DiGraph[str], final: nx.DiGraph[str]) -> str:
    lines = ["flowchart TD"]
    for step in plan.all_steps():
        text = f"{step.id}<br/>{_label(step)}".replace('"', "#quot;")
        lines.append(f'  {step.id}["{text}"]')
    lines += [f"  {a} --> {b}" for a, b in main.edges]
    if plan.finally_:
        lines.append("  subgraph finally")
        lines += [f"    {s.id}" for s in plan.finally_]
        lines.append("  end")
        lines += [f"  {a} --> {b}" for a, b in final.edges]
        reads, after = _finally_edges(plan, main, final)
        lines += [f"  {a} --> {b}" for a, b in reads]
        lines += [f"  {a} -.-> {b}" for a, b in after]
    return "\n".join(lines) + "\n"


def _dot(plan: Plan, main: nx.DiGraph[str], final: nx.DiGraph[str]) -> str:
    def node(step: Step, extra: str = "") -> str:
        label = json.dumps(f"{step.id}\n{_label(step)}")
        return f"{json.dumps(step.id)} [label={label}{extra}];"

    def edge(a: str, b: str, extra: str = "") -> str:
        return f"  {json.dumps(a)} -> {json.dumps(b)}{extra};"

    lines = [f"digraph {json.dumps(plan.name)} {{", "  rankdir=LR;", "  node [shape=box];"]
    lines += [f"  {node(step)}" for step in plan.steps]
    lines += [edge(a, b) for a, b in main.edges]
    if plan.finally_:
        # A subgraph named cluster_* is drawn boxed: the counterpart of Mermaid's subgraph.
        lines += ["  subgraph cluster_finally {", '    label="finally";', "    style=dashed;"]
        lines += [f"    {node(step, ', style=dashed')}" for step in plan.finally_]
        lines.append("  }")
        lines += [edge(a, b) for a, b in final.edges]
        reads, after = _finally_edges(plan, main, final)
        lines += [edge(a, b) for a, b in reads]
        lines += [edge(a, b, " [style=dashed]") for a, b in after]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _ascii(plan: Plan, main: nx.DiGraph[str], final: nx.DiGraph[str]) -> str:
    steps = {s.id: s for s in plan.all_steps()}
    width = max((len(s) for s in steps), default=4)
    lines = [f"{plan.name}: {len(plan.steps)} steps, {len(plan.finally_)} finally"]
    reads: dict[str, list[str]] = {}  # a finally step → the main steps it reads
    for a, b in _finally_edges(plan, main, final)[0]:
        reads.setdefault(b, []).append(a)
    import networkx as nx

    for title, graph in (("layer", main), ("finally", final)):
        for depth, layer in enumerate(nx.topological_generations(graph), start=1):
            for node in sorted(layer):
                parents = sorted(graph.predecessors(node)) + sorted(reads.get(node, ()))
                after = f"  ← {', '.join(parents)}" if parents else ""
                head = f"{title} {depth}" if title == "layer" else "finally"
                lines.append(f"  {head:<9} {node:<{width}}  {_label(steps[node])}{after}")
    return "\n".join(lines) + "\n"


def step_has_side_effects(step: Step, registry: Registry) -> bool:
    """Whether the step could change the world: a tool (its own, its fallback's, an
    agent's) that has or may have side effects, or a fallback in words (any tool)."""
    names = [step.tool] if step.tool else list(step.agent.tools if step.agent else [])
    if isinstance(step.fallback, str):
        return True  # a natural-language fallback may use any granted tool
    if step.fallback is not None:
        names += [step.fallback.tool] if step.fallback.tool else []
        names += step.fallback.agent.tools if step.fallback.agent else []
    for name in names:
        action = registry.get(name) if name else None
        if action is None or action.side_effects is not False:
            return True
    return False


def plan_has_side_effects(plan: Plan, registry: Registry) -> bool:
    """Whether any step could change the world (then the plan needs approval)."""
    return any(step_has_side_effects(step, registry) for step in plan.all_steps())


def render_plan(plan: Plan, registry: Registry) -> str:
    """The whole plan for a person: one row a step, then the graph."""
    rows = [("id", "action", "params", "after", "effects")]
    for step in plan.all_steps():
        action = step.tool or f"agent {step.agent.tools if step.agent else []}"
        params = step.params if step.tool else (step.agent.goal if step.agent else "")
        text = neutralize(json.dumps(params, ensure_ascii=False, default=repr))
        text = text if len(text) <= 60 else text[:59] + "…"
        deps = ", ".join(build_deps(step)) or "-"
        rows.append(
            (step.id, action, text, deps, "yes" if step_has_side_effects(step, registry) else "no")
        )
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = [f"plan '{plan.name}'" + (f": {plan.goal}" if plan.goal else "")]
    for row in rows:
        lines.append(
            "  "
            + "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
        )
    return "\n".join(lines) + "\n\n" + render_graph(plan, "ascii")
