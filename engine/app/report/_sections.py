"""The report's sections as HTML: header, steps, errors, in-flight calls, approvals, usage."""

from __future__ import annotations

import html
import json
from typing import Any

from engine._support.scope import PLANNER, step_of
from engine.app.report._html import (
    badge,
    clock,
    escaped,
    html_table,
    json_block,
    seconds,
    step_badge,
)
from engine.app.report._model_calls import model_calls_html, step_model_calls
from engine.app.report._read import (
    INTERRUPTED,
    CallView,
    ModelCallView,
    RunView,
    StepView,
    as_dict,
    as_int,
    as_list,
    as_str,
    as_time,
    attempt_number,
    ordered,
    usage_counts,
)

__all__ = [
    "MAX_CALLS",
    "answers_html",
    "approvals_html",
    "errors_html",
    "header_html",
    "in_flight_html",
    "in_flight_title",
    "model_usage_html",
    "outputs_html",
    "steps_html",
]

MAX_CALLS = 50
"""Tool calls of one step listed (a `for_each` step may make thousands)."""


def header_html(run: RunView) -> str:
    """The page's header: the run's facts, and a banner if it was interrupted or runs."""
    record = run.record
    usage = as_dict(run.end.get("usage")) if run.end else {}
    usage = usage or as_dict(record.usage)
    if usage:
        counted = (
            f"{as_int(usage.get('tool_calls'))} tool calls, {as_int(usage.get('llm_calls'))} "
            f"model calls, {as_int(usage.get('prompt_tokens'))} + "
            f"{as_int(usage.get('completion_tokens'))} tokens"
        )
    else:
        model_calls = sum(u["calls"] for u in run.llm.values())
        counted = (
            f"not counted (the run did not end); journaled: {len(run.calls)} tool calls, "
            f"{model_calls} model calls"
        )
    started, finished = as_time(record.started), as_time(record.finished)
    if started and finished:
        took_text = seconds(finished - started)
    elif started and run.last_at is not None:
        took_text = f"— (its last journal entry came {seconds(run.last_at - started)} in)"
    else:
        took_text = "—"
    ended = sum(s.status not in ("pending", "running") for s in run.steps.values())
    facts = [
        ("run", escaped(record.id)),
        ("status", badge(run.status)),
        ("recipe", escaped(record.recipe or "(planned from a goal)")),
        ("started", clock(record.started)),
        ("duration", took_text),
        ("steps", f"{ended} of {len(run.steps)} ended"),
        ("segments", escaped(record.segments)),
        ("model", escaped(run.model or "—")),
        ("usage", escaped(counted)),
        *([("inputs", json_block(run.inputs))] if run.inputs else []),
    ]
    rows = "".join(f"<dt>{html.escape(k)}</dt><dd>{v}</dd>" for k, v in facts)
    parts = [f"<header><h1>{escaped(run.name)}</h1><dl>{rows}</dl></header>"]
    if run.status == INTERRUPTED:
        flying = [s.id for s in run.steps.values() if s.in_flight]
        names = ", ".join(f"<code>{escaped(s)}</code>" for s in flying) or "none journaled"
        parts.append(
            '<div class="banner" id="interrupted"><strong>interrupted</strong>: the process '
            f"running this run (pid {escaped(record.pid)}) stopped before the run ended. "
            f"In flight: {names}. The last journal entry was written at "
            f"{clock(run.last_at)}. Continue it with <code>planloom resume "
            f"{escaped(record.id)}</code>.</div>"
        )
    elif run.status == "running":
        parts.append(
            '<div class="banner running">still running (pid '
            f"{escaped(record.pid)}): this report shows the journal so far.</div>"
        )
    return "\n".join(parts)


