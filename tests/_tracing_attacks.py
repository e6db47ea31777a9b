"""Helpers for the attacks on tracing: an OTLP/HTTP collector stand-in that fails the way
collectors do, the `planloom` command run against it, a run made in this process with its
spans in memory, and the invariants every exported span tree must keep.

The stand-in decodes each payload with `opentelemetry-proto`, as a collector would, and can
refuse (500, 404), answer slowly, or accept the connection and never answer (`hang`: it is
released when the stand-in closes, so a test never waits on it).
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _procs
from _procs import PLANLOOM, TIMEOUT, env
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from capabilities import default_registry
from engine.approval import ApproveAll
from engine.events import EventBus
from engine.redaction import Secrets
from engine.results import RunResult
from engine.testing import Fault, ScriptedTools, run_recipe_text
from engine.tracing import follow

__all__ = [
    "Collector",
    "Running",
    "attributes",
    "collector",
    "forms",
    "one_json",
    "planloom",
    "run_in_process",
    "start",
    "tree_problems",
]


# -- the collector stand-in ------------------------------------------------------------------


@dataclass
class Collector:
    """What the stand-in was sent, and how it answers.

    `mode`: `ok` (200), `500`, `404`, `500-then-ok` (the first request 500, then 200),
    `hang` (reads the request, never answers). `delay`: seconds before each answer.
    Spans are kept only from requests answered 200, as a collector keeps them.
    """

    url: str = ""
    mode: str = "ok"
    delay: float = 0.0
    requests: int = 0
    paths: list[str] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def status_for(self, number: int) -> int | None:
        if self.mode == "hang":
            return None
        if self.mode == "500-then-ok":
            return 500 if number == 1 else 200
        return {"500": 500, "404": 404}.get(self.mode, 200)

    def raw(self) -> bytes:
        """Every accepted payload, as sent: to grep for what must not be there."""
        with self.lock:
            return b"".join(self.bodies)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def attributes(items: Any) -> dict[str, Any]:
    """A span's (or resource's) attributes as a plain dict."""
    return {item.key: _value(item.value) for item in items}


@contextlib.contextmanager
def collector(mode: str = "ok", delay: float = 0.0) -> Iterator[Collector]:
    """An OTLP/HTTP collector stand-in on 127.0.0.1 (see `Collector`)."""
    received = Collector(mode=mode, delay=delay)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with received.lock:
                received.requests += 1
                number = received.requests
                received.paths.append(self.path)
            status = received.status_for(number)
            if status is None:  # accepted, and never answered
                received.released.wait(TIMEOUT)
                return
            if received.delay:
                received.released.wait(received.delay)
            if status == 200:
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with received.lock:
                    received.bodies.append(body)
                    for batch in request.resource_spans:
                        resource = attributes(batch.resource.attributes)
                        for scope in batch.scope_spans:
                            for span in scope.spans:
                                received.spans.append(span)
                                received.resources.append(resource)
            with contextlib.suppress(OSError):  # the client gave up on us: nothing to tell
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    received.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield received
    finally:
        received.released.set()  # a hanging or slow answer ends now
        server.shutdown()
        server.server_close()
        thread.join(TIMEOUT)


# -- the command -----------------------------------------------------------------------------


def planloom(
    *args: str | Path, cwd: Path, timeout: float = TIMEOUT, **environ: str
) -> subprocess.CompletedProcess[str]:
    """`planloom ARGS` in a clean environment (no OTEL_, OPENAI_, PLANLOOM_ variables)
    plus `environ`; no stdin. `.took` is its wall time in seconds."""
    started = time.monotonic()
    proc = _procs.planloom(*args, cwd=cwd, environ=env(**environ), timeout=timeout)
    proc.took = time.monotonic() - started  # type: ignore[attr-defined]
    return proc


@dataclass
class Running:
    """A `planloom` process being watched: its stderr lines as they come."""

    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    def wait_for(self, *needles: str, within: float = TIMEOUT) -> str:
        """The first stderr line holding every needle; fails the test past `within`."""
        end = time.monotonic() + within
        while time.monotonic() < end:
            for line in list(self.lines):
                if all(needle in line for needle in needles):
                    return line
            if self.proc.poll() is not None and self.reader is not None:
                self.reader.join(1)
                for line in list(self.lines):
                    if all(needle in line for needle in needles):
                        return line
                break
            time.sleep(0.02)
        raise AssertionError(f"no stderr line with {needles!r}; stderr:\n{''.join(self.lines)}")

    def finish(self, timeout: float = TIMEOUT) -> tuple[int, str, str]:
        """Wait for the end: exit code, stdout, stderr."""
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()
        code = self.proc.wait(timeout)
        if self.reader is not None:
            self.reader.join(timeout)
        self.proc.stdout.close()
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return code, out, "".join(self.lines)


def start(*args: str | Path, cwd: Path, **environ: str) -> Running:
    """Start `planloom ARGS` (clean environment plus `environ`), its stderr read as it
    comes so a test can act on what it says."""
    proc = subprocess.Popen(
        [PLANLOOM, *map(str, args)],
        cwd=cwd,
        env=env(**environ),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    running = Running(proc)

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            running.lines.append(line)

    running.reader = threading.Thread(target=read, daemon=True)
    running.reader.start()
    return running


def one_json(stdout: str) -> dict[str, Any]:
    """The one JSON object `--json` prints; fails if stdout holds anything else."""
    assert stdout.strip(), "nothing on stdout: --json must print one JSON object"
    try:
        value = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"stdout is not one JSON object ({exc}):\n{stdout[:2000]}") from None
    assert isinstance(value, dict), stdout[:500]
    return value


def forms(secret: str) -> list[bytes]:
    """A secret as text, hex and base64: each must be absent from what leaves the run."""
    raw = secret.encode()
    return [raw, raw.hex().encode(), base64.b64encode(raw).rstrip(b"=")]


# -- span trees ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Node:
    name: str
    span_id: bytes
    parent_id: bytes
    trace_id: bytes
    start: int
    end: int


def _nodes(spans: list[Span] | list[ReadableSpan]) -> list[_Node]:
    nodes = []
    for span in spans:
        if isinstance(span, ReadableSpan):
            assert span.context is not None
            nodes.append(
                _Node(
                    span.name,
                    span.context.span_id.to_bytes(8, "big"),
                    span.parent.span_id.to_bytes(8, "big") if span.parent else b"",
                    span.context.trace_id.to_bytes(16, "big"),
                    span.start_time or 0,
                    span.end_time or 0,
                )
            )
        else:
            nodes.append(
                _Node(
                    span.name,
                    span.span_id,
                    span.parent_span_id,
                    span.trace_id,
                    span.start_time_unix_nano,
                    span.end_time_unix_nano,
                )
            )
    return nodes


def tree_problems(spans: list[Span] | list[ReadableSpan]) -> list[str]:
    """What is wrong with a command's spans as one tree: more than one trace or root, a
    span ending before it starts, a parent missing, a child outside its parent's time, a
    root that is not the last to end."""
    nodes = _nodes(spans)
    if not nodes:
        return ["no spans"]
    problems = []
    by_id = {node.span_id: node for node in nodes}
    traces = {node.trace_id for node in nodes}
    if len(traces) != 1:
        problems.append(f"{len(traces)} traces, not one")
    roots = [node for node in nodes if not node.parent_id]
    if len(roots) != 1:
        problems.append(f"{len(roots)} roots: {sorted(n.name for n in roots)}")
    for node in nodes:
        if node.end < node.start:
            problems.append(f"'{node.name}' ends before it starts")
        if not node.parent_id:
            continue
        parent = by_id.get(node.parent_id)
        if parent is None:
            problems.append(f"'{node.name}': its parent span never arrived")
            continue
        if node.start < parent.start:
            problems.append(f"'{node.name}' starts before its parent '{parent.name}'")
        if node.end > parent.end:
            problems.append(f"'{node.name}' ends after its parent '{parent.name}'")
    if len(roots) == 1 and roots[0].end != max(node.end for node in nodes):
        problems.append(f"the root '{roots[0].name}' is not the last span to end")
    return problems


# -- a run in this process -------------------------------------------------------------------


def run_in_process(
    recipe: dict[str, Any],
    base_dir: Path,
    *,
    model: Callable[[Any], Any] | None = None,
    faults: tuple[Fault, ...] = (),
    scripts: dict[str, tuple[Any, ...]] | None = None,
    secrets: tuple[str, ...] = (),
) -> tuple[RunResult, list[ReadableSpan]]:
    """Run `recipe` (scripted `test.run` tools, a scripted model behind a fake endpoint)
    with its spans made as the `planloom` command makes them (`follow`), into memory."""
    registry = default_registry()
    tools = ScriptedTools(registry)
    for key, behaviours in (scripts or {}).items():
        tools.script(key, *behaviours)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    bus = EventBus("r")
    follow(bus, provider.get_tracer("attack"))
    result = run_recipe_text(
        json.dumps(recipe),
        registry,
        base_dir=base_dir,
        approver=ApproveAll(),
        model=model or (lambda request: "done"),
        faults=faults,
        events=bus,
        secrets=Secrets(secrets),
    )
    provider.shutdown()
    return result, list(memory.get_finished_spans())
