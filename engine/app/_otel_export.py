"""The OTLP exporter as the `planloom` command uses it: counting the spans it could not
export, and keeping the SDK's last complaint instead of printing its warnings."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["Complaints", "Ended", "Watched"]

_LIMIT = 400  # characters of the complaint quoted


class Complaints(logging.Handler):
    """Keeps the OpenTelemetry SDK's first warning instead of printing it: it names the
    cause (connection refused, a 404), where the last one only says that retrying gave
    up. `install` puts it on the SDK's loggers before anything can log."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.first: str | None = None
        self.closed = False  # planloom stopped the exporter: later complaints are its own

    @classmethod
    def install(cls) -> Complaints:
        handler = cls()
        logger = logging.getLogger("opentelemetry")
        logger.addHandler(handler)
        logger.propagate = False  # one line at the end instead of the SDK's warnings
        return handler

    def emit(self, record: logging.LogRecord) -> None:
        if self.first is not None or self.closed:
            return
        try:
            text = record.getMessage()
        except Exception:  # a malformed log call must not break an export
            text = str(record.msg)
        self.first = text if len(text) <= _LIMIT else text[: _LIMIT - 1] + "…"


class Watched(SpanExporter):
    """An exporter, counting the spans it exported and lost, and why it lost them."""

    def __init__(self, inner: SpanExporter, complaints: Complaints) -> None:
        self.inner = inner
        self.exported = 0
        self.lost = 0
        self.pending = 0  # spans of the export under way
        self._closed = False
        self._complaints = complaints

    @property
    def complaint(self) -> str | None:
        return self._complaints.first

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.pending = len(spans)
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # an exporter's bug must not reach the run
            self._complaints.first = self._complaints.first or f"{type(exc).__name__}: {exc}"
            result = SpanExportResult.FAILURE
        self.pending = 0
        if result is SpanExportResult.SUCCESS:
            self.exported += len(spans)
        else:
            self.lost += len(spans)
        return result

    def shutdown(self) -> None:
        """Stop exporting (an export waiting to retry gives up); once."""
        if not self._closed:
            self._closed = True
            self._complaints.closed = True
            self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


class Ended(SpanProcessor):
    """Counts the spans that ended: those not exported were dropped or lost."""

    def __init__(self) -> None:
        self.count = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.count += 1
