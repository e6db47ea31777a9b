"""`--json` on `planloom graph` and `planloom schema`, through the real CLI: the graph as
data (the edges the pictures draw, with their kind), problems as JSON, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

from tests._procs import planloom

RECIPE = """\
version: 1
name: g
capabilities:
  fs: {root: ., read: true, write: ["out/*"]}
steps:
  - {id: a, tool: fs.read, params: {path: in.txt}}
  - {id: b, tool: fs.read, params: {path: "${{ steps.a.status }}.txt"}, can_fail: true}
  - {id: c, tool: fs.list, params: {path: .}, depends_on: [a]}
finally:
  - {id: tidy, tool: fs.list, params: {path: out}}
  - {id: note, tool: fs.write, params: {path: out/n.txt, content: "${{ steps.b.status }}"}}
"""


def test_graph_json_gives_steps_and_edges_with_their_kind(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(RECIPE)

    proc = planloom("graph", "r.yaml", "--json", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["name"] == "g"
    assert data["steps"] == [
        {"id": "a", "tool": "fs.read", "section": "steps", "flags": []},
        {"id": "b", "tool": "fs.read", "section": "steps", "flags": ["can_fail"]},
        {"id": "c", "tool": "fs.list", "section": "steps", "flags": []},
        {"id": "tidy", "tool": "fs.list", "section": "finally", "flags": []},
        {"id": "note", "tool": "fs.write", "section": "finally", "flags": []},
    ]
    edges = {(e["from"], e["to"], e["kind"]) for e in data["edges"]}
    assert edges == {
        ("a", "b", "needs"),
        ("a", "c", "needs"),
        ("b", "note", "needs"),  # a finally step reading a main step
        # the finally steps start once the main graph (its last steps: b, c) ended
        ("b", "tidy", "after"),
        ("c", "tidy", "after"),
        ("c", "note", "after"),
    }
    assert len(data["edges"]) == len(edges)


def test_graph_json_and_format_together_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(RECIPE)

    proc = planloom("graph", "r.yaml", "--json", "--format", "dot", cwd=tmp_path)

    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "--json and --format do not go together" in proc.stderr


def test_graph_json_of_an_invalid_recipe_gives_its_problems_as_json(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(RECIPE.replace("tool: fs.list", "tool: fs.lsit", 1))

    proc = planloom("graph", "r.yaml", "--json", cwd=tmp_path)

    assert proc.returncode == 2
    [problem] = json.loads(proc.stdout)
    assert (problem["rule"], problem["line"]) == ("unknown-tool", 8)


def test_graph_without_json_still_draws(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(RECIPE)

    proc = planloom("graph", "r.yaml", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("g: 3 steps, 2 finally")


def test_schema_accepts_json(tmp_path: Path) -> None:
    plain = planloom("schema", cwd=tmp_path)
    flagged = planloom("schema", "--json", cwd=tmp_path)

    assert flagged.returncode == 0, flagged.stderr
    assert json.loads(flagged.stdout) == json.loads(plain.stdout)
