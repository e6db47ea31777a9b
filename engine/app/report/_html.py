"""Journal values as safe HTML text, and the small pieces of markup the report is made of.

Everything in a journal is untrusted text (tool output, model answers, error messages):
every value goes through `escaped` (control and invisible characters made visible, then
HTML-escaped) and long values are cut.
"""

from __future__ import annotations

import html
import json
import math
import time
from collections.abc import Iterable
from typing import Any

from engine.app.report._assets import status_class
from engine.app.report._read import INTERRUPTED, RunView, StepView, as_time
from engine.sanitize import neutralize

__all__ = [
    "OUTPUT_CHARS",
    "OUTPUT_LINES",
    "badge",
    "clock",
    "escaped",
    "html_section",
    "html_table",
    "json_block",
    "seconds",
    "short",
    "shown_status",
    "step_badge",
]

OUTPUT_CHARS = 4000
"""Characters of one value (an output, params, an error) shown before it is cut."""
OUTPUT_LINES = 80
"""Lines of one value shown before it is cut."""
_LABEL_CHARS = 22


def escaped(value: Any, limit: int = OUTPUT_CHARS) -> str:
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


def json_block(value: Any) -> str:
    """A value as indented JSON (a string as it is) in an escaped, cut `<pre>`."""
    text = (
        value
        if isinstance(value, str)
        else json.dumps(value, indent=2, ensure_ascii=False, default=repr)
    )
    return f"<pre>{escaped(text)}</pre>"


def short(text: str, limit: int = _LABEL_CHARS) -> str:
    """`text` cut to `limit` characters, for a label in a drawing (not escaped)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clock(at: Any) -> str:
    """A journal time as a UTC date and time, or a dash when it is not one."""
    when = as_time(at)
    if not when:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(when))


def seconds(value: float | None) -> str:
    """A duration as a person reads it, or a dash when there is none."""
    if value is None or not math.isfinite(value):
        return "—"
    # No-break spaces: a duration never wraps inside a narrow table cell.
    if value < 10:
        return f"{value:.2f}\u00a0s"
    if value < 120:
        return f"{value:.1f}\u00a0s"
    whole = round(value)
    return f"{whole // 60}\u00a0min {whole % 60}\u00a0s"


def badge(status: str, label: str | None = None) -> str:
    """A status badge in the status's colour, labelled `label` (else the status)."""
    return f'<span class="badge st-{status_class(status)}">{escaped(label or status)}</span>'


def shown_status(run: RunView, step: StepView) -> str:
    """A step's status as the page says it: a step running when the run stopped is `in
    flight` (drawn in the colour of `running`)."""
    return "in flight" if step.in_flight and run.status == INTERRUPTED else step.status


def step_badge(run: RunView, step: StepView) -> str:
    """A step's status badge, saying `in flight` for a step the stop cut short."""
    return badge(step.status, shown_status(run, step))


def html_section(title: str, content: str, anchor: str) -> str:
    """A titled `<section>`; `content` is markup, already escaped."""
    return f'<section id="{anchor}"><h2>{html.escape(title)}</h2>\n{content}\n</section>'


def html_table(head: Iterable[str], rows: list[list[str]], empty: str) -> str:
    """A table of cells (markup, already escaped), or `empty` when it has no rows."""
    if not rows:
        return f'<p class="none">{html.escape(empty)}</p>'
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "\n".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{cells}</tr></thead><tbody>\n{body}\n</tbody></table>"
