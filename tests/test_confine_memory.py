"""`max_memory` is a memory cgroup's limit, not an address-space one, where there is a
memory controller: Node's WebAssembly (which reserves ~10 GiB of address space, and which
`fetch` uses) runs under the default limits, a program that fills more than `max_memory`
with real pages is killed by the kernel and the step says it went over max_memory, and
the engine goes on. Without a memory controller these tests skip: `max_memory` is then
RLIMIT_AS, as the layer report says.
"""

from __future__ import annotations

import asyncio
import http.server
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _procs import run_json

from capabilities import shell
from capabilities.confine.scratch import memory_cgroup_base
from capabilities.shell import ShellGrant, ShellParams, ShellResult
from engine.capability import CallContext
from engine.errors import StepFailed

PYTHON = os.path.realpath(sys.executable)
_LAYERS = shell.confinement_report()
pytestmark = pytest.mark.skipif(
    not _LAYERS.get("memory_cgroup", "").startswith("active"),
    reason=f"no memory cgroup here: {_LAYERS.get('memory_cgroup')}",
)
_NODE = pytest.mark.skipif(
    shutil.which("node") is None, reason="node is not installed (apt-get install nodejs npm)"
)
# A module with one page of linear memory: instantiating it reserves V8's wasm cage.
_WASM = (
    "const bytes = new Uint8Array([0,97,115,109,1,0,0,0,5,3,1,0,1]);\n"
    "const { instance } = await WebAssembly.instantiate(bytes);\n"
    "console.log('wasm', instance instanceof WebAssembly.Instance);\n"
)
_FILL = "import sys; b = bytearray(int(sys.argv[1]) << 20); print('filled', len(b) >> 20)\n"


def _run(folder: Path, argv: list[str], **grant: Any) -> ShellResult:
    ctx = CallContext(grant=ShellGrant(cwd=".", **grant), base_dir=folder, timeout=30.0)
    return asyncio.run(shell.run(ShellParams(argv=argv), ctx))


def _ours() -> list[str]:
    base, _ = memory_cgroup_base()
    assert base is not None
    return [name for name in os.listdir(base) if name.startswith(f"planloom-{os.getpid()}-")]


@pytest.fixture
def server() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 answering every GET with `hello from the host`."""

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"hello from the host"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


def test_the_report_says_the_memory_cgroup_holds_max_memory_and_rlimit_as_is_off() -> None:
    assert _LAYERS["memory_cgroup"].startswith("active (max 2048 MiB")
    assert "as=" not in _LAYERS["rlimits"]
    assert "fsize=" in _LAYERS["rlimits"]


@_NODE
def test_node_instantiates_webassembly_under_the_default_limits(tmp_path: Path) -> None:
    (tmp_path / "wasm.mjs").write_text(_WASM)
    result = _run(tmp_path, ["node", "wasm.mjs"], allow=["node"])
    assert result.stdout == "wasm true\n", result.stderr
    assert result.confinement["memory_cgroup"].startswith("active")


@_NODE
def test_node_fetches_from_a_loopback_server_with_the_network_granted(
    tmp_path: Path, server: str
) -> None:
    # fetch (undici) parses HTTP with WebAssembly: under RLIMIT_AS it died with
    # "WebAssembly.instantiate(): Out of memory" before connecting.
    script = f"const r = await fetch({server!r});\nconsole.log(r.status, await r.text());\n"
    (tmp_path / "get.mjs").write_text(script)
    result = _run(tmp_path, ["node", "get.mjs"], allow=["node"], network=True)
    assert result.stdout == "200 hello from the host\n", result.stderr


def test_a_program_over_max_memory_is_killed_and_the_step_says_so(tmp_path: Path) -> None:
    (tmp_path / "fill.py").write_text(_FILL)
    grant: dict[str, Any] = {"allow": [PYTHON], "max_memory": 64 << 20}
    with pytest.raises(StepFailed, match=r"killed: it went over max_memory \(64 MiB\)"):
        _run(tmp_path, [PYTHON, "fill.py", "256"], **grant)
    assert _run(tmp_path, [PYTHON, "fill.py", "16"], **grant).stdout == "filled 16\n"
    assert _ours() == [], "a call's memory cgroup was left behind"


@pytest.mark.slow
def test_a_run_goes_on_after_a_step_went_over_max_memory(tmp_path: Path) -> None:
    """Through `planloom run` (the resident launcher and its spares): the step over the
    limit fails saying so, the others run, in cgroups of their own."""
    (tmp_path / "fill.py").write_text(_FILL)
    (tmp_path / "r.yaml").write_text(
        "version: 1\n"
        f"capabilities: {{shell: {{allow: [python3], max_memory: {64 << 20}}}}}\n"
        "steps:\n"
        "  - {id: small, tool: shell.run, params: {argv: [python3, fill.py, '8']}}\n"
        "  - id: big\n"
        "    tool: shell.run\n"
        "    params: {argv: [python3, fill.py, '256']}\n"
        "    depends_on: [small]\n"
        "    can_fail: true\n"
        "  - id: after\n"
        "    tool: shell.run\n"
        "    params: {argv: [python3, fill.py, '8']}\n"
        "    depends_on: [big]\n"
    )
    proc, result = run_json("r.yaml", tmp_path)
    steps = result["steps"]
    assert steps["big"]["status"] == "failed_acceptable", proc.stderr
    assert "'python3' was killed: it went over max_memory (64 MiB)" in steps["big"]["error"]
    assert steps["small"]["output"]["stdout"] == "filled 8\n"
    assert steps["after"]["output"]["stdout"] == "filled 8\n"
