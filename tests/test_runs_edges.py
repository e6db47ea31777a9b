"""`planloom runs` at its edges, through the real command: a run whose process was killed
and not yet reaped, a pid that was reused, and a run killed before it had a plan."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from _durable_attacks import WATCH, lab
from _procs import TIMEOUT, env, stat_fields, until

from engine.app.sqlite_store import process_start
from engine.testing import ChatRequest, FakeOpenAIServer

SLOW = """\
version: 1
name: slow
capabilities:
  shell: {allow: [sh, sleep], unsafe_args: [sh]}
steps:
  - id: work
    tool: shell.run
    timeout: 600
    params: {argv: [sh, -c, "echo work >> ledger.txt; sleep MARK"]}
"""


def _listed(rows: str) -> list[dict[str, Any]]:
    return [{k: row[k] for k in ("status", "steps", "done")} for row in json.loads(rows)]


def _state(pid: int) -> str:
    """The state letter of process `pid` (`Z` for a zombie), or `gone`."""
    try:
        return stat_fields(pid)[0]
    except OSError:
        return "gone"


@pytest.mark.slow
def test_a_run_killed_and_not_yet_reaped_is_listed_interrupted(tmp_path: Path) -> None:
    """Right after `kill -9`, until its parent waits for it, the process is a zombie: its
    /proc entry (and start time) is still there, but it runs nothing."""
    with lab(tmp_path) as it:
        it.recipe(SLOW)
        run = it.start("run", "r.yaml", "--yes", fork=False)  # this test is its parent
        try:
            it.wait_for(run, lambda: it.ledger() == ["work"], "the step's append")
            listed = it.cli("runs", "--json")
            assert _listed(listed.stdout) == [{"status": "running", "steps": 1, "done": 0}]
            run.send_signal(signal.SIGKILL)
            until(lambda: _state(run.pid) == "Z", WATCH, "the killed process as a zombie")
            listed = it.cli("runs", "--json")  # not reaped yet: this test has not waited
            assert _state(run.pid) == "Z"
        finally:
            if run.poll() is None:
                run.kill()
            run.wait(TIMEOUT)
    assert listed.returncode == 0, listed.stderr
    assert _listed(listed.stdout) == [{"status": "interrupted", "steps": 1, "done": 0}]


@pytest.mark.slow
def test_a_run_whose_pid_is_now_another_process_is_listed_interrupted(tmp_path: Path) -> None:
    """The run's pid was reused by a live process (here: this test's) started at another
    time: the run is not running. With that process's own start time it would be."""
    with lab(tmp_path) as it:
        it.recipe(SLOW)
        run = it.start("run", "r.yaml", "--yes")
        it.stop_when(run, lambda: it.ledger() == ["work"], "the step's append")
        listed = {}
        for name, start in (("same", process_start(os.getpid())), ("reused", "1")):
            with contextlib.closing(sqlite3.connect(it.store)) as db, db:
                db.execute("UPDATE runs SET pid=?, pid_start=?", (os.getpid(), start))
            done = it.cli("runs", "--json")
            assert done.returncode == 0, done.stderr
            listed[name] = _listed(done.stdout)[0]["status"]
    assert listed == {"same": "running", "reused": "interrupted"}


@pytest.mark.slow
def test_a_run_killed_before_its_plan_was_stored_is_listed(tmp_path: Path) -> None:
    """A goal run killed while the model writes its plan: the run happened (it may have
    been given inputs, its model was asked), so it is listed, interrupted, with 0 steps."""
    release = threading.Event()

    def model(request: ChatRequest) -> str:
        release.wait(WATCH)  # held until the test has killed planloom
        return "{}"

    with lab(tmp_path) as it, FakeOpenAIServer(model) as server:
        it.recipe(
            """\
            version: 1
            name: planned
            goal: write a file
            capabilities:
              shell: {allow: [sh], unsafe_args: [sh]}
            """
        )
        it.environ = env(OPENAI_API_KEY="test")
        run = it.start("run", "r.yaml", "--yes", "--base-url", server.base_url, "--model", "m")
        try:
            it.stop_when(run, lambda: bool(server.requests), "the planning request")
        finally:
            release.set()
        listed = it.cli("runs", "--json")
        run_id = it.run_id()
        shown = it.cli("show", run_id)
        with contextlib.closing(sqlite3.connect(it.store)) as db:
            kinds = [kind for (kind,) in db.execute("SELECT kind FROM journal ORDER BY seq")]
    assert kinds == ["start"], "killed before its plan was stored"
    assert listed.returncode == 0, listed.stderr
    assert _listed(listed.stdout) == [{"status": "interrupted", "steps": 0, "done": 0}]
    assert shown.returncode == 0, shown.stderr
    assert f"run {run_id} stopped before it ended, before it had a plan, so nothing ran" in (
        shown.stdout
    ), "not advice to resume: a resume refuses a run with no plan"
