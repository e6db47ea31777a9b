"""A run's report: one self-contained HTML page drawn from its journal.

`render_report(record, entries)` reads a run's journal (`engine.store`) and returns a page
that needs nothing else to be viewed, no network and no other file: the plan graph and the
timeline are inline SVG laid out here (layers from `networkx`), the style and the one small
script are inline, and a Content-Security-Policy lets only those two run, so even a page
that failed to escape something could not load or execute anything else.

Everything in a journal is untrusted text (tool output, model answers, error messages):
every value goes through `_text` (control and invisible characters made visible, then
HTML-escaped) and long values are cut. The journal may also be from another version, torn
by a crash or hand-edited: a field of the wrong type is read as missing, never an error.

A run with no `end` entry whose process is gone was interrupted (killed, crashed): the page
says so and shows what was in flight, the steps that had started without ending and the
side-effect calls whose intent was journaled with no result after it.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
from pydantic import ValidationError

from engine._graph import step_dependencies
from engine._sanitize import neutralize
from engine._scope import step_of
from engine._sqlite_store import is_alive
from engine.model import Step
from engine.store import Entry, RunRecord

__all__ = ["INTERRUPTED", "STATUS_STYLE", "render_report"]

INTERRUPTED = "interrupted"
"""The status of a run whose process stopped (killed, crashed) before the run ended."""

STATUS_STYLE: dict[str, str] = {
    "succeeded": "green",
    "fallback": "yellow",
    "failed_acceptable": "yellow",
    "failed": "bold red",
    "denied": "bold red",
    "skipped": "dim",
    "cancelled": "magenta",
    "pending": "dim",
    "running": "cyan",
}
"""A step status's terminal style, as the summary table prints it (`engine.app.console`
holds the same table; the core cannot import it). The page draws each in the same hue."""

_HUES = {
    "green": "#2e8b3e",
    "yellow": "#b58900",
    "red": "#c62828",
    "dim": "#8a8f98",
    "magenta": "#a3369e",
    "cyan": "#00838f",
}

OUTPUT_CHARS = 4000
"""Characters of one value (an output, params, an error) shown before it is cut."""
OUTPUT_LINES = 80
"""Lines of one value shown before it is cut."""
MAX_CALLS = 50
"""Tool calls of one step listed (a `for_each` step may make thousands)."""
_LABEL_CHARS = 22


def render_report(record: RunRecord, entries: list[Entry]) -> str:
    """The HTML page reporting one run.

    Args:
        record: the run's summary from the store.
        entries: its journal, in order (`RunStore.journal`).

    Returns:
        One HTML document with no external reference; every journal value in it escaped.
    """
    run = _read(record, entries)
    body = [
        _header(run),
        _section("Plan graph", _graph_svg(run), "graph"),
        _section("Timeline", _timeline_svg(run), "timeline"),
        _section("Steps", _steps_table(run), "steps"),
        _section("Errors", _errors(run), "errors"),
        _section(_in_flight_title(run), _in_flight(run), "in-flight") if run.doubts else "",
        _section("Approvals", _approvals(run), "approvals"),
        _section("Answers", _answers(run), "answers") if run.answers else "",
        _section("Model usage", _model_usage(run), "model"),
        _section("Outputs", _outputs(run), "outputs"),
    ]
    css_hash = _csp_hash(_CSS)
    js_hash = _csp_hash(_JS)
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        f"style-src '{css_hash}'; script-src '{js_hash}'; img-src data:; base-uri 'none'; "
        "form-action 'none'\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>planloom run {_text(run.record.id)}: {_text(run.name)}</title>\n"
        f"<style>{_CSS}</style>\n</head><body>\n"
        + "\n".join(part for part in body if part)
        + f"\n<footer>planloom report, written {_clock(time.time())}</footer>\n"
        f"<script>{_JS}</script>\n</body></html>\n"
    )
    # A journal may hold lone surrogates (JSON allows them); the page must encode as UTF-8.
    return page.encode("utf-8", "replace").decode("utf-8")


# -- reading the journal --------------------------------------------------------------------


@dataclass
class _Call:
    """A journaled tool call: a side-effect call's intent (with its params), and its result
    when one was journaled; a read-only call's result."""

    scope: str
    attempt: int
    action: str
    params: Any
    started: float
    finished: float | None = None
    output: Any = None
    error: str | None = None


