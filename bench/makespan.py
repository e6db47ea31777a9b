"""Makespan of a skewed DAG against its critical path: the engine's default parallelism.

The DAG (fixed seed) is one chain of `--chain` slow steps (120–200 ms each) beside
`--layers` layers of `--width` short steps of mixed durations (80% take 10–40 ms, 20%
60–200 ms); a step in layer k > 0 depends on one or two steps of layer k−1. Every step
calls `bench.work`, an `async def` registered with `Registry.function` that awaits
`asyncio.sleep(seconds)` and records when it started and ended. `--time-scale` multiplies
every duration (a quick run for the tests).

The critical path is the longest path weighted by the steps' durations (networkx). Four
executors (and one more per `--cap`) run the same DAG, each timed from the start of its
run to its end, inside the event loop:

- **engine, default limits**: the recipe sets no `limits.max_parallel`, so the engine's
  default applies (printed, as the validated plan holds it); YAML text → `parse_recipe_text`
  → `validate_plan` → `Executor(...).run()`. The target is makespan ≤ 1.1x the critical
  path.
- **engine, max_parallel = width**: the same recipe with `limits.max_parallel` set to the
  DAG's width (its largest topological generation), for reference.
- **bare asyncio, start when ready**: in-degree counters and a completion queue, no cap; a
  floor.
- **supersteps**: each topological generation is started together and awaited whole
  before the next (a layer-by-layer scheduler); what start-when-ready avoids.
- **engine, max_parallel = N** for each `--cap N`, if asked (e.g. 4, the old default).

A capped run cannot beat max(critical path, total work / cap); that bound is printed beside
the engine's runs. The executors alternate, `--repeat` times (the order rotating), after one
warm-up of a tiny DAG through the engine; figures are medians, with [min–max]. After every
run the bench checks that every step ran exactly once and started after each of its
dependencies ended (and, for the engine, that the run and every step succeeded with the
right output); a wrong run exits non-zero. It also prints the most steps that were ever
running at once in each run.

Usage:
    .venv/bin/python bench/makespan.py [--chain 10] [--layers 16] [--width 16]
                                       [--time-scale 1.0] [--repeat 3] [--seed N]
                                       [--cap N ...] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx

from capabilities import Registry, default_registry
from engine.executor import Executor
from engine.model import Limits, Plan
from engine.validation import validate_plan
from planners.recipe import parse_recipe_text

DEFAULT_SEED = 1234
TARGET_RATIO = 1.1
BASE_DIR = Path(__file__).resolve().parent
CHAIN_SECONDS = (0.12, 0.2)
SHORT_SECONDS = (0.01, 0.04)
LONG_SECONDS = (0.06, 0.2)
LONG_SHARE = 0.2  # of the layered steps, this share takes LONG_SECONDS
LABELS = {
    "engine_default": "engine, default limits",
    "engine_width": "engine, max_parallel = width",
    "start_when_ready": "bare asyncio, start when ready",
    "supersteps": "supersteps (layer by layer)",
}

Work = Callable[[str, float], Awaitable[str]]


# -- the DAG -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """One step: sleeps `seconds` once every step in `deps` has ended."""

    id: str
    seconds: float
    deps: tuple[str, ...]


def skewed_dag(chain: int, layers: int, width: int, seed: int, scale: float) -> list[Task]:
    """A chain of slow steps beside layers of short steps of mixed durations."""
    rng = random.Random(seed)

    def seconds(low_high: tuple[float, float]) -> float:
        return round(rng.uniform(*low_high) * scale, 4)

    tasks = [
        Task(f"c{k}", seconds(CHAIN_SECONDS), (f"c{k - 1}",) if k else ()) for k in range(chain)
    ]
    previous: list[str] = []
    for layer in range(layers):
        current = [f"l{layer}_{i}" for i in range(width)]
        for step_id in current:
            duration = seconds(LONG_SECONDS if rng.random() < LONG_SHARE else SHORT_SECONDS)
            count = min(len(previous), rng.choice((1, 2)))
            tasks.append(Task(step_id, duration, tuple(rng.sample(previous, count))))
        previous = current
    return tasks


def dag_graph(tasks: Sequence[Task]) -> nx.DiGraph[str]:
    graph: nx.DiGraph[str] = nx.DiGraph()
    for task in tasks:
        graph.add_node(task.id)
        graph.add_edges_from((dep, task.id) for dep in task.deps)
    return graph


def critical_path(tasks: Sequence[Task], graph: nx.DiGraph[str]) -> tuple[float, list[str]]:
    """The longest path weighted by duration: each edge weighs its source step's duration,
    and every sink gets an edge to an end node weighing its own."""
    seconds = {task.id: task.seconds for task in tasks}
    weighted: nx.DiGraph[str] = nx.DiGraph()
    end = "<end>"
    for source, target in graph.edges:
        weighted.add_edge(source, target, weight=seconds[source])
    for node in graph:
        if graph.out_degree(node) == 0:
            weighted.add_edge(node, end, weight=seconds[node])
    path = nx.dag_longest_path(weighted, weight="weight")
    return nx.dag_longest_path_length(weighted, weight="weight"), path[:-1]


def recipe_text(tasks: Sequence[Task], max_parallel: int | None) -> str:
    """The DAG as a recipe; with `max_parallel` None, the recipe leaves it to the engine."""
    lines = ["version: 1", "name: bench-makespan", "capabilities:", "  bench: {}"]
    limits = []
    if max_parallel is not None:
        limits.append(f"max_parallel: {max_parallel}")
    if len(tasks) > Limits().max_tool_calls:  # only so a big --width/--layers still runs
        limits.append(f"max_tool_calls: {len(tasks)}")
    if limits:
        lines.append(f"limits: {{{', '.join(limits)}}}")
    lines.append("steps:")
    for task in tasks:
        lines += [
            f"  - id: {task.id}",
            "    tool: bench.work",
            f"    params: {{step: {task.id}, seconds: {task.seconds!r}}}",
        ]
        if task.deps:
            lines.append(f"    depends_on: [{', '.join(task.deps)}]")
    return "\n".join(lines) + "\n"


# -- recording what ran --------------------------------------------------------------------


class Recorder:
    """When each step started and ended, in `time.perf_counter` seconds."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, float, float]] = []

    async def work(self, step: str, seconds: float) -> str:
        started = time.perf_counter()
        await asyncio.sleep(seconds)
        self.spans.append((step, started, time.perf_counter()))
        return step

    def check(self, tasks: Sequence[Task], who: str) -> None:
        """Every step ran once, and after every one of its dependencies ended."""
        counts = Counter(step for step, _, _ in self.spans)
        wrong = {task.id: counts[task.id] for task in tasks if counts[task.id] != 1}
        extra = set(counts) - {task.id for task in tasks}
        if wrong or extra:
            raise SystemExit(f"{who}: steps not run exactly once: {wrong or extra}")
        spans = {step: (start, end) for step, start, end in self.spans}
        for task in tasks:
            for dep in task.deps:
                if spans[task.id][0] < spans[dep][1]:
                    raise SystemExit(
                        f"{who}: step {task.id} started before its dependency {dep} ended"
                    )

    def peak_concurrency(self) -> int:
        # at equal times an end comes first (-1 sorts before +1): the step was done
        edges = sorted([(s, 1) for _, s, _ in self.spans] + [(e, -1) for _, _, e in self.spans])
        running = peak = 0
        for _, change in edges:
            running += change
            peak = max(peak, running)
        return peak