def steps_html(run: RunView) -> str:
    """The steps table, then each step's details: as planned, attempts, tool calls."""
    rows = []
    for step in ordered(run):
        spec = step.spec
        what = as_str(spec.get("tool")) or ("agent" if spec.get("agent") else "—")
        duration = (
            step.finished - step.started
            if step.started is not None and step.finished is not None
            else None
        )
        note = as_str(step.result.get("error"))
        if step.in_flight:
            note = "in flight when the run stopped" if run.status == INTERRUPTED else "running"
        rows.append(
            [
                f'<a href="#{step.anchor}" data-step="{step.anchor}">{escaped(step.id)}</a>'
                + (' <span class="tag">finally</span>' if step.final else ""),
                step_badge(run, step),
                escaped(what),
                str(as_int(step.result.get("attempts")) or len(step.attempts)),
                seconds(duration),
                f'<span class="clip">{escaped(note, 300)}</span>',
            ]
        )
    table = html_table(
        ["step", "status", "action", "tries", "took", "error / note"], rows, "no steps"
    )
    calls: dict[str, list[CallView]] = {}
    for call in run.calls:
        calls.setdefault(step_of(call.scope) or call.scope, []).append(call)
    model = step_model_calls(run.model_calls)
    details = [
        _step_details(run, step, calls.get(step.id, []), model.get(step.id, []))
        for step in ordered(run)
    ]
    if model.get(PLANNER):  # a goal's planning (and replanning): not a step, shown apart
        details.append(
            '<details class="step" id="planning"><summary>planning</summary>'
            f"<h4>model calls</h4>{model_calls_html(model[PLANNER])}</details>"
        )
    return table + "\n" + "\n".join(details)


def _step_details(
    run: RunView, step: StepView, calls: list[CallView], model_calls: list[ModelCallView]
) -> str:
    parts = [
        f'<details class="step" id="{step.anchor}"><summary>{escaped(step.id)} '
        f"{step_badge(run, step)}</summary>"
    ]
    if step.spec:
        parts.append(f"<h4>as planned</h4>{json_block(step.spec)}")
    if step.attempts:
        rows = [
            [
                escaped(attempt_number(a)),
                escaped(a.get("action")),
                escaped(a.get("outcome")),
                seconds(_span(a.get("started"), a.get("finished"))),
                f'<span class="clip">{escaped(a.get("error") or "", 600)}</span>',
            ]
            for a in step.attempts
        ]
        parts.append(
            "<h4>attempts</h4>" + html_table(["#", "action", "outcome", "took", "error"], rows, "")
        )
    if calls:
        rows = [
            [
                escaped(c.scope),
                escaped(c.attempt),
                escaped(c.action),
                json_block(c.params) if c.params is not None else "(read-only: not kept)",
                (
                    "no result journaled"
                    if c.finished is None
                    else (escaped(c.error, 600) if c.error is not None else "ok")
                ),
            ]
            for c in calls[:MAX_CALLS]
        ]
        more = len(calls) - MAX_CALLS
        parts.append(
            "<h4>tool calls</h4>"
            + html_table(["scope", "attempt", "action", "params", "result"], rows, "")
            + (f'<p class="note">… and {more:,} more calls not shown</p>' if more > 0 else "")
        )
    if model_calls:
        parts.append(f"<h4>model calls</h4>{model_calls_html(model_calls)}")
    if step.result.get("output") is not None:
        parts.append('<p class="note">its output is under <a href="#outputs">Outputs</a></p>')
    transcript = step.result.get("transcript")
    if transcript:
        parts.append(f"<h4>agent transcript</h4>{json_block(transcript)}")
    parts.append("</details>")
    return "".join(parts)


def _span(start: Any, end: Any) -> float | None:
    a, b = as_time(start), as_time(end)
    return None if a is None or b is None else b - a


def errors_html(run: RunView) -> str:
    """Every error: the run's, each step's, and each attempt's that differs from it."""
    rows = [["run", "", f"<pre>{escaped(e)}</pre>"] for e in as_list((run.end or {}).get("errors"))]
    for step in ordered(run):
        error = step.result.get("error")
        if error:
            rows.append([escaped(step.id), step_badge(run, step), f"<pre>{escaped(error)}</pre>"])
        for attempt in step.attempts:
            message = attempt.get("error")
            if message and message != error:
                rows.append(
                    [
                        escaped(f"{step.id} (attempt {attempt_number(attempt)})"),
                        escaped(attempt.get("outcome")),
                        f"<pre>{escaped(message)}</pre>",
                    ]
                )
    return html_table(["where", "status", "error"], rows, "no errors")


