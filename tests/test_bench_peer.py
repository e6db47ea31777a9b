"""`bench/peer.py` (planloom against LangGraph) runs where LangGraph is not installed.

LangGraph is a bench-only dependency (the `peer` extra), not a test one, so these tests run
the bench as a machine without it does: a folder first on `PYTHONPATH` holds a `langgraph`
package whose import fails as a missing package's does, so the bench sees no LangGraph
even where the `peer` extra is installed. Nothing here is timed.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _procs import env

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120  # seconds: four fresh processes on a loaded 2-core machine


def without_langgraph(tmp_path: Path) -> dict[str, str]:
    """An environment in which `import langgraph` fails as it does where it is missing."""
    package = tmp_path / "hidden" / "langgraph"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'langgraph'\", name='langgraph')\n"
    )
    return env(PYTHONPATH=str(package.parent))


def peer(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "bench/peer.py", *args],
        cwd=ROOT,
        env=without_langgraph(tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def test_without_langgraph_the_bench_says_how_to_install_it_and_exits_2(tmp_path: Path) -> None:
    done = peer(tmp_path, "--sizes", "200", "--repeat", "1")

    assert done.returncode == 2, done.stderr
    assert "LangGraph is not installed" in done.stderr
    assert "pip install -e '.[peer]'" in done.stderr
    assert "--planloom-only" in done.stderr
    assert done.stdout == ""  # no figures: nothing was measured


@pytest.mark.slow
def test_planloom_only_reports_planloom_and_its_journal_without_langgraph(tmp_path: Path) -> None:
    done = peer(
        tmp_path, "--sizes", "200", "--repeat", "1", "--planloom-only", "--journal", "--json"
    )

    assert done.returncode == 0, done.stderr[-3000:]
    figures: dict[str, Any] = json.loads(done.stdout)
    assert figures["sides"] == ["floor", "planloom", "planloom_journal"]
    assert figures["langgraph"] is None
    assert figures["width"] == figures["max_parallel"] == 50
    [size] = figures["sizes"]
    assert size["steps"] == 200
    us = size["us_per_step"]
    assert not any(key.startswith("langgraph") for key in us)
    assert "ratio_langgraph_planloom" not in size
    for key in ("floor", "planloom_whole", "planloom_execute", "planloom_parse"):
        assert len(us[key]["runs"]) == 1, key
        assert us[key]["median"] == us[key]["runs"][0] > 0, key
    whole = us["planloom_whole"]["median"]
    parts = sum(us[f"planloom_{part}"]["median"] for part in ("parse", "validate", "execute"))
    assert whole == pytest.approx(parts)  # one run: the sum of its phases
    assert us["planloom_execute"]["median"] < whole
    assert size["ratio_to_floor"] == {"planloom": whole / us["floor"]["median"]}
    assert set(size["rss_peak_mib"]) == {"planloom", "floor", "planloom_journal"}
    # the journaled run (its journal checked whole by the bench): what the journal adds
    journaled = us["planloom_journal_execute"]["median"] - us["planloom_execute"]["median"]
    assert size["persistence"] == {"journal_added": {"median": journaled, "runs": [journaled]}}


def langgraph_side() -> ModuleType:
    """bench/_langgraph_side.py, imported (it imports LangGraph only when it runs a graph)."""
    path = ROOT / "bench" / "_langgraph_side.py"
    if str(path.parent) not in sys.path:  # (as when it runs: its folder is on the path)
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("bench_langgraph_side", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


def test_the_langgraph_side_refuses_a_wrong_result() -> None:
    side = langgraph_side()
    expected = {"a": 0, "b": 0, "c": 1}

    side.check(dict(expected), expected, "3 steps")  # a right result passes
    with pytest.raises(SystemExit, match=r"3 steps: .* \(1 of 3 steps, e\.g\. 'c'\)"):
        side.check({"a": 0, "b": 0, "c": 2}, expected, "3 steps")
    with pytest.raises(SystemExit, match=r"e\.g\. 'c'"):
        side.check({"a": 0, "b": 0}, expected, "3 steps")  # a step that never ran


def test_langgraph_gets_a_recursion_limit_above_the_dag_depth() -> None:
    side = langgraph_side()
    chain = [side.Node("a", (), 0), side.Node("b", ("a",)), side.Node("c", ("b", "a"))]
    fan = [side.Node("a", (), 0), side.Node("b", (), 1), side.Node("c", ("a", "b"))]

    assert side.depth(chain) == 3
    assert side.depth(fan) == 2
    # one superstep a layer, and one for the input: older LangGraphs stop at 25 by default
    assert side.recursion_limit(chain) == 4


def test_help_explains_each_flag_and_hides_the_child_ones(tmp_path: Path) -> None:
    done = peer(tmp_path, "--help")  # without LangGraph: --help needs none of it

    assert done.returncode == 0, done.stderr
    for flag in ("--sizes", "--width", "--repeat", "--seed", "--journal", "--planloom-only"):
        assert flag in done.stdout, flag
    assert "--json" in done.stdout
    assert "pip install -e '.[peer]'" in " ".join(done.stdout.split())  # however it wraps
    assert "--child" not in done.stdout  # the hidden flags a bench spawns itself with
    assert "--side" not in done.stdout
