"""What the README tells a new user holds, through the real `planloom` command: the
scripted-model example runs as written, the table of action outputs is what actions give,
`${% %}` blocks render, policy list patterns match as a prefix, and recording through
`engine.testing.replay()` decides gates by `approve`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _procs import TIMEOUT, env, planloom

from engine.testing import FakeOpenAIServer, ScriptedModel, replay

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


@pytest.mark.slow
def test_the_scripted_model_example_runs_as_written(tmp_path: Path) -> None:
    found = re.search(r"```python\n(# scripted\.py.*?)```", README, re.S)
    assert found, "the README's scripted-model example is missing"
    (tmp_path / "scripted.py").write_text(found.group(1))
    proc = subprocess.run(
        [sys.executable, "scripted.py"],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "The notes say: ship on friday"


def test_the_table_of_outputs_is_what_the_actions_give(tmp_path: Path) -> None:
    rows = dict(re.findall(r"^\| (`[a-z.]+`(?:, `[a-z.]+`)*) \| `\{([a-z_, ]+)\}`", README, re.M))
    documented = {
        name.strip("`"): [field.strip() for field in fields.split(",")]
        for names, fields in rows.items()
        for name in names.split(", ")
    }
    proc = planloom("tools", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    actual = {
        tool["name"]: list(tool["output"]["properties"])
        for tool in json.loads(proc.stdout)
        if tool["output"] is not None
    }
    assert actual  # the built-in actions say what they give
    assert {name: documented.get(name) for name in actual} == actual


def test_blocks_and_comments_render(tmp_path: Path) -> None:
    recipe = tmp_path / "blocks.yaml"
    recipe.write_text(
        textwrap.dedent(
            """\
            version: 1
            name: blocks
            inputs:
              files: {type: array, default: [a.txt, b.txt]}
            capabilities:
              fs: {root: ., read: true}
            steps:
              - id: look
                tool: fs.list
                params: {path: .}
            outputs:
              list: "${% for f in inputs.files %}- ${{ f }}\\n${% endfor %}${# not shown #}"
            """
        )
    )
    proc = planloom("run", str(recipe), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["outputs"] == {"list": "- a.txt\n- b.txt\n"}


def test_a_policy_list_pattern_matches_as_a_prefix(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(
        "version: 1\nrules:\n  - {tool: shell.run, params: {argv: [echo, '*']}, decision: allow}\n"
    )
    recipe = tmp_path / "echo.yaml"
    recipe.write_text(
        textwrap.dedent(
            """\
            version: 1
            name: echo
            capabilities:
              shell: {allow: [echo]}
            steps:
              - id: say
                tool: shell.run
                params: {argv: [echo, hello, and, more]}
            """
        )
    )
    proc = planloom("run", str(recipe), "--json", "--policy", "policy.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["steps"]["say"]["output"]["stdout"] == "hello and more\n"
    [decision] = result["approvals"]
    assert (decision["approved"], decision["by"]) == (True, "policy:1")


WRITE = """\
version: 1
name: writes
capabilities:
  fs: {root: ., write: ["out.txt"]}
steps:
  - id: save
    tool: fs.write
    params: {path: out.txt, content: hi}
    can_fail: true
"""


def test_recording_through_replay_decides_gates_by_approve(tmp_path: Path) -> None:
    recipe = tmp_path / "writes.yaml"
    recipe.write_text(WRITE)
    with FakeOpenAIServer(ScriptedModel.sequence()) as server:
        denied = replay(
            tmp_path / "denied.yaml", recipe, mode="all", base_url=server.base_url, model="m"
        )
        approved = replay(
            tmp_path / "approved.yaml",
            recipe,
            mode="all",
            base_url=server.base_url,
            model="m",
            approve=True,
        )
    assert denied.steps["save"].status == "failed_acceptable"
    assert [(d.approved, d.by) for d in denied.approvals] == [(False, "fail-closed")]
    assert approved.steps["save"].status == "succeeded"
    assert [(d.approved, d.by) for d in approved.approvals] == [(True, "--yes")]
    assert (tmp_path / "out.txt").read_text() == "hi"