def in_flight_title(run: RunView) -> str:
    """The title of the section of calls journaled with no result after them."""
    return "In flight" if run.status in (INTERRUPTED, "running") else "Calls with no result"


def in_flight_html(run: RunView) -> str:
    """The side-effect calls whose intent was journaled with no result after it."""
    rows = [
        [
            escaped(c.scope),
            escaped(c.attempt),
            escaped(c.action),
            clock(c.started),
            json_block(c.params),
        ]
        for c in run.doubts
    ]
    note = (
        '<p class="note">Side-effect calls whose intent was journaled with no result after '
        "it: they may or may not have happened. A resume asks before making them again "
        "(unless the step or action is idempotent).</p>"
    )
    return note + html_table(["scope", "attempt", "action", "started", "params"], rows, "")


def approvals_html(run: RunView) -> str:
    """Every gate's decision, in the order they were made."""
    rows = []
    for at, data in run.approvals:
        approved = data.get("approved") is True
        verdict = "approved" if approved else "denied"
        extras = []
        if data.get("in_doubt"):
            extras.append("the call may already have happened")
        if data.get("quit"):
            extras.append("quit")
        if data.get("edited_params") is not None:
            extras.append("params edited: " + json.dumps(data["edited_params"], default=repr))
        rows.append(
            [
                escaped(data.get("step") or "(run)"),
                escaped(data.get("action")),
                badge("succeeded" if approved else "denied", verdict),
                f'<span class="nw">{escaped(data.get("by"))}</span>',
                escaped(data.get("reason") or ""),
                escaped("; ".join(extras)),
                clock(at),
            ]
        )
    return html_table(
        ["step", "action", "decision", "by", "reason", "note", "at"], rows, "no gates were asked"
    )


def answers_html(run: RunView) -> str:
    """Every question a step asked and the answer it got."""
    rows = [
        [
            escaped(data.get("step")),
            json_block(data.get("question")),
            json_block(data.get("answer")),
            clock(at),
        ]
        for at, data in run.answers
    ]
    return html_table(["step", "question", "answer", "at"], rows, "")


def model_usage_html(run: RunView) -> str:
    """Model calls and tokens per step (or other scope), with totals."""
    usage: dict[str, dict[str, int]] = {k: dict(v) for k, v in run.llm.items()}
    for step in run.steps.values():
        # The step's own count covers calls a crash or replay left out of `llm` entries.
        if step.llm.get("calls") and step.id not in usage:
            usage[step.id] = {**usage_counts(), **step.llm}
    if not usage:
        return '<p class="none">no model calls</p>'
    rows = [
        [escaped(scope), str(u["calls"]), str(u["prompt_tokens"]), str(u["completion_tokens"]),
         str(u["errors"])]
        for scope, u in usage.items()
    ]  # fmt: skip
    totals = [sum(u[k] for u in usage.values()) for k in usage_counts()]
    rows.append(["<strong>total</strong>", *(f"<strong>{n}</strong>" for n in totals)])
    return f'<p class="note">model: {escaped(run.model or "—")}</p>' + html_table(
        ["step", "calls", "prompt tokens", "completion tokens", "errors"], rows, ""
    )


def outputs_html(run: RunView) -> str:
    """The run's outputs, then each step's."""
    outputs = as_dict((run.end or {}).get("outputs"))
    parts = []
    if outputs:
        rows = [[escaped(name), json_block(value)] for name, value in outputs.items()]
        parts.append("<h3>run outputs</h3>" + html_table(["name", "value"], rows, ""))
    rows = [
        [f'<a href="#{s.anchor}" data-step="{s.anchor}">{escaped(s.id)}</a>', json_block(out)]
        for s in ordered(run)
        if (out := s.result.get("output")) is not None
    ]
    parts.append("<h3>step outputs</h3>" + html_table(["step", "output"], rows, "no step outputs"))
    return "\n".join(parts)
