"""Issue 10 item 7: `kill -9` of planloom must not orphan its sandboxed children.

The launcher dies with the engine (PR_SET_PDEATHSIG), the sandbox's init dies with the
launcher, and the kernel then kills everything in the PID namespace, `setsid` and
double-forked processes included. The pids cgroups a dead engine leaves behind are emptied
and removed by the next planloom that starts a shell call (or probes with `tools`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from _procs import PLANLOOM, env, gone, marker_seconds, pids_with

from capabilities import shell
from capabilities.confine.launch import launcher_command
from capabilities.confine.scratch import pids_cgroup_base
from capabilities.shell import ShellGrant, ShellParams
from engine.capability import CallContext

PYTHON = os.path.realpath(sys.executable)
_LAYERS = shell.confinement_report()
_HAVE_PIDNS = _LAYERS.get("pid_namespace") == "active"
_CGROUPS, _WHY = pids_cgroup_base()

_DAEMON = (
    "import os, sys, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        os.closerange(0, 3)\n"
    "        time.sleep(600)\n"
    "    os._exit(0)\n"
    "time.sleep(600)\n"
)


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique `sleep` duration; whatever still carries it at the end is killed."""
    value = marker_seconds(600)
    yield value
    for pid in pids_with(value):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _recipe(folder: Path, marker: str) -> None:
    daemon = _DAEMON.encode("unicode_escape").decode()  # one line in a YAML "..." string
    (folder / "orphans.yaml").write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: orphans
            capabilities:
              shell:
                allow: [sleep, sh, {PYTHON}]
                unsafe_args: [sh, {PYTHON}]
            limits: {{max_parallel: 5, per_family: {{shell: 5}}, timeout: 900, max_duration: 900}}
            steps:
              - {{id: one, tool: shell.run, params: {{argv: [sleep, "{marker}"]}}}}
              - {{id: two, tool: shell.run, params: {{argv: [sleep, "{marker}"]}}}}
              - id: detached
                tool: shell.run
                params:
                  argv: [sh, -c, "setsid sleep {marker} > /dev/null 2>&1 < /dev/null & wait"]
              - id: background
                tool: shell.run
                params: {{argv: [sh, -c, "sleep {marker} & sleep {marker}"]}}
              - id: daemon
                tool: shell.run
                params: {{argv: [{PYTHON}, -c, "{daemon}", "{marker}"]}}
            """
        )
    )


def _wait_for(marker: str, count: int, within: float = 30.0) -> list[int]:
    end = time.monotonic() + within
    while time.monotonic() < end:
        found = pids_with(marker)
        if len(found) >= count:
            return found
        time.sleep(0.1)
    return pids_with(marker)


@pytest.fixture
def own_cgroup() -> Iterator[Path | None]:
    """A pids cgroup of this test's own for the engines it starts, or None without one.

    Engines sweep dead engines' cgroups beside their own; other planloom processes on this
    machine must not be the ones that clean up after the engine this test kills.
    """
    if _CGROUPS is None:
        yield None
        return
    folder = Path(_CGROUPS, f"pytest-orphans-{uuid.uuid4().hex[:12]}")
    folder.mkdir()
    try:
        yield folder
    finally:
        inner = sorted(folder.glob("*/cgroup.procs"), reverse=True)
        for procs in [*inner, folder / "cgroup.procs"]:
            for line in procs.read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(line), signal.SIGKILL)
        for child in [p.parent for p in inner]:
            _rmdir_when_empty(child)
        _rmdir_when_empty(folder)


def _rmdir_when_empty(folder: Path) -> None:
    for _ in range(200):
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


def _inside(cgroup: Path | None, argv: list[str]) -> list[str]:
    """`argv` run from inside `cgroup` (a shell joins it, then execs the command)."""
    if cgroup is None:
        return argv
    return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cgroup / "cgroup.procs"), *argv]


@pytest.mark.slow
def test_kill_9_of_planloom_leaves_no_sandboxed_process(
    tmp_path: Path, marker: str, own_cgroup: Path | None
) -> None:
    _recipe(tmp_path, marker)
    proc = subprocess.Popen(
        _inside(own_cgroup, [PLANLOOM, "run", "orphans.yaml", "--yes"]),
        cwd=tmp_path,
        env=env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # one + two + setsid'd + background pair + daemon pair (parent and grandchild)
        started = _wait_for(marker, 7)
        assert len(started) >= 7, started
    finally:
        proc.kill()
        proc.wait(10)
    assert gone(lambda: pids_with(marker), within=5.0), f"survivors: {pids_with(marker)}"

    if own_cgroup is None:
        pytest.skip(f"no pids cgroup to check here: {_WHY}")
    stale = f"planloom-{proc.pid}-"
    assert any(name.startswith(stale) for name in os.listdir(own_cgroup))
    # The next planloom start (here `tools`, which probes a shell call) sweeps them.
    subprocess.run(
        _inside(own_cgroup, [PLANLOOM, "tools"]), env=env(), capture_output=True, check=True
    )
    assert [name for name in os.listdir(own_cgroup) if name.startswith(stale)] == []


def test_next_start_kills_what_is_left_in_a_dead_engines_cgroup(
    tmp_path: Path, marker: str, own_cgroup: Path | None
) -> None:
    """Without a PID namespace, a `setsid` grandchild outlives a killed engine in the
    engine's pids cgroup until the next planloom start, which kills it."""
    if own_cgroup is None:
        pytest.skip(f"no pids cgroup here: {_WHY}")
    engine = subprocess.Popen(["true"])  # a pid that is surely dead: a dead engine's
    engine.wait()
    cgroup = own_cgroup / f"planloom-{engine.pid}-{uuid.uuid4().hex[:12]}"
    cgroup.mkdir()
    survivor = subprocess.Popen(_inside(cgroup, ["sleep", marker]), start_new_session=True)
    try:
        assert _wait_for(marker, 1, within=5.0)
        subprocess.run(
            _inside(own_cgroup, [PLANLOOM, "tools"]), env=env(), capture_output=True, check=True
        )
        assert gone(lambda: pids_with(marker), within=3.0)
        assert not cgroup.exists()
    finally:
        survivor.kill()
        survivor.wait(5)


