"""Engine cost per step as the plan grows: 2,000 to 100,000 steps, against a bare floor.

The DAG is bench/overhead.py's (its builder, imported): layers of `--width` no-op steps
(`bench.noop`, registered with `Registry.function`), each step in layer k > 0 reading one
parent of layer k−1 through `${{ steps.X.output }}` and depending on one or two more
through `depends_on`; `limits.max_parallel` is the width. For each of `--sizes` the bench
times the whole pipeline, as overhead.py's engine side runs it, inside the
`engine._support.gc.heap_frozen` block `planloom` runs every command in (`--library`: without it,
as a program calling the API): YAML text →
`parse_recipe_text` → `validate_plan` → `Executor(...).run()` under `asyncio.run`, with one
`EventBus` subscriber (it counts events; keeping 600,000 of them would be the bench's
memory, not the engine's). The floor is overhead.py's bare start-when-ready asyncio
executor of the same DAG (in-degree counters, a completion queue, the same cap).

Every run is a fresh process (this script with a hidden `--child SIZE` flag): peak memory
(`ru_maxrss`) is a process's lifetime peak, so only a fresh process per run can say what
a run of that size needs. Each child first runs a 200-step DAG as a warm-up (imports,
validators, the event loop), then the timed run, then reads `ru_maxrss` (before checking
anything, so the check's own memory is not counted), then checks that every step
succeeded and every output is the expected value (the floor's outputs too); a wrong run
exits non-zero, and so does this bench. The pipeline child holds nothing the engine does
not: the recipe text is handed over, and the parse result is dropped after validation.
Pipeline and floor children alternate, `--repeat` times per size (`--repeat-large` for
sizes from 50,000), starting with the other side each time, so a drift of the shared
machine hits both alike. Figures are medians in µs per step, with [min–max] of the runs.

Printed per size: parse, validate, execute, pipeline (their sum, per run) and floor
µs/step; pipeline/floor; flatness (µs/step at this size / at the smallest size); the GC's
share; peak RSS of a pipeline run and of a floor run (MiB), and what the process held
before its timed run began. Targets beside them: pipeline ≤ 40 µs/step and execute ≤ 20
µs/step at every size, flatness ≤ 1.2x, peak RSS ≤ 350 MiB at 100,000 steps. The targets
were set on a machine whose floor was 4.0 µs/step (20 µs = 5.0x the floor, 40 µs = 10x);
each size also prints execute and pipeline as multiples of this run's floor, to tell a
slower machine from a slower engine.

Usage:
    .venv/bin/python bench/scale.py [--sizes 2000 10000 100000] [--width 50] [--repeat 3]
                                    [--repeat-large N] [--seed N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from overhead import (
    BASE_DIR,
    DEFAULT_SEED,
    GcClock,
    bare_executor,
    clear_template_caches,
    expected_outputs,
    layered_dag,
    make_registry,
    recipe_json,
    recipe_text,
)

from engine._support.gc import heap_frozen
from engine.capability import Registry
from engine.diagnostics import SourceMap
from engine.events import Event, EventBus
from engine.executor import Executor
from engine.results import RunResult
from engine.validation import validate_plan
from engine.yaml import parse_json_text
from planners.recipe import parse_recipe_text

DEFAULT_SIZES = (2_000, 10_000, 100_000)
DEFAULT_WIDTH = 50
LARGE = 50_000  # sizes from here on repeat `--repeat-large` times
WARM_UP_STEPS = 200
TARGET_PIPELINE_US = 40.0
TARGET_EXECUTE_US = 20.0
TARGET_FLATNESS = 1.2
TARGET_PEAK_MIB = 350.0
TARGET_PEAK_AT = 100_000
REFERENCE_FLOOR_US = 4.0  # the floor on the machine the targets were set on
SIDES = ("pipeline", "floor")
CHILD_TIMEOUT = 1800  # seconds; a hung child fails the bench instead of hanging it


# -- in the child: one timed run in a fresh process ------------------------------------------


def peak_mib() -> float:
    """This process's peak resident set so far, in MiB (`ru_maxrss` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_pipeline(
    box: list[str], registry: Registry, *, library: bool = False, text_format: str = "yaml"
) -> tuple[dict[str, float], RunResult]:
    """Parse, validate and run the recipe text in `box` (taken out of it: the pipeline owns
    the text, as `planloom run` does once it has read the file).

    As `planloom` runs every command (`engine/app/main.py`), the pipeline runs inside
    `heap_frozen`: what exists before it is out of the cyclic collector's way, and what
    loading, validation and compiling keep is frozen as they end. `library` runs it as a
    program calling the API does, without that block. `text_format` is the text's: "yaml",
    or "json" (a recipe a program or a planner wrote, read by `parse_json_text`).
    """
    read = parse_json_text if text_format == "json" else parse_recipe_text
    with contextlib.nullcontext() if library else heap_frozen():
        return _pipeline(box, registry, read)