def make_registry(recorder_of: Callable[[], Recorder]) -> Registry:
    registry = default_registry()

    @registry.function("bench.work", side_effects=False)
    async def work(step: str, seconds: float) -> str:
        """Sleep `seconds`, recording when step `step` started and ended; return `step`."""
        return await recorder_of().work(step, seconds)

    return registry


# -- the executors -------------------------------------------------------------------------


async def run_engine(plan: Plan, registry: Registry) -> tuple[float, str | None]:
    """Run `plan`; the seconds it took, and what was wrong with the result, if anything."""
    started = time.perf_counter()
    executor = Executor(plan, registry=registry, base_dir=BASE_DIR, run_id="bench")
    result = await executor.run()
    seconds = time.perf_counter() - started
    if result.status != "succeeded":
        bad = {k: (s.status, s.error) for k, s in result.steps.items() if s.status != "succeeded"}
        return seconds, f"engine run {result.status}: {list(bad.items())[:5]} {result.errors}"
    wrong = [k for k, s in result.steps.items() if s.output != k]
    if wrong or len(result.steps) != len(plan.steps):
        return seconds, f"engine outputs wrong for {wrong[:5]} ({len(result.steps)} steps)"
    return seconds, None


async def start_when_ready(tasks: Sequence[Task], work: Work) -> float:
    """No cap: a step starts the moment its last dependency ends."""
    started = time.perf_counter()
    by_id = {task.id: task for task in tasks}
    children: dict[str, list[str]] = {task.id: [] for task in tasks}
    waiting = {task.id: len(task.deps) for task in tasks}
    for task in tasks:
        for dep in task.deps:
            children[dep].append(task.id)
    ready = deque(task.id for task in tasks if not task.deps)
    done: asyncio.Queue[str] = asyncio.Queue()

    async def one(task: Task) -> None:
        done.put_nowait(await work(task.id, task.seconds))

    running = 0
    async with asyncio.TaskGroup() as group:
        while ready or running:
            while ready:
                group.create_task(one(by_id[ready.popleft()]))
                running += 1
            finished = await done.get()
            running -= 1
            for child in children[finished]:
                waiting[child] -= 1
                if waiting[child] == 0:
                    ready.append(child)
    return time.perf_counter() - started


