"""Helpers for tests that run processes: the `planloom` console script in a subprocess
with a clean environment, and looking for processes in /proc, for tests that assert
nothing is left running.

Zombies count as gone: PID 1 on test machines may not reap orphans.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from _forkserver import Forked, ForkServer

PLANLOOM = str(Path(sys.executable).parent / "planloom")
_FORKS = ForkServer(enabled=os.environ.get("PLANLOOM_TESTS_FORK", "1") != "0")
TIMEOUT = 60  # seconds; generous for a loaded machine, a hang still fails the test


def stat_fields(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (the state is the first).

    Raises:
        OSError: there is no such process (any more).
    """
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie counts as dead)."""
    try:
        return stat_fields(pid)[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return False


def cpu_seconds(pid: int) -> float:
    """The CPU time process `pid` has used (user and system), in seconds."""
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pids_with(marker: str, *, whole_argument: bool = False) -> list[int]:
    """Live processes whose command line holds `marker` (as one argument, if asked)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # it ended while we looked
            continue
        hit = marker.encode() in (cmdline.split(b"\0") if whole_argument else cmdline)
        if hit and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def gone(check: Callable[[], object], within: float = 3.0) -> bool:
    """Poll `check()` until it is false, for at most `within` seconds (SIGKILL is async)."""
    end = time.monotonic() + within
    while check():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def until(check: Callable[[], object], within: float, what: str) -> None:
    """Poll `check()` until it is true, for at most `within` seconds, then fail naming `what`."""
    end = time.monotonic() + within
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {within:g} s waiting for {what}")
        time.sleep(0.02)


async def until_async(check: Callable[[], object], within: float, what: str) -> None:
    """`until` inside a running event loop: polls without blocking it."""
    end = time.monotonic() + within
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {within:g} s waiting for {what}")
        await asyncio.sleep(0.02)


def marker_seconds(whole: int) -> str:
    """A sleep duration that doubles as a unique marker on the command line."""
    return f"{whole}.{uuid.uuid4().int % 10**8:08d}"


_NOISE = {"CI", "PYTHONPATH", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE"}


def env(**extra: str) -> dict[str, str]:
    """This environment without model settings (and CI, path and colour noise), plus
    `extra`."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in _NOISE and not k.startswith(("OPENAI_", "PLANLOOM_", "OTEL_"))
    }
    clean.update(extra)
    return clean


def planloom(
    *args: str | Path,
    cwd: Path,
    environ: dict[str, str] | None = None,
    timeout: float = TIMEOUT,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `planloom ARGS` with no stdin; `subprocess.TimeoutExpired` past `timeout`.

    The command is a fork of a process that has imported planloom (tests/_forkserver.py):
    the same `main()`, argv, folder, environment, streams and exit status, without starting
    Python again. With `preexec_fn`, an environment Python reads at startup, or
    PLANLOOM_TESTS_FORK=0 in the tests' environment, it is a new `planloom` process.
    """
    environ = environ if environ is not None else env()
    argv = [PLANLOOM, *map(str, args)]
    if preexec_fn is None and _FORKS.fits(environ):
        return _FORKS.run(argv, cwd=cwd, environ=environ, timeout=timeout)
    return subprocess.run(
        argv,
        cwd=cwd,
        env=environ,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        preexec_fn=preexec_fn,
    )


def start(
    *args: str | Path, cwd: Path, new_session: bool = False
) -> subprocess.Popen[str] | Forked:
    """Start `planloom ARGS` with no stdin and piped output, for a test to watch it run (a
    fork, as `planloom()`; `Forked` has what tests use of `Popen`)."""
    argv = [PLANLOOM, *map(str, args)]
    environ = env()
    if _FORKS.fits(environ):
        return _FORKS.start(
            argv, cwd=cwd, environ=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, new_session=new_session,
        )  # fmt: skip
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=environ,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
    )


def background(
    *args: str | Path,
    cwd: Path,
    environ: dict[str, str],
    stdout: IO[bytes],
    stderr: IO[bytes],
    fork: bool = True,
) -> subprocess.Popen[bytes] | Forked:
    """Start `planloom ARGS` with no stdin, its output to the files `stdout` and `stderr`
    (a fork when the environment allows, as `planloom()`; `fork=False`: a child of this
    process, for a test that must be its parent)."""
    argv = [PLANLOOM, *map(str, args)]
    if fork and _FORKS.fits(environ):
        return _FORKS.start(argv, cwd=cwd, environ=environ, stdout=stdout, stderr=stderr)
    return subprocess.Popen(
        argv, cwd=cwd, env=environ, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr
    )


def run_json(recipe: str | Path, cwd: Path) -> tuple[subprocess.CompletedProcess[str], Any]:
    """`planloom run RECIPE --yes --json`: the process and its JSON result (no traceback)."""
    proc = planloom("run", recipe, "--yes", "--json", cwd=cwd)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads(proc.stdout)


@dataclass
class Peaked:
    """How a command ran under `peaked`: its exit, streams, own peak RSS and time."""

    returncode: int  # negative: the signal that ended it
    stdout: str
    stderr: str
    peak_mib: float
    seconds: float
    timed_out: bool


def peaked(
    argv: list[str],
    *,
    cwd: Path | None = None,
    environ: dict[str, str] | None = None,
    address_space: int = 0,
    timeout: float = TIMEOUT,
) -> Peaked:
    """Run `argv` through `_peak.py` (its docstring says why): its own peak RSS, not one
    inherited from this test process, with `RLIMIT_AS` at `address_space` bytes (0: none),
    killed after `timeout` seconds."""
    launcher = Path(__file__).with_name("_peak.py")
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "peak.json"
        proc = subprocess.run(
            [sys.executable, launcher, report, str(address_space), str(timeout), "--", *argv],
            cwd=cwd,
            env=environ,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=True,
        )
        figures = json.loads(report.read_text(encoding="utf-8"))
    return Peaked(
        figures["returncode"],
        proc.stdout.decode(errors="replace"),
        proc.stderr.decode(errors="replace"),
        figures["peak_kib"] / 1024,
        figures["seconds"],
        figures["timed_out"],
    )
