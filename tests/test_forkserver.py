"""The tests' `planloom` (tests/_forkserver.py) is the command a user runs: a forked command
gives the same exit status, output and errors as a new `planloom` process, in its own folder
and environment, and a hung one is killed at its timeout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _forkserver import ForkServer
from _procs import PLANLOOM, env, gone, marker_seconds, pids_with, until

GOOD = """\
version: 1
name: echo
capabilities:
  fs: {root: ., read: true, write: true}
inputs:
  word: {type: string, default: hi}
steps:
  - id: say
    tool: fs.write
    params: {path: out.txt, content: "${{ inputs.word }}"}
  - id: back
    tool: fs.read
    params: {path: out.txt}
    depends_on: [say]
outputs:
  said: ${{ steps.back.output.content }}
"""

BAD = """\
version: 1
name: typo
steps:
  - id: a
    tool: fs.reed
    params: {path: x}
"""

SLOW = """\
version: 1
name: slow
capabilities:
  shell: {allow: [sleep]}
steps:
  - id: nap
    tool: shell.run
    params: {argv: [sleep, "SECONDS"]}
"""


@pytest.fixture(scope="module")
def forks() -> ForkServer:
    return ForkServer()


def _real(args: list[str], cwd: Path, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PLANLOOM, *args],
        cwd=cwd,
        env=environ,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["--help"],
        ["validate", "good.yaml"],
        ["validate", "bad.yaml"],
        ["validate", "--json", "bad.yaml"],
        ["graph", "good.yaml"],
        ["run", "missing.yaml"],
        ["run", "good.yaml", "--frobnicate"],
    ],
    ids=" ".join,
)
def test_a_forked_command_prints_and_exits_as_a_new_process(
    forks: ForkServer, tmp_path: Path, args: list[str]
) -> None:
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "bad.yaml").write_text(BAD)
    environ = env()
    real = _real(args, tmp_path, environ)
    forked = forks.run([PLANLOOM, *args], cwd=tmp_path, environ=environ, timeout=60)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        real.returncode,
        real.stdout,
        real.stderr,
    )


def test_a_forked_run_works_in_its_own_folder_with_its_own_environment(
    forks: ForkServer, tmp_path: Path
) -> None:
    (tmp_path / "good.yaml").write_text(GOOD)
    done = forks.run(
        [PLANLOOM, "run", "good.yaml", "--yes", "--json", "-i", "word=folded"],
        cwd=tmp_path,
        environ=env(),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["outputs"] == {"said": "folded"}
    assert (tmp_path / "out.txt").read_text() == "folded"

    # what the environment says reaches the command: an executor that does not exist
    refused = forks.run(
        [PLANLOOM, "run", "good.yaml", "--yes"],
        cwd=tmp_path,
        environ=env(PLANLOOM_EXECUTOR="carrier-pigeon"),
        timeout=60,
    )
    real = _real(["run", "good.yaml", "--yes"], tmp_path, env(PLANLOOM_EXECUTOR="carrier-pigeon"))
    assert refused.returncode == real.returncode == 2
    assert refused.stderr == real.stderr
    assert "carrier-pigeon" in refused.stderr


def test_a_hung_command_is_killed_at_its_timeout_with_what_it_printed(
    forks: ForkServer, tmp_path: Path
) -> None:
    seconds = marker_seconds(30)
    (tmp_path / "slow.yaml").write_text(SLOW.replace("SECONDS", seconds))
    with pytest.raises(subprocess.TimeoutExpired) as hung:
        forks.run([PLANLOOM, "run", "slow.yaml", "--yes"], cwd=tmp_path, environ=env(), timeout=3)
    assert hung.value.timeout == 3
    # the command is gone; its step's sleep, orphaned by SIGKILL, ends with its run's group
    assert gone(lambda: pids_with(seconds), within=10)


def test_what_python_reads_at_startup_decides_whether_a_fork_fits(forks: ForkServer) -> None:
    forks.run([PLANLOOM, "--version"], cwd=Path.cwd(), environ=env(), timeout=60)
    assert forks.fits(env(ANYTHING="else"))
    assert not forks.fits(env(PYTHONPATH="/elsewhere"))
    assert not forks.fits(env(LC_ALL="C"))
    assert not ForkServer(enabled=False).fits(env())


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "new process"])
def test_a_started_command_takes_ctrl_c_as_a_new_process_does(
    forks: ForkServer, tmp_path: Path, forked: bool
) -> None:
    seconds = marker_seconds(30)
    (tmp_path / "slow.yaml").write_text(SLOW.replace("SECONDS", seconds))
    argv = [PLANLOOM, "run", "slow.yaml", "--yes", "--json"]
    if forked:
        proc: Any = forks.start(
            argv, cwd=tmp_path, environ=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, new_session=True,
        )  # fmt: skip
    else:
        proc = subprocess.Popen(
            argv, cwd=tmp_path, env=env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
    until(lambda: pids_with(seconds) or proc.poll() is not None, 30, "the step's sleep")
    assert proc.poll() is None
    assert os.getpgid(proc.pid) == proc.pid  # its own session and process group
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert json.loads(stdout)["steps"]["nap"]["status"] == "cancelled"
    assert "Traceback" not in stderr
    assert gone(lambda: pids_with(seconds), within=5)