@dataclass
class _Step:
    """What the journal says about one step."""

    id: str
    index: int
    final: bool
    spec: dict[str, Any]
    status: str = "pending"
    result: dict[str, Any] = field(default_factory=dict)
    started: float | None = None
    finished: float | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    gates: list[dict[str, Any]] = field(default_factory=list)
    llm: dict[str, int] = field(default_factory=dict)
    ended_seq: int = -1
    active_seq: int = -1
    first_at: float | None = None
    in_flight: bool = False

    @property
    def anchor(self) -> str:
        # Ids are untrusted: the page's element ids are made from the index only.
        return f"step-{self.index}"


@dataclass
class _Run:
    record: RunRecord
    name: str
    status: str
    inputs: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    steps: dict[str, _Step] = field(default_factory=dict)
    end: dict[str, Any] | None = None
    segments: list[float] = field(default_factory=list)
    calls: list[_Call] = field(default_factory=list)
    doubts: list[_Call] = field(default_factory=list)
    approvals: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    answers: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    llm: dict[str, dict[str, int]] = field(default_factory=dict)
    t0: float = 0.0
    t1: float = 0.0
    last_at: float | None = None


def _read(record: RunRecord, entries: list[Entry]) -> _Run:
    run = _Run(record=record, name=record.name, status=record.status)
    pending: dict[tuple[Any, ...], _Call] = {}
    for entry in entries:
        data = entry.data if isinstance(entry.data, dict) else {}
        kind = entry.kind
        if kind == "start":
            run.segments.append(entry.at)
            run.end = None  # a resume after an end: that end is no longer the run's
        elif kind == "plan":
            _read_plan(run, data)
        elif kind == "end":
            run.end = data
        elif kind == "step" and isinstance(entry.scope, str):
            _read_step(run, entry, data)
        elif kind in ("intent", "tool"):
            _read_call(run, pending, entry, data)
        elif kind == "llm":
            usage = run.llm.setdefault(entry.scope or "(run)", _usage())
            response = _dict(data.get("response"))
            usage["calls"] += 1
            usage["prompt_tokens"] += _int(response.get("prompt_tokens"))
            usage["completion_tokens"] += _int(response.get("completion_tokens"))
            usage["errors"] += 1 if data.get("error") is not None else 0
        elif kind == "approval":
            run.approvals.append((entry.at, data))
        elif kind == "answer":
            run.answers.append((entry.at, data))
        if kind in ("intent", "tool", "llm", "approval", "answer") and entry.scope:
            step_id = step_of(entry.scope)
            if step_id is not None:
                step = _step(run, step_id)
                step.active_seq = entry.seq
                step.first_at = _when(entry.at) if step.first_at is None else step.first_at
        run.last_at = _when(entry.at) or run.last_at
    run.doubts = list(pending.values())
    _settle(run, entries)
    return run


def _read_plan(run: _Run, data: dict[str, Any]) -> None:
    plan = _dict(data.get("plan"))
    run.inputs = _dict(data.get("inputs"))
    run.model = data.get("model") if isinstance(data.get("model"), str) else run.model
    if isinstance(plan.get("name"), str):
        run.name = plan["name"]
    for final, section in ((False, "steps"), (True, "finally")):
        for spec in _list(plan.get(section)):
            if isinstance(spec, dict) and isinstance(spec.get("id"), str):
                step = _step(run, spec["id"])
                step.spec, step.final = spec, final