@pytest.mark.slow
def test_a_call_from_a_thread_pool_is_not_killed_early(tmp_path: Path) -> None:
    """The parent-death signal fires when the *thread* that started the launcher ends:
    a call made in a worker thread (its own event loop) must still run to its end."""
    grant = ShellGrant(allow=["sh"], unsafe_args=["sh"])
    script = "sleep 0.5; echo done"

    def call() -> str:
        ctx = CallContext(grant=grant, base_dir=tmp_path, timeout=20.0)
        result = asyncio.run(shell.run(ShellParams(argv=["sh", "-c", script]), ctx))
        return result.stdout

    with ThreadPoolExecutor(max_workers=2) as pool:
        outputs = list(pool.map(lambda _: call(), range(4)))
    assert outputs == ["done\n"] * 4


def test_launcher_exits_when_its_engine_is_already_gone(tmp_path: Path, marker: str) -> None:
    """The race before the prctl: a launcher whose parent is not the engine it was started
    for (the engine died and the launcher was re-parented) starts nothing."""
    program = shutil.which("sleep", path="/usr/bin:/bin") or "/bin/sleep"
    config = {
        "parent": 1,  # not this process: as if the engine had died before the prctl
        "network": False,
        "rlimits": {},
        "read_paths": ["/usr", "/bin", "/lib", "/lib64"],
        "write_paths": [str(tmp_path)],
        "cgroup": None,
    }
    status_r, status_w = os.pipe()
    command, config_fd = launcher_command(config, status_w, [program, marker])
    try:
        proc = subprocess.Popen(command, pass_fds=(status_w, config_fd), cwd=tmp_path)
    finally:
        os.close(status_w)
        os.close(config_fd)
    try:
        code = proc.wait(10)
    finally:
        proc.kill()
        proc.wait()
        os.close(status_r)
    assert code == 125
    assert pids_with(marker) == []
