"""`planloom` in a pseudo-terminal, for tests where a person answers prompts.

`spawning(folder)` starts planloom with pexpect (stdin and stderr are the pty, so the
terminal approver is used); `--json` output is redirected to a file by a `sh -c 'exec ...'`
wrapper (the wrapper execs, so the pid and exit status are planloom's own). Every child is
force-closed when the block ends, so a failing test leaves nothing running.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pexpect

PLANLOOM = str(Path(sys.executable).parent / "planloom")
TIMEOUT = 30  # seconds for any one expect: generous on a loaded machine, a hang still fails

GATE = r"step '([^']+)' wants to run (\S+) \("
GATE_MENU = r"\[A\]pprove all remaining  \[q\]uit > "


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without model/planloom settings or editors, plus `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "PLANLOOM_"))
        and k not in {"CI", "PYTHONPATH", "COLUMNS", "LINES", "EDITOR", "VISUAL"}
    }
    env.setdefault("TERM", "xterm")
    env.update(extra)
    return env


class Session:
    """One spawned planloom in a pty, with everything it printed kept in `transcript`."""

    def __init__(self, child: pexpect.spawn, log: io.StringIO, result: Path) -> None:
        self.child = child
        self.log = log
        self.result_path = result

    @property
    def transcript(self) -> str:
        return self.log.getvalue()

    def expect(self, pattern: Any, timeout: float = TIMEOUT) -> int:
        try:
            return self.child.expect(pattern, timeout=timeout)
        except (pexpect.TIMEOUT, pexpect.EOF) as exc:
            raise AssertionError(
                f"expected {pattern!r}, got {type(exc).__name__}; transcript:\n{self.transcript}"
            ) from None

    def send(self, line: str) -> None:
        self.child.sendline(line)

    def gate(self, timeout: float = TIMEOUT) -> tuple[str, str, str]:
        """Wait for a gate; (step id, action, the text of the prompt up to its menu)."""
        self.expect(GATE, timeout)
        step_id, action = self.child.match.group(1), self.child.match.group(2)
        self.expect(GATE_MENU, timeout)
        return step_id, action, self.child.before

    def asked_again(self, message: str, keys: str) -> None:
        """The answer just sent was refused with `message` and the menu shown again (not
        taken as a "no" that ends the run)."""
        index = self.expect([message, pexpect.EOF])
        assert index == 0, f"the answer ended the run instead; transcript:\n{self.transcript}"
        self.expect(keys)

    def finish(self, timeout: float = TIMEOUT) -> int:
        """Wait for the end; the exit status."""
        self.expect(pexpect.EOF, timeout)
        self.child.close()
        status = self.child.exitstatus
        assert status is not None, f"killed by signal {self.child.signalstatus}"
        return status

    def result(self) -> dict[str, Any]:
        value = json.loads(self.result_path.read_text(encoding="utf-8"))
        assert isinstance(value, dict)
        return value


@contextlib.contextmanager
def spawning(folder: Path) -> Iterator[Callable[..., Session]]:
    """start(*args, cwd=folder, env=None): planloom ARGS in a pty; `--json` lands in a
    file in `folder`. Every child is force-closed when the block ends."""
    sessions: list[Session] = []

    def start(*args: str | Path, cwd: Path = folder, env: dict[str, str] | None = None) -> Session:
        result = folder / f"result-{len(sessions)}.json"
        log = io.StringIO()
        child = pexpect.spawn(
            "/bin/sh",
            ["-c", 'out=$1; shift; exec "$@" >"$out"', "sh", str(result), PLANLOOM]
            + [str(a) for a in args],
            cwd=str(cwd),
            env=env if env is not None else clean_env(),
            timeout=TIMEOUT,
            encoding="utf-8",
            dimensions=(40, 200),
        )
        child.logfile_read = log
        session = Session(child, log, result)
        sessions.append(session)
        return session

    try:
        yield start
    finally:
        for session in sessions:
            session.child.close(force=True)


def drawn(folder: Path, *args: str, width: int = 160, **extra: str) -> tuple[int | None, str]:
    """`planloom ARGS` in a pseudo-terminal (`TERM=xterm-256color` and `extra` in a clean
    environment) until it ends: its exit status, and everything it drew, unaltered."""
    from tests._procs import env

    child = pexpect.spawn(
        PLANLOOM,
        list(args),
        cwd=str(folder),
        env=env(TERM="xterm-256color", **extra),
        encoding="utf-8",
        codec_errors="replace",
        timeout=60,
        dimensions=(30, width),
    )
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus, str(child.before)