def _read_step(run: _Run, entry: Entry, data: dict[str, Any]) -> None:
    step = _step(run, step_of(entry.scope or "") or entry.scope or "?")
    step.result = _dict(data.get("result"))
    step.status = _str(step.result.get("status")) or "pending"
    step.started = _when(data.get("started"))
    step.finished = _when(data.get("finished"))
    step.attempts = [a for a in _list(data.get("attempts")) if isinstance(a, dict)]
    step.gates = [g for g in _list(data.get("gates")) if isinstance(g, dict)]
    llm = _dict(data.get("llm"))
    step.llm = {k: _int(llm.get(k)) for k in ("calls", "prompt_tokens", "completion_tokens")}
    step.ended_seq = entry.seq


def _read_call(
    run: _Run, pending: dict[tuple[Any, ...], _Call], entry: Entry, data: dict[str, Any]
) -> None:
    key = tuple(
        json.dumps(data.get(k), default=repr)
        for k in ("step", "attempt", "action", "params_hash", "ordinal")
    )
    call = pending.pop(key) if entry.kind == "tool" and key in pending else None
    if call is None:
        # An intent, or the result of a read-only call (those have no intent: no params).
        call = _Call(
            scope=entry.scope or _str(data.get("step")) or "?",
            attempt=_int(data.get("attempt")),
            action=_str(data.get("action")) or "?",
            params=data.get("params"),
            started=entry.at,
        )
        run.calls.append(call)
        if entry.kind == "intent":
            pending[key] = call
            return
    call.finished = entry.at
    error = data.get("error")
    if error is not None:
        found = _dict(error)
        call.error = f"{_str(found.get('type')) or 'error'}: {_str(found.get('message'))}"
    else:
        call.output = data.get("output")


def _settle(run: _Run, entries: list[Entry]) -> None:
    """The run's status, each step's final status, and the time span drawn."""
    ended = run.end is not None
    if ended and run.end is not None:
        run.status = _str(run.end.get("status")) or run.record.status
        for step_id, result in _dict(run.end.get("steps")).items():
            status = _str(_dict(result).get("status"))
            if status:
                step = _step(run, step_id)
                step.status = status
                if not step.result:
                    step.result = _dict(result)
    elif run.record.status == "running":
        run.status = "running" if is_alive(run.record) else INTERRUPTED
    if not ended:
        for step in run.steps.values():
            # Activity after the step's last end (or with no end): it was running.
            if step.active_seq > step.ended_seq:
                step.in_flight = True
                step.status = "running"
    found = [run.record.started or None, run.record.finished, *(e.at for e in entries)]
    for step in run.steps.values():
        found += [step.started, step.finished]
    times = [t for t in map(_when, found) if t is not None]
    run.t0 = min(times, default=0.0)
    run.t1 = max(times, default=0.0)
    if not ended and any(step.in_flight for step in run.steps.values()):
        # How long in-flight work went on after the last entry is unknown: leave room to
        # draw it running off past that point.
        run.t1 += max((run.t1 - run.t0) * 0.15, 0.05)


def _step(run: _Run, step_id: str) -> _Step:
    step = run.steps.get(step_id)
    if step is None:
        step = run.steps[step_id] = _Step(id=step_id, index=len(run.steps), final=False, spec={})
    return step


def _usage() -> dict[str, int]:
    return {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "errors": 0}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _when(value: Any) -> float | None:
    """A time (epoch seconds), or None: a value no clock gives (a torn or edited journal)
    must not stretch the time axis out of shape."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e11:
        return float(value)
    return None


# -- text -----------------------------------------------------------------------------------


def _text(value: Any, limit: int = OUTPUT_CHARS) -> str:
    """Any value as escaped HTML text: invisible characters shown, cut at `limit`."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    return html.escape(neutralize(_cut(text, limit)), quote=True)


def _cut(text: str, limit: int, lines: int = OUTPUT_LINES) -> str:
    kept = text[:limit]
    rows = kept.split("\n")
    if len(rows) > lines:
        kept = "\n".join(rows[:lines])
    left = len(text) - len(kept)
    return kept if left <= 0 else f"{kept}\n… ({left:,} more characters not shown)"


def _json_block(value: Any) -> str:
    text = (
        value
        if isinstance(value, str)
        else json.dumps(value, indent=2, ensure_ascii=False, default=repr)
    )
    return f"<pre>{_text(text)}</pre>"


