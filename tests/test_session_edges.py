"""Edges of a session as the `planloom` command runs it: what is checked before anything
runs, in what order, and that every error path under `--json` still prints one JSON object."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from _procs import planloom

from engine.testing import FakeOpenAIServer, ScriptedModel

PLAN: dict[str, Any] = {
    "goal": "Write a note",
    "steps": [{"id": "save", "tool": "fs.write", "params": {"path": "note.txt", "content": "hi"}}],
}


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _invalid_json(stdout: str) -> dict[str, Any]:
    value = json.loads(stdout)
    assert value["status"] == "invalid"
    assert value["errors"], value
    return value  # type: ignore[no-any-return]


def test_a_bad_llm_block_in_capabilities_is_a_configuration_error(tmp_path: Path) -> None:
    _write(
        tmp_path / "caps.yaml",
        """\
        capabilities: {fs: {root: ., write: true}}
        llm: {model: m, temperature: hot}
        """,
    )
    proc = planloom("plan", "Write a note", "--capabilities", "caps.yaml", "--json", cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "--capabilities caps.yaml: llm.temperature" in proc.stderr
    _invalid_json(proc.stdout)


def test_unreadable_capabilities_yaml_under_json_prints_the_problems(tmp_path: Path) -> None:
    _write(tmp_path / "caps.yaml", "capabilities: {fs: [\n")
    proc = planloom("plan", "x", "--capabilities", "caps.yaml", "--json", cwd=tmp_path)
    assert proc.returncode == 2
    assert _invalid_json(proc.stdout)["errors"][0]["rule"]


def test_a_bad_policy_is_refused_before_the_model_is_asked(tmp_path: Path) -> None:
    _write(tmp_path / "caps.yaml", "capabilities: {fs: {root: ., write: true}}\n")
    _write(tmp_path / "policy.yaml", "rules: [{tool: 'fs.*', decision: maybe}]\n")
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN)) as server:
        flags = ["--capabilities", "caps.yaml", "--model", "m", "--policy", "policy.yaml", "--yes"]
        proc = planloom("plan", "Write a note", "--base-url", server.base_url, *flags, cwd=tmp_path)
        asked = len(server.requests)
    assert proc.returncode == 2, proc.stderr
    assert "policy.yaml" in proc.stderr
    assert asked == 0  # nothing was planned with a policy that could not be read
    assert not (tmp_path / "note.txt").exists()


def test_no_log_file_is_left_when_the_run_cannot_start(tmp_path: Path) -> None:
    _write(
        tmp_path / "goal.yaml",
        """\
        version: 1
        name: g
        goal: Write a note
        capabilities: {fs: {root: ., write: true}}
        """,
    )
    proc = planloom("run", "goal.yaml", "--log-file", "run.log", cwd=tmp_path)
    assert proc.returncode == 2
    assert "no model configured" in proc.stderr
    assert not (tmp_path / "run.log").exists()


def test_a_missing_cassette_is_said_before_a_bad_input(tmp_path: Path) -> None:
    _write(
        tmp_path / "r.yaml",
        """\
        version: 1
        name: r
        capabilities: {fs: {}}
        steps: [{id: look, tool: fs.list}]
        """,
    )
    proc = planloom("run", "r.yaml", "-i", "novalue", "--replay", "nope.yaml", cwd=tmp_path)
    assert proc.returncode == 2
    assert "cassette nope.yaml does not exist" in proc.stderr


def test_replaying_a_cassette_whose_plan_is_invalid_here_prints_json(tmp_path: Path) -> None:
    _write(
        tmp_path / "c.yaml",
        """\
        planloom_cassette: 1
        plan:
          version: 1
          name: p
          steps:
            - {id: a, tool: nope.tool}
        """,
    )
    proc = planloom("replay", "c.yaml", "--json", cwd=tmp_path)
    assert proc.returncode == 2
    assert "nope.tool" in json.dumps(_invalid_json(proc.stdout))
