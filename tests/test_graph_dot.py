"""`planloom graph` draws the same edges in every format: the `finally` steps set apart,
their edges among them and from the main steps they read, and, dashed, from the main
graph's last steps to the first `finally` steps. Through the real `planloom` command."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from _procs import planloom

# Main: fetch → build, and lint alone. Finally: report reads build (a template), cleanup
# depends on report and on the main step fetch; notify reads nothing.
RECIPE = """\
version: 1
name: release
capabilities:
  fs: {root: ., write: ["*.txt"]}
steps:
  - id: fetch
    tool: fs.read
    params: {path: notes.txt}
  - id: build
    tool: fs.write
    params: {path: out.txt, content: "${{ steps.fetch.output.content }}"}
  - id: lint
    tool: fs.read
    params: {path: notes.txt}
finally:
  - id: report
    tool: fs.write
    params: {path: report.txt, content: "${{ steps.build.status }} ${{ run.status }}"}
  - id: cleanup
    tool: fs.write
    params: {path: done.txt, content: done}
    depends_on: [report, fetch]
  - id: notify
    tool: fs.write
    params: {path: notify.txt, content: "${{ run.status }}"}
"""
MAIN = {"fetch", "build", "lint"}
FINALLY = {"report", "cleanup", "notify"}
SOLID = {
    ("fetch", "build"),
    ("report", "cleanup"),  # among the finally steps
    ("build", "report"),  # a finally step reading a main step
    ("fetch", "cleanup"),  # a finally step depending on a main step
}
# From the main graph's last steps (build, lint) to the first finally steps (report,
# notify), where no solid edge joins them already: finally starts once the main graph ends.
DASHED = {("lint", "report"), ("build", "notify"), ("lint", "notify")}

Edges = set[tuple[str, str]]


def _graph(tmp_path: Path, fmt: str, text: str = RECIPE) -> str:
    (tmp_path / "r.yaml").write_text(text, encoding="utf-8")
    proc: subprocess.CompletedProcess[str] = planloom(
        "graph", "r.yaml", "--format", fmt, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def _mermaid_edges(text: str) -> tuple[Edges, Edges]:
    solid = set(re.findall(r"^\s*(\w+) --> (\w+)$", text, re.MULTILINE))
    dashed = set(re.findall(r"^\s*(\w+) -\.-> (\w+)$", text, re.MULTILINE))
    return solid, dashed


def _dot_edges(text: str) -> tuple[Edges, Edges]:
    edge = re.compile(r'^\s*"(\w+)" -> "(\w+)"( \[style=dashed\])?;$', re.MULTILINE)
    found = edge.findall(text)
    return {(a, b) for a, b, d in found if not d}, {(a, b) for a, b, d in found if d}


def _dot_cluster(text: str) -> set[str]:
    """The nodes declared inside the `finally` cluster."""
    block = re.search(r"^\s*subgraph cluster_finally \{\n(.*?)^\s*\}$", text, re.S | re.M)
    assert block, text
    return set(re.findall(r'^\s*"(\w+)" \[', block.group(1), re.MULTILINE))


def test_dot_draws_the_finally_steps_and_their_edges(tmp_path: Path) -> None:
    text = _graph(tmp_path, "dot")

    assert text.startswith('digraph "release" {')
    assert text.rstrip().endswith("}")
    assert text.count("{") == text.count("}")
    solid, dashed = _dot_edges(text)
    assert (solid, dashed) == (SOLID, DASHED)
    assert _dot_cluster(text) == FINALLY
    assert 'label="finally";' in text
    declared = set(re.findall(r'^\s*"(\w+)" \[label=', text, re.MULTILINE))
    assert declared == MAIN | FINALLY  # each node once: the finally ones in the cluster only
    for step in FINALLY:
        assert re.search(rf'^\s*"{step}" \[label="{step}\\nfs.write", style=dashed\];$', text, re.M)


def test_mermaid_draws_the_same_edges(tmp_path: Path) -> None:
    text = _graph(tmp_path, "mermaid")

    assert _mermaid_edges(text) == (SOLID, DASHED)
    block = re.search(r"^\s*subgraph finally\n(.*?)^\s*end$", text, re.S | re.M)
    assert block, text
    assert set(block.group(1).split()) == FINALLY


def test_ascii_names_every_dependency_of_a_finally_step(tmp_path: Path) -> None:
    text = _graph(tmp_path, "ascii")

    rows = {}
    for line in text.splitlines()[1:]:
        head, _, parents = line.partition("←")
        words = head.split()
        step = words[1] if words[0] == "finally" else words[2]  # "layer N step ..."
        rows[step] = (words[0], {p.strip() for p in parents.split(",") if p.strip()})
    assert {step for step, (title, _) in rows.items() if title == "finally"} == FINALLY
    assert {(p, step) for step, (_, parents) in rows.items() for p in parents} == SOLID
    assert text.splitlines()[0] == "release: 3 steps, 3 finally"


@pytest.mark.slow
@pytest.mark.parametrize(
    "recipe",
    ["release", "project-report", "no-finally"],
)
def test_dot_and_mermaid_agree_on_every_edge(tmp_path: Path, recipe: str) -> None:
    root = Path(__file__).resolve().parent.parent
    text = {
        "release": RECIPE,
        "project-report": (root / "recipes" / "project-report.yaml").read_text("utf-8"),
        "no-finally": RECIPE.split("finally:")[0],
    }[recipe]

    dot = _dot_edges(_graph(tmp_path, "dot", text))
    mermaid = _mermaid_edges(_graph(tmp_path, "mermaid", text))

    assert dot == mermaid
    assert dot[0]  # not vacuous: every recipe here has edges
    if recipe == "project-report":  # its finally step reads no step: only "after" edges
        assert dot[1] == {("report", "log_status")}
    if recipe == "no-finally":
        assert "cluster_finally" not in _graph(tmp_path, "dot", text)