def _short(text: str, limit: int = _LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clock(at: Any) -> str:
    when = _when(at)
    if not when:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(when))


def _seconds(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    # No-break spaces: a duration never wraps inside a narrow table cell.
    if value < 10:
        return f"{value:.2f}\u00a0s"
    if value < 120:
        return f"{value:.1f}\u00a0s"
    whole = round(value)
    return f"{whole // 60}\u00a0min {whole % 60}\u00a0s"


def _hue(status: str) -> str:
    style = STATUS_STYLE.get(status, "red" if status == INTERRUPTED else "dim")
    return _HUES[style.split()[-1]]


def _badge(status: str, label: str | None = None) -> str:
    return f'<span class="badge st-{_css_name(status)}">{_text(label or status)}</span>'


def _shown(run: _Run, step: _Step) -> str:
    """A step's status as the page says it: a step running when the run stopped is `in
    flight` (drawn in the colour of `running`)."""
    return "in flight" if step.in_flight and run.status == INTERRUPTED else step.status


def _step_badge(run: _Run, step: _Step) -> str:
    return _badge(step.status, _shown(run, step))


def _css_name(status: str) -> str:
    known = {*STATUS_STYLE, INTERRUPTED, "rejected"}
    return status if status in known else "other"


def _csp_hash(source: str) -> str:
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")


def _section(title: str, content: str, anchor: str) -> str:
    return f'<section id="{anchor}"><h2>{html.escape(title)}</h2>\n{content}\n</section>'


def _table(head: Iterable[str], rows: list[list[str]], empty: str) -> str:
    if not rows:
        return f'<p class="none">{html.escape(empty)}</p>'
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "\n".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{cells}</tr></thead><tbody>\n{body}\n</tbody></table>"


# -- sections -------------------------------------------------------------------------------


def _header(run: _Run) -> str:
    record = run.record
    usage = _dict(run.end.get("usage")) if run.end else {}
    usage = usage or _dict(record.usage)
    if usage:
        counted = (
            f"{_int(usage.get('tool_calls'))} tool calls, {_int(usage.get('llm_calls'))} "
            f"model calls, {_int(usage.get('prompt_tokens'))} + "
            f"{_int(usage.get('completion_tokens'))} tokens"
        )
    else:
        model_calls = sum(u["calls"] for u in run.llm.values())
        counted = (
            f"not counted (the run did not end); journaled: {len(run.calls)} tool calls, "
            f"{model_calls} model calls"
        )
    started, finished = _when(record.started), _when(record.finished)
    if started and finished:
        took_text = _seconds(finished - started)
    elif started and run.last_at is not None:
        took_text = f"— (its last journal entry came {_seconds(run.last_at - started)} in)"
    else:
        took_text = "—"
    ended = sum(s.status not in ("pending", "running") for s in run.steps.values())
    facts = [
        ("run", _text(record.id)),
        ("status", _badge(run.status)),
        ("recipe", _text(record.recipe or "(planned from a goal)")),
        ("started", _clock(record.started)),
        ("duration", took_text),
        ("steps", f"{ended} of {len(run.steps)} ended"),
        ("segments", _text(record.segments)),
        ("model", _text(run.model or "—")),
        ("usage", _text(counted)),
        *([("inputs", _json_block(run.inputs))] if run.inputs else []),
    ]
    rows = "".join(f"<dt>{html.escape(k)}</dt><dd>{v}</dd>" for k, v in facts)
    parts = [f"<header><h1>{_text(run.name)}</h1><dl>{rows}</dl></header>"]
    if run.status == INTERRUPTED:
        flying = [s.id for s in run.steps.values() if s.in_flight]
        names = ", ".join(f"<code>{_text(s)}</code>" for s in flying) or "none journaled"
        parts.append(
            '<div class="banner" id="interrupted"><strong>interrupted</strong>: the process '
            f"running this run (pid {_text(record.pid)}) stopped before the run ended. "
            f"In flight: {names}. The last journal entry was written at "
            f"{_clock(run.last_at)}. Continue it with <code>planloom resume "
            f"{_text(record.id)}</code>.</div>"
        )
    elif run.status == "running":
        parts.append(
            '<div class="banner running">still running (pid '
            f"{_text(record.pid)}): this report shows the journal so far.</div>"
        )
    return "\n".join(parts)


def _ordered(run: _Run) -> list[_Step]:
    return sorted(run.steps.values(), key=lambda s: (s.final, s.index))


def _steps_table(run: _Run) -> str:
    rows = []
    for step in _ordered(run):
        spec = step.spec
        what = _str(spec.get("tool")) or ("agent" if spec.get("agent") else "—")
        duration = (
            step.finished - step.started
            if step.started is not None and step.finished is not None
            else None
        )
        note = _str(step.result.get("error"))
        if step.in_flight:
            note = "in flight when the run stopped" if run.status == INTERRUPTED else "running"
        rows.append(
            [
                f'<a href="#{step.anchor}" data-step="{step.anchor}">{_text(step.id)}</a>'
                + (' <span class="tag">finally</span>' if step.final else ""),
                _step_badge(run, step),
                _text(what),
                str(_int(step.result.get("attempts")) or len(step.attempts)),
                _seconds(duration),
                f'<span class="clip">{_text(note, 300)}</span>',
            ]
        )
    table = _table(["step", "status", "action", "tries", "took", "error / note"], rows, "no steps")
    calls: dict[str, list[_Call]] = {}
    for call in run.calls:
        calls.setdefault(step_of(call.scope) or call.scope, []).append(call)
    details = (_step_details(run, step, calls.get(step.id, [])) for step in _ordered(run))
    return table + "\n" + "\n".join(details)


def _step_details(run: _Run, step: _Step, calls: list[_Call]) -> str:
    parts = [
        f'<details class="step" id="{step.anchor}"><summary>{_text(step.id)} '
        f"{_step_badge(run, step)}</summary>"
    ]
    if step.spec:
        parts.append(f"<h4>as planned</h4>{_json_block(step.spec)}")
    if step.attempts:
        rows = [
            [
                _text(a.get("n")),
                _text(a.get("action")),
                _text(a.get("outcome")),
                _seconds(_span(a.get("started"), a.get("finished"))),
                f'<span class="clip">{_text(a.get("error") or "", 600)}</span>',
            ]
            for a in step.attempts
        ]
        parts.append(
            "<h4>attempts</h4>" + _table(["#", "action", "outcome", "took", "error"], rows, "")
        )
    if calls:
        rows = [
            [
                _text(c.scope),
                _text(c.attempt),
                _text(c.action),
                _json_block(c.params) if c.params is not None else "(read-only: not kept)",
                (
                    "no result journaled"
                    if c.finished is None
                    else (_text(c.error, 600) if c.error is not None else "ok")
                ),
            ]
            for c in calls[:MAX_CALLS]
        ]
        more = len(calls) - MAX_CALLS
        parts.append(
            "<h4>tool calls</h4>"
            + _table(["scope", "attempt", "action", "params", "result"], rows, "")
            + (f'<p class="note">… and {more:,} more calls not shown</p>' if more > 0 else "")
        )
    if step.result.get("output") is not None:
        parts.append('<p class="note">its output is under <a href="#outputs">Outputs</a></p>')
    transcript = step.result.get("transcript")
    if transcript:
        parts.append(f"<h4>agent transcript</h4>{_json_block(transcript)}")
    parts.append("</details>")
    return "".join(parts)


def _span(start: Any, end: Any) -> float | None:
    a, b = _when(start), _when(end)
    return None if a is None or b is None else b - a


def _errors(run: _Run) -> str:
    rows = [["run", "", f"<pre>{_text(e)}</pre>"] for e in _list((run.end or {}).get("errors"))]
    for step in _ordered(run):
        error = step.result.get("error")
        if error:
            rows.append([_text(step.id), _step_badge(run, step), f"<pre>{_text(error)}</pre>"])
        for attempt in step.attempts:
            message = attempt.get("error")
            if message and message != error:
                rows.append(
                    [
                        _text(f"{step.id} (attempt {_int(attempt.get('n'))})"),
                        _text(attempt.get("outcome")),
                        f"<pre>{_text(message)}</pre>",
                    ]
                )
    return _table(["where", "status", "error"], rows, "no errors")


def _in_flight_title(run: _Run) -> str:
    return "In flight" if run.status in (INTERRUPTED, "running") else "Calls with no result"


def _in_flight(run: _Run) -> str:
    rows = [
        [
            _text(c.scope),
            _text(c.attempt),
            _text(c.action),
            _clock(c.started),
            _json_block(c.params),
        ]
        for c in run.doubts
    ]
    note = (
        '<p class="note">Side-effect calls whose intent was journaled with no result after '
        "it: they may or may not have happened. A resume asks before making them again "
        "(unless the step or action is idempotent).</p>"
    )
    return note + _table(["scope", "attempt", "action", "started", "params"], rows, "")


def _approvals(run: _Run) -> str:
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
                _text(data.get("step") or "(run)"),
                _text(data.get("action")),
                _badge("succeeded" if approved else "denied", verdict),
                f'<span class="nw">{_text(data.get("by"))}</span>',
                _text(data.get("reason") or ""),
                _text("; ".join(extras)),
                _clock(at),
            ]
        )
    return _table(
        ["step", "action", "decision", "by", "reason", "note", "at"], rows, "no gates were asked"
    )


