"""The confirmation gate asks in a real terminal (pseudo-terminal via pexpect)."""

from __future__ import annotations

import sys
from pathlib import Path

import pexpect
import pytest

PLANLOOM = str(Path(sys.executable).parent / "planloom")

RECIPE = """\
version: 1
name: gate
capabilities:
  fs: {root: ., write: ["out/**"]}
steps:
  - id: save
    tool: fs.write
    params: {path: out/note.txt, content: "hello"}
"""


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    path = tmp_path / "gate.yaml"
    path.write_text(RECIPE)
    return path


def _spawn(recipe: Path) -> pexpect.spawn:
    return pexpect.spawn(
        PLANLOOM,
        ["run", str(recipe)],
        cwd=str(recipe.parent),
        timeout=30,
        encoding="utf-8",
        dimensions=(40, 120),
    )


@pytest.mark.slow
def test_answering_yes_runs_the_gated_step(recipe: Path) -> None:
    child = _spawn(recipe)
    child.expect(r"step 'save' wants to run fs\.write")
    child.expect(r"\[q\]uit > ")
    child.sendline("y")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert (recipe.parent / "out" / "note.txt").read_text() == "hello"


@pytest.mark.slow
def test_answering_no_denies_and_writes_nothing(recipe: Path) -> None:
    child = _spawn(recipe)
    child.expect(r"\[q\]uit > ")
    child.sendline("n")
    child.expect("denied")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
    assert not (recipe.parent / "out").exists()


@pytest.mark.slow
def test_prompt_shows_the_rendered_params(recipe: Path) -> None:
    child = _spawn(recipe)
    child.expect('"path": "out/note.txt"')
    child.expect(r"\[q\]uit > ")
    child.sendline("n")  # no (an empty answer asks again: there is no default)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
