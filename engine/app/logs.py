"""Event logs: `-v` on stderr as readable lines, `--log-file` as JSON lines."""

from __future__ import annotations

import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

from engine.app.console import uses_colour
from engine.errors import ConfigurationError
from engine.events import EventBus, structlog_subscriber
from engine.sanitize import neutralize

__all__ = ["open_log", "subscribe_logs"]


def open_log(path: str) -> TextIO:
    """The `--log-file`, opened for appending (closed by the caller)."""
    try:
        return open(path, "a", encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"--log-file {path}: {exc.strerror or exc}") from exc


def subscribe_logs(events: EventBus, *, verbose: bool, log_stream: TextIO | None) -> None:
    if not verbose and log_stream is None:
        return
    import structlog  # ~80 ms with its dev renderer: only a run that logs pays for it

    if verbose:
        logger = structlog.wrap_logger(
            structlog.PrintLogger(sys.stderr),
            processors=[
                structlog.processors.TimeStamper(fmt="%H:%M:%S"),
                _terminal_safe,
                structlog.dev.ConsoleRenderer(colors=uses_colour(sys.stderr)),
            ],
        )
        events.subscribe(structlog_subscriber(logger), sink=True)  # written out: redacted
    if log_stream is not None:
        logger = structlog.wrap_logger(
            structlog.WriteLogger(log_stream),
            processors=[
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.JSONRenderer(default=repr),
            ],
        )
        events.subscribe(structlog_subscriber(logger), sink=True)  # written out: redacted


def _terminal_safe(logger: Any, method: str, event: MutableMapping[str, Any]) -> dict[str, Any]:
    """structlog processor: escape sequences in logged values cannot reach the terminal."""
    return {k: neutralize(v) if isinstance(v, str) else v for k, v in event.items()}