def _answers(run: _Run) -> str:
    rows = [
        [
            _text(data.get("step")),
            _json_block(data.get("question")),
            _json_block(data.get("answer")),
            _clock(at),
        ]
        for at, data in run.answers
    ]
    return _table(["step", "question", "answer", "at"], rows, "")


def _model_usage(run: _Run) -> str:
    usage: dict[str, dict[str, int]] = {k: dict(v) for k, v in run.llm.items()}
    for step in run.steps.values():
        # The step's own count covers calls a crash or replay left out of `llm` entries.
        if step.llm.get("calls") and step.id not in usage:
            usage[step.id] = {**_usage(), **step.llm}
    if not usage:
        return '<p class="none">no model calls</p>'
    rows = [
        [_text(scope), str(u["calls"]), str(u["prompt_tokens"]), str(u["completion_tokens"]),
         str(u["errors"])]
        for scope, u in usage.items()
    ]  # fmt: skip
    totals = [sum(u[k] for u in usage.values()) for k in _usage()]
    rows.append(["<strong>total</strong>", *(f"<strong>{n}</strong>" for n in totals)])
    return f'<p class="note">model: {_text(run.model or "—")}</p>' + _table(
        ["step", "calls", "prompt tokens", "completion tokens", "errors"], rows, ""
    )


