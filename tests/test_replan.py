"""Replanning after a critical failure (`replan: {max: 1}`), end to end from the CLI.

The first plan reads a file that does not exist; the model is told what ran and failed,
and plans again. The step that succeeded is kept — its output is reused, it never runs a
second time — and the run ends succeeded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _procs import planloom

from engine.testing import ChatRequest, FakeOpenAIServer, ScriptedModel

PLANLOOM = str(Path(sys.executable).parent / "planloom")

FIRST_PLAN = {
    "goal": "report on the notes",
    "steps": [
        {"id": "notes", "tool": "fs.read", "params": {"path": "notes.txt"}},
        {"id": "extra", "tool": "fs.read", "params": {"path": "missing.txt"}},
        {
            "id": "report",
            "tool": "fs.read",
            "params": {"path": "${{ steps.extra.output.content | trim }}"},
        },
    ],
}

SECOND_PLAN = {
    "goal": "report on the notes",
    "steps": [
        # the model repeats a succeeded step: it must be dropped, not run again
        {"id": "notes", "tool": "fs.read", "params": {"path": "notes.txt"}},
        {"id": "extra2", "tool": "fs.read", "params": {"path": "other.txt"}},
        {
            "id": "report2",
            "tool": "fs.list",
            "params": {"path": "${{ steps.notes.output.content | trim }}"},
            "depends_on": ["extra2"],
        },
    ],
}


def model(request: ChatRequest) -> dict[str, object]:
    if "The previous plan failed" in request.last_user_text():
        return SECOND_PLAN
    return FIRST_PLAN


def plan_cli(tmp_path: Path, base_url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "PLANLOOM"))}
    return planloom(
        "plan",
        "report on the notes",
        "--capabilities",
        "caps.yaml",
        "--base-url",
        base_url,
        "--model",
        "m",
        "--json",
        *extra,
        cwd=tmp_path,
        environ=env,
        timeout=120,
    )


@pytest.mark.slow
def test_replan_keeps_what_succeeded_and_finishes(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("sub\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "other.txt").write_text("other\n")
    (tmp_path / "caps.yaml").write_text(
        "capabilities: {fs: {root: ., read: true}}\nreplan: {max: 1}\n"
    )
    scripted = ScriptedModel(model)
    with FakeOpenAIServer(scripted) as server:
        done = plan_cli(tmp_path, server.base_url, "--log-file", "run.jsonl")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "replanning after the failure (1 step kept)" in done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "succeeded"
    statuses = {k: v["status"] for k, v in result["steps"].items()}
    assert statuses == {"notes": "succeeded", "extra2": "succeeded", "report2": "succeeded"}
    assert result["steps"]["report2"]["output"]["entries"] == []  # listed the empty `sub`
    # the second planning request told the model what ran and failed
    second = scripted.calls[1].last_user_text()
    assert "- notes: succeeded" in second
    assert "- extra: failed" in second
    events = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    reads_of_notes = [
        e for e in events if e["event"] == "tool.called" and e.get("step_id") == "notes"
    ]
    assert len(reads_of_notes) == 1  # kept, never run again
    assert result["usage"]["llm_calls"] == 2


@pytest.mark.slow
def test_without_replan_the_failure_stands(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("sub\n")
    (tmp_path / "caps.yaml").write_text("capabilities: {fs: {root: ., read: true}}\n")
    with FakeOpenAIServer(ScriptedModel(model)) as server:
        done = plan_cli(tmp_path, server.base_url)
        assert len(server.requests) == 1
    assert done.returncode == 1
    assert json.loads(done.stdout)["steps"]["extra"]["status"] == "failed"


@pytest.mark.slow
def test_a_model_failing_during_planning_is_reported_not_a_traceback(tmp_path: Path) -> None:
    from engine.testing import Fault

    (tmp_path / "caps.yaml").write_text("capabilities: {fs: {root: ., read: true}}\n")
    with FakeOpenAIServer(ScriptedModel(model)) as server:
        server.inject(*[Fault.status(500)] * 4)  # every retry fails (1 s, 2 s, 4 s backoff)
        done = plan_cli(tmp_path, server.base_url)
    assert done.returncode == 1
    assert "planning failed" in done.stderr
    assert "Traceback" not in done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "failed"
    assert "500" in result["errors"][0]
