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

from engine.events import Event
from engine.recording.cassette import RECORDED
from engine.results import STATUS_STYLE as _STYLE
from engine.results import RunResult, StepResult
from engine.sanitize import neutralize

__all__ = ["LiveProgress", "console_on", "print_summary", "uses_colour"]

_PIPED_WIDTH = 120  # columns of a table written to a file or a pipe


def console_on(stream: IO[str]) -> Console:
    """A console on `stream`. Whether it writes colour (and escape codes at all) is rich's
    call, from the stream and the environment: a terminal or not, `NO_COLOR`,
    `FORCE_COLOR`, `TTY_COMPATIBLE`, `TERM=dumb`."""
    console = Console(file=stream, highlight=False)
    if not console.is_terminal:
        console.width = _PIPED_WIDTH  # a pipe has no width to measure: a stable one
    return console


def uses_colour(stream: IO[str]) -> bool:
    """Whether what is written to `stream` may be coloured, as `console_on` decides."""
    console = console_on(stream)
    return console.is_terminal and not console.no_color and not console.is_dumb_terminal


def _clip(text: str | None, width: int = 80) -> str:
    if not text:
        return ""
    flat = neutralize(" ".join(text.split()))
    return flat if len(flat) <= width else flat[: width - 1] + "…"


class LiveProgress:
    """An event subscriber that keeps a table of running steps on a terminal, redrawn on a
    clock (`refresh_per_second`), so the running steps' timers tick between events. A step
    whose model answer is streaming shows its tokens so far (`llm.streaming`)."""

    def __init__(self, console: Console, step_ids: list[str]) -> None:
        self.console = console
        self.total = len(step_ids)
        self.done = 0
        # Running steps and when each started; read by rich's refresh thread, which copies
        # it first (a copy of a dict is one step under the GIL).
        self.running: dict[str, float] = {}
        self.tokens: dict[str, int] = {}  # a running step's streaming answer, so far
        self.live = Live(
            console=console,
            refresh_per_second=4,
            transient=True,
            get_renderable=self._table,
        )

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
        if event.kind == "run.started":  # the steps kept from before ended already
            self.done += len(event.data.get("kept", ()))
        elif event.kind == "run.settled":  # a streamed plan is whole: its size is known
            self.total = int(event.data.get("steps", self.total))
        if event.step_id is None:
            return
        if event.kind == "step.started":
            self.running[event.step_id] = time.monotonic()
        elif event.kind == "step.finished":
            self.running.pop(event.step_id, None)
            self.tokens.pop(event.step_id, None)
            self.done += 1
        elif event.kind == "step.discarded":  # an early step the whole plan did not keep
            self.running.pop(event.step_id, None)
            self.done -= 1 if event.data.get("ended") else 0
        elif event.kind == "llm.streaming":
            self.tokens[event.step_id] = int(event.data.get("tokens", 0))
        elif event.kind == "llm.called":  # that answer is in (or failed): no count shown
            self.tokens.pop(event.step_id, None)
        elif event.kind == "step.warning":  # printed above the view, and it stays
            line = f"warning: {event.step_id}: {event.data.get('warning')}"
            self.console.print(Text(neutralize(line), style="yellow"))

    def _table(self) -> Table:
        table = Table(box=None, show_header=False, pad_edge=False)
        table.add_row(Text(f"{self.done}/{self.total} steps done", style="bold"), "")
        now = time.monotonic()
        tokens = dict(self.tokens)
        for step_id, started in list(self.running.items())[:12]:
            count = tokens.get(step_id)
            streamed = f"  {count} tokens" if count else ""
            table.add_row(
                Text(f"  ⠿ {neutralize(step_id)}", style="cyan"),
                f"{now - started:5.1f}s{streamed}",
            )
        return table


def print_summary(result: RunResult, stream: IO[str]) -> None:
    """The end-of-run table: one row a step (its time, when it ran), then the run status
    and usage. Coloured as `console_on` decides."""
    console = console_on(stream)
    table = Table(title=f"run {result.run_id}", title_justify="left")
    table.add_column("step")
    table.add_column("status")
    table.add_column("tries", justify="right")
    table.add_column("time", justify="right")
    table.add_column("error / note", overflow="fold")
    for step_id, step in result.steps.items():
        table.add_row(  # Text, not str: rich would read "[...]" in an error as markup
            Text(neutralize(step_id)),
            Text(neutralize(step.status), style=_STYLE.get(step.status, "")),
            _tries(step),
            _seconds(step.duration),
            _note(step),
        )
    if result.steps:
        console.print(table)
    else:
        console.print(Text(f"run {result.run_id}: no steps ran"))
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
    unknown = result.unknown_outputs or {}
    for name, value in result.outputs.items():
        if name in unknown:
            console.print(Text(neutralize(f"output {name}:\n  unknown: {unknown[name]}")))
            continue
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
    count = len(result.steps)
    console.print(
        Text(f"run {result.status}", style=style),
        Text(
            f"  ({count} step{'' if count == 1 else 's'}, {model}{usage.tool_calls} tool calls)",
            style="dim",
        ),
    )


def _tries(step: StepResult) -> str:
    """A step's attempts as the summary shows them: `2`; for a `for_each` step, its
    attempts over all its items, `3 over 3 items` (each item went at its first try)."""
    if step.items is None:
        return str(step.attempts)
    return f"{step.attempts} over {step.items} item{'' if step.items == 1 else 's'}"


def _note(step: StepResult) -> Text:
    """A step's error, then its warnings (an output cut at a limit), for the summary."""
    note = Text(_clip(step.error, 100))
    for warning in step.warnings or []:
        note.append(("\n" if note else "") + f"warning: {neutralize(warning)}", style="yellow")
    return note


def _seconds(duration: float | None) -> str:
    """A step's time as the summary shows it: `0.04s`, `2.5s`, `1m05s`; blank if none."""
    if duration is None:
        return ""
    if duration < 1:
        return f"{duration:.2f}s"
    if duration < 60:
        return f"{duration:.1f}s"
    minutes, seconds = divmod(round(duration), 60)
    return f"{minutes}m{seconds:02d}s"