async def supersteps(generations: Sequence[Sequence[Task]], work: Work) -> float:
    """Each generation starts together; the next starts when the whole of it has ended."""
    started = time.perf_counter()
    for generation in generations:
        await asyncio.gather(*(work(task.id, task.seconds) for task in generation))
    return time.perf_counter() - started


# -- measuring -----------------------------------------------------------------------------


def load(text: str, registry: Registry) -> Plan:
    data, source = parse_recipe_text(text, "<bench>")
    return validate_plan(data, source, registry, base_dir=BASE_DIR)


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    tasks = skewed_dag(args.chain, args.layers, args.width, args.seed, args.time_scale)
    graph = dag_graph(tasks)
    by_id = {task.id: task for task in tasks}
    generations = [[by_id[n] for n in layer] for layer in nx.topological_generations(graph)]
    width = max(len(layer) for layer in generations)
    path_seconds, path = critical_path(tasks, graph)
    work_seconds = sum(task.seconds for task in tasks)

    recorder = Recorder()
    registry = make_registry(lambda: recorder)
    default_text = recipe_text(tasks, None)
    plans = {"engine_default": load(default_text, registry)}
    plans["engine_width"] = load(recipe_text(tasks, width), registry)
    default_cap = plans["engine_default"].limits.max_parallel
    caps: dict[str, int | None] = {
        "engine_default": default_cap,
        "engine_width": plans["engine_width"].limits.max_parallel,
        "start_when_ready": None,
        "supersteps": None,
    }
    labels = dict(LABELS)
    for cap in args.cap:
        name = f"engine_cap_{cap}"
        plans[name] = load(recipe_text(tasks, cap), registry)
        caps[name] = cap
        labels[name] = f"engine, max_parallel = {cap}"
    names = list(caps)

    # Warm-up: imports, validators and the engine's code paths, on a tiny DAG.
    warm = skewed_dag(2, 2, 2, args.seed, 0.01)
    recorder = Recorder()
    _, problem = asyncio.run(run_engine(load(recipe_text(warm, None), registry), registry))
    if problem:
        raise SystemExit(f"warm-up: {problem}")
    recorder.check(warm, "warm-up")

    makespans: dict[str, list[float]] = {name: [] for name in names}
    peaks: dict[str, list[int]] = {name: [] for name in names}
    for index in range(args.repeat):
        shift = index % len(names)  # rotate the order, so drift hits every one alike
        for name in names[shift:] + names[:shift]:
            recorder = Recorder()
            if name in plans:
                seconds, problem = asyncio.run(run_engine(plans[name], registry))
                if problem:
                    raise SystemExit(f"{labels[name]}: {problem}")
            elif name == "start_when_ready":
                seconds = asyncio.run(start_when_ready(tasks, recorder.work))
            else:
                seconds = asyncio.run(supersteps(generations, recorder.work))
            recorder.check(tasks, labels[name])
            makespans[name].append(seconds)
            peaks[name].append(recorder.peak_concurrency())
            print(f"  run {index + 1}/{args.repeat}: {name} {seconds:.3f} s", file=sys.stderr)

    executors: dict[str, Any] = {}
    for name in names:
        cap = caps[name]
        makespan = spread(makespans[name])
        executors[name] = {
            "label": labels[name],
            "max_parallel": cap,
            "makespan_seconds": makespan,
            "ratio": makespan["median"] / path_seconds,
            "ratio_min": makespan["min"] / path_seconds,
            "ratio_max": makespan["max"] / path_seconds,
            "bound_seconds": max(path_seconds, work_seconds / cap) if cap else path_seconds,
            "peak_concurrency": max(peaks[name]),
        }
    ratio = executors["engine_default"]["ratio"]
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "seed": args.seed,
        "repeat": args.repeat,
        "time_scale": args.time_scale,
        "dag": {
            "steps": len(tasks),
            "edges": graph.number_of_edges(),
            "chain": args.chain,
            "layers": args.layers,
            "layer_width": args.width,
            "generations": len(generations),
            "width": width,
            "work_seconds": work_seconds,
            "critical_path_seconds": path_seconds,
            "critical_path_steps": len(path),
            "critical_path": path,
        },
        "default_max_parallel": default_cap,
        "recipe_sets_max_parallel": "max_parallel" in default_text,
        "executors": executors,
        "target_ratio": TARGET_RATIO,
        "target_met": ratio <= TARGET_RATIO,
    }


