"""`fs.search` walks only where its glob can match and not into tool folders, and a call
cut short at a limit says so: through the real `planloom` command (summary, `-v` events,
`--json`, `planloom show`, the live view in a terminal), and the glob's reach as a property.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests._procs import planloom, run_json
from tests._pty import drawn

RECIPES = Path(__file__).parent.parent / "recipes"
PLANLOOM = str(Path(sys.executable).parent / "planloom")


def tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def searched(result: dict[str, Any], step: str) -> dict[str, Any]:
    """A search step's output, the step having succeeded."""
    assert result["steps"][step]["status"] == "succeeded", result["steps"][step]
    output: dict[str, Any] = result["steps"][step]["output"]
    return output


def paths(output: dict[str, Any]) -> list[str]:
    return sorted({m["path"] for m in output["matches"]})


# -- the shipped recipe -------------------------------------------------------------------


def big_venv(root: Path, files: int = 20_000) -> None:
    """A virtual environment of `files` files: modules with a class right inside it (where
    `*/*.py` would match them) and thousands more in site-packages."""
    venv = root / ".venv"
    site = venv / "lib" / "python3.12" / "site-packages"
    tree(venv, {"pyvenv.cfg": "home = /usr/bin\n"})
    for i in range(100):
        (venv / f"tool{i}.py").write_text("class X:\n    pass\n")
    for i in range(files - 101):
        package = site / f"pkg{i // 500}"
        package.mkdir(parents=True, exist_ok=True)
        (package / f"m{i}.py").write_text("class X:\n    pass\n" if i % 7 == 0 else "x = 1\n")


