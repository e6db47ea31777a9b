"""OpenTelemetry for the `planloom` command: traces over OTLP/HTTP when `--otel` is given or
`OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) is set, and nothing otherwise.

Off, it costs nothing: the SDK is not imported and no subscriber is added, so a run's
events reach no span code (`bench/overhead.py` measures it). On, one `TracerProvider`
with a batch processor exports every run of the command; the standard `OTEL_*` variables
configure it (endpoint, headers, timeout, compression, sampler, resource, service name).
Spans are made from the run's events by `engine.tracing.RunSpans`.

What was said (model messages, tool arguments and results) goes in spans only when
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` asks for it, as the GenAI
instrumentations read it: `true` (or `SPAN_ONLY`, `SPAN_AND_EVENT`); `false`, `NO_CONTENT`,
`EVENT_ONLY` (planloom sends no log events) or unset leave it out. Anything else is refused.

The exporter's own log lines are kept off the terminal: if spans could not be exported,
one line says so at the end, with the exporter's last complaint.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from engine.errors import ConfigurationError
from engine.redaction import Secrets, redact_url

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from engine.app._otel_export import Ended, Watched
    from engine.events import EventBus
    from engine.tracing import RunSpans

__all__ = ["CAPTURE", "INSTALL_HINT", "Telemetry", "captures_content", "wanted"]

INSTALL_HINT = "pip install 'planloom[otel]'"
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
_TIMEOUTS = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
_HEADERS = ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
_COMPRESSIONS = ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION")
_DEFAULT_ENDPOINT = "http://localhost:4318/v1/traces"
_DEFAULT_TIMEOUT = 10.0  # seconds, as the OTLP exporter specification says
_QUEUE = 32_768  # spans waiting to be sent, at most (OTEL_BSP_MAX_QUEUE_SIZE overrides)
_SAY_WAITING_AFTER = 1.0  # seconds of exporting at exit before the wait is explained
CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_CAPTURE_ON = frozenset({"true", "span_only", "span_and_event"})
_CAPTURE_OFF = frozenset({"", "false", "no_content", "event_only"})


def wanted(flag: bool, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this command traces: `--otel`, or an OTLP endpoint in the environment,
    unless `OTEL_SDK_DISABLED=true`."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return flag or any(environ.get(name, "").strip() for name in _ENDPOINTS)


def captures_content(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether spans hold what was said (see the module's docstring).

    Raises:
        ConfigurationError: the variable holds a value that is neither on nor off.
    """
    value = environ.get(CAPTURE, "").strip().lower()
    if value in _CAPTURE_ON:
        return True
    if value in _CAPTURE_OFF:
        return False
    raise ConfigurationError(
        f"{CAPTURE}={environ[CAPTURE].strip()!r}: set it to true to put model messages and "
        "tool arguments and results (redacted) in the traces, or false (the default) to "
        "leave them out"
    )


