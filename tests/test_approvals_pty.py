"""Plan review and confirmation gates, driven through the real CLI in a pseudo-terminal.

the README's "Confirmation gates": a person at a terminal approves, edits (in `$EDITOR`) or
rejects an LLM plan, and answers each gate with approve / deny with a reason / edit params /
approve all remaining / quit. With no terminal and no flag every gate is denied.

Each test spawns `planloom` with pexpect (stdin and stderr are the pty, so the terminal
approver is used); `--json` output is redirected to a file by a `sh -c 'exec ...'` wrapper
(the wrapper execs, so the pid and exit status are planloom's own). Plans come from a
`FakeOpenAIServer` in this process, reached over 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.testing import FakeOpenAIServer, ScriptedModel
from tests._procs import gone, marker_seconds, pids_with
from tests._pty import PLANLOOM, Session, clean_env, spawning

EDITOR = Path(__file__).parent / "data" / "pty" / "editor.py"
PLAN_MENU = r"\[s\]ave as recipe > "
REASON = r"reason \(optional\) > "
NEW_PARAMS = r"new params as one line of JSON > "

CAPS = """\
capabilities:
  fs: {root: ., write: ["out/**"]}
"""

GOAL = "Write a note"
PLAN: dict[str, Any] = {
    "goal": GOAL,
    "steps": [
        {"id": "save", "tool": "fs.write", "params": {"path": "out/a.txt", "content": "planned"}}
    ],
}


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Session]]:
    """spawn(*args, cwd=tmp_path, env=None): planloom in a pty; `--json` lands in a file."""
    with spawning(tmp_path) as start:
        yield start


def write_recipe(tmp_path: Path, text: str, name: str = "recipe.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def plan_args(server: FakeOpenAIServer) -> list[str]:
    return [
        "plan",
        GOAL,
        "--capabilities",
        "caps.yaml",
        "--base-url",
        server.base_url,
        "--model",
        "m",
        "--json",
    ]


@pytest.fixture
def caps(tmp_path: Path) -> Path:
    return write_recipe(tmp_path, CAPS, "caps.yaml")


# -- the plan review -----------------------------------------------------------------------------


@pytest.mark.slow
def test_plan_approved_then_gate_approved_runs(
    tmp_path: Path, caps: Path, spawn: Callable[..., Session]
) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN)) as server:
        s = spawn(*plan_args(server))
        s.expect(r"plan 'plan'")
        s.expect(r"save\s+fs\.write")
        s.expect(PLAN_MENU)
        s.send("a")
        step_id, action, shown = s.gate()
        assert (step_id, action) == ("save", "fs.write")
        assert '"path": "out/a.txt"' in shown
        s.send("a")
        assert s.finish() == 0, s.transcript
        assert len(server.requests) == 1
    result = s.result()
    assert result["status"] == "succeeded"
    assert result["steps"]["save"]["status"] == "succeeded"
    assert (tmp_path / "out" / "a.txt").read_text() == "planned"


@pytest.mark.slow
def test_plan_edited_into_an_invalid_one_shows_located_error_then_fixed_runs(
    tmp_path: Path, caps: Path, spawn: Callable[..., Session]
) -> None:
    state = tmp_path / "editor-state"
    state.mkdir()
    rounds = [
        [["tool: fs.write", "tool: fs.wriet"]],
        [
            ["tool: fs.wriet", "tool: fs.write"],
            ["out/a.txt", "out/edited.txt"],
            ["content: planned", "content: edited"],
        ],
    ]
    (state / "rounds.json").write_text(json.dumps(rounds))
    env = clean_env(EDITOR=f"{sys.executable} {EDITOR} {state}")
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN)) as server:
        s = spawn(*plan_args(server), env=env)
        s.expect(PLAN_MENU)
        s.send("e")
        s.expect(r"plan\.yaml:(\d+):(\d+): error\[unknown-tool\]")
        line = int(s.child.match.group(1))
        edited = (state / "after-1.yaml").read_text().splitlines()
        assert "fs.wriet" in edited[line - 1], (line, edited)
        s.expect(PLAN_MENU)
        s.send("a")  # an invalid plan cannot be approved
        s.expect(r"the plan is invalid: edit it again, or reject it")
        s.expect(PLAN_MENU)
        s.send("e")
        s.expect(r"plan 'plan'")
        s.expect(r"out/edited\.txt")
        s.expect(PLAN_MENU)
        s.send("a")
        step_id, _, shown = s.gate()
        assert step_id == "save"
        assert '"path": "out/edited.txt"' in shown
        s.send("a")
        assert s.finish() == 0, s.transcript
        assert len(server.requests) == 1  # the edit is not sent back to the model
    assert (state / "count").read_text() == "2"
    # the second edit started from the first edit's text, not the model's
    assert "fs.wriet" in (state / "before-2.yaml").read_text()
    assert (tmp_path / "out" / "edited.txt").read_text() == "edited"
    assert not (tmp_path / "out" / "a.txt").exists()
    assert s.result()["steps"]["save"]["status"] == "succeeded"


@pytest.mark.slow
def test_plan_rejected_exits_3_and_nothing_runs(
    tmp_path: Path, caps: Path, spawn: Callable[..., Session]
) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN)) as server:
        s = spawn(*plan_args(server))
        s.expect(PLAN_MENU)
        s.send("r")
        s.expect(r"plan rejected: nothing ran")
        assert s.finish() == 3, s.transcript
    assert "wants to run" not in s.transcript
    assert not (tmp_path / "out").exists()
    result = s.result()
    assert result["status"] == "rejected"
    assert result["steps"] == {}


# -- the step gates ------------------------------------------------------------------------------

FALLBACK_RECIPE = """\
version: 1
name: deny
capabilities:
  fs: {root: ., write: ["out/**"]}