def _outputs(run: _Run) -> str:
    outputs = _dict((run.end or {}).get("outputs"))
    parts = []
    if outputs:
        rows = [[_text(name), _json_block(value)] for name, value in outputs.items()]
        parts.append("<h3>run outputs</h3>" + _table(["name", "value"], rows, ""))
    rows = [
        [f'<a href="#{s.anchor}" data-step="{s.anchor}">{_text(s.id)}</a>', _json_block(out)]
        for s in _ordered(run)
        if (out := s.result.get("output")) is not None
    ]
    parts.append("<h3>step outputs</h3>" + _table(["step", "output"], rows, "no step outputs"))
    return "\n".join(parts)


# -- the plan graph -------------------------------------------------------------------------

_NODE_W, _NODE_H, _GAP_X, _GAP_Y, _PAD = 180, 44, 72, 18, 16
_PAD_TOP = _PAD + _GAP_Y  # room above the first row for edges that skip columns


def _dependencies(spec: dict[str, Any]) -> list[str]:
    try:
        return step_dependencies(Step.model_validate(spec))
    except (ValidationError, ValueError, TypeError):
        # Not a step this version reads: its explicit dependencies are still drawn.
        return [d for d in _list(spec.get("depends_on")) if isinstance(d, str)]


def _layers(run: _Run) -> tuple[list[list[str]], list[tuple[str, str]]]:
    """Columns of step ids (dependencies left of dependents; `finally` steps last) and the
    edges to draw."""
    columns: list[list[str]] = []
    edges: list[tuple[str, str]] = []
    for final in (False, True):
        steps = [s for s in _ordered(run) if s.final == final]
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


