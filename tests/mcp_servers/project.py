"""Recipe folders for the MCP tests: a copy of the notes server, seeded notes, the `planloom`
command run in the folder, and the notes server over HTTP on 127.0.0.1.

Every server a test starts carries a unique marker argument, so a test can assert from
/proc that none is left running once `planloom` has exited.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _procs import env, gone, pids_with, planloom

SERVER = Path(__file__).with_name("notes_server.py")
SEED = "release on friday\nlunch at noon\nrelease notes drafted\n"
RUN_KEYS = {"run_id", "status", "steps", "outputs", "usage"}


def marker() -> str:
    """A string unique to one test, to be found on a server's command line."""
    return f"mcp-notes-{uuid.uuid4().hex}"


def one_json(stdout: str) -> Any:
    """Parse stdout as exactly one JSON value (no banner, no trailing text)."""
    decoder = json.JSONDecoder()
    text = stdout.strip()
    assert text, "stdout is empty"
    value, end = decoder.raw_decode(text)
    assert text[end:].strip() == "", f"extra text after the JSON value: {text[end:]!r:.200}"
    return value


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout, proc.stdout


def locate(text: str, needle: str, *, after: str = "") -> tuple[int, int]:
    """1-based (line, column) of the first `needle` in `text` past the first `after`."""
    start = text.index(after) + len(after) if after else 0
    offset = text.index(needle, start)
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column


@dataclass
class Project:
    """A recipe folder, the notes server's `cwd`: `servers/notes_server.py` and `notes.txt`."""

    root: Path
    marker: str

    @property
    def command(self) -> str:
        """The notes server's `command:` as a YAML flow list, marker included."""
        return f"[python3, servers/notes_server.py, {self.marker}]"

    def notes(self) -> str:
        path = self.root / "notes.txt"
        return path.read_text(encoding="utf-8") if path.exists() else ""

    def write(self, text: str, name: str = "r.yaml") -> str:
        """Write a recipe (dedented, `{command}` filled in); the text as written."""
        body = textwrap.dedent(text).lstrip("\n").replace("{command}", self.command)
        (self.root / name).write_text(body, encoding="utf-8")
        return body

    def servers_alive(self) -> list[int]:
        return pids_with(self.marker)

    def planloom(
        self, *args: str | Path, environ: dict[str, str] | None = None, timeout: float = 90
    ) -> subprocess.CompletedProcess[str]:
        """`planloom ARGS` in the folder; no traceback, and no server outlives it."""
        proc = planloom(*args, cwd=self.root, environ=environ, timeout=timeout)
        no_traceback(proc)
        assert gone(self.servers_alive, within=5), (
            f"a server outlived planloom: {self.servers_alive()}\n{proc.stderr}"
        )
        return proc

    def run_json(
        self, *args: str | Path, environ: dict[str, str] | None = None
    ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
        """`planloom run ARGS --json` on a valid recipe: the process and its result object."""
        proc = self.planloom("run", *args, "--json", environ=environ)
        result = one_json(proc.stdout)
        assert isinstance(result, dict), result
        assert result.get("status") != "invalid", (result.get("errors"), proc.stderr)
        assert result.keys() >= RUN_KEYS, (result.keys(), proc.stderr)
        return proc, result

    def validate_json(
        self, recipe: str = "r.yaml"
    ) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
        """`planloom validate RECIPE --json`: the process and its diagnostics."""
        proc = self.planloom("validate", recipe, "--json")
        diagnostics = one_json(proc.stdout)
        assert isinstance(diagnostics, list), diagnostics
        return proc, diagnostics


def make_project(parent: Path) -> Project:
    """A recipe folder `parent/project` with the notes server copied in and notes seeded.

    The rest of `parent` is outside the server's folder, for tests that try to leave it.
    """
    root = parent / "project"
    (root / "servers").mkdir(parents=True)
    shutil.copy(SERVER, root / "servers" / SERVER.name)
    (root / "notes.txt").write_text(SEED, encoding="utf-8")
    return Project(root, marker())


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (at the time of asking)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class HTTPServer:
    """The notes server over streamable HTTP: its URL, folder and marker."""

    url: str
    port: int
    folder: Path
    marker: str

    def notes(self) -> str:
        path = self.folder / "notes.txt"
        return path.read_text(encoding="utf-8") if path.exists() else ""


@contextmanager
def http_server(folder: Path, startup: float = 20) -> Iterator[HTTPServer]:
    """Start the notes server on a free 127.0.0.1 port in `folder`; stop it on exit."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes.txt").write_text(SEED, encoding="utf-8")
    port = free_port()
    tag = marker()
    log = folder / "server.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(SERVER), "--http", str(port), tag],
            cwd=folder,
            env=env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + startup
        while True:
            assert process.poll() is None, log.read_text(errors="replace")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the HTTP notes server did not start"
                time.sleep(0.05)
        yield HTTPServer(f"http://127.0.0.1:{port}/mcp", port, folder, tag)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