steps:
  - id: save
    tool: fs.write
    params: {path: out/primary.txt, content: p}
    fallback: {tool: fs.write, params: {path: out/fallback.txt, content: x}}
"""


def test_deny_with_a_reason_lands_in_the_error_and_the_fallback_runs(
    tmp_path: Path, spawn: Callable[..., Session]
) -> None:
    recipe = write_recipe(tmp_path, FALLBACK_RECIPE)
    s = spawn("run", recipe, "--json")
    step_id, _, shown = s.gate()
    assert step_id == "save"
    assert "out/primary.txt" in shown
    s.send("d")
    s.expect(REASON)
    s.send("not today")
    step_id, action, shown = s.gate()  # the fallback is gated too
    assert (step_id, action) == ("save", "fs.write")
    assert "out/fallback.txt" in shown
    s.send("a")
    assert s.finish() == 0, s.transcript
    step = s.result()["steps"]["save"]
    assert step["status"] == "fallback"
    assert "not today" in (step["error"] or "")
    assert (tmp_path / "out" / "fallback.txt").read_text() == "x"
    assert not (tmp_path / "out" / "primary.txt").exists()


SEQUENTIAL_RECIPE = """\
version: 1
name: all
capabilities:
  fs: {root: ., write: ["out/**"]}
steps:
  - {id: s1, tool: fs.write, params: {path: out/1.txt, content: "1"}}
  - {id: s2, tool: fs.write, params: {path: out/2.txt, content: "2"}, depends_on: [s1]}
  - {id: s3, tool: fs.write, params: {path: out/3.txt, content: "3"}, depends_on: [s2]}
"""


@pytest.mark.slow
def test_approve_all_answers_every_later_gate(
    tmp_path: Path, spawn: Callable[..., Session]
) -> None:
    recipe = write_recipe(tmp_path, SEQUENTIAL_RECIPE)
    s = spawn("run", recipe, "--json")
    step_id, _, _ = s.gate()
    assert step_id == "s1"
    s.send("A")
    assert s.finish() == 0, s.transcript
    assert s.transcript.count("wants to run") == 1
    assert {k: v["status"] for k, v in s.result()["steps"].items()} == dict.fromkeys(
        ("s1", "s2", "s3"), "succeeded"
    )
    for n in "123":
        assert (tmp_path / "out" / f"{n}.txt").read_text() == n


QUIT_RECIPE = """\
version: 1
name: quit
inputs:
  nap: {type: string}
capabilities:
  shell: {allow: [sleep]}
  fs: {root: ., read: true, write: ["out/**"]}
limits: {max_parallel: 4, timeout: 900, max_duration: 900}
steps:
  - id: nap
    tool: shell.run
    params: {argv: [sleep, "${{ inputs.nap }}"]}
  - id: look
    tool: fs.list
    params: {path: "."}
  - id: save
    tool: fs.write
    params: {path: out/late.txt, content: late}
    depends_on: [look]
"""


@pytest.mark.slow
def test_quit_at_a_gate_mid_run_exits_130_and_leaves_no_process(
    tmp_path: Path, spawn: Callable[..., Session]
) -> None:
    nap = marker_seconds(600)
    recipe = write_recipe(tmp_path, QUIT_RECIPE)
    s = spawn("run", recipe, "-i", f"nap={nap}", "--json")
    try:
        step_id, action, shown = s.gate()
        assert (step_id, action) == ("nap", "shell.run")
        assert nap in shown
        s.send("a")
        step_id, _, _ = s.gate()
        assert step_id == "save"
        assert gone(lambda: not pids_with(nap, whole_argument=True), within=10), (
            "the approved sleep never started"
        )
        started = time.monotonic()
        s.send("q")
        assert s.finish(timeout=15) == 130, s.transcript
        assert time.monotonic() - started < 10
        assert gone(lambda: pids_with(nap, whole_argument=True), within=5), (
            f"orphan sleep left running: {pids_with(nap, whole_argument=True)}"
        )
    finally:
        for pid in pids_with(nap, whole_argument=True):  # never leave a 600 s sleep behind
            os.kill(pid, 9)
    result = s.result()
    assert result["status"] == "cancelled"
    assert result["steps"]["nap"]["status"] == "cancelled"
    assert result["steps"]["save"]["status"] in ("denied", "cancelled")
    assert not (tmp_path / "out" / "late.txt").exists()


PARALLEL_RECIPE = """\
version: 1
name: five
capabilities:
  fs: {root: ., write: ["out/**"]}
