"""The shipped MCP example, `recipes/mcp-notes/`, runs offline as the README says."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests._procs import planloom, run_json

EXAMPLE = Path(__file__).resolve().parent.parent / "recipes" / "mcp-notes"


def copy_example(tmp_path: Path) -> Path:
    folder = tmp_path / "mcp-notes"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("notes.txt", "__pycache__"))
    return folder


@pytest.mark.slow
def test_the_example_runs_and_its_gated_step_writes_only_in_the_servers_folder(
    tmp_path: Path,
) -> None:
    folder = copy_example(tmp_path)
    proc, result = run_json("notes.yaml", folder)
    assert proc.returncode == 0, proc.stderr
    assert result["outputs"]["hits"] == [
        "release 0.3: cut the branch on Monday",
        "ask Dana about the release notes",
    ]
    assert result["outputs"]["notes"][-1] == "2 notes mention release"
    assert (folder / "data" / "notes.txt").read_text() == "2 notes mention release\n"
    assert [a["step_id"] for a in result["approvals"]] == ["add"]


@pytest.mark.slow
def test_unattended_the_examples_write_is_denied_and_nothing_is_written(tmp_path: Path) -> None:
    folder = copy_example(tmp_path)
    proc = planloom("run", "notes.yaml", "--json", cwd=folder)
    result = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert result["steps"]["find"]["status"] == "succeeded"
    assert result["steps"]["add"]["status"] == "denied"
    assert not (folder / "data" / "notes.txt").exists()


@pytest.mark.slow
def test_the_examples_ungranted_tool_is_refused_at_validation(tmp_path: Path) -> None:
    folder = copy_example(tmp_path)
    recipe = folder / "notes.yaml"
    recipe.write_text(
        recipe.read_text().replace("tool: mcp.notes.list_notes", "tool: mcp.notes.clear")
    )
    proc = planloom("validate", "notes.yaml", "--json", cwd=folder)
    assert proc.returncode == 2
    (problem,) = json.loads(proc.stdout)
    assert problem["rule"] == "not-granted"
    assert "grant does not allow" in problem["message"]
