"""`planloom run --otel` exporting over OTLP/HTTP to a collector stand-in on 127.0.0.1: a
small HTTP server that decodes each payload with `opentelemetry-proto`, as a collector
would. The real command runs in a subprocess; tracing is configured as users configure it,
by `--otel` and the standard `OTEL_*` variables."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _procs import planloom
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from engine.testing import ChatRequest, FakeOpenAIServer, ScriptedModel

PLANLOOM = str(Path(sys.executable).parent / "planloom")
SECRET = "tok-9f8e7d6c5b4a3210"
TIMEOUT = 60


@dataclass
class Received:
    """What the stand-in was sent: each request's path and headers, and every span with
    the resource attributes of its batch."""

    paths: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    spans: list[tuple[dict[str, Any], Span]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def _attributes(items: Any) -> dict[str, Any]:
    return {item.key: _value(item.value) for item in items}


@pytest.fixture
def collector() -> Iterator[tuple[str, Received]]:
    """An OTLP/HTTP collector stand-in: its base URL, and what it received."""
    received = Received()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            received.paths.append(self.path)
            received.headers.append({k.lower(): v for k, v in self.headers.items()})
            received.bodies.append(body)
            for batch in request.resource_spans:
                resource = _attributes(batch.resource.attributes)
                for scope in batch.scope_spans:
                    received.spans.extend((resource, span) for span in scope.spans)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def _planloom(
    *args: str, cwd: Path, env: dict[str, str], timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "OPENAI_", "PLANLOOM_")) and k not in {"CI", "PYTHONPATH"}
    }
    return planloom(*args, cwd=cwd, environ={**base, **env}, timeout=timeout)


def _recipe(tmp_path: Path) -> Path:
    path = tmp_path / "traced.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            version: 1
            name: traced-cli
            inputs:
              name: {type: string}
            capabilities:
              fs: {root: ., read: true}
              shell: {allow: [echo], cwd: .}
            steps:
              - id: listing
                tool: fs.list
                params: {path: .}
              - id: hello
                tool: shell.run
                params: {argv: [echo, hello]}
              - id: missing
                tool: fs.read
                can_fail: true
                params: {path: "missing-${{ inputs.name }}.txt"}
              - id: after
                depends_on: [listing, hello]
                tool: fs.read
                params: {path: traced.yaml}
            """
        ),
        encoding="utf-8",
    )
    return path


def test_run_otel_exports_its_span_tree_over_otlp_http(
    tmp_path: Path, collector: tuple[str, Received]
) -> None:
    url, received = collector
    recipe = _recipe(tmp_path)
    proc = _planloom(
        "run",
        str(recipe),
        "--otel",
        "--yes",
        "-i",
        f"name={SECRET}",
        cwd=tmp_path,
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": url,
            "OTEL_EXPORTER_OTLP_HEADERS": "x-collector-key=abc123",
            "DEPLOY_TOKEN": SECRET,  # a secret-looking variable: its value is redacted
        },
    )
    assert proc.returncode == 0, proc.stderr
    assert "could not be exported" not in proc.stderr
    assert received.paths
    assert set(received.paths) == {"/v1/traces"}
    assert all(h.get("x-collector-key") == "abc123" for h in received.headers)
    assert all(h.get("content-type") == "application/x-protobuf" for h in received.headers)

    every = [span for _, span in received.spans]
    assert len(every) == 13  # a run, and four steps of one attempt and one tool call each
    spans = {span.name: span for span in every if span.name.startswith(("run ", "step "))}
    assert {resource.get("service.name") for resource, _ in received.spans} == {"planloom"}
    run = spans["run traced-cli"]
    assert run.parent_span_id == b""
    assert _attributes(run.attributes)["planloom.run.status"] == "succeeded"
    by_id = {span.span_id: span for span in every}
    for step in ("listing", "hello", "missing", "after"):
        span = spans[f"step {step}"]
        assert span.parent_span_id == run.span_id
        assert span.trace_id == run.trace_id
        [attempt] = [s for s in every if s.parent_span_id == span.span_id]
        assert attempt.name == "attempt 1"
        [tool] = [s for s in every if s.parent_span_id == attempt.span_id]
        assert tool.name.startswith("execute_tool ")
        assert _attributes(tool.attributes)["gen_ai.operation.name"] == "execute_tool"
    tools = sorted(s.name for s in every if s.name.startswith("execute_tool "))
    assert tools == [
        "execute_tool fs.list",
        "execute_tool fs.read",
        "execute_tool fs.read",
        "execute_tool shell.run",
    ]
    # `after` started once both `listing` and `hello` had ended.
    after = spans["step after"]
    for first in ("listing", "hello"):
        assert spans[f"step {first}"].end_time_unix_nano <= after.start_time_unix_nano

    missing = spans["step missing"]
    assert _attributes(missing.attributes)["planloom.step.status"] == "failed_acceptable"
    [attempt] = [s for s in every if s.parent_span_id == missing.span_id]
    [tool] = [s for s in every if s.parent_span_id == attempt.span_id]
    for failed in (attempt, tool):
        assert failed.status.code == Status.STATUS_CODE_ERROR
        assert "no such file 'missing-[REDACTED].txt'" in failed.status.message
    assert by_id[tool.parent_span_id] is attempt
    assert not any(SECRET.encode() in body for body in received.bodies)