limits: {max_parallel: 5}
steps:
""" + "".join(
    f'  - {{id: w{n}, tool: fs.write, params: {{path: out/w{n}.txt, content: "w{n}"}}}}\n'
    for n in range(1, 6)
)


@pytest.mark.slow
def test_five_parallel_gates_each_answer_lands_on_its_step(
    tmp_path: Path, spawn: Callable[..., Session]
) -> None:
    recipe = write_recipe(tmp_path, PARALLEL_RECIPE)
    s = spawn("run", recipe, "--json")
    asked: list[str] = []
    for _ in range(5):
        step_id, action, shown = s.gate()
        assert action == "fs.write"
        # the prompt shows this step's own params
        assert f'"path": "out/{step_id}.txt"' in shown, shown
        assert f'"content": "{step_id}"' in shown, shown
        asked.append(step_id)
        if step_id in ("w1", "w4"):
            s.send("a")
        elif step_id == "w2":
            s.send("d")
            s.expect(REASON)
            s.send("no w2")
        elif step_id == "w3":
            s.send("e")
            s.expect(NEW_PARAMS)
            s.send('{"path": "out/w3-edited.txt", "content": "e"}')
        else:
            s.send("n")  # denies at once, without a reason
    assert sorted(asked) == ["w1", "w2", "w3", "w4", "w5"], asked
    assert s.finish() == 1, s.transcript
    assert s.transcript.count("wants to run") == 5
    steps = s.result()["steps"]
    assert {k: v["status"] for k, v in steps.items()} == {
        "w1": "succeeded",
        "w2": "denied",
        "w3": "succeeded",
        "w4": "succeeded",
        "w5": "denied",
    }
    assert "no w2" in steps["w2"]["error"]
    assert "no w2" not in (steps["w5"]["error"] or "")
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["w1.txt", "w3-edited.txt", "w4.txt"]
    assert (out / "w1.txt").read_text() == "w1"
    assert (out / "w4.txt").read_text() == "w4"
    assert (out / "w3-edited.txt").read_text() == "e"


WRITE_RECIPE = """\
version: 1
name: one
capabilities:
  fs: {root: ., write: ["out/**"]}
steps:
  - id: save
    tool: fs.write
    params: {path: out/note.txt, content: hello}
"""


@pytest.mark.slow
def test_an_invalid_edit_is_refused_and_asked_again(
    tmp_path: Path, spawn: Callable[..., Session]
) -> None:
    recipe = write_recipe(tmp_path, WRITE_RECIPE)
    s = spawn("run", recipe, "--json")
    s.gate()
    s.send("e")
    s.expect(NEW_PARAMS)
    s.send('{"path": 5}')
    step_id, _, shown = s.gate()  # asked again, saying why
    assert step_id == "save"
    assert "your edit was refused" in shown, shown
    s.send("e")
    s.expect(NEW_PARAMS)
    s.send('{"path": "out/edited.txt", "content": "edited"}')
    assert s.finish() == 0, s.transcript
    assert s.result()["steps"]["save"]["status"] == "succeeded"
    assert (tmp_path / "out" / "edited.txt").read_text() == "edited"
    assert not (tmp_path / "out" / "note.txt").exists()


@pytest.mark.slow
def test_an_edit_that_is_not_json_is_refused_and_asked_again(
    tmp_path: Path, spawn: Callable[..., Session]
) -> None:
    """A typo in the one-line JSON is an invalid edit like any other: the gate asks again
    (as for params that fail the schema) instead of denying the step outright."""
    recipe = write_recipe(tmp_path, WRITE_RECIPE)
    s = spawn("run", recipe, "--json")
    s.gate()
    s.send("e")
    s.expect(NEW_PARAMS)
    s.send('{"path": "out/edited.txt", content: oops}')
    step_id, _, shown = s.gate()
    assert step_id == "save"
    assert "your edit was refused" in shown, shown
    s.send("e")
    s.expect(NEW_PARAMS)
    s.send('{"path": "out/edited.txt", "content": "edited"}')
    assert s.finish() == 0, s.transcript
    assert (tmp_path / "out" / "edited.txt").read_text() == "edited"


def test_piped_stdin_without_a_flag_denies_every_gate(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path, WRITE_RECIPE)
    proc = subprocess.run(
        [PLANLOOM, "run", str(recipe), "--json"],
        cwd=tmp_path,
        env=clean_env(),
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, proc.stderr
    step = json.loads(proc.stdout)["steps"]["save"]
    assert step["status"] == "denied"
    assert "--yes" in step["error"], step["error"]
    assert "--policy" in step["error"], step["error"]
    assert not (tmp_path / "out").exists()
    assert "denied" in proc.stderr