def _pipeline(
    box: list[str], registry: Registry, read: Callable[[str, str], tuple[Any, SourceMap]]
) -> tuple[dict[str, float], RunResult]:
    clear_template_caches()
    events = 0

    def count(event: Event) -> None:
        nonlocal events
        events += 1

    with GcClock() as gc_clock:
        cpu_started = time.process_time()
        started = time.perf_counter()
        data, source = read(box.pop(), "<bench>")
        parsed = time.perf_counter()
        plan = validate_plan(data, source, registry, base_dir=BASE_DIR, owned=True)
        # What the engine keeps of the parse is its business; the bench keeps none of it.
        del data, source
        validated = time.perf_counter()
        cpu_validated = time.process_time()
        bus = EventBus("bench")
        bus.subscribe(count)
        executor = Executor(plan, registry=registry, base_dir=BASE_DIR, events=bus, run_id="bench")
        result = asyncio.run(executor.run())
        finished = time.perf_counter()
        cpu_finished = time.process_time()
    seconds = {
        "parse": parsed - started,
        "validate": validated - parsed,
        "execute": finished - validated,
        "cpu_pipeline": cpu_finished - cpu_started,
        "cpu_execute": cpu_finished - cpu_validated,
        "gc": gc_clock.seconds,
        "events": float(events),
    }
    return seconds, result


def check_result(result: RunResult, expected: dict[str, Any]) -> str | None:
    """What is wrong with an engine run, if anything."""
    if result.status != "succeeded":
        bad = {k: (s.status, s.error) for k, s in result.steps.items() if s.status != "succeeded"}
        return f"engine run {result.status}: {list(bad.items())[:5]} {result.errors}"
    if len(result.steps) != len(expected):
        return f"engine ran {len(result.steps)} steps, expected {len(expected)}"
    wrong = [k for k, s in result.steps.items() if expected.get(k, object()) != s.output]
    if wrong:
        return f"{len(wrong)} engine outputs differ from the expected, e.g. step {wrong[0]!r}"
    return None


def child_pipeline(
    size: int, width: int, seed: int, library: bool, text_format: str = "yaml"
) -> dict[str, Any]:
    registry = make_registry()
    text_of = recipe_json if text_format == "json" else recipe_text
    warm = layered_dag(WARM_UP_STEPS, width, seed)
    warm_box = [text_of(warm, width)]
    _, result = run_pipeline(warm_box, registry, library=library, text_format=text_format)
    if problem := check_result(result, expected_outputs(warm)):
        raise SystemExit(f"warm-up: {problem}")
    del result
    nodes = layered_dag(size, width, seed)
    box = [text_of(nodes, width)]
    del nodes  # rebuilt for the check, after the peak is read
    gc.collect()
    before = peak_mib()
    seconds, result = run_pipeline(box, registry, library=library, text_format=text_format)
    peak = peak_mib()
    nodes = layered_dag(size, width, seed)
    if problem := check_result(result, expected_outputs(nodes)):
        raise SystemExit(f"{size} steps: {problem}")
    return {"seconds": seconds, "rss_before_mib": before, "rss_peak_mib": peak}


