"""Tool calls on a Dask cluster (`--executor dask://HOST:PORT | dask-local[:N]`), end to end.

The cluster is real: a `dask scheduler` and a `dask worker` with two worker processes
(each under its nanny, which starts a new one when it dies), started by the fixture as a
user would start them; `planloom` runs as the console script in a subprocess. The plugin
`tests/data/dask/dask_plugin.py` is importable on both sides (PYTHONPATH), as the README's
"Scale-out on Dask" says user capabilities must be.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _procs import env, gone, marker_seconds, pids_with, planloom, until

from engine.app._dask_worker import make_call
from engine.backend import Outcome, RemoteCall, run_remote

DASK = str(Path(sys.executable).parent / "dask")
PLUGINS = Path(__file__).parent / "data" / "dask"
TIMEOUT = 120


def _env(**extra: str) -> dict[str, str]:
    return env(PYTHONPATH=str(PLUGINS), PYTHONDONTWRITEBYTECODE="1", **extra)


@contextlib.contextmanager
def _scheduler(folder: Path) -> Iterator[tuple[str, Path]]:
    """A `dask scheduler` on 127.0.0.1 with no workers: its address and scheduler file."""
    address_file = folder / "scheduler.json"
    scheduler = subprocess.Popen(
        [DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
         "--scheduler-file", str(address_file)],
        env=_env(), cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        until(
            lambda: address_file.exists() and address_file.read_text().strip(),
            60,
            "the Dask scheduler to start",
        )
        yield json.loads(address_file.read_text())["address"], address_file
    finally:
        _stop(scheduler)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A scheduler and two single-threaded worker processes; the scheduler's address."""
    folder = tmp_path_factory.mktemp("dask")
    with _scheduler(folder) as (address, address_file):
        workers = subprocess.Popen(
            [DASK, "worker", "--scheduler-file", str(address_file), "--nworkers", "2",
             "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"],
            env=_env(), cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            _wait_for_workers(address, 2)
            yield address
        finally:
            _stop(workers)


@pytest.fixture(scope="module")
def lone_scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A scheduler no worker ever joins; its address."""
    with _scheduler(tmp_path_factory.mktemp("lone")) as (address, _):
        yield address


def _wait_for_workers(address: str, count: int, within: float = 60) -> None:
    code = (
        "import sys; from distributed import Client\n"
        f"c = Client({address!r}, timeout=30); c.wait_for_workers({count}, timeout={within})\n"
        "print(len(c.scheduler_info()['workers'])); c.close()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=within + 30,
        env=_env(), check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def _result(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    value: dict[str, Any] = json.loads(proc.stdout)
    return value


# -- the same run, local and on the cluster -----------------------------------------------


FAN = """\
version: 1
name: fan
capabilities:
  shell: {allow: [expr], cwd: .}
  fs: {root: ., read: true, write: ["out/**"]}
steps:
  - id: each
    for_each: ${{ range(200) | list }}
    tool: shell.run
    params: {argv: [expr, "${{ item | string }}", "+", "1"]}
  - id: some
    for_each: ${{ range(30) | list }}
    tool: shell.run
    params: {argv: [expr, "${{ item | string }}", "%", "7"]}
    can_fail: true
  - id: count
    tool: fs.write
    params: {path: out/n.txt, content: "${{ steps.some.status }}", create_dirs: true}
    depends_on: [each, some]
"""


@pytest.mark.slow
def test_a_200_item_fan_out_gives_the_same_statuses_and_outputs_as_local(
    tmp_path: Path, cluster: str
) -> None:
    (tmp_path / "fan.yaml").write_text(FAN, encoding="utf-8")
    local = _result(planloom("run", "fan.yaml", "--yes", "--json", cwd=tmp_path, environ=_env()))
    remote = _result(
        planloom(
            "run",
            "fan.yaml",
            "--yes",
            "--json",
            "--executor",
            f"dask://{cluster[6:]}",
            cwd=tmp_path,
            environ=_env(),
            timeout=TIMEOUT,
        )
    )

    def summary(result: dict[str, Any]) -> Any:
        steps = result["steps"]
        return {
            "status": result["status"],
            "steps": {k: (v["status"], v["attempts"], v["error"]) for k, v in steps.items()},
            "outputs": [(o["exit_code"], o["stdout"]) for o in steps["each"]["output"]],
            "tool_calls": result["usage"]["tool_calls"],
        }

    assert summary(remote) == summary(local)
    outputs = remote["steps"]["each"]["output"]
    assert [o["stdout"] for o in outputs] == [f"{i + 1}\n" for i in range(200)]
    assert remote["steps"]["some"]["status"] == "failed_acceptable"  # expr exits 1 on 0
    assert "item 7:" in remote["steps"]["some"]["error"]
    assert remote["usage"]["tool_calls"] == 231
    assert (tmp_path / "out" / "n.txt").read_text() == "failed_acceptable"


@pytest.mark.slow
def test_calls_ran_on_the_workers_not_in_planloom(tmp_path: Path, cluster: str) -> None:
    (tmp_path / "pid.yaml").write_text(
        textwrap.dedent(
            """\
            version: 1
            name: where
            capabilities: {slow: {}}
            steps:
              - id: where
                for_each: [1, 2, 3, 4, 5, 6]
                tool: slow.pid
                params: {}
            """
        ),
        encoding="utf-8",
    )
    args = ("--plugin", "dask_plugin", "run", "pid.yaml", "--json")
    local = _result(planloom(*args, cwd=tmp_path, environ=_env()))
    remote = _result(
        planloom(*args, "--executor", f"dask://{cluster[6:]}", cwd=tmp_path, environ=_env())
    )
    [planloom_pid] = set(local["steps"]["where"]["output"])  # all in planloom's process
    workers = set(remote["steps"]["where"]["output"])
    assert planloom_pid not in workers
    assert all(isinstance(pid, int) for pid in workers)


# -- the sandbox holds on the workers ------------------------------------------------------


def _forged(action: str, params: Any, grant: Any, base_dir: Path) -> RemoteCall:
    return RemoteCall(
        key=f"forged-{time.time_ns()}",
        step_id="forged",
        action=action,
        params=params,
        grant=grant,
        base_dir=str(base_dir),
        timeout=10,
    )


def test_a_worker_refuses_calls_its_grant_does_not_allow_even_if_sent_directly(
    tmp_path: Path, cluster: str
) -> None:
    """Calls submitted straight to the cluster, never admitted by planloom's sandbox: the
    worker's own checks refuse them (the fs root, the shell allow-list, the params)."""
    from distributed import Client

    calls = {
        "outside the root": _forged(
            "fs.write", {"path": "../escape.txt", "content": "x"},
            {"root": ".", "write": ["**"]}, tmp_path,
        ),
        "a program not allowed": _forged(
            "shell.run", {"argv": ["touch", "pwned"]}, {"allow": ["echo"], "cwd": "."}, tmp_path
        ),
        "bad params": _forged("fs.read", {"path": 3, "extra": 1}, {"root": "."}, tmp_path),
        "a family that stays local": _forged("human.ask", {"question": "?"}, {}, tmp_path),
        "an unknown tool": _forged("fs.format_disk", {}, {"root": "."}, tmp_path),
    }  # fmt: skip
    with Client(cluster, timeout=30, set_as_default=False) as client:
        outcomes: dict[str, Outcome] = {
            name: client.submit(make_call, call, (), key=call.key, pure=False).result(timeout=60)
            for name, call in calls.items()
        }
    rules = {name: (o.error, o.rule) for name, o in outcomes.items()}
    assert rules == {
        "outside the root": ("CapabilityDenied", "fs.outside-root"),
        "a program not allowed": ("CapabilityDenied", rules["a program not allowed"][1]),
        "bad params": ("CapabilityDenied", "params-schema"),
        "a family that stays local": ("CapabilityDenied", "not-portable"),
        "an unknown tool": ("CapabilityDenied", "unknown-tool"),
    }
    assert "touch" in outcomes["a program not allowed"].message
    assert not (tmp_path.parent / "escape.txt").exists()
    assert not (tmp_path / "pwned").exists()


@pytest.mark.slow
def test_refusals_on_the_workers_reach_the_run_as_the_local_ones_do(
    tmp_path: Path, cluster: str
) -> None:
    (tmp_path / "deny.yaml").write_text(
        textwrap.dedent(
            """\
            version: 1
            name: deny
            on_failure: continue
            capabilities:
              fs: {root: ., write: ["out/**"]}
              shell: {allow: [echo], cwd: .}
            steps:
              - id: escape
                tool: fs.write
                params: {path: "${{ '../escape.txt' }}", content: x}  # (from data)
              - id: program
                tool: shell.run
                params: {argv: [echo, "$(touch pwned)"]}
            """
        ),
        encoding="utf-8",
    )
    args = ("run", "deny.yaml", "--yes", "--json")
    local = _result(planloom(*args, cwd=tmp_path, environ=_env()))
    remote = _result(
        planloom(*args, "--executor", f"dask://{cluster[6:]}", cwd=tmp_path, environ=_env())
    )
    for result in (local, remote):
        assert result["steps"]["escape"]["status"] == "failed"
        assert "denied by rule fs.outside-root" in result["steps"]["escape"]["error"]
        assert result["steps"]["escape"]["error"].count("denied by rule") == 1
    remote["steps"]["program"].pop("duration")  # the one thing that may differ
    local["steps"]["program"].pop("duration")
    assert remote["steps"]["program"] == local["steps"]["program"]
    assert not (tmp_path.parent / "escape.txt").exists()
    assert not (tmp_path / "pwned").exists()


def test_run_remote_checks_grant_and_params_itself(tmp_path: Path) -> None:
    """The worker's half without a cluster: `run_remote` with a registry."""
    import asyncio

    from engine.app.registry import build_registry

    registry = build_registry()
    bad_grant = _forged("fs.read", {"path": "a"}, {"root": 5, "nonsense": True}, tmp_path)
    outcome = asyncio.run(run_remote(bad_grant, registry))
    assert (outcome.error, outcome.rule) == ("CapabilityDenied", "grant-schema")
    (tmp_path / "a.txt").write_text("hello", encoding="utf-8")
    good = _forged("fs.read", {"path": "a.txt"}, {"root": ".", "read": True}, tmp_path)
    outcome = asyncio.run(run_remote(good, registry))
    assert outcome.error is None
    assert outcome.unwrap("s")["content"] == "hello"


# -- a worker lost mid-call, and Ctrl-C ----------------------------------------------------


LOST = """\
version: 1
name: lost
capabilities: {slow: {}}
steps:
  - id: look
    tool: slow.look
    params: {folder: "FOLDER", seconds: 3}
  - id: change
    tool: slow.change
    params: {folder: "FOLDER", seconds: 3}
    fallback: {tool: slow.pid, params: {}}
  - id: change_again
    tool: slow.change
    params: {folder: "FOLDER2", seconds: 3}
    can_fail: true
"""


@pytest.mark.slow
def test_a_lost_worker_reruns_read_only_calls_and_never_repeats_a_side_effect(
    tmp_path: Path, cluster: str
) -> None:
    notes, notes2 = tmp_path / "notes", tmp_path / "notes2"
    notes.mkdir()
    notes2.mkdir()
    recipe = LOST.replace("FOLDER2", str(notes2)).replace("FOLDER", str(notes))
    (tmp_path / "lost.yaml").write_text(recipe, encoding="utf-8")
    run = subprocess.Popen(
        [sys.executable, "-m", "engine.app", "--plugin", "dask_plugin", "run", "lost.yaml",
         "--yes", "--json", "--executor", f"dask://{cluster[6:]}"],
        cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # Both workers busy (one thread each): kill each worker process as soon as it has
        # started one of the calls (the nanny starts a new one).
        killed: set[int] = set()
        end = time.monotonic() + 60
        while len(killed) < 2:
            assert time.monotonic() < end, "the calls did not start on the workers"
            started = [int(p.read_text()) for p in notes.glob("look-*")]
            for folder in (notes, notes2):
                log = folder / "changes.log"
                if log.exists():
                    started += [int(line) for line in log.read_text().split()]
            for pid in set(started) - killed:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            time.sleep(0.05)
        out, err = run.communicate(timeout=TIMEOUT)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert "Traceback" not in err, err[-3000:]
    result = json.loads(out)
    steps = result["steps"]
    # The read-only call ran again elsewhere and the step succeeded.
    assert steps["look"]["status"] == "succeeded", steps["look"]
    assert steps["look"]["output"] == "seen"
    # A side effect whose worker died is not made again: its outcome is unknown, and the
    # fallback (or can_fail) applies as to any failure.
    lines = [
        (notes / "changes.log").read_text().split(),
        (notes2 / "changes.log").read_text().split(),
    ]
    assert [len(x) for x in lines] == [1, 1], lines
    for step_id, status in (("change", "fallback"), ("change_again", "failed_acceptable")):
        if steps[step_id]["status"] == "succeeded":  # its worker was killed after it ended
            continue
        assert steps[step_id]["status"] == status, steps[step_id]
        assert "may or may not have happened" in steps[step_id]["error"]
        assert steps[step_id]["attempts"] <= 2  # no retry of the unknown call
    assert any(steps[s]["status"] != "succeeded" for s in ("change", "change_again"))


@pytest.mark.slow
def test_ctrl_c_leaves_no_process_on_any_worker(tmp_path: Path, cluster: str) -> None:
    marker = marker_seconds(300)
    (tmp_path / "sleepy.yaml").write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: sleepy
            capabilities:
              shell: {{allow: [sleep], cwd: .}}
            steps:
              - id: naps
                for_each: [1, 2, 3, 4]
                tool: shell.run
                timeout: 600
                params: {{argv: [sleep, "{marker}"]}}
            """
        ),
        encoding="utf-8",
    )
    run = subprocess.Popen(
        [sys.executable, "-m", "engine.app", "run", "sleepy.yaml", "--yes",
         "--executor", f"dask://{cluster[6:]}"],
        cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        end = time.monotonic() + 60
        while len(pids_with(marker)) < 2:  # one nap per worker (one thread each)
            assert time.monotonic() < end, "the naps did not start on the workers"
            assert run.poll() is None, run.communicate()
            time.sleep(0.05)
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=TIMEOUT)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 130, err[-3000:]
    assert gone(lambda: pids_with(marker), within=10), pids_with(marker)


# -- configuration -------------------------------------------------------------------------


@pytest.mark.slow
def test_an_unreachable_scheduler_is_exit_2_before_any_step_runs(tmp_path: Path) -> None:
    (tmp_path / "w.yaml").write_text(
        "version: 1\nname: w\ncapabilities: {fs: {root: ., write: ['*']}}\n"
        "steps:\n  - {id: w, tool: fs.write, params: {path: w.txt, content: x}}\n",
        encoding="utf-8",
    )
    proc = planloom(
        "run", "w.yaml", "--yes", "--json", "--store", "s.db",
        "--executor", "dask://127.0.0.1:9", cwd=tmp_path, environ=_env(),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "the Dask scheduler at tcp://127.0.0.1:9 cannot be reached" in proc.stderr
    assert json.loads(proc.stdout)["status"] == "invalid"
    assert not (tmp_path / "w.txt").exists()
    assert not (tmp_path / "s.db").exists()  # no run begun


@pytest.mark.slow
def test_a_scheduler_with_no_workers_is_exit_2_within_the_wait_naming_it(
    tmp_path: Path, lone_scheduler: str
) -> None:
    (tmp_path / "w.yaml").write_text(
        "version: 1\nname: w\ncapabilities: {fs: {root: ., write: ['*']}}\n"
        "steps:\n  - {id: w, tool: fs.write, params: {path: w.txt, content: x}}\n",
        encoding="utf-8",
    )
    began = time.monotonic()
    proc = planloom(
        "run", "w.yaml", "--yes", "--json", "--store", "s.db",
        "--executor", lone_scheduler.replace("tcp://", "dask://"),
        cwd=tmp_path, environ=_env(PLANLOOM_DASK_WORKER_WAIT="2"),
    )  # fmt: skip
    seconds = time.monotonic() - began
    assert proc.returncode == 2, proc.stderr
    assert f"waiting up to 2 s for a worker to join the Dask scheduler at {lone_scheduler}" in (
        proc.stderr
    )
    assert f"the Dask scheduler at {lone_scheduler} has no workers" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert json.loads(proc.stdout)["status"] == "invalid"
    assert not (tmp_path / "w.txt").exists()
    assert not (tmp_path / "s.db").exists()  # no run begun
    assert seconds < 20, f"{seconds:.1f} s for a 2 s wait"


@pytest.mark.parametrize("value", ["soon", "0", "-5", "inf"])
def test_a_wrong_worker_wait_is_exit_2_naming_the_variable(tmp_path: Path, value: str) -> None:
    (tmp_path / "w.yaml").write_text(
        "version: 1\nname: w\ncapabilities: {fs: {root: .}}\n"
        "steps:\n  - {id: l, tool: fs.list, params: {path: .}}\n",
        encoding="utf-8",
    )
    proc = planloom(
        "run", "w.yaml", "--executor", "dask://127.0.0.1:9",
        cwd=tmp_path, environ=_env(PLANLOOM_DASK_WORKER_WAIT=value),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"PLANLOOM_DASK_WORKER_WAIT {value!r}: give the seconds" in proc.stderr
    assert "cannot be reached" not in proc.stderr  # said before any connection is tried


@pytest.mark.slow
def test_a_call_no_worker_takes_ends_at_its_timeout(tmp_path: Path, lone_scheduler: str) -> None:
    """Workers can leave after the run began: the call still ends, at its timeout."""
    from engine.app.dask_backend import DaskBackend
    from engine.errors import StepTimeout

    backend = DaskBackend(lone_scheduler)
    call = dataclasses.replace(
        _forged("fs.list", {"path": "."}, {"root": "."}, tmp_path), timeout=1.0
    )

    async def attempt() -> float:
        began = time.monotonic()
        async with backend.scope():
            with pytest.raises(StepTimeout, match="timed out after 1 s: no Dask worker ended it"):
                await backend.run(call)
        return time.monotonic() - began

    assert asyncio.run(attempt()) < 30


@pytest.mark.slow
@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("dask", "use local, dask-local, dask-local:N"),
        ("dask://host", "give the scheduler's port"),
        ("dask-local:0", "N must be from 1 to 256"),
        ("kubernetes", "use local, dask-local, dask-local:N"),
    ],
)
def test_a_wrong_executor_is_refused_saying_the_forms(
    tmp_path: Path, value: str, said: str
) -> None:
    (tmp_path / "w.yaml").write_text(
        "version: 1\nname: w\ncapabilities: {fs: {root: ., read: true}}\n"
        "steps:\n  - {id: r, tool: fs.list, params: {path: .}}\n",
        encoding="utf-8",
    )
    flag = planloom("run", "w.yaml", "--executor", value, cwd=tmp_path, environ=_env())
    assert flag.returncode == 2
    assert f"--executor {value!r}: {said}" in flag.stderr
    from_env = planloom("run", "w.yaml", cwd=tmp_path, environ=_env(PLANLOOM_EXECUTOR=value))
    assert from_env.returncode == 2
    assert f"PLANLOOM_EXECUTOR {value!r}: {said}" in from_env.stderr


@pytest.mark.slow
def test_dask_local_starts_its_own_cluster_and_stops_it(tmp_path: Path) -> None:
    (tmp_path / "pid.yaml").write_text(
        "version: 1\nname: where\ncapabilities: {slow: {}}\n"
        "steps:\n  - {id: where, for_each: [1, 2, 3, 4], tool: slow.pid, params: {}}\n",
        encoding="utf-8",
    )
    proc = planloom(
        "--plugin", "dask_plugin", "run", "pid.yaml", "--json",
        cwd=tmp_path, environ=_env(PLANLOOM_EXECUTOR="dask-local:2"), timeout=TIMEOUT,
    )  # fmt: skip
    result = _result(proc)
    assert proc.returncode == 0, proc.stderr
    workers = set(result["steps"]["where"]["output"])
    assert 1 <= len(workers) <= 2
    assert gone(lambda: [p for p in workers if Path(f"/proc/{p}").exists()], within=10)


@pytest.mark.slow
def test_a_call_whose_outcome_is_unknown_is_in_doubt_when_the_run_is_resumed(
    tmp_path: Path,
) -> None:
    """Its intent stays open in the journal, as after a crash: `resume --yes` does not
    make it again; only a person could approve it."""
    (tmp_path / "send.yaml").write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: send
            capabilities: {{flaky: {{}}}}
            steps:
              - id: send
                tool: flaky.send
                params: {{folder: "{tmp_path}"}}
            """
        ),
        encoding="utf-8",
    )
    args = ("--plugin", "dask_unknown_plugin")
    first = planloom(*args, "run", "send.yaml", "--yes", "--json", cwd=tmp_path, environ=_env())
    result = json.loads(first.stdout)
    assert result["steps"]["send"]["status"] == "failed"
    assert "may or may not have happened" in result["steps"]["send"]["error"]
    assert result["steps"]["send"]["attempts"] == 1
    again = planloom(
        *args, "resume", result["run_id"], "--yes", "--json", cwd=tmp_path, environ=_env()
    )
    resumed = json.loads(again.stdout)
    assert resumed["steps"]["send"]["status"] == "denied", resumed["steps"]["send"]
    assert "may already have happened" in resumed["steps"]["send"]["error"]
    assert (tmp_path / "sent.log").read_text().split() == ["sent"]  # made once
