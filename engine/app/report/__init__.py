"""A run's report: one self-contained HTML page drawn from its journal.

`render_report(record, entries)` reads a run's journal (`engine.store`) and returns a page
that needs nothing else to be viewed, no network and no other file: the plan graph and the
timeline are inline SVG laid out by the report itself (layers from `networkx`), the style
and the one small script are inline, and a Content-Security-Policy lets only those two run,
so even a page that failed to escape something could not load or execute anything else.

Everything in a journal is untrusted text (tool output, model answers, error messages):
every value goes through `engine.app.report._html.escaped` (control and invisible characters
made visible, then HTML-escaped) and long values are cut. The journal may also be from
another version, torn by a crash or hand-edited: a field of the wrong type is read as
missing, never an error.

A run with no `end` entry whose process is gone was interrupted (killed, crashed): the page
says so and shows what was in flight, the steps that had started without ending and the
side-effect calls whose intent was journaled with no result after it.

This module puts the page together from parts split by concern: `engine.app.report._read`
reads the journal into the report's view of the run, `engine.app.report._sections` writes the
sections (a step's model calls by `engine.app.report._model_calls`) and
`engine.app.report._svg` draws the graph and timeline, `engine.app.report._html`
escapes values and makes the small pieces of markup, `engine.app.report._assets` holds the
status colours, style sheet and script.
"""

from __future__ import annotations

import time

from engine.app.report._assets import CSS, JS, csp_hash
from engine.app.report._assets import STATUS_STYLE as STATUS_STYLE
from engine.app.report._html import OUTPUT_CHARS as OUTPUT_CHARS
from engine.app.report._html import OUTPUT_LINES as OUTPUT_LINES
from engine.app.report._html import clock, escaped, html_section
from engine.app.report._read import INTERRUPTED as INTERRUPTED
from engine.app.report._read import read_run
from engine.app.report._sections import MAX_CALLS as MAX_CALLS
from engine.app.report._sections import (
    answers_html,
    approvals_html,
    errors_html,
    header_html,
    in_flight_html,
    in_flight_title,
    model_usage_html,
    outputs_html,
    steps_html,
)
from engine.app.report._svg import graph_svg, timeline_svg
from engine.store import Entry, RunRecord

__all__ = ["INTERRUPTED", "STATUS_STYLE", "render_report"]


def render_report(record: RunRecord, entries: list[Entry]) -> str:
    """The HTML page reporting one run.

    Args:
        record: the run's summary from the store.
        entries: its journal, in order (`RunStore.journal`).

    Returns:
        One HTML document with no external reference; every journal value in it escaped.
    """
    run = read_run(record, entries)
    body = [
        header_html(run),
        html_section("Plan graph", graph_svg(run), "graph"),
        html_section("Timeline", timeline_svg(run), "timeline"),
        html_section("Steps", steps_html(run), "steps"),
        html_section("Errors", errors_html(run), "errors"),
        html_section(in_flight_title(run), in_flight_html(run), "in-flight") if run.doubts else "",
        html_section("Approvals", approvals_html(run), "approvals"),
        html_section("Answers", answers_html(run), "answers") if run.answers else "",
        html_section("Model usage", model_usage_html(run), "model"),
        html_section("Outputs", outputs_html(run), "outputs"),
    ]
    css_hash = csp_hash(CSS)
    js_hash = csp_hash(JS)
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        f"style-src '{css_hash}'; script-src '{js_hash}'; img-src data:; base-uri 'none'; "
        "form-action 'none'\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>planloom run {escaped(run.record.id)}: {escaped(run.name)}</title>\n"
        f"<style>{CSS}</style>\n</head><body>\n"
        + "\n".join(part for part in body if part)
        + f"\n<footer>planloom report, written {clock(time.time())}</footer>\n"
        f"<script>{JS}</script>\n</body></html>\n"
    )
    # A journal may hold lone surrogates (JSON allows them); the page must encode as UTF-8.
    return page.encode("utf-8", "replace").decode("utf-8")