@pytest.mark.slow
def test_project_report_counts_the_same_classes_beside_a_big_venv(tmp_path: Path) -> None:
    shutil.copytree(RECIPES, tmp_path / "recipes", ignore=shutil.ignore_patterns(".planloom"))
    tree(
        tmp_path,
        {
            "README.md": "# demo\n",
            "engine/core.py": "class Engine:\n    pass\n\n\nclass Plan:\n    pass\n",
            "planners/llm.py": "class Planner:\n    pass\n",
            "capabilities/fs.py": "class Fs:\n    pass\n",
        },
    )
    run = ("run", "recipes/project-report.yaml", "--yes", "--json")
    assert planloom(*run, cwd=tmp_path).returncode == 0  # its .planloom folders exist now
    before = json.loads(planloom(*run, cwd=tmp_path).stdout)
    big_venv(tmp_path)
    proc = planloom(*run, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    after = json.loads(proc.stdout)

    assert before["outputs"]["classes"] == after["outputs"]["classes"] == 4
    assert after["steps"]["big_project"]["status"] == before["steps"]["big_project"]["status"]
    sources_before, sources = searched(before, "sources"), searched(after, "sources")
    assert paths(sources) == ["capabilities/fs.py", "engine/core.py", "planners/llm.py"]
    assert sources["truncated"] is False
    assert after["steps"]["sources"]["warnings"] is None
    # 20,000 files beside it, and the walk looked at one entry more: the `.venv` folder.
    assert sources["visited"] == sources_before["visited"] + 1, (sources_before, sources)


# -- where the walk goes ------------------------------------------------------------------

SKIPS = """\
version: 1
name: skips
capabilities:
  fs: {root: ., read: true}
steps:
  - {id: top, tool: fs.search, params: {pattern: "^class ", glob: "*/*.py"}}
  - {id: everywhere, tool: fs.search, params: {pattern: "^class "}}
  - {id: named, tool: fs.search, params: {pattern: "^class ", glob: "myenv/*.py"}}
  - {id: inside, tool: fs.search, params: {pattern: "^class ", path: myenv, glob: "*.py"}}
  - {id: venv, tool: fs.search, params: {pattern: "^class ", glob: ".venv/**"}}
  - {id: modules, tool: fs.search, params: {pattern: "^class ", glob: "**/node_modules/*.py"}}
"""


def test_tool_folders_are_searched_only_when_named(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {
            "r.yaml": SKIPS,
            "pkg/a.py": "class A:\n",
            "pkg/deep/b.py": "class B:\n",
            "myenv/pyvenv.cfg": "home = /usr/bin\n",  # a virtual environment by any name
            "myenv/c.py": "class C:\n",
            ".venv/pyvenv.cfg": "home = /usr/bin\n",
            ".venv/d.py": "class D:\n",
            "node_modules/e.py": "class E:\n",
            "web/node_modules/f.py": "class F:\n",
            "pkg/__pycache__/g.py": "class G:\n",
            ".git/h.py": "class H:\n",
        },
    )
    proc, result = run_json("r.yaml", tmp_path)

    assert proc.returncode == 0, proc.stderr
    assert paths(searched(result, "top")) == ["pkg/a.py"]
    assert paths(searched(result, "everywhere")) == ["pkg/a.py", "pkg/deep/b.py"]
    assert paths(searched(result, "named")) == ["myenv/c.py"]
    assert paths(searched(result, "inside")) == ["myenv/c.py"]
    assert paths(searched(result, "venv")) == [".venv/d.py"]
    assert paths(searched(result, "modules")) == ["node_modules/e.py", "web/node_modules/f.py"]


PRUNED = """\
version: 1
name: pruned
capabilities:
  fs: {root: ., read: true}
steps:
  - {id: under, tool: fs.search, params: {pattern: "^class ", glob: "src/**/*.py"}}
  - {id: here, tool: fs.search, params: {pattern: "^class ", glob: "*.py"}}
  - {id: two, tool: fs.search, params: {pattern: "^class ", glob: "*/*.py"}}
"""


def test_the_walk_enters_only_folders_where_the_glob_can_match(tmp_path: Path) -> None:
    project = tmp_path / "project"
    tree(project, {"r.yaml": PRUNED, "top.py": "class Top:\n", "src/x/y.py": "class Y:\n"})
    tree(project, {f"other/sub{i % 5}/m{i}.py": "class M:\n" for i in range(300)})
    store = tmp_path / "runs.db"  # not in the folder searched
    proc = planloom("run", "r.yaml", "--json", "--store", store, cwd=project)

    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    under, here, two = (searched(result, step) for step in ("under", "here", "two"))
    # r.yaml, top.py, src and other; then src/x and src/x/y.py
    assert (paths(under), under["visited"]) == (["src/x/y.py"], 4 + 2)
    assert (paths(here), here["visited"]) == (["top.py"], 4)
    # one level down (src/x, other/sub0..4), never two: none of the 300 modules
    assert (paths(two), two["visited"], two["truncated"]) == ([], 4 + 1 + 5, False)


# -- a call cut short says so ------------------------------------------------------------

CUT = """\
version: 1
name: cut
capabilities:
  fs: {root: ., read: true, max_read_bytes: 100}
  shell: {allow: [seq], cwd: ., max_output: 100}
steps:
  - {id: find, tool: fs.search, params: {pattern: needle, path: many, max_entries: 5}}
  - {id: head, tool: fs.read, params: {path: big.txt}}
  - {id: each, for_each: [small.txt, big.txt], tool: fs.read, params: {path: "${{ item }}"}}
  - id: count
    tool: shell.run
    params: {argv: [seq, "1", "100000"], check: false}
    confirm: never
  - {id: whole, tool: fs.read, params: {path: small.txt}}
"""


def cut_project(root: Path) -> None:
    files = {f"many/f{i:02d}.txt": f"needle {i}\n" for i in range(30)}
    tree(root, {"r.yaml": CUT, "big.txt": "x" * 500 + "\n", "small.txt": "small\n", **files})


@pytest.mark.slow
def test_truncated_outputs_warn_in_the_summary_the_events_and_json(tmp_path: Path) -> None:
    cut_project(tmp_path)

    plain = planloom("run", "r.yaml", cwd=tmp_path)
    verbose = planloom("run", "r.yaml", "-v", "--json", cwd=tmp_path)

    assert plain.returncode == verbose.returncode == 0, plain.stderr
    result = json.loads(verbose.stdout)
    assert {step["status"] for step in result["steps"].values()} == {"succeeded"}
    warnings = {step_id: step["warnings"] for step_id, step in result["steps"].items()}
    assert warnings["whole"] is None
    for step_id, action in [("find", "fs.search"), ("head", "fs.read"), ("count", "shell.run")]:
        assert warnings[step_id] is not None, warnings
        assert [w.startswith(f"{action} output truncated") for w in warnings[step_id]] == [True]
    assert "max_entries=5" in warnings["find"][0]
    assert "max_read_bytes" in warnings["head"][0]
    assert "max_output" in warnings["count"][0]
    [item] = warnings["each"]
    assert item.startswith("item 1: fs.read output truncated")  # big.txt, not small.txt
    # -v: one event per cut call, naming its step
    logged = [line for line in verbose.stderr.splitlines() if "step.warning" in line]
    assert len(logged) == 4, verbose.stderr
    assert any("step_id=find" in line and "fs.search output truncated" in line for line in logged)
    # the summary table, in the row of each step
    rows = flat_rows(plain.stderr)
    for step_id, action in [("find", "fs.search"), ("head", "fs.read"), ("count", "shell.run")]:
        assert f"warning: {action} output truncated" in rows[step_id], plain.stderr
    assert "warning" not in rows["whole"]
    # and `planloom show`, from the run's journal
    shown = planloom("show", result["run_id"], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "warning: fs.search output truncated" in flat_rows(shown.stdout + shown.stderr)["find"]


def flat_rows(summary: str) -> dict[str, str]:
    """Each step's row of the summary table, its wrapped lines joined: step id → text."""
    rows: dict[str, str] = {}
    step = None
    for line in summary.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if not cells:
            continue
        step = cells[0] or step
        if step is not None:
            rows[step] = " ".join([rows.get(step, ""), *cells[1:]])
    return {step: re.sub(r"\s+", " ", text) for step, text in rows.items()}


def test_the_live_view_shows_a_truncated_call_as_it_happens(tmp_path: Path) -> None:
    cut_project(tmp_path)
    status, text = drawn(tmp_path, "run", "r.yaml", width=200, NO_COLOR="1")
    assert status == 0, text
    # the live line names the step; the summary's note does not repeat it
    assert "warning: find: fs.search output truncated" in text, text
    assert "warning: each: item 1: fs.read output truncated" in text, text


# -- the glob's reach ---------------------------------------------------------------------

SEGMENTS = st.sampled_from(["a", "b", ".v", "*", "?", "**", "a*", "*b", "[ab]", "[!a]"])
NAMES = st.sampled_from(["a", "b", ".v", "ab", "ba", "c"])


@given(st.lists(SEGMENTS, min_size=1, max_size=5), st.lists(NAMES, min_size=2, max_size=6))
def test_a_folder_holding_a_match_is_always_entered(segments: list[str], parts: list[str]) -> None:
    from engine.globs import compile_glob, glob_reach

    glob, path = "/".join(segments), "/".join(parts)
    if compile_glob(glob).fullmatch(path) is None:
        return
    reach = glob_reach(glob)
    for depth in range(1, len(parts)):
        assert reach.enters("/".join(parts[:depth])), (glob, path, depth)


def test_a_glob_reaches_no_further_than_it_can_match() -> None:
    from engine.globs import glob_reach

    assert not glob_reach("*/*.py").enters("engine/app")
    assert not glob_reach("*.py").enters("engine")
    assert not glob_reach("src/**/*.py").enters("lib")
    assert glob_reach("src/**/*.py").enters("src/a/b/c")
    assert glob_reach("**/*.py").enters("a/b/c/d")
    assert glob_reach("a**b/x").enters("q/r")  # `**` inside a segment spans segments
    assert glob_reach(".venv/**").literals == {".venv"}
