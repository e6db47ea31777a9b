"""The report's inline SVG drawings: the plan graph (layers from `networkx`) and the timeline."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import networkx as nx
from pydantic import ValidationError

from engine._graph import step_dependencies
from engine.app.report._assets import status_hue
from engine.app.report._html import clock, escaped, seconds, short, shown_status
from engine.app.report._read import (
    INTERRUPTED,
    RunView,
    StepView,
    as_list,
    as_str,
    as_time,
    attempt_number,
    ordered,
)
from engine.model import Step

__all__ = ["graph_svg", "timeline_svg"]

# -- the plan graph -------------------------------------------------------------------------

_NODE_W, _NODE_H, _GAP_X, _GAP_Y, _PAD = 180, 44, 72, 18, 16
_PAD_TOP = _PAD + _GAP_Y  # room above the first row for edges that skip columns


def _dependencies(spec: dict[str, Any]) -> list[str]:
    try:
        return step_dependencies(Step.model_validate(spec))
    except (ValidationError, ValueError, TypeError):
        # Not a step this version reads: its explicit dependencies are still drawn.
        return [d for d in as_list(spec.get("depends_on")) if isinstance(d, str)]


def _layers(run: RunView) -> tuple[list[list[str]], list[tuple[str, str]]]:
    """Columns of step ids (dependencies left of dependents; `finally` steps last) and the
    edges to draw."""
    columns: list[list[str]] = []
    edges: list[tuple[str, str]] = []
    for final in (False, True):
        steps = [s for s in ordered(run) if s.final == final]
        ids = {s.id for s in steps}
        graph: nx.DiGraph[str] = nx.DiGraph()
        graph.add_nodes_from(s.id for s in steps)
        for step in steps:
            for dep in _dependencies(step.spec):
                if dep in ids and dep != step.id:
                    graph.add_edge(dep, step.id)
                elif final and dep in run.steps:
                    edges.append((dep, step.id))  # a `finally` step reading a main step
        try:
            generations = [list(g) for g in nx.topological_generations(graph)]
        except nx.NetworkXUnfeasible:  # a cycle: not a plan that ran; draw it in one column
            generations = [[s.id for s in steps]] if steps else []
        columns += generations
        edges += list(graph.edges)
    order = {s.id: s.index for s in run.steps.values()}
    needs: dict[str, list[str]] = {}
    for a, b in edges:
        needs.setdefault(b, []).append(a)
    placed: dict[str, float] = {}
    for column in columns:
        # Each node near the mean row of what it depends on: fewer crossing edges.
        def rank(node: str) -> tuple[float, int]:
            rows = [placed[a] for a in needs.get(node, ()) if a in placed]
            return (sum(rows) / len(rows) if rows else math.inf, order.get(node, 0))

        column.sort(key=rank)
        placed.update({node: float(i) for i, node in enumerate(column)})
    return columns, edges


def graph_svg(run: RunView) -> str:
    """The plan graph: a node per step, in columns by dependency, coloured by status."""
    columns, edges = _layers(run)
    if not columns:
        return '<p class="none">the journal holds no plan</p>'
    where: dict[str, tuple[int, int]] = {}
    layer: dict[str, int] = {}
    for x, column in enumerate(columns):
        for y, node in enumerate(column):
            where[node] = (_PAD + x * (_NODE_W + _GAP_X), _PAD_TOP + y * (_NODE_H + _GAP_Y))
            layer[node] = x
    width = _PAD * 2 + len(columns) * (_NODE_W + _GAP_X) - _GAP_X
    height = _PAD_TOP + _PAD + max(len(c) for c in columns) * (_NODE_H + _GAP_Y) - _GAP_Y
    parts = [
        f'<svg class="graph" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'role="img" aria-label="plan graph"><defs><marker id="arrow" viewBox="0 0 10 10" '
        'refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#6b7280"/></marker></defs>'
    ]
    for a, b in edges:
        if a not in where or b not in where:
            continue
        (x1, y1), (x2, y2) = where[a], where[b]
        x1, y1, y2 = x1 + _NODE_W, y1 + _NODE_H // 2, y2 + _NODE_H // 2
        if layer[b] - layer[a] > 1:
            # It skips columns: up into the gap above the rows, along it past the nodes
            # between, and down into its target (turning in the gaps between columns).
            lane = min(y1, y2) - (_NODE_H + _GAP_Y) // 2
            turn = _GAP_X // 3
            route = (
                f"M {x1} {y1} C {x1 + turn} {y1}, {x1 + turn} {lane}, {x1 + 2 * turn} {lane} "
                f"L {x2 - 2 * turn} {lane} C {x2 - turn} {lane}, {x2 - turn} {y2}, {x2} {y2}"
            )
        else:
            bend = max((x2 - x1) / 2, 30)
            route = f"M {x1} {y1} C {x1 + bend} {y1}, {x2 - bend} {y2}, {x2} {y2}"
        dashed = ' stroke-dasharray="5 4"' if run.steps[b].final else ""
        parts.append(
            f'<path class="edge" d="{route}" fill="none" stroke="#9ca3af" '
            f'stroke-width="1.5"{dashed} marker-end="url(#arrow)"/>'
        )
    for node, (x, y) in where.items():
        step = run.steps[node]
        hue = status_hue(step.status)
        what = as_str(step.spec.get("tool")) or ("agent" if step.spec.get("agent") else "")
        shown = shown_status(run, step)
        dash = ' stroke-dasharray="6 3"' if step.in_flight else ""
        parts.append(
            f'<g class="node" data-step="{step.anchor}" tabindex="0"><title>{escaped(node)}: '
            f"{escaped(shown)}</title>"
            f'<rect x="{x}" y="{y}" width="{_NODE_W}" height="{_NODE_H}" rx="7" fill="{hue}" '
            f'fill-opacity="0.12" stroke="{hue}" stroke-width="{3 if step.in_flight else 1.8}"'
            f"{dash}/>"
            f'<text x="{x + 10}" y="{y + 18}" class="id">{escaped(short(node))}</text>'
            f'<text x="{x + 10}" y="{y + 35}" class="sub" fill="{hue}">'
            f"{escaped(short(f'{shown} · {what}' if what else shown, 28))}</text></g>"
        )
    parts.append("</svg>")
    return '<div class="scroll">' + "".join(parts) + "</div>"


# -- the timeline ---------------------------------------------------------------------------

_LABEL_W, _PLOT_W, _ROW_H, _AXIS_H = 190, 760, 26, 28


def _tick_step(span: float) -> float:
    raw = span / 8
    magnitude = 10.0 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * magnitude:
            return factor * magnitude
    return 10 * magnitude


def timeline_svg(run: RunView) -> str:
    """The timeline: a row per step with its bar, attempts and gates on one time
    axis; resumes and where an interrupted run stopped are marked."""
    steps = ordered(run)
    if not steps:
        return '<p class="none">no steps</p>'
    span = max(run.t1 - run.t0, 1e-3)

    def x(at: float) -> float:
        at = min(max(at, run.t0), run.t1) if math.isfinite(at) else run.t0
        return round(_LABEL_W + (at - run.t0) / span * _PLOT_W, 2)

    height = _AXIS_H + len(steps) * _ROW_H + 10
    width = _LABEL_W + _PLOT_W + 20
    parts = [
        f'<svg id="timeline-svg" class="timeline" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="timeline">'
    ]
    tick = _tick_step(span)
    n = 0
    while n * tick <= span + 1e-9:
        at = x(run.t0 + n * tick)
        parts.append(
            f'<line x1="{at}" y1="{_AXIS_H - 6}" x2="{at}" y2="{height - 6}" class="grid"/>'
            f'<text x="{at}" y="{_AXIS_H - 10}" class="tick">{seconds(n * tick)}</text>'
        )
        n += 1
    for number, at in enumerate(run.segments[1:], start=2):
        parts.append(
            f'<line x1="{x(at)}" y1="{_AXIS_H - 4}" x2="{x(at)}" y2="{height - 6}" '
            f'class="segment"><title>resumed: segment {number} started {clock(at)}</title></line>'
        )
    if run.status == INTERRUPTED and run.last_at is not None:
        parts.append(
            f'<line x1="{x(run.last_at)}" y1="{_AXIS_H - 4}" x2="{x(run.last_at)}" '
            f'y2="{height - 6}" class="stop"><title>last journal entry: the run stopped after '
            f"this</title></line>"
        )
    for row, step in enumerate(steps):
        top = _AXIS_H + row * _ROW_H
        parts.append(
            f'<g class="row" data-step="{step.anchor}"><text x="6" y="{top + 17}" class="label">'
            f"{escaped(short(step.id, 24))}</text>"
        )
        parts += _bars(run, step, top, x)
        parts.append("</g>")
    parts.append("</svg>")
    return '<div class="scroll" id="timeline">' + "".join(parts) + "</div>"


def _bars(run: RunView, step: StepView, top: int, x: Callable[[float], float]) -> list[str]:
    parts: list[str] = []
    hue = status_hue(step.status)
    start = step.started
    end = step.finished
    if step.in_flight:
        start = step.first_at if start is None or step.ended_seq >= 0 else start
        end = run.t1  # still going, or stopped at some unknown point after the last entry
    if start is None or end is None:
        parts.append(
            f'<text x="{_LABEL_W + 4}" y="{top + 17}" class="tick">{escaped(step.status)}: '
            "not started</text>"
        )
        return parts
    left, right = x(start), x(max(end, start))
    flight = ' stroke-dasharray="4 3"' if step.in_flight else ""
    parts.append(
        f'<rect class="bar" x="{left}" y="{top + 4}" width="{max(right - left, 2)}" '
        f'height="{_ROW_H - 8}" rx="3" fill="{hue}" fill-opacity="0.22" stroke="{hue}"{flight}>'
        f"<title>{escaped(step.id)}: {escaped(step.status)}, {seconds(end - start)}"
        f"{' (in flight)' if step.in_flight else ''}</title></rect>"
    )
    if step.in_flight:
        return parts
    for attempt in step.attempts:
        a, b = as_time(attempt.get("started")), as_time(attempt.get("finished"))
        if a is None or b is None:
            continue
        ok = attempt.get("outcome") == "ok"
        colour = status_hue("succeeded" if ok else "failed")
        parts.append(
            f'<rect class="attempt" x="{x(a)}" y="{top + 9}" width="{max(x(b) - x(a), 2)}" '
            f'height="{_ROW_H - 18}" fill="{colour}"><title>attempt {attempt_number(attempt)}: '
            f"{escaped(attempt.get('outcome'))}, {seconds(b - a)}</title></rect>"
        )
    for gate in step.gates:
        at = as_time(gate.get("at"))
        if at is None:
            continue
        colour = status_hue("succeeded" if gate.get("approved") is True else "denied")
        verdict = "approved" if gate.get("approved") is True else "denied"
        parts.append(
            f'<path class="gate" d="M {x(at)} {top + 1} l 4 5 l -8 0 z" fill="{colour}">'
            f"<title>gate {escaped(gate.get('action'))} {verdict} by {escaped(gate.get('by'))}"
            f"</title></path>"
        )
    return parts
