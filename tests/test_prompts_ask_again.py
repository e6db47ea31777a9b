"""A person who mistypes at a prompt is asked again; only the end of input fails closed.

Through the real `planloom` command in a pseudo-terminal (pexpect): a gate or the plan
review menu given an unknown key or a bare Enter says what the valid answers are and asks
again, instead of taking it as "no" (a denied step, exit 1; a rejected plan, exit 3). The
prompts say there is no default. Closing the input (Ctrl-D) still fails closed, and is
never read as an answer (a `human.ask` question is not answered "n", a plan is not saved
to a file named "n").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.testing import FakeOpenAIServer, ScriptedModel
from tests._pty import Session, spawning

GATE_KEYS = r"\[a\]pprove  \[d\]eny  \[e\]dit params  \[A\]pprove all remaining  \[q\]uit > "
PLAN_KEYS = r"\[a\]pprove  \[e\]dit  \[r\]eject  \[s\]ave as recipe > "
GATE_AGAIN = r"type a, d, e, A or q"
PLAN_AGAIN = r"type a, e, r or s"

RECIPE = """\
version: 1
name: gate
capabilities:
  fs: {root: ., write: ["out/**"]}
steps:
  - id: save
    tool: fs.write
    params: {path: out/note.txt, content: hello}
"""

PLAN: dict[str, Any] = {
    "goal": "Write a note",
    "steps": [
        {"id": "save", "tool": "fs.write", "params": {"path": "out/a.txt", "content": "planned"}}
    ],
}


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Session]]:
    """spawn(*args): `planloom ARGS` in a pty in tmp_path; closed at teardown."""
    with spawning(tmp_path) as start:
        yield start


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    path = tmp_path / "gate.yaml"
    path.write_text(RECIPE, encoding="utf-8")
    return path


def plan_args(server: FakeOpenAIServer) -> list[str]:
    return ["plan", PLAN["goal"], "--capabilities", "caps.yaml", "--base-url", server.base_url,
            "--model", "m", "--json"]  # fmt: skip


@pytest.fixture
def caps(tmp_path: Path) -> Path:
    path = tmp_path / "caps.yaml"
    path.write_text('capabilities:\n  fs: {root: ., write: ["out/**"]}\n', encoding="utf-8")
    return path


# -- gates ---------------------------------------------------------------------------------


def test_an_unknown_key_at_a_gate_asks_again_and_a_then_approves(
    tmp_path: Path, recipe: Path, spawn: Callable[..., Session]
) -> None:
    s = spawn("run", recipe, "--json")
    s.expect(r"step 'save' wants to run fs\.write")
    s.expect(GATE_KEYS)
    s.send("x")
    s.asked_again(rf"'x' is not an answer here: {GATE_AGAIN}", GATE_KEYS)
    s.send("a")
    assert s.finish() == 0, s.transcript
    assert s.result()["steps"]["save"]["status"] == "succeeded"
    assert (tmp_path / "out" / "note.txt").read_text(encoding="utf-8") == "hello"
    assert s.transcript.count("wants to run") == 1  # asked again without the whole gate


def test_a_bare_enter_at_a_gate_asks_again_and_d_then_denies(
    tmp_path: Path, recipe: Path, spawn: Callable[..., Session]
) -> None:
    s = spawn("run", recipe, "--json")
    s.expect(GATE_KEYS)
    s.send("")
    s.asked_again(rf"there is no default: {GATE_AGAIN}", GATE_KEYS)
    s.send("d")
    s.expect(r"reason \(optional\) > ")
    s.send("not this one")
    assert s.finish() == 1, s.transcript
    step = s.result()["steps"]["save"]
    assert step["status"] == "denied"
    assert "not this one" in step["error"]
    assert not (tmp_path / "out").exists()


def test_the_gate_prompt_says_there_is_no_default_and_shows_every_key(
    recipe: Path, spawn: Callable[..., Session]
) -> None:
    s = spawn("run", recipe, "--json")
    s.expect(r"\(no default\) " + GATE_KEYS)
    s.send("n")  # the old "no" still denies at once, without asking a reason
    assert s.finish() == 1, s.transcript
    assert s.result()["steps"]["save"]["status"] == "denied"


def test_the_end_of_input_at_a_gate_still_denies(
    tmp_path: Path, recipe: Path, spawn: Callable[..., Session]
) -> None:
    s = spawn("run", recipe, "--json")
    s.expect(GATE_KEYS)
    s.child.sendeof()
    assert s.finish() == 1, s.transcript
    step = s.result()["steps"]["save"]
    assert step["status"] == "denied"
    assert "input ended" in step["error"], step["error"]
    assert not (tmp_path / "out").exists()


# -- the plan review -------------------------------------------------------------------------


@pytest.mark.slow
def test_the_plan_menu_asks_again_after_an_unknown_key_or_enter_then_approves(
    tmp_path: Path, caps: Path, spawn: Callable[..., Session]
) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN)) as server:
        s = spawn(*plan_args(server))
        s.expect(r"\(no default\) " + PLAN_KEYS)
        s.send("x")
        s.asked_again(rf"'x' is not an answer here: {PLAN_AGAIN}", PLAN_KEYS)
        s.send("")
        s.asked_again(rf"there is no default: {PLAN_AGAIN}", PLAN_KEYS)
        s.send("a")
        s.expect(r"step 'save' wants to run fs\.write")
        s.expect(GATE_KEYS)
        s.send("a")
        assert s.finish() == 0, s.transcript
        assert len(server.requests) == 1
    assert s.result()["status"] == "succeeded"
    assert (tmp_path / "out" / "a.txt").read_text(encoding="utf-8") == "planned"


@pytest.mark.slow
def test_the_end_of_input_when_saving_a_plan_saves_nothing(
    tmp_path: Path, caps: Path, spawn: Callable[..., Session]
) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN)) as server:
        s = spawn(*plan_args(server))
        s.expect(PLAN_KEYS)
        s.send("s")
        s.expect(r"save as \[plan\.yaml\] > ")
        s.child.sendeof()  # Ctrl-D: no file name, so nothing is saved
        s.expect(PLAN_KEYS)
        s.send("r")
        assert s.finish() == 3, s.transcript
    made = {p.name for p in tmp_path.iterdir()} - {"caps.yaml", ".planloom", "result-0.json"}
    assert made == set(), made  # before, Ctrl-D was read as "n": the plan was saved to `n`


# -- human.ask shares the prompt ---------------------------------------------------------------

QUESTION = """\
version: 1
name: ask
capabilities: {human: {}}
steps:
  - id: q
    tool: human.ask
    params: {question: "Which branch?"}
"""


def test_the_end_of_input_is_no_answer_to_a_question(
    tmp_path: Path, spawn: Callable[..., Session]
) -> None:
    (tmp_path / "ask.yaml").write_text(QUESTION, encoding="utf-8")
    s = spawn("run", "ask.yaml", "--json")
    s.expect(r"step 'q' asks: Which branch\?")
    s.child.sendeof()
    assert s.finish() == 1, s.transcript
    step = s.result()["steps"]["q"]
    assert step["status"] == "failed"
    assert step["output"] is None
    assert "no default" in step["error"], step["error"]