@pytest.mark.slow
def test_an_unreachable_collector_costs_at_most_the_export_timeout_and_is_said(
    tmp_path: Path,
) -> None:
    recipe = _recipe(tmp_path)
    started = time.monotonic()
    proc = _planloom(
        "run",
        str(recipe),
        "--yes",
        "-i",
        "name=x",
        cwd=tmp_path,
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",  # discard: nothing listens
            "OTEL_EXPORTER_OTLP_TIMEOUT": "1500",
        },
    )
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr  # the run is what the exit code says
    assert "could not be exported to http://127.0.0.1:9/v1/traces" in proc.stderr
    assert "Connection refused" in proc.stderr or "refused" in proc.stderr.lower()
    assert "Traceback" not in proc.stderr
    assert took < 15, took


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env", "flag", "message"),
    [
        (
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            True,
            "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: planloom exports traces over OTLP/HTTP",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
                "OTEL_EXPORTER_OTLP_TIMEOUT": "soon",
            },
            False,
            "OTEL_EXPORTER_OTLP_TIMEOUT='soon' is not a number of milliseconds",
        ),
    ],
)
def test_a_wrong_otel_setting_is_refused_before_the_run_starts(
    tmp_path: Path, env: dict[str, str], flag: bool, message: str
) -> None:
    recipe = _recipe(tmp_path)
    store = tmp_path / "runs.db"
    args = ["run", str(recipe), "-i", "name=x", "--store", str(store)]
    proc = _planloom(*args, *(["--otel"] if flag else []), cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    listed = _planloom("runs", "--store", str(store), cwd=tmp_path, env={})
    assert "traced-cli" not in listed.stdout  # nothing was begun


def test_otel_sdk_disabled_turns_tracing_off(
    tmp_path: Path, collector: tuple[str, Received]
) -> None:
    url, received = collector
    recipe = _recipe(tmp_path)
    proc = _planloom(
        "run",
        str(recipe),
        "--otel",
        "--yes",
        "-i",
        "name=x",
        cwd=tmp_path,
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_SDK_DISABLED": "true"},
    )
    assert proc.returncode == 0, proc.stderr
    assert received.spans == []


def _python(code: str, *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PLANLOOM_"))}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env={**base, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


_TRACING_MODULES = """
import sys
from engine.app.main import main
code = main(sys.argv[1:])
loaded = sorted(
    name for name in sys.modules
    if name.startswith(("opentelemetry.sdk", "opentelemetry.exporter", "engine.tracing"))
)
print(code, ",".join(loaded) or "-")
"""


@pytest.mark.slow
def test_off_a_run_loads_no_tracing_code_at_all(tmp_path: Path) -> None:
    """Without `--otel` or an endpoint, nothing of tracing is imported or subscribed:
    the run's events go where they went before (`bench/overhead.py` times it)."""
    recipe = _recipe(tmp_path)
    code = _TRACING_MODULES.replace(
        "sys.argv[1:]", repr(["run", str(recipe), "--yes", "-i", "name=x"])
    )
    proc = _python(code, cwd=tmp_path, env={})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-2:] == ["0", "-"], proc.stdout[-500:]


# Imports of OpenTelemetry's SDK and exporters fail, as where `planloom[otel]` is not
# installed (the API stays: planloom's core depends on it).
_NO_SDK = """
import sys

class NoSDK:
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("opentelemetry.sdk", "opentelemetry.exporter")):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoSDK())
from engine.app.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_without_the_otel_extra_otel_is_refused_saying_what_to_install(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path)
    args = ["run", str(recipe), "--yes", "-i", "name=x"]
    explicit = _python(
        _NO_SDK.replace("sys.argv[1:]", repr([*args, "--otel"])), cwd=tmp_path, env={}
    )
    assert explicit.returncode == 2, explicit.stderr
    assert "--otel: tracing needs OpenTelemetry's SDK and OTLP exporter" in explicit.stderr
    assert "pip install 'planloom[otel]'" in explicit.stderr
    assert "Traceback" not in explicit.stderr
    # Set in the environment only (for other programs, maybe): said, and the run goes on.
    implicit = _python(
        _NO_SDK.replace("sys.argv[1:]", repr(args)),
        cwd=tmp_path,
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
    )
    assert implicit.returncode == 0, implicit.stderr
    assert "running without traces (pip install 'planloom[otel]')" in implicit.stderr
    assert "run succeeded" in implicit.stderr


FIRST_PLAN = {
    "goal": "report on the notes",
    "steps": [
        {"id": "notes", "tool": "fs.read", "params": {"path": "notes.txt"}},
        {"id": "extra", "tool": "fs.read", "params": {"path": "missing.txt"}},
    ],
}
SECOND_PLAN = {
    "goal": "report on the notes",
    "steps": [
        {"id": "notes", "tool": "fs.read", "params": {"path": "notes.txt"}},
        {"id": "other", "tool": "fs.read", "params": {"path": "other.txt"}},
    ],
}


def _planner(request: ChatRequest) -> dict[str, object]:
    if "The previous plan failed" in request.last_user_text():
        return SECOND_PLAN
    return FIRST_PLAN


@pytest.mark.slow
def test_a_goal_session_is_one_trace_with_its_planning_and_replanning(
    tmp_path: Path, collector: tuple[str, Received]
) -> None:
    url, received = collector
    (tmp_path / "notes.txt").write_text("notes\n", encoding="utf-8")
    (tmp_path / "other.txt").write_text("other\n", encoding="utf-8")
    (tmp_path / "caps.yaml").write_text(
        "capabilities: {fs: {root: ., read: true}}\nreplan: {max: 1}\n", encoding="utf-8"
    )
    with FakeOpenAIServer(ScriptedModel(_planner)) as model:
        model_port = int(model.base_url.split(":")[2].split("/")[0])
        proc = _planloom(
            "plan",
            "report on the notes",
            "--capabilities",
            "caps.yaml",
            "--base-url",
            model.base_url,
            "--model",
            "m",
            "--otel",
            "--log-file",
            "events.jsonl",
            cwd=tmp_path,
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": url},
        )
    assert proc.returncode == 0, proc.stderr
    every = [span for _, span in received.spans]
    by_id = {span.span_id: span for span in every}

    def parent(span: Span) -> Span | None:
        return by_id.get(span.parent_span_id)

    [session] = [s for s in every if s.name == "session"]
    assert session.parent_span_id == b""
    assert _attributes(session.attributes)["planloom.goal"] == "report on the notes"
    assert _attributes(session.attributes)["planloom.run.status"] == "succeeded"
    assert len({s.trace_id for s in every}) == 1
    children = sorted(
        (s for s in every if s.parent_span_id == session.span_id),
        key=lambda s: s.start_time_unix_nano,
    )
    assert [s.name for s in children] == ["plan", "run plan", "replan", "run plan"]
    plan, first, replan, second = children
    assert _attributes(plan.attributes)["planloom.plan.outcome"] == "accepted"
    assert first.status.code == Status.STATUS_CODE_ERROR  # `extra` failed: replanned
    assert _attributes(second.attributes)["planloom.run.status"] == "succeeded"
    for planning in (plan, replan):
        [chat] = [s for s in every if parent(s) is planning]
        assert chat.name == "chat m"
        attributes = _attributes(chat.attributes)
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.request.model"] == "m"
        assert attributes["gen_ai.usage.input_tokens"] > 0
        assert attributes["server.address"] == "127.0.0.1"  # from --base-url, host only
        assert attributes["server.port"] == model_port
    steps = {s.name for s in every if parent(s) is second}
    assert steps == {"step other"}  # `notes` was kept: it did not run again
    # The log file has the session's events too.
    lines = (tmp_path / "events.jsonl").read_text(encoding="utf-8").splitlines()
    kinds = [json.loads(line)["event"] for line in lines]
    assert kinds[:2] == ["session.started", "plan.started"]
    assert kinds.count("plan.finished") == 2
    assert kinds[-1] == "session.finished"
