"""Checking the steps' dependency graph: unique ids, known dependencies, no cycles."""

from __future__ import annotations

import itertools

from engine._graph import Edges, build_graph
from engine.diagnostics import NodePath, did_you_mean
from engine.model import Step
from engine.validation._report import Report

__all__ = ["check_cycles", "check_depends_on", "step_ids", "unknown_step"]


def step_ids(report: Report, steps: list[tuple[NodePath, Step]]) -> dict[str, NodePath]:
    """Where each step id is first used, reporting ids used twice."""
    ids: dict[str, NodePath] = {}
    again: list[tuple[NodePath, Step]] = []
    for path, step in steps:
        if step.id in ids:
            again.append((path, step))
        else:
            ids[step.id] = path
    firsts = report.source.locate_many([((*ids[s.id], "id"), False) for _, s in again])
    for (path, step), (first, _) in zip(again, firsts, strict=True):
        report(
            (*path, "id"),
            "duplicate-id",
            f"duplicate step id '{step.id}' (first used on line {first})",
            "give every step, 'finally' steps included, its own id",
        )
    return ids


def check_depends_on(
    report: Report, path: NodePath, step: Step, visible: set[str], later: set[str]
) -> None:
    """Report each `depends_on` entry naming no step `step` can see."""
    for dep_index, dep in enumerate(step.depends_on):
        if dep not in visible:
            unknown_step(report, (*path, "depends_on", dep_index), dep, visible, later)


def unknown_step(
    report: Report, path: NodePath, target: str, visible: set[str], later: set[str]
) -> None:
    """Report a reference to step `target`, which is not among the `visible` ones."""
    if target in later:
        report(
            path,
            "not-a-dependency",
            f"step '{target}' is a 'finally' step; main steps cannot read it",
            "move the reading step into 'finally', or the read step into 'steps'",
        )
        return
    hint = did_you_mean(target, visible) or (
        "steps: " + ", ".join(sorted(visible)) if len(visible) <= 20 else None
    )
    report(path, "unknown-step", f"unknown step '{target}'", hint)


def check_cycles(
    report: Report, steps: list[tuple[NodePath, Step]], ids: dict[str, NodePath]
) -> Edges | None:
    """Report up to ten cycles among the dependencies of `steps`; their edges when there
    is none (what the run needs: found once per plan)."""
    edges = Edges.of([s for _, s in steps])
    if edges.is_acyclic():
        return edges
    import networkx as nx  # only to name the cycles

    graph = build_graph([s for _, s in steps])
    cycles = list(itertools.islice(nx.simple_cycles(graph), 10))
    members = sorted({sid for cycle in cycles for sid in cycle})
    where = dict(
        zip(members, report.source.locate_many([(ids[sid], False) for sid in members]), strict=True)
    )
    for cycle in cycles:
        start = min(cycle, key=where.__getitem__)
        order = cycle[cycle.index(start) :] + cycle[: cycle.index(start)]
        ring = " → ".join([*order, order[0]])
        report(
            (*ids[start], "id"),
            "cycle",
            f"dependency cycle: {ring}",
            "remove one of these dependencies (a 'steps.X' reference or a 'depends_on' entry)",
        )
    return None