# -- output --------------------------------------------------------------------------------


def report(f: dict[str, Any]) -> str:
    dag = f["dag"]
    path = dag["critical_path"]
    shown = " → ".join(path) if len(path) <= 14 else " → ".join([*path[:6], "…", *path[-6:]])
    lines = [
        f"planloom makespan benchmark (Python {f['python']}, {f['machine']}, {f['cpus']} CPUs)",
        f"DAG (seed {f['seed']}, time scale {f['time_scale']:g}): {dag['steps']} steps, "
        f"{dag['edges']} edges: a chain of {dag['chain']} slow steps beside {dag['layers']} "
        f"layers of {dag['layer_width']}; {dag['generations']} generations, width "
        f"{dag['width']}; total work {dag['work_seconds']:.2f} s",
        f"critical path: {dag['critical_path_seconds']:.3f} s over "
        f"{dag['critical_path_steps']} steps ({shown})",
        f"engine default max_parallel: {f['default_max_parallel']} (the recipe sets none)",
        f"median of {f['repeat']} runs each, alternating, after one warm-up; [min–max]",
        "",
        f"{'executor':<32} {'cap':>5} {'makespan s':>10} {'[min–max]':>15} {'/ crit.':>8} "
        f"{'bound s':>8} {'peak':>5}",
    ]
    for e in f["executors"].values():
        m = e["makespan_seconds"]
        cap = "none" if e["max_parallel"] is None else str(e["max_parallel"])
        lines.append(
            f"{e['label']:<32} {cap:>5} {m['median']:10.3f} "
            f"{'[' + format(m['min'], '.3f') + '–' + format(m['max'], '.3f') + ']':>15} "
            f"{e['ratio']:7.2f}x {e['bound_seconds']:8.3f} {e['peak_concurrency']:>5}"
        )
    verdict = "MET" if f["target_met"] else "MISSED"
    lines += [
        "",
        "bound: the least any schedule needs at that cap, max(critical path, work / cap); "
        "peak: most steps running at once",
        f"target: engine at default limits ≤ {f['target_ratio']:g}x the critical path: "
        f"{f['executors']['engine_default']['ratio']:.2f}x {verdict}",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None,
        epilog="Run from the repository root: .venv/bin/python bench/makespan.py",
    )
    parser.add_argument(
        "--chain", type=int, default=10, help="slow steps in the chain (default 10)"
    )
    parser.add_argument("--layers", type=int, default=16, help="layers of short steps (default 16)")
    parser.add_argument("--width", type=int, default=16, help="short steps per layer (default 16)")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="multiply every step's duration by this (default 1: 10–200 ms a step)",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of each executor; medians shown (default 3)"
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help=f"DAG seed (default {DEFAULT_SEED})"
    )
    parser.add_argument(
        "--cap",
        type=int,
        action="append",
        default=[],
        metavar="N",
        help="also run the engine with limits.max_parallel N, for reference (repeatable; "
        "e.g. --cap 4, the default before 64)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)
    if any(not 1 <= cap <= 1024 for cap in args.cap):
        parser.error("--cap must be between 1 and 1024 (it is limits.max_parallel)")
    for name in ("chain", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    for name in ("layers", "width"):
        if getattr(args, name) < 0:
            parser.error(f"--{name} must be 0 or more")
    if not 0 < args.time_scale <= 100:
        parser.error("--time-scale must be above 0 and at most 100")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    figures = measure(args)
    print(json.dumps(figures, indent=2) if args.json else report(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