class Telemetry:
    """The tracer provider and exporter of one command (see the module's docstring).

    Raises (from `start`):
        ConfigurationError: the protocol asked for is not OTLP/HTTP with protobuf, or a
            timeout is not a number, or content capture is neither on nor off, or
            `--otel` was given and the SDK is not installed.
    """

    def __init__(
        self,
        provider: TracerProvider,
        exporter: Watched,
        ended: Ended,
        endpoint: str,
        timeout: float,
        capture_content: bool = False,
    ) -> None:
        self.provider = provider
        self.exporter = exporter
        self.ended = ended
        self._spans: RunSpans | None = None
        self.endpoint = endpoint
        self.timeout = timeout
        self.capture_content = capture_content

    @classmethod
    def start(cls, *, flag: bool, environ: Mapping[str, str] = os.environ) -> Telemetry | None:
        """Tracing for this command, or None if it is off (or cannot be had: the SDK is
        missing and only the environment asked for it, which is said on stderr)."""
        if not wanted(flag, environ):
            return None
        for name in _PROTOCOLS:
            protocol = environ.get(name, "").strip()
            if protocol and protocol != "http/protobuf":
                raise ConfigurationError(
                    f"{name}={protocol}: planloom exports traces over OTLP/HTTP with "
                    "protobuf only; set it to http/protobuf (port 4318) or unset it"
                )
        timeout = _timeout(environ)
        endpoint = _endpoint(environ)
        _check(environ)
        capture = captures_content(environ)
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            from engine.app._otel_export import Complaints, Ended, Watched
        except ImportError as exc:
            why = f"tracing needs OpenTelemetry's SDK and OTLP exporter ({exc.name} is missing)"
            if flag:
                raise ConfigurationError(f"--otel: {why}: {INSTALL_HINT}") from None
            sys.stderr.write(
                f"planloom: OTEL_EXPORTER_OTLP_ENDPOINT is set, but {why}; running without "
                f"traces ({INSTALL_HINT})\n"
            )
            return None
        complaints = Complaints.install()  # before the SDK can print anything
        exporter = Watched(OTLPSpanExporter(endpoint=endpoint, timeout=timeout), complaints)
        # The SDK's resource (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME); "planloom" when
        # neither names the service.
        resource = Resource.create()
        named = str(resource.attributes.get("service.name") or "").strip()
        if not named or named.startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "planloom"}))
        provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        ended = Ended()
        provider.add_span_processor(ended)
        # A run makes spans faster than they are sent: the queue holds a burst of them
        # (the SDK's default, 2,048, drops spans of a run of a few hundred steps).
        queue = None if environ.get("OTEL_BSP_MAX_QUEUE_SIZE") else _QUEUE
        try:
            batches = BatchSpanProcessor(exporter, max_queue_size=queue)
        except ValueError as exc:  # the SDK refuses the OTEL_BSP_* settings it was given
            given = ", ".join(f"{k}={v}" for k, v in environ.items() if k.startswith("OTEL_BSP_"))
            raise ConfigurationError(
                f"{given or 'OTEL_BSP_*'}: {exc} (with planloom's queue of {_QUEUE:,} spans "
                "unless OTEL_BSP_MAX_QUEUE_SIZE is set)"
            ) from None
        provider.add_span_processor(batches)
        return cls(provider, exporter, ended, endpoint, timeout, capture)

    def follow(self, bus: EventBus, *, base_url: str | None = None) -> RunSpans:
        """Have the spans of what publishes on `bus` made: a session's planning, then each
        of its runs, in one trace (`engine.tracing.RunSpans.follow`)."""
        if self._spans is None:
            from engine.tracing import RunSpans, server_of

            self._spans = RunSpans(
                self.provider.get_tracer("planloom"),
                server=server_of(base_url),
                capture_content=self.capture_content,
            )
        self._spans.follow(bus)
        return self._spans

    def close(self) -> None:
        """End what the runs left open (a second Ctrl-C stops a run without its last
        events), export what is left, waiting at most the export timeout, and say on
        stderr if spans were lost, and why. A Ctrl-C here stops the wait, not the command."""
        if self._spans is not None:
            self._spans.end_all()
        done = threading.Event()

        def shut() -> None:
            self.provider.shutdown()
            done.set()

        where = redact_url(self.endpoint)
        threading.Thread(target=shut, name="planloom-otel-shutdown", daemon=True).start()
        why: str | None = None
        try:
            if not done.wait(_SAY_WAITING_AFTER):
                sys.stderr.write(f"planloom: sending traces to {where}...\n")
                if not done.wait(max(self.timeout - _SAY_WAITING_AFTER, 0.0) + 1.0):
                    why = self.exporter.complaint or f"no answer within {self.timeout:g} s"
        except KeyboardInterrupt:
            why = "interrupted while they were being sent"
        if not done.is_set():
            self.exporter.shutdown()  # the exporter stops retrying
            done.wait(1.0)
        lost = self.ended.count - self.exporter.exported  # failed, dropped or not sent yet
        if lost or not done.is_set():
            why = why or self.exporter.complaint or "not sent"
            count = "some spans" if not lost else "1 span" if lost == 1 else f"{lost} spans"
            said = Secrets.from_environ().redact(f"{count} could not be exported to {where}: {why}")
            sys.stderr.write(f"planloom: {said}\n")


def _check(environ: Mapping[str, str]) -> None:
    """Refuse settings the exporter would take and then fail on, or print its own line
    about: a URL that is not http(s), headers not in `key=value` pairs, an unknown
    compression. Values are never quoted: a header holds a token."""
    for name in _ENDPOINTS:
        url = environ.get(name, "").strip()
        if url and urlsplit(url).scheme not in ("http", "https"):
            raise ConfigurationError(
                f"{name}: the endpoint must be an http:// or https:// URL (e.g. "
                "http://localhost:4318)"
            )
    for name in _HEADERS:
        text = environ.get(name, "").strip()
        for pair in filter(None, (p.strip() for p in text.split(","))):
            if "=" not in pair or not pair.split("=", 1)[0].strip():
                raise ConfigurationError(
                    f"{name}: every header must be key=value, separated by commas (e.g. "
                    "authorization=Bearer%20TOKEN); one is not"
                )
    for name in _COMPRESSIONS:
        value = environ.get(name, "").strip().lower()
        if value and value not in ("gzip", "deflate", "none"):
            raise ConfigurationError(f"{name}={value}: use gzip, deflate or none")


def _endpoint(environ: Mapping[str, str]) -> str:
    """The traces URL, as the OTLP exporter specification derives it."""
    traces = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if base:
        return base.rstrip("/") + "/v1/traces"
    return _DEFAULT_ENDPOINT


def _timeout(environ: Mapping[str, str]) -> float:
    for name in _TIMEOUTS:
        text = environ.get(name, "").strip()
        if text:
            try:
                seconds = float(text) / 1000  # the specification says milliseconds
            except ValueError:
                raise ConfigurationError(
                    f"{name}={text!r} is not a number of milliseconds"
                ) from None
            if not math.isfinite(seconds):
                raise ConfigurationError(f"{name}={text!r}: give a finite number of ms")
            if seconds <= 0:
                raise ConfigurationError(f"{name}={text!r}: the timeout must be above 0")
            return seconds
    return _DEFAULT_TIMEOUT
