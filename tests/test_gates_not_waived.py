"""Gates that must not be waived.

- `http.request` with a body is a side effect whatever its method: a GET or HEAD that
  sends `json` or `body` is gated like a POST; a GET without a body is not.
- A fallback's gate is its own: `confirm: never` on a step waives the gate of the step's
  own action only; a fallback action with side effects is gated as under `confirm: auto`.

Through the real `planloom` console script in a subprocess, stdin on /dev/null (no terminal,
so every gate fails closed without `--yes`), with a real HTTP server on 127.0.0.1 and real
files.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _procs import planloom


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers 200 to everything and remembers what it received."""

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        server: _Server = self.server  # type: ignore[assignment]  # ours, see _Server
        with server.lock:
            server.received.append((self.command, self.path, body))
        payload = b"{}" if self.command != "HEAD" else b""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_HEAD = do_POST = _handle

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Recorder)
        self.lock = threading.Lock()
        self.received: list[tuple[str, str, bytes]] = []


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server()
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        thread.join(5)
        httpd.server_close()


def http_recipe(port: int, steps: str) -> str:
    return (
        "version: 1\nname: bodies\non_failure: continue\ncapabilities:\n"
        f"  http: {{allow: ['127.0.0.1'], ports: [{port}], allow_http: true,"
        " private_networks: ['127.0.0.0/8']}\n"
        "steps:\n" + steps
    )


def run_json(tmp_path: Path, text: str, *args: str) -> tuple[int, dict[str, Any], str]:
    (tmp_path / "job.yaml").write_text(text, encoding="utf-8")
    done = planloom("run", "job.yaml", "--json", *args, cwd=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


# -- item 11: a body is a side effect, whatever the method ------------------------------------


@pytest.mark.parametrize(
    ("method", "body"),
    [
        ("GET", "json: {drop: tables}"),
        ("GET", "body: 'delete=all'"),
        ("GET", "body: ''"),  # an empty body is still a body sent
        ("HEAD", "json: [1, 2]"),
    ],
)
def test_a_get_or_head_with_a_body_is_gated(
    tmp_path: Path, server: _Server, method: str, body: str
) -> None:
    port = server.server_address[1]
    steps = (
        "  - id: peek\n    tool: http.request\n"
        f"    params: {{url: 'http://127.0.0.1:{port}/plain'}}\n"
        "  - id: sneak\n    tool: http.request\n"
        f"    params: {{url: 'http://127.0.0.1:{port}/body', method: {method}, {body}}}\n"
    )
    code, result, stderr = run_json(tmp_path, http_recipe(port, steps))

    assert code == 1, stderr
    assert result["steps"]["peek"]["status"] == "succeeded"  # a GET without a body: ungated
    assert result["steps"]["sneak"]["status"] == "denied"
    assert "no terminal to ask for approval" in result["steps"]["sneak"]["error"]
    assert server.received == [("GET", "/plain", b"")]  # the body never left
    assert [(d["step_id"], d["approved"], d["by"]) for d in result["approvals"]] == [
        ("sneak", False, "fail-closed")
    ]


def test_a_get_with_a_body_runs_when_approved(tmp_path: Path, server: _Server) -> None:
    port = server.server_address[1]
    steps = (
        "  - id: send\n    tool: http.request\n"
        f"    params: {{url: 'http://127.0.0.1:{port}/q', json: {{q: 1}}}}\n"
    )
    code, result, stderr = run_json(tmp_path, http_recipe(port, steps), "--yes")

    assert code == 0, stderr
    assert server.received == [("GET", "/q", b'{"q": 1}')]
    assert [(d["step_id"], d["by"]) for d in result["approvals"]] == [("send", "--yes")]


# -- item 15: a fallback's gate is its own ------------------------------------------------------

FALLBACKS = {
    "fs.write": "{tool: fs.write, params: {path: written.txt, content: oops}}",
    "shell.run": "{tool: shell.run, params: {argv: [touch, written.txt]}}",
}


def fallback_recipe(fallback: str, confirm: str = "never") -> str:
    return f"""\
version: 1
name: fallbacks
capabilities:
  fs: {{root: work, read: true, write: true}}
  shell: {{allow: [touch], cwd: work}}
steps:
  - id: look
    tool: fs.read
    params: {{path: missing.txt}}
    confirm: {confirm}
    fallback: {fallback}
"""


@pytest.mark.parametrize("tool", sorted(FALLBACKS))
def test_confirm_never_does_not_waive_the_fallbacks_gate(tmp_path: Path, tool: str) -> None:
    (tmp_path / "work").mkdir()
    code, result, stderr = run_json(tmp_path, fallback_recipe(FALLBACKS[tool]))

    assert not (tmp_path / "work" / "written.txt").exists()
    assert code == 1, stderr
    step = result["steps"]["look"]
    assert step["status"] == "failed"
    assert "no such file 'missing.txt'" in step["error"]
    assert "fallback failed: denied by approver" in step["error"]
    assert [(d["step_id"], d["action"], d["approved"], d["by"]) for d in result["approvals"]] == [
        ("look", tool, False, "fail-closed")
    ]


@pytest.mark.parametrize("tool", sorted(FALLBACKS))
def test_an_approved_fallback_runs(tmp_path: Path, tool: str) -> None:
    (tmp_path / "work").mkdir()
    code, result, stderr = run_json(tmp_path, fallback_recipe(FALLBACKS[tool]), "--yes")

    assert code == 0, stderr
    assert result["steps"]["look"]["status"] == "fallback"
    assert (tmp_path / "work" / "written.txt").exists()
    assert [(d["step_id"], d["by"]) for d in result["approvals"]] == [("look", "--yes")]


def test_confirm_always_carries_to_a_read_only_fallback(tmp_path: Path) -> None:
    """`always` is stricter than the fallback's own `auto`: it is kept."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "other.txt").write_text("there", encoding="utf-8")
    fallback = "{tool: fs.read, params: {path: other.txt}}"
    code, result, stderr = run_json(tmp_path, fallback_recipe(fallback, confirm="always"))

    assert code == 1, stderr
    assert [(d["action"], d["approved"]) for d in result["approvals"]] == [
        ("fs.read", False),
        ("fs.read", False),
    ]