def _graph_svg(run: _Run) -> str:
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
        hue = _hue(step.status)
        what = _str(step.spec.get("tool")) or ("agent" if step.spec.get("agent") else "")
        shown = _shown(run, step)
        dash = ' stroke-dasharray="6 3"' if step.in_flight else ""
        parts.append(
            f'<g class="node" data-step="{step.anchor}" tabindex="0"><title>{_text(node)}: '
            f"{_text(shown)}</title>"
            f'<rect x="{x}" y="{y}" width="{_NODE_W}" height="{_NODE_H}" rx="7" fill="{hue}" '
            f'fill-opacity="0.12" stroke="{hue}" stroke-width="{3 if step.in_flight else 1.8}"'
            f"{dash}/>"
            f'<text x="{x + 10}" y="{y + 18}" class="id">{_text(_short(node))}</text>'
            f'<text x="{x + 10}" y="{y + 35}" class="sub" fill="{hue}">'
            f"{_text(_short(f'{shown} · {what}' if what else shown, 28))}</text></g>"
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


def _timeline_svg(run: _Run) -> str:
    steps = _ordered(run)
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
            f'<text x="{at}" y="{_AXIS_H - 10}" class="tick">{_seconds(n * tick)}</text>'
        )
        n += 1
    for number, at in enumerate(run.segments[1:], start=2):
        parts.append(
            f'<line x1="{x(at)}" y1="{_AXIS_H - 4}" x2="{x(at)}" y2="{height - 6}" '
            f'class="segment"><title>resumed: segment {number} started {_clock(at)}</title></line>'
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
            f"{_text(_short(step.id, 24))}</text>"
        )
        parts += _bars(run, step, top, x)
        parts.append("</g>")
    parts.append("</svg>")
    return '<div class="scroll" id="timeline">' + "".join(parts) + "</div>"


def _bars(run: _Run, step: _Step, top: int, x: Callable[[float], float]) -> list[str]:
    parts: list[str] = []
    hue = _hue(step.status)
    start = step.started
    end = step.finished
    if step.in_flight:
        start = step.first_at if start is None or step.ended_seq >= 0 else start
        end = run.t1  # still going, or stopped at some unknown point after the last entry
    if start is None or end is None:
        parts.append(
            f'<text x="{_LABEL_W + 4}" y="{top + 17}" class="tick">{_text(step.status)}: '
            "not started</text>"
        )
        return parts
    left, right = x(start), x(max(end, start))
    flight = ' stroke-dasharray="4 3"' if step.in_flight else ""
    parts.append(
        f'<rect class="bar" x="{left}" y="{top + 4}" width="{max(right - left, 2)}" '
        f'height="{_ROW_H - 8}" rx="3" fill="{hue}" fill-opacity="0.22" stroke="{hue}"{flight}>'
        f"<title>{_text(step.id)}: {_text(step.status)}, {_seconds(end - start)}"
        f"{' (in flight)' if step.in_flight else ''}</title></rect>"
    )
    if step.in_flight:
        return parts
    for attempt in step.attempts:
        a, b = _when(attempt.get("started")), _when(attempt.get("finished"))
        if a is None or b is None:
            continue
        ok = attempt.get("outcome") == "ok"
        colour = _hue("succeeded" if ok else "failed")
        parts.append(
            f'<rect class="attempt" x="{x(a)}" y="{top + 9}" width="{max(x(b) - x(a), 2)}" '
            f'height="{_ROW_H - 18}" fill="{colour}"><title>attempt {_int(attempt.get("n"))}: '
            f"{_text(attempt.get('outcome'))}, {_seconds(b - a)}</title></rect>"
        )
    for gate in step.gates:
        at = _when(gate.get("at"))
        if at is None:
            continue
        colour = _hue("succeeded" if gate.get("approved") is True else "denied")
        verdict = "approved" if gate.get("approved") is True else "denied"
        parts.append(
            f'<path class="gate" d="M {x(at)} {top + 1} l 4 5 l -8 0 z" fill="{colour}">'
            f"<title>gate {_text(gate.get('action'))} {verdict} by {_text(gate.get('by'))}"
            f"</title></path>"
        )
    return parts


