"""`planloom plan GOAL --stream`, end to end: the console script against a
`FakeOpenAIServer` that streams its plan slowly (`Fault.slow`: a piece of 16 characters
every so often), its events in a `--log-file` whose order and times show what started
when.

A read-only step starts while the plan is still streaming; a step with side effects never
starts before the whole plan is validated and approved (even with the person slow to
answer); an invalid plan goes to repair and its side effects never run, while a read-only
step the repaired plan keeps is not run twice and one it changes is thrown away and run as
the plan says; a rejected plan leaves no side effect; Ctrl-C while the plan streams ends
the run at once (130) with nothing left running; a recorded streamed session replays, the
same twice.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from _procs import PLANLOOM, env, planloom

from engine.testing import FakeOpenAIServer, Fault, ScriptedModel
from tests._pty import Session, spawning

GOAL = "Summarise a.txt and b.txt into out/summary.txt"
CAPABILITIES = """\
capabilities:
  fs: {root: work, read: true, write: ["out/**"]}
"""
READ_A = {"id": "read_a", "tool": "fs.read", "params": {"path": "a.txt"}}
READ_B = {"id": "read_b", "tool": "fs.read", "params": {"path": "b.txt"}}
SAVE = {
    "id": "save",
    "tool": "fs.write",
    "params": {
        "path": "out/summary.txt",
        "content": "${{ steps.read_a.output.content }}+${{ steps.read_b.output.content }}",
        "create_dirs": True,
    },
}
PLAN: dict[str, Any] = {"goal": GOAL, "steps": [READ_A, READ_B, SAVE]}
PLAN_MENU = r"\[s\]ave as recipe > "
PIECE = 0.08  # seconds between the stream's pieces: the plan streams for ~2 s


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "a.txt").write_text("apples", encoding="utf-8")
    (tmp_path / "work" / "b.txt").write_text("bananas", encoding="utf-8")
    (tmp_path / "caps.yaml").write_text(CAPABILITIES, encoding="utf-8")
    return tmp_path


def _args(server: FakeOpenAIServer, *extra: str) -> list[str]:
    return [
        "plan", GOAL, "--stream", "--capabilities", "caps.yaml", "--base-url",
        server.base_url, "--model", "m", "--log-file", "events.jsonl", *extra,
    ]  # fmt: skip


def _events(folder: Path) -> list[dict[str, Any]]:
    text = (folder / "events.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def _at(event: dict[str, Any]) -> float:
    return datetime.datetime.fromisoformat(event["timestamp"]).timestamp()


def _first(events: list[dict[str, Any]], kind: str, step: str | None = None) -> dict[str, Any]:
    return next(
        e for e in events if e["event"] == kind and (step is None or e.get("step_id") == step)
    )


def _run_goal_recipe(
    workspace: Path, more: str, *answers: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """`planloom run` of a goal recipe asking for a streamed plan (and `more` settings),
    the model streaming each of `answers` slowly in turn."""
    (workspace / "goal.yaml").write_text(
        f"version: 1\nname: g\ngoal: {GOAL}\nplanner: {{stream: true}}\n{more}{CAPABILITIES}",
        encoding="utf-8",
    )
    with FakeOpenAIServer(ScriptedModel.sequence(*answers)) as server:
        for _ in answers:
            server.inject(Fault.slow(PIECE))
        return planloom(
            "run", "goal.yaml", "--yes", "--json", "--base-url", server.base_url, "--model",
            "m", "--log-file", "events.jsonl", cwd=workspace,
        )  # fmt: skip


def _count(events: list[dict[str, Any]], kind: str, step: str) -> int:
    return sum(1 for e in events if e["event"] == kind and e.get("step_id") == step)


@pytest.mark.slow
def test_a_read_only_step_starts_while_the_plan_streams_and_a_write_only_after_approval(
    workspace: Path,
) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN)) as server:
        server.inject(Fault.slow(PIECE))
        proc = planloom(*_args(server, "--yes", "--json"), cwd=workspace)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "succeeded"
    assert (workspace / "work" / "out" / "summary.txt").read_text() == "apples+bananas"
    events = _events(workspace)
    answered = _first(events, "llm.called")  # the planner's answer, whole
    accepted = _first(events, "plan.finished")
    assert accepted["outcome"] == "accepted"
    read_a, save = _first(events, "step.started", "read_a"), _first(events, "step.started", "save")
    # event times prove it: the read began (and ended) before the answer was whole
    assert _at(read_a) < _at(answered) - 2 * PIECE
    assert _at(_first(events, "step.finished", "read_a")) < _at(answered)
    assert events.index(read_a) < events.index(answered)
    # the write only once the whole plan was validated and approved
    assert events.index(save) > events.index(accepted)
    assert _at(save) >= _at(accepted)
    assert _count(events, "step.started", "read_a") == 1
    assert "+ read_a (fs.read): started (read-only)" in proc.stderr
    assert "+ save (fs.write): waits for the whole plan" in proc.stderr
    assert "already started while the plan streamed (read-only): read_a (succeeded)" in proc.stderr


@pytest.fixture
def spawn(workspace: Path) -> Iterator[Callable[..., Session]]:
    with spawning(workspace) as start:
        yield start


@pytest.mark.slow
def test_the_write_waits_for_a_slow_person_while_the_reads_have_ended(
    workspace: Path, spawn: Callable[..., Session]
) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN)) as server:
        server.inject(Fault.slow(PIECE))
        s = spawn(*_args(server, "--json"))
        s.expect(PLAN_MENU)
        time.sleep(1.0)  # the person reads the plan: nothing with side effects may start
        events = _events(workspace)
        assert _count(events, "step.finished", "read_a") == 1
        assert _count(events, "step.finished", "read_b") == 1
        assert _count(events, "step.started", "save") == 0
        assert not (workspace / "work" / "out").exists()
        s.send("a")
        s.gate()  # the write's own gate, as for any plan
        s.send("a")
        assert s.finish() == 0, s.transcript
    assert s.result()["status"] == "succeeded"
    assert (workspace / "work" / "out" / "summary.txt").read_text() == "apples+bananas"


@pytest.mark.slow
def test_an_invalid_plan_is_repaired_its_writes_never_run_and_unchanged_reads_run_once(
    workspace: Path,
) -> None:
    wrong_write = {
        "id": "save_wrong", "tool": "fs.write",
        "params": {"path": "out/wrong.txt", "content": "x", "create_dirs": True},
    }  # fmt: skip
    read_b_wrong = {"id": "read_b", "tool": "fs.read", "params": {"path": "a.txt"}}
    invalid = {"id": "bad", "tool": "fs.nope", "params": {}}  # the last step: not a tool
    first = {"goal": GOAL, "steps": [READ_A, read_b_wrong, wrong_write, invalid]}
    with FakeOpenAIServer(ScriptedModel.sequence(first, PLAN)) as server:
        server.inject(Fault.slow(PIECE))
        server.inject(Fault.slow(PIECE))
        proc = planloom(*_args(server, "--yes", "--json", "--record", "c.yaml"), cwd=workspace)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "succeeded"
    assert "plan repaired 1 time" in proc.stderr
    assert not (workspace / "work" / "out" / "wrong.txt").exists()
    assert (workspace / "work" / "out" / "summary.txt").read_text() == "apples+bananas"
    events = _events(workspace)
    assert _count(events, "step.started", "save_wrong") == 0
    assert _count(events, "step.started", "read_a") == 1  # kept: the repaired plan has it
    assert _count(events, "step.discarded", "read_b") == 1  # changed: thrown away, run again
    assert _count(events, "step.started", "read_b") == 2
    assert result["steps"]["read_b"]["output"]["content"] == "bananas"
    assert result["usage"]["tool_calls"] == 4  # the thrown-away read was made all the same
    # the recording holds what the repaired plan's run used: a replay (which runs the
    # whole answer, nothing early) uses all of it and gives the same steps
    replayed = planloom("replay", "c.yaml", "--json", cwd=workspace)
    assert replayed.returncode == 0, replayed.stderr
    again = json.loads(replayed.stdout)
    assert again["replay"]["unused"] == []
    assert again["replay"]["mismatches"] == []
    assert again["steps"] == result["steps"] | {
        k: {**v, "duration": None} for k, v in result["steps"].items()
    }


@pytest.mark.slow
def test_a_rejected_plan_leaves_no_side_effect(workspace: Path) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN)) as server:
        server.inject(Fault.slow(PIECE))
        proc = planloom(*_args(server, "--no", "--json"), cwd=workspace)
    assert proc.returncode == 3, proc.stderr
    assert json.loads(proc.stdout)["status"] == "rejected"
    assert not (workspace / "work" / "out").exists()
    events = _events(workspace)
    assert _count(events, "step.started", "save") == 0
    assert _count(events, "step.started", "read_a") == 1  # read-only: it may have run


@pytest.mark.slow
def test_ctrl_c_while_the_plan_streams_ends_at_once_with_nothing_left_running(
    workspace: Path,
) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN)) as server:
        server.inject(Fault.slow(0.5))  # ~12 s of stream
        child = pexpect.spawn(
            PLANLOOM, _args(server, "--yes"), cwd=str(workspace),
            env=env(TERM="xterm", NO_COLOR="1"), encoding="utf-8", timeout=30,
        )  # fmt: skip
        try:
            child.expect(r"\+ read_a \(fs\.read\): started")
            pressed = time.monotonic()
            child.sendintr()
            child.expect(pexpect.EOF, timeout=15)
            took = time.monotonic() - pressed
            child.close()
        finally:
            if child.isalive():
                child.close(force=True)
        printed = child.before or ""
    assert child.exitstatus == 130, printed
    assert took < 3.0, took
    assert "Traceback" not in printed
    assert not (workspace / "work" / "out").exists()
    listed = planloom("runs", "--json", cwd=workspace)
    assert all(run["status"] != "running" for run in json.loads(listed.stdout))


@pytest.mark.slow
def test_a_recorded_streamed_session_replays_the_same_twice(workspace: Path) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN)) as server:
        server.inject(Fault.slow(PIECE))
        recorded = planloom(*_args(server, "--yes", "--json", "--record", "c.yaml"), cwd=workspace)
    assert recorded.returncode == 0, recorded.stderr
    (workspace / "work" / "out" / "summary.txt").unlink()
    replays = [planloom("replay", "c.yaml", "--json", cwd=workspace) for _ in range(2)]
    for replay in replays:
        assert replay.returncode == 0, replay.stderr
    assert replays[0].stdout == replays[1].stdout
    first = json.loads(replays[0].stdout)
    assert first["status"] == "succeeded"
    live = json.loads(recorded.stdout)
    assert {k: v["output"] for k, v in first["steps"].items()} == {
        k: v["output"] for k, v in live["steps"].items()
    }


@pytest.mark.slow
def test_a_goal_recipe_asks_for_streaming_with_planner_stream(workspace: Path) -> None:
    proc = _run_goal_recipe(workspace, "", PLAN)
    assert proc.returncode == 0, proc.stderr
    events = _events(workspace)
    started = _first(events, "step.started", "read_a")
    assert events.index(started) < events.index(_first(events, "llm.called"))
    assert (workspace / "work" / "out" / "summary.txt").read_text() == "apples+bananas"


@pytest.mark.slow
def test_a_plan_stream_cut_short_and_asked_again_runs_each_read_once(workspace: Path) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN, PLAN)) as server:
        server.inject(Fault.cut(after_chunks=14))  # read_a is whole by then; read_b is not
        server.inject(Fault.slow(PIECE))
        proc = planloom(*_args(server, "--yes", "--json"), cwd=workspace)
        assert len(server.requests) == 2
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "succeeded"
    events = _events(workspace)
    assert _count(events, "step.started", "read_a") == 1  # offered again: the same step
    assert _count(events, "step.started", "read_b") == 1
    assert (workspace / "work" / "out" / "summary.txt").read_text() == "apples+bananas"


@pytest.mark.slow
def test_a_streamed_replan_keeps_what_succeeded_and_starts_its_new_reads_early(
    workspace: Path,
) -> None:
    missing = {"id": "read_c", "tool": "fs.read", "params": {"path": "c.txt"}}  # fails
    save_c = {**SAVE, "params": {**SAVE["params"], "content": "${{ steps.read_c.output.content }}"}}
    first = {"goal": GOAL, "steps": [READ_A, missing, save_c]}
    second = {"goal": GOAL, "steps": [READ_B, SAVE]}
    proc = _run_goal_recipe(workspace, "replan: {max: 1}\n", first, second)
    assert proc.returncode == 0, proc.stderr
    assert "replanning after the failure (1 step kept)" in proc.stderr
    events = _events(workspace)
    assert _count(events, "step.started", "read_a") == 1  # kept: never run again
    answers = [e for e in events if e["event"] == "llm.called"]
    read_b = _first(events, "step.started", "read_b")
    assert events.index(read_b) < events.index(answers[1])  # began while the replan streamed
    assert (workspace / "work" / "out" / "summary.txt").read_text() == "apples+bananas"