def child_floor(size: int, width: int, seed: int) -> dict[str, Any]:
    warm = layered_dag(WARM_UP_STEPS, width, seed)
    if asyncio.run(bare_executor(warm, width)) != expected_outputs(warm):
        raise SystemExit("warm-up: floor outputs differ from the expected outputs")
    nodes = layered_dag(size, width, seed)
    gc.collect()
    before = peak_mib()
    cpu_started = time.process_time()
    started = time.perf_counter()
    outputs = asyncio.run(bare_executor(nodes, width))
    seconds = {
        "floor": time.perf_counter() - started,
        "cpu_floor": time.process_time() - cpu_started,
    }
    peak = peak_mib()
    if outputs != expected_outputs(nodes):
        raise SystemExit(f"{size} steps: floor outputs differ from the expected outputs")
    return {"seconds": seconds, "rss_before_mib": before, "rss_peak_mib": peak}


# -- in the parent: alternate fresh processes, take medians --------------------------------


def run_child(side: str, size: int, args: argparse.Namespace) -> dict[str, Any]:
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        str(size),
        "--side",
        side,
        "--width",
        str(args.width),
        "--seed",
        str(args.seed),
        *(["--library"] if args.library else []),
        *(["--format", args.format] if side == "pipeline" else []),
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=CHILD_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        raise SystemExit(f"the {side} run of {size} steps took over {CHILD_TIMEOUT} s") from None
    if done.returncode != 0:
        raise SystemExit(
            f"the {side} run of {size} steps failed (exit {done.returncode}):\n"
            f"{done.stderr.strip()[-2000:]}"
        )
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure_size(size: int, repeat: int, args: argparse.Namespace) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for index in range(repeat):
        for side in SIDES if index % 2 == 0 else SIDES[::-1]:
            started = time.perf_counter()
            runs[side].append(run_child(side, size, args))
            print(
                f"  {size:,} steps, {side} run {index + 1}/{repeat}: "
                f"{time.perf_counter() - started:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    pipeline = [run["seconds"] for run in runs["pipeline"]]

    def per_step(values: list[float]) -> dict[str, float]:
        return spread([value / size * 1e6 for value in values])

    figures: dict[str, Any] = {
        "steps": size,
        "layers": -(-size // args.width),
        "repeat": repeat,
        "events_per_step": pipeline[0]["events"] / size,
        "us_per_step": {
            "parse": per_step([s["parse"] for s in pipeline]),
            "validate": per_step([s["validate"] for s in pipeline]),
            "execute": per_step([s["execute"] for s in pipeline]),
            "pipeline": per_step([s["parse"] + s["validate"] + s["execute"] for s in pipeline]),
            "gc": per_step([s["gc"] for s in pipeline]),
            "floor": per_step([run["seconds"]["floor"] for run in runs["floor"]]),
        },
        # CPU time of the child: steadier than wall time when other work shares the cores
        "cpu_us_per_step": {
            "pipeline": per_step([s["cpu_pipeline"] for s in pipeline]),
            "execute": per_step([s["cpu_execute"] for s in pipeline]),
            "floor": per_step([run["seconds"]["cpu_floor"] for run in runs["floor"]]),
        },
        "rss_mib": {
            side: {
                "peak": spread([run["rss_peak_mib"] for run in runs[side]]),
                "before_run": spread([run["rss_before_mib"] for run in runs[side]]),
            }
            for side in SIDES
        },
    }
    us = figures["us_per_step"]
    figures["ratio_pipeline_floor"] = us["pipeline"]["median"] / us["floor"]["median"]
    return figures


def measure(args: argparse.Namespace) -> dict[str, Any]:
    results = []
    for size in args.sizes:
        repeat = args.repeat_large if size >= LARGE else args.repeat
        results.append(measure_size(size, repeat, args))
    for figures in results:
        for kind in ("", "cpu_"):
            us, smallest = figures[f"{kind}us_per_step"], results[0][f"{kind}us_per_step"]
            figures[f"{kind}flatness"] = {
                key: us[key]["median"] / smallest[key]["median"]
                for key in ("pipeline", "execute", "floor")
            }
        us = figures["us_per_step"]
        figures["targets_met"] = {
            "pipeline": us["pipeline"]["median"] <= TARGET_PIPELINE_US,
            "execute": us["execute"]["median"] <= TARGET_EXECUTE_US,
            "flatness": figures["flatness"]["pipeline"] <= TARGET_FLATNESS,
            "peak_rss": (
                figures["rss_mib"]["pipeline"]["peak"]["median"] <= TARGET_PEAK_MIB
                if figures["steps"] == TARGET_PEAK_AT
                else None
            ),
        }
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "width": args.width,
        "max_parallel": args.width,
        "seed": args.seed,
        "mode": "library" if args.library else "cli",
        "format": args.format,
        "warm_up_steps": WARM_UP_STEPS,
        "targets": {
            "pipeline_us_per_step": TARGET_PIPELINE_US,
            "execute_us_per_step": TARGET_EXECUTE_US,
            "flatness": TARGET_FLATNESS,
            "peak_rss_mib": TARGET_PEAK_MIB,
            "peak_rss_at_steps": TARGET_PEAK_AT,
        },
        "sizes": results,
    }


# -- output --------------------------------------------------------------------------------


def verdict(met: bool | None) -> str:
    return "–" if met is None else ("MET" if met else "MISSED")


def report(f: dict[str, Any]) -> str:
    sizes = f["sizes"]
    smallest = sizes[0]["steps"]
    repeats = ", ".join(f"{s['repeat']} at {s['steps']:,}" for s in sizes)
    lines = [
        f"planloom scale benchmark (Python {f['python']}, {f['machine']}, {f['cpus']} CPUs)",
        f"DAG: bench/overhead.py's shape, width {f['width']} (= max_parallel), seed "
        f"{f['seed']}; every run a fresh process after a {f['warm_up_steps']}-step warm-up; "
        "pipeline and floor runs alternate",
        "pipeline run "
        + (
            "as a program calling the API does (--library)"
            if f["mode"] == "library"
            else "as the planloom command runs it, inside engine._support.gc.heap_frozen"
        ),
        f"recipe text: {f['format'].upper()}; runs per side: {repeats}; figures are medians, "
        "[min–max] over the runs",
        "",
        f"{'steps':>8} {'parse':>7} {'valid.':>7} {'execute':>8} {'pipeline':>9} "
        f"{'floor':>6} {'pipe/floor':>10} {'flat':>6} {'gc':>6} {'peak MiB':>9} {'floor MiB':>9}",
    ]
    for s in sizes:
        us = s["us_per_step"]
        rss = s["rss_mib"]
        lines.append(
            f"{s['steps']:>8,} {us['parse']['median']:7.1f} {us['validate']['median']:7.1f} "
            f"{us['execute']['median']:8.1f} {us['pipeline']['median']:9.1f} "
            f"{us['floor']['median']:6.1f} {s['ratio_pipeline_floor']:9.1f}x "
            f"{s['flatness']['pipeline']:5.2f}x {us['gc']['median']:6.1f} "
            f"{rss['pipeline']['peak']['median']:9,.0f} {rss['floor']['peak']['median']:9,.0f}"
        )
    lines += [
        "",
        "noise, µs/step [min–max of the runs]; CPU time of the run's process (steadier than "
        "wall time on a shared machine); memory held before the timed run:",
    ]
    for s in sizes:
        us, cpu, rss = s["us_per_step"], s["cpu_us_per_step"], s["rss_mib"]

        def span(key: str, us: dict[str, Any] = us) -> str:
            return f"[{us[key]['min']:.1f}–{us[key]['max']:.1f}]"

        lines += [
            f"  {s['steps']:>8,}: wall: pipeline {span('pipeline')}, execute "
            f"{span('execute')}, floor {span('floor')}",
            f"  {'':>8}  CPU:  pipeline {cpu['pipeline']['median']:.1f} "
            f"{span('pipeline', cpu)}, execute {cpu['execute']['median']:.1f} "
            f"{span('execute', cpu)}, floor {cpu['floor']['median']:.1f}; flatness "
            f"{s['cpu_flatness']['pipeline']:.2f}x pipeline, "
            f"{s['cpu_flatness']['execute']:.2f}x execute",
            f"  {'':>8}  held before the run: pipeline "
            f"{rss['pipeline']['before_run']['median']:,.0f} MiB, floor "
            f"{rss['floor']['before_run']['median']:,.0f} MiB; "
            f"{s['events_per_step']:.0f} events/step",
        ]
    lines += ["", f"targets (flatness = pipeline µs/step here / at {smallest:,} steps):"]
    for s in sizes:
        us = s["us_per_step"]
        met = s["targets_met"]
        peak = s["rss_mib"]["pipeline"]["peak"]["median"]
        peak_part = (
            f"; peak {peak:,.0f} MiB ≤ {TARGET_PEAK_MIB:g}: {verdict(met['peak_rss'])}"
            if met["peak_rss"] is not None
            else ""
        )
        lines.append(
            f"  {s['steps']:>8,}: pipeline {us['pipeline']['median']:.1f} ≤ "
            f"{TARGET_PIPELINE_US:g}: {verdict(met['pipeline'])}; execute "
            f"{us['execute']['median']:.1f} ≤ {TARGET_EXECUTE_US:g}: {verdict(met['execute'])}"
            f"; flatness {s['flatness']['pipeline']:.2f}x ≤ {TARGET_FLATNESS:g}: "
            f"{verdict(met['flatness'])}{peak_part}"
        )
    execute_x, pipeline_x = (
        t / REFERENCE_FLOOR_US for t in (TARGET_EXECUTE_US, TARGET_PIPELINE_US)
    )
    lines.append(
        f"  as multiples of this run's floor (the targets are {execute_x:.1f}x and "
        f"{pipeline_x:.1f}x a {REFERENCE_FLOOR_US:g} µs floor):"
    )
    for s in sizes:
        us = s["us_per_step"]
        floor = us["floor"]["median"]
        lines.append(
            f"  {s['steps']:>8,}: execute {us['execute']['median'] / floor:.1f}x, pipeline "
            f"{us['pipeline']['median'] / floor:.1f}x the floor ({floor:.1f} µs/step)"
        )
    if not any(s["steps"] == TARGET_PEAK_AT for s in sizes):
        lines.append(f"  peak ≤ {TARGET_PEAK_MIB:g} MiB applies at {TARGET_PEAK_AT:,} steps: –")
    return "\n".join(lines)


# -- command line --------------------------------------------------------------------------


def parse_sizes(text: str) -> list[int]:
    return [int(part) for part in text.replace(",", " ").split()]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None,
        epilog="Run from the repository root: .venv/bin/python bench/scale.py",
    )
    parser.add_argument(
        "--sizes",
        nargs="+",
        type=parse_sizes,
        default=[list(DEFAULT_SIZES)],
        metavar="N",
        help="DAG sizes in steps, space- or comma-separated (default: 2000 10000 100000); "
        "flatness is measured against the smallest",
    )
    parser.add_argument(
        "--width",
        type=int,
        default=DEFAULT_WIDTH,
        help=f"steps per layer, also limits.max_parallel and the floor's cap "
        f"(default {DEFAULT_WIDTH})",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="fresh-process runs per side and size; medians are shown (default 3)",
    )
    parser.add_argument(
        "--repeat-large",
        type=int,
        default=None,
        metavar="N",
        help=f"runs per side for sizes from {LARGE:,} steps (default: --repeat); "
        "a 100,000-step pipeline run takes 10-30 s, so 1 makes a quick look",
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help=f"DAG shape seed (default {DEFAULT_SEED})"
    )
    parser.add_argument(
        "--library",
        action="store_true",
        help="run the pipeline as a program calling the API does; by default it runs as "
        "the planloom command runs it, inside engine._support.gc.heap_frozen",
    )
    parser.add_argument(
        "--format",
        choices=("yaml", "json"),
        default="yaml",
        help="the recipe's text: YAML (default), or JSON (as a program or a planner writes "
        "a large plan; read by the JSON parser)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    # One timed run of one side in this process: what the parent spawns.
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--side", choices=SIDES, default="pipeline", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.sizes = sorted({size for group in args.sizes for size in group})
    if args.repeat_large is None:
        args.repeat_large = args.repeat
    if not 1 <= args.width <= 1024:
        parser.error("--width must be between 1 and 1024 (it is limits.max_parallel)")
    if not args.sizes or min(args.sizes) < 1:
        parser.error("--sizes must be whole numbers of steps, at least 1")
    for name in ("repeat", "repeat_large"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        if args.side == "pipeline":
            figures = child_pipeline(args.child, args.width, args.seed, args.library, args.format)
        else:
            figures = child_floor(args.child, args.width, args.seed)
        print(json.dumps(figures))
        return 0
    figures = measure(args)
    print(json.dumps(figures, indent=2) if args.json else report(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
