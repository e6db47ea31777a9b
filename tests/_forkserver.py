"""`planloom` commands as forks of one process that has already imported planloom.

Every `planloom` a test starts is a new process running the console script's `main()` with
its own argv, folder, environment and standard streams, and ends with its exit status, as
`subprocess.run` gives them. Starting Python and importing planloom costs about 0.25 s of
CPU a command and the suite runs over a thousand; forked from a process that has imported
every planloom module (as Android's zygote and Python's own forkserver start method do), a
command starts in a few milliseconds.

The server holds no thread, loop or open file when it forks; the child resets what a new
interpreter would have: signal dispositions, the environment (in place, so every
`os.environ` default argument sees it), the folder and argv; on exit it waits for non-daemon
threads and runs `atexit` as the interpreter does. What a fork cannot give is what Python
reads from the environment before any code runs (`PYTHON*`, the locale): a command whose
environment differs there from the server's runs as a real `planloom` process instead
(`run`).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import io
import json
import os
import pkgutil
import select
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

_HEADER = struct.Struct("!I")
_STARTUP = ("PYTHON", "LC_", "LANG")  # read by the interpreter before any code runs


def _preload() -> None:
    """Import every planloom module a command may use, and the libraries they import
    lazily, so that a child imports nothing."""
    for package in ("engine", "capabilities", "planners"):
        root = importlib.import_module(package)
        for module in pkgutil.walk_packages(root.__path__, f"{package}."):
            if module.name.endswith(".__main__") or module.name.startswith(
                ("engine.testing", "engine.pytest_plugin")
            ):
                continue
            importlib.import_module(module.name)
    for library in ("openai", "structlog", "networkx", "jsonschema", "rich.live", "mcp"):
        importlib.import_module(library)


def _recv_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    (size,) = _HEADER.unpack_from(data)
    body = bytearray(data[_HEADER.size :])
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ConnectionError("the request was cut short")
        body += chunk
    return json.loads(body), list(fds)


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _child(request: dict[str, Any], fds: list[int]) -> None:
    """Become `planloom ARGV`; never returns."""
    code = 1
    try:
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        if request.get("session"):
            os.setsid()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for name, soft, hard in request.get("rlimits", ()):
            import resource

            resource.setrlimit(getattr(resource, name), (soft, hard))
        sys.argv = list(request["argv"])
        sys.path[0] = os.path.dirname(sys.argv[0])  # a script's folder, as for the console script
        from engine.app import main

        try:
            code = _exit_code(SystemExit(main()))
        except SystemExit as exc:
            code = _exit_code(exc)
        except KeyboardInterrupt:
            traceback.print_exc()
            code = -signal.SIGINT
        except BaseException:
            traceback.print_exc()
            code = 1
        threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter at exit
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        if code < 0:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code & 0xFF)


def serve(path: str) -> None:
    """Listen on the Unix socket `path`; fork a `planloom` for each request."""
    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.data is None:
                conn, _ = listener.accept()
                try:
                    request, fds = _recv_request(conn)
                except (OSError, ValueError):  # a client that went away mid-request
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:  # the child keeps none of the server's files
                    for other in selector.get_map().values():
                        if other.data is not None:
                            os.close(other.fd)
                            other.data[1].close()
                    selector.close()
                    listener.close()
                    conn.close()
                    _child(request, fds)
                for fd in fds:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    conn.sendall(_HEADER.pack(pid))
                pidfd = os.pidfd_open(pid)
                selector.register(pidfd, selectors.EVENT_READ, (pid, conn))
            else:
                pid, conn = key.data
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                with conn, contextlib.suppress(OSError):  # a client gone at its timeout
                    conn.sendall(struct.pack("!i", os.waitstatus_to_exitcode(status)))


class ForkServer:
    """One server per test process, started on first use and stopped at exit."""

    def __init__(self, *, enabled: bool = True) -> None:
        self._enabled = enabled
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._path = ""
        self._environ: dict[str, str] = {}

    def _start(self, environ: dict[str, str]) -> None:
        folder = tempfile.mkdtemp(prefix="planloom-fork-")
        self._path = os.path.join(folder, "socket")
        self._environ = environ
        self._proc = subprocess.Popen(
            [sys.executable, __file__, self._path],
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        atexit.register(self._stop, self._proc, folder)
        assert self._proc.stdout is not None
        with self._proc.stdout:
            if self._proc.stdout.readline().strip() != "ready":
                raise RuntimeError("the planloom fork server did not start")

    @staticmethod
    def _stop(proc: subprocess.Popen[str], folder: str) -> None:
        proc.kill()
        proc.wait()
        shutil.rmtree(folder, ignore_errors=True)

    def fits(self, environ: dict[str, str]) -> bool:
        """Whether a fork runs a command with `environ` as a new interpreter would: what
        Python reads at startup is as the server had it (it starts with the first command's)."""

        def startup(env: dict[str, str]) -> dict[str, str]:
            return {k: v for k, v in env.items() if k.startswith(_STARTUP)}

        if not self._enabled:
            return False
        return not self._environ or startup(environ) == startup(self._environ)

    def _send(
        self,
        argv: Sequence[str],
        cwd: Path,
        environ: dict[str, str],
        streams: tuple[int, int, int],
        rlimits: Sequence[tuple[str, int, int]] = (),
        session: bool = False,
    ) -> tuple[socket.socket, int]:
        """Ask for a fork running `argv` with `streams` as its stdin, stdout and stderr: the
        connection its exit status will come on, and its pid."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start(environ)
        request = {
            "argv": list(argv),
            "cwd": str(cwd),
            "env": environ,
            "rlimits": list(rlimits),
            "session": session,
        }
        body = json.dumps(request).encode()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self._path)
            socket.send_fds(conn, [_HEADER.pack(len(body)) + body], list(streams))
            (pid,) = _HEADER.unpack(_recv_exactly(conn, _HEADER.size))
        except BaseException:
            conn.close()
            raise
        return conn, pid

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        environ: dict[str, str],
        timeout: float,
        rlimits: Sequence[tuple[str, int, int]] = (),
    ) -> subprocess.CompletedProcess[str]:
        """`subprocess.run(argv, capture_output=True, text=True, stdin=DEVNULL, timeout=)`."""
        with (
            tempfile.TemporaryFile() as out,
            tempfile.TemporaryFile() as err,
            open(os.devnull, "rb") as devnull,
        ):
            streams = (devnull.fileno(), out.fileno(), err.fileno())
            conn, pid = self._send(argv, cwd, environ, streams, rlimits)
            with conn:
                conn.settimeout(timeout)
                try:
                    (code,) = struct.unpack("!i", _recv_exactly(conn, 4))
                except TimeoutError:
                    os.kill(pid, signal.SIGKILL)
                    raise subprocess.TimeoutExpired(
                        list(argv), timeout, _read(out), _read(err)
                    ) from None
            return subprocess.CompletedProcess(list(argv), code, _read(out), _read(err))

    def start(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        environ: dict[str, str],
        stdout: int | IO[Any],
        stderr: int | IO[Any],
        text: bool = False,
        new_session: bool = False,
    ) -> Forked:
        """`subprocess.Popen(argv, stdin=DEVNULL, stdout=, stderr=, text=,
        start_new_session=)`: `stdout` and `stderr` are `subprocess.PIPE`,
        `subprocess.DEVNULL` or an open file."""
        opened: list[int] = []
        readers: list[IO[Any] | None] = []

        def stream(where: int | IO[Any]) -> int:
            if where == subprocess.PIPE:
                read_end, write_end = os.pipe()
                opened.append(write_end)
                readers.append(os.fdopen(read_end, "r" if text else "rb"))
                return write_end
            readers.append(None)
            if where == subprocess.DEVNULL:
                fd = os.open(os.devnull, os.O_WRONLY)
                opened.append(fd)
                return fd
            assert not isinstance(where, int), "a file object, PIPE or DEVNULL"
            return where.fileno()

        devnull = os.open(os.devnull, os.O_RDONLY)
        opened.append(devnull)
        try:
            streams = (devnull, stream(stdout), stream(stderr))
            conn, pid = self._send(argv, cwd, environ, streams, session=new_session)
        finally:
            for fd in opened:
                os.close(fd)
        return Forked(list(argv), conn, pid, readers[0], readers[1])


class Forked:
    """A forked command, with the part of `subprocess.Popen` tests use: `pid`, `args`,
    `returncode`, `stdout`/`stderr` (pipes, or None), `poll`, `wait`, `communicate`,
    `send_signal`, `terminate`, `kill`."""

    def __init__(
        self,
        args: list[str],
        conn: socket.socket,
        pid: int,
        stdout: IO[Any] | None,
        stderr: IO[Any] | None,
    ) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self.stdin = None
        self.stdout = stdout
        self.stderr = stderr
        self._conn = conn

    def _ended(self, data: bytes) -> int:
        (self.returncode,) = struct.unpack("!i", data)
        self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            ready, _, _ = select.select([self._conn], [], [], 0)
            if ready:
                return self._ended(_recv_exactly(self._conn, 4))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        self._conn.settimeout(timeout)
        try:
            return self._ended(_recv_exactly(self._conn, 4))
        except TimeoutError:
            raise subprocess.TimeoutExpired(self.args, timeout or 0) from None

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Read the pipes to their end and wait; the output of each (None where not piped)."""
        got: dict[int, Any] = {}
        pipes = {n: pipe for n, pipe in enumerate((self.stdout, self.stderr)) if pipe is not None}
        threads = [
            threading.Thread(target=lambda n=n, pipe=pipe: got.update({n: pipe.read()}))
            for n, pipe in pipes.items()
        ]
        for thread in threads:
            thread.daemon = True
            thread.start()
        end = None if timeout is None else time.monotonic() + timeout
        for thread in threads:
            thread.join(None if end is None else max(0.0, end - time.monotonic()))
            if thread.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(None if end is None else max(0.0, end - time.monotonic()))
        for pipe in pipes.values():
            pipe.close()
        return got.get(0), got.get(1)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *_: object) -> None:
        for pipe in (self.stdout, self.stderr):
            if pipe is not None:
                pipe.close()
        self.wait()


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the planloom fork server went away")
        data += chunk
    return data


def _read(file: Any) -> str:
    """The file's text as `subprocess.run(text=True)` reads a pipe: the locale's encoding,
    universal newlines."""
    file.seek(0)
    text = io.TextIOWrapper(file)
    try:
        return text.read()
    finally:
        text.detach()


if __name__ == "__main__":
    serve(sys.argv[1])
