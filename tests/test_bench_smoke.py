"""The benchmarks `bench/scale.py`, `bench/makespan.py` and `bench/json_recipes.py` still run.

Each bench runs at a tiny size in a subprocess, from the repository root as documented,
with `--json`; nothing here is timed. Each bench checks its own runs (every step succeeded
with the right output, ran once, after its dependencies) and exits non-zero otherwise;
these tests assert it exits 0, reports what it says it reports, and that its checker
refuses a wrong run.
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

from engine.model import Limits

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 300  # seconds: fresh processes on a loaded 2-core machine; a hang still fails


def run_bench(script: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, f"bench/{script}", *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures: dict[str, Any] = json.loads(done.stdout)
    return figures


def bench_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_scale_reports_every_figure_per_size() -> None:
    figures = run_bench("scale.py", "--sizes", "300,200", "--repeat", "1")

    sizes = figures["sizes"]
    assert [s["steps"] for s in sizes] == [200, 300]  # sorted: flatness is against the first
    assert figures["width"] == figures["max_parallel"] == 50
    for size in sizes:
        us = size["us_per_step"]
        for key in ("parse", "validate", "execute", "pipeline", "floor"):
            assert 0 < us[key]["min"] <= us[key]["median"] <= us[key]["max"], key
        for key, cpu in size["cpu_us_per_step"].items():
            assert 0 < cpu["min"] <= cpu["median"] <= cpu["max"], key
        parts = us["parse"]["median"] + us["validate"]["median"] + us["execute"]["median"]
        assert us["pipeline"]["median"] == pytest.approx(parts)  # one run: the sum of its parts
        assert size["ratio_pipeline_floor"] == pytest.approx(
            us["pipeline"]["median"] / us["floor"]["median"]
        )
        assert size["repeat"] == 1
        assert size["events_per_step"] >= 2  # at least a step's start and end
        for side in ("pipeline", "floor"):
            rss = size["rss_mib"][side]
            assert 0 < rss["before_run"]["median"] <= rss["peak"]["median"]
        assert size["targets_met"]["peak_rss"] is None  # that target is for 100,000 steps
    for kind in ("flatness", "cpu_flatness"):
        assert sizes[0][kind] == {"pipeline": 1.0, "execute": 1.0, "floor": 1.0}
    later = sizes[1]
    assert later["flatness"]["pipeline"] == pytest.approx(
        later["us_per_step"]["pipeline"]["median"] / sizes[0]["us_per_step"]["pipeline"]["median"]
    )


def test_makespan_runs_every_executor_within_its_cap() -> None:
    figures = run_bench(
        "makespan.py",
        *("--chain", "3", "--layers", "3", "--width", "4"),
        *("--time-scale", "0.05", "--repeat", "1", "--cap", "2"),
    )

    dag = figures["dag"]
    assert dag["steps"] == 3 + 3 * 4
    assert dag["critical_path_steps"] == len(dag["critical_path"]) >= 3  # at least the chain
    # The recipe leaves max_parallel to the engine, and the bench reports the engine's default.
    assert figures["recipe_sets_max_parallel"] is False
    assert figures["default_max_parallel"] == Limits().max_parallel
    executors = figures["executors"]
    assert set(executors) == {
        "engine_default",
        "engine_width",
        "start_when_ready",
        "supersteps",
        "engine_cap_2",
    }
    assert executors["engine_width"]["max_parallel"] == dag["width"]
    for name, executor in executors.items():
        # sleeps cannot end before they are due: no schedule beats the critical path
        assert executor["ratio"] >= 0.99, name
        assert executor["makespan_seconds"]["median"] > 0, name
        cap = executor["max_parallel"]
        if cap is not None:  # the engine held its cap: never more steps running at once
            assert 1 <= executor["peak_concurrency"] <= cap, name
    assert figures["target_met"] == (executors["engine_default"]["ratio"] <= 1.1)


@pytest.mark.parametrize(
    ("spans", "wrong"),
    [
        ([("a", 0.0, 1.0), ("b", 0.5, 2.0)], "started before its dependency a ended"),
        ([("a", 0.0, 1.0), ("b", 1.0, 2.0), ("b", 2.0, 3.0)], "not run exactly once"),
        ([("a", 0.0, 1.0)], "not run exactly once"),
    ],
)
def test_makespan_refuses_a_wrong_run(spans: list[tuple[str, float, float]], wrong: str) -> None:
    makespan = bench_module("makespan")
    tasks = [makespan.Task("a", 1.0, ()), makespan.Task("b", 1.0, ("a",))]
    recorder = makespan.Recorder()
    recorder.spans = spans

    with pytest.raises(SystemExit, match=wrong):
        recorder.check(tasks, "a run")


@pytest.mark.parametrize("script", ["scale.py", "makespan.py"])
def test_help_explains_each_flag(script: str) -> None:
    done = subprocess.run(
        [sys.executable, f"bench/{script}", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    flags = {
        "scale.py": ["--sizes", "--width", "--repeat", "--repeat-large", "--seed", "--json"],
        "makespan.py": ["--chain", "--layers", "--width", "--time-scale", "--repeat", "--seed"],
    }[script]
    for flag in [*flags, "--json"]:
        assert flag in done.stdout, flag
    assert "--child" not in done.stdout  # the hidden flag a bench spawns itself with


def test_overhead_tracing_reports_off_and_on_and_counts_the_exported_spans() -> None:
    figures = run_bench("overhead.py", "--tracing-only", "--steps", "100", "--repeat", "1")
    assert figures["tracing_steps"] == 100
    assert figures["tracing_spans_per_run"] == 301  # a run span, and 3 per step
    for key in ("tracing_off_added_us_per_step", "tracing_on_added_us_per_step"):
        assert isinstance(figures[key], float)
    assert figures["tracing_off_target_us_per_step"] == 1.0
    assert "store_steps" not in figures


@pytest.mark.slow
def test_dask_bench_runs_both_sides_and_reports_speedup_and_dispatch() -> None:
    figures = run_bench(
        "dask.py", "--items", "4", "--seconds", "0.02", "--noops", "20", "--workers", "2"
    )
    assert figures["items"] == 4
    assert figures["workers"] == 2
    assert 1 <= figures["worker_processes_used"] <= 2
    for key in ("speedup", "noop_local_us_per_call", "noop_dask_us_per_call"):
        assert figures[key] > 0


def test_json_recipes_reports_both_readers_and_the_data_path() -> None:
    figures = run_bench("json_recipes.py", "--sizes", "300", "--data-sizes", "20", "--repeat", "2")
    [texts] = figures["texts"]
    assert texts["steps"] == 300
    assert set(texts["runs"]) == {"yaml", "json"}
    assert all(len(runs) == 2 for runs in texts["runs"].values())
    assert len(texts["ratios"]) == 2
    assert 0 < texts["bytes"]["yaml"] < texts["bytes"]["json"] * 2
    [data] = figures["data"]
    assert set(data["runs"]) == {"yaml round trip", "data", "data, then shown"}
    assert all(value > 0 for value in data["us_per_step"].values())