# -- style and script (hashed into the page's Content-Security-Policy) ------------------

_STATUS_CSS = "".join(
    f".st-{status}{{background:{_HUES[style.split()[-1]]}}}"
    for status, style in {**STATUS_STYLE, INTERRUPTED: "red", "rejected": "red"}.items()
)

_CSS = (
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;"
    "max-width:1200px;padding:16px 24px;color:#1f2328;background:#fff}"
    "h1{margin:0 0 8px;font-size:22px}h2{border-bottom:1px solid #d0d7de;padding-bottom:4px;"
    "margin-top:28px;font-size:18px}h3{font-size:15px}h4{margin:10px 0 4px;font-size:13px}"
    "dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0}"
    "dt{color:#57606a}dd{margin:0}"
    "table{border-collapse:collapse;width:100%;margin:6px 0}"
    "th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}"
    "th{background:#f6f8fa;font-weight:600}"
    "pre{margin:0;white-space:pre-wrap;word-break:break-word;max-height:360px;overflow:auto;"
    "font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;background:#f6f8fa;"
    "padding:4px 6px;border-radius:4px}"
    "code{font-family:ui-monospace,monospace;background:#f6f8fa;padding:0 3px}"
    ".badge{color:#fff;border-radius:10px;padding:1px 8px;font-size:12px;white-space:nowrap}"
    ".st-other{background:#57606a}" + _STATUS_CSS + ".banner{margin:12px 0;padding:10px 14px;"
    "border-left:5px solid #c62828;background:#fdecea}"
    ".banner.running{border-color:#00838f;background:#e0f2f1}"
    ".scroll{overflow-x:auto;border:1px solid #d0d7de;border-radius:6px;padding:4px}"
    "svg text{font:12px system-ui,sans-serif;fill:#1f2328}svg text.sub{font-size:11px}"
    "svg text.id{font-weight:600}svg text.tick{fill:#57606a;font-size:11px}"
    "svg .grid{stroke:#eaeef2}svg .segment{stroke:#6b7280;stroke-dasharray:3 3}"
    "svg .stop{stroke:#c62828;stroke-width:2}"
    ".node,.row{cursor:pointer}.node:hover rect,.node:focus rect{fill-opacity:.3}"
    ".row:hover .label{text-decoration:underline}"
    "details.step{border:1px solid #d0d7de;border-radius:6px;margin:6px 0;padding:4px 10px}"
    "details.step summary{cursor:pointer;font-weight:600}"
    "details.step.hit{outline:2px solid #0969da}"
    ".tag{font-size:11px;color:#57606a;border:1px solid #d0d7de;border-radius:8px;"
    "padding:0 5px}.nw{white-space:nowrap}.clip{display:block;max-height:6em;overflow:hidden}"
    ".none,.note{color:#57606a}footer{margin-top:32px;color:#8a8f98;font-size:12px}"
)

_JS = (
    "(function(){"
    "function open(id){var d=document.getElementById(id);if(!d)return;d.open=true;"
    "document.querySelectorAll('details.hit').forEach(function(e){e.classList.remove('hit')});"
    "d.classList.add('hit');d.scrollIntoView({block:'start'});}"
    "document.querySelectorAll('[data-step]').forEach(function(e){"
    "e.addEventListener('click',function(ev){ev.preventDefault();"
    "open(e.getAttribute('data-step'));});"
    "e.addEventListener('keydown',function(ev){if(ev.key==='Enter'){"
    "open(e.getAttribute('data-step'));}});});"
    "if(location.hash){open(location.hash.slice(1));}"
    "})();"
)
