"""What a person sees on stderr: a live view of running steps and a summary table."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import IO, Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from engine._sanitize import neutralize
from engine.cassette import RECORDED
from engine.events import Event
from engine.results import STATUS_STYLE as _STYLE
from engine.results import RunResult

__all__ = ["LiveProgress", "print_summary"]


def _clip(text: str | None, width: int = 80) -> str:
    if not text:
        return ""
    flat = neutralize(" ".join(text.split()))
    return flat if len(flat) <= width else flat[: width - 1] + "…"


class LiveProgress:
    """An event subscriber that redraws a table of step states (terminals only)."""

    def __init__(self, console: Console, step_ids: list[str]) -> None:
        self.console = console
        self.states: dict[str, str] = dict.fromkeys(step_ids, "pending")
        self.started: dict[str, float] = {}
        self.live = Live(console=console, refresh_per_second=8, transient=True)

    def __enter__(self) -> LiveProgress:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.live.__exit__(*exc)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Stop redrawing (and clear the view) while a question is on screen."""
        self.live.stop()
        try:
            yield
        finally:
            self.live.start()

    def __call__(self, event: Event) -> None:
        if event.step_id is None:
            return
        if event.kind == "step.started":
            self.states[event.step_id] = "running"
            self.started[event.step_id] = time.monotonic()
        elif event.kind == "step.finished":
            self.states[event.step_id] = str(event.data.get("status", "?"))
        else:
            return
        self.live.update(self._table())

    def _table(self) -> Table:
        table = Table(box=None, show_header=False, pad_edge=False)
        running = [s for s, state in self.states.items() if state == "running"]
        done = sum(1 for state in self.states.values() if state not in ("pending", "running"))
        table.add_row(Text(f"{done}/{len(self.states)} steps done", style="bold"), "")
        now = time.monotonic()
        for step_id in running[:12]:
            elapsed = now - self.started.get(step_id, now)
            table.add_row(Text(f"  ⠿ {step_id}", style="cyan"), f"{elapsed:5.1f}s")
        return table


def print_summary(result: RunResult, stream: IO[str], *, color: bool) -> None:
    """The end-of-run table: one row a step, then the run status and usage."""
    console = Console(
        file=stream,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        width=120 if not color else None,
    )
    table = Table(title=f"run {result.run_id}", title_justify="left")
    table.add_column("step")
    table.add_column("status")
    table.add_column("tries", justify="right")
    table.add_column("error / note", overflow="fold")
    for step_id, step in result.steps.items():
        table.add_row(  # Text, not str: rich would read "[...]" in an error as markup
            Text(neutralize(step_id)),
            Text(neutralize(step.status), style=_STYLE.get(step.status, "")),
            str(step.attempts),
            Text(_clip(step.error, 100)),
        )
    console.print(table)
    for step_id, step in result.steps.items():
        for entry in (step.transcript or [])[:10]:
            arguments = neutralize(json.dumps(entry.get("arguments"), default=repr))
            line = f"agent {step_id}: {entry.get('tool')} {_clip(arguments, 80)} → "
            console.print(Text(neutralize(f"{line}{entry.get('status')}")))
    for decision in result.approvals:
        verdict = "approved" if decision.approved else "denied"
        why = f": {decision.reason}" if decision.reason and not decision.approved else ""
        by = "(recorded)" if decision.by == RECORDED else f"by {decision.by}"
        line = f"gate: {decision.step_id} {decision.action} {verdict} {by}{why}"
        console.print(Text(neutralize(line)))
    for name, value in result.outputs.items():
        text = value if isinstance(value, str) else json.dumps(value, default=repr)
        lines = neutralize(text.rstrip()).splitlines() or [""]
        more = f"\n  … ({len(lines) - 20} more lines)" if len(lines) > 20 else ""
        console.print(Text(f"output {name}:\n  " + "\n  ".join(lines[:20]) + more))
    for error in result.errors:
        console.print(Text(neutralize(f"error: {error}"), style="red"))
    style = "bold green" if result.status == "succeeded" else "bold red"
    usage = result.usage
    model = (
        f"{usage.llm_calls} model calls, {usage.prompt_tokens + usage.completion_tokens} tokens, "
        if usage.llm_calls
        else ""
    )
    console.print(
        Text(f"run {result.status}", style=style),
        Text(f"  ({model}{usage.tool_calls} tool calls)", style="dim"),
    )
