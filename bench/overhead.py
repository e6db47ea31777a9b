"""Engine overhead per step: planloom against a bare asyncio executor of the same DAG.

A layered DAG of no-op tool steps (`width` per layer, each step reading one parent through
a `${{ steps.X.output }}` template and depending on one or two more through `depends_on`)
goes through the whole engine: YAML parsing, validation, templating, sandbox dispatch and
events delivered to a subscriber. The same DAG then runs on a minimal start-when-ready
asyncio executor with the same `max_parallel`. The difference per step is the engine's
overhead; the target is at most 50 µs per step. A second figure times parsing and
validating a 10,000-step recipe of the same shape (target: under 2 s). A third figure is
what journaling the run to a SQLite run store adds ("store on" against "store off", the
same DAG in the same process; target: at most 25 µs per step). A fourth is what tracing
costs: off (no `--otel`, no OTLP endpoint; target: at most 1 µs per step) and on (every
span exported over OTLP/HTTP to a collector stand-in in another process).

Usage:
    python bench/overhead.py [--steps 2000] [--width 20] [--repeat 5]
                             [--validate-steps 10000] [--seed N] [--json] [--profile]
                             [--store-only | --tracing-only] [--store-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from _collector import Collector
from _gc_clock import GcClock

from capabilities import Registry, default_registry
from engine.app.sqlite_store import open_store
from engine.app.telemetry import Telemetry
from engine.approval import Approver, FailClosed
from engine.events import Event, EventBus
from engine.executor import Executor
from engine.journal import Journal
from engine.model import Plan
from engine.results import RunResult
from engine.sandbox import LiveResults, Results
from engine.store import RunRecord
from engine.templating import Template
from engine.validation import validate_plan
from planners.recipe import parse_recipe_text

TARGET_US_PER_STEP = 50.0
TARGET_VALIDATE_SECONDS = 2.0
TARGET_STORE_US_PER_STEP = 25.0
TARGET_TRACING_OFF_US_PER_STEP = 1.0
DEFAULT_SEED = 1234
BASE_DIR = Path(__file__).resolve().parent

T = TypeVar("T")


# -- the DAG -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """One step: `parents[0]` is read through a template, the rest go in `depends_on`."""

    id: str
    parents: tuple[str, ...]
    literal: int | None = None


def layered_dag(steps: int, width: int, seed: int) -> list[Node]:
    """`steps` nodes in layers of `width`; a node in layer k > 0 has 2–3 parents in k - 1."""
    rng = random.Random(seed)
    nodes: list[Node] = []
    previous: list[str] = []
    layer = 0
    while len(nodes) < steps:
        current = [f"s{layer}_{i}" for i in range(min(width, steps - len(nodes)))]
        for index, step_id in enumerate(current):
            if layer == 0:
                nodes.append(Node(step_id, (), literal=index))
            else:
                count = min(len(previous), rng.choice((2, 3)))
                nodes.append(Node(step_id, tuple(rng.sample(previous, count))))
        previous = current
        layer += 1
    return nodes


def recipe_text(nodes: Sequence[Node], max_parallel: int) -> str:
    """The DAG as a recipe, in YAML."""
    lines = [
        "version: 1",
        "name: bench-overhead",
        "capabilities:",
        "  bench: {}",
        f"limits: {{max_parallel: {max_parallel}, max_tool_calls: 1000000}}",
        "steps:",
    ]
    for node in nodes:
        lines += [f"  - id: {node.id}", "    tool: bench.noop"]
        if not node.parents:
            lines.append(f"    params: {{value: {node.literal}}}")
            continue
        first, *others = node.parents
        lines.append(f'    params: {{value: "${{{{ steps.{first}.output }}}}"}}')
        if others:
            lines.append(f"    depends_on: [{', '.join(others)}]")
    return "\n".join(lines) + "\n"


def recipe_json(nodes: Sequence[Node], max_parallel: int) -> str:
    """The DAG as a recipe in JSON (the same recipe as `recipe_text`), one step a line."""
    steps = []
    for node in nodes:
        step: dict[str, Any] = {"id": node.id, "tool": "bench.noop"}
        if not node.parents:
            step["params"] = {"value": node.literal}
        else:
            first, *others = node.parents
            step["params"] = {"value": f"${{{{ steps.{first}.output }}}}"}
            if others:
                step["depends_on"] = others
        steps.append(json.dumps(step))
    head = {
        "version": 1,
        "name": "bench-overhead",
        "capabilities": {"bench": {}},
        "limits": {"max_parallel": max_parallel, "max_tool_calls": 1000000},
    }
    return json.dumps(head)[:-1] + ', "steps": [\n' + ",\n".join(steps) + "\n]}\n"


def expected_outputs(nodes: Sequence[Node]) -> dict[str, Any]:
    """What every step returns: the literal at the root of its chain of first parents."""
    outputs: dict[str, Any] = {}
    for node in nodes:  # layers are in order, so parents come first
        outputs[node.id] = node.literal if not node.parents else outputs[node.parents[0]]
    return outputs


# -- the engine ----------------------------------------------------------------------------


def make_registry() -> Registry:
    registry = default_registry()

    @registry.function("bench.noop", side_effects=False, blocking=False)
    def noop(value: int) -> int:
        """Return `value` unchanged."""
        return value

    return registry


@dataclass
class EngineRun:
    parse_seconds: float  # YAML text → data
    validate_seconds: float  # data → Plan
    exec_seconds: float  # Executor construction + run
    gc_seconds: float  # of all the above, spent in the cyclic garbage collector
    events: int
    result: RunResult
    exec_cpu_seconds: float = 0.0  # this process's CPU time in the execute phase

    @property
    def load_seconds(self) -> float:
        return self.parse_seconds + self.validate_seconds

    @property
    def total_seconds(self) -> float:
        return self.load_seconds + self.exec_seconds


def clear_template_caches() -> None:
    """Start each repeat as a fresh process would, with nothing parsed yet."""
    Template.parse.cache_clear()


def run_engine(
    text: str,
    registry: Registry,
    store: Path | None = None,
    tracing: Mapping[str, str] | None = None,
) -> EngineRun:
    """Parse, validate and run the recipe; with `store`, journaled to the SQLite store at
    that path, as `planloom run` does (the store's opening, the plan entry, every step and
    call, the end entry and the close are all in `exec_seconds`).

    `tracing`: the environment `planloom` decides tracing from (`Telemetry.start`); on,
    the run's spans are made and exported as the command exports them, and the final
    export (the provider's shutdown) is in `exec_seconds` too.
    """
    clear_template_caches()
    events: list[Event] = []
    with GcClock() as gc_clock:
        started = time.perf_counter()
        data, source = parse_recipe_text(text, "<bench>")
        parsed = time.perf_counter()
        plan = validate_plan(data, source, registry, base_dir=BASE_DIR)
        validated = time.perf_counter()
        cpu = time.process_time()
        bus = EventBus("bench")
        bus.subscribe(events.append)
        telemetry = Telemetry.start(flag=False, environ=tracing) if tracing is not None else None
        if telemetry is not None:
            telemetry.follow(bus)
        if store is None:
            executor = Executor(
                plan, registry=registry, base_dir=BASE_DIR, events=bus, run_id="bench"
            )
            result = asyncio.run(executor.run())
        else:
            result = run_journaled(plan, registry, bus, store)
        if telemetry is not None:
            telemetry.close()
        finished = time.perf_counter()
        cpu = time.process_time() - cpu
    return EngineRun(
        parsed - started,
        validated - parsed,
        finished - validated,
        gc_clock.seconds,
        len(events),
        result,
        cpu,
    )


def run_journaled(plan: Plan, registry: Registry, bus: EventBus, path: Path) -> RunResult:
    """Run `plan` with a journal, wired as `engine.app.launch.open_journal` and
    `engine.session._run.SessionRun._execute` wire it."""
    store = open_store(path)
    try:
        run_id = uuid.uuid4().hex[:12]
        store.begin(
            RunRecord(
                id=run_id,
                name=plan.name,
                recipe=None,
                base_dir=str(BASE_DIR),
                started=time.time(),
                pid=os.getpid(),
            )
        )
        store.append(run_id, "start", None, {"segment": 1, "pid": os.getpid()}, durable=True)
        journal = Journal(store, run_id)
        approver: Approver = journal.approver(FailClosed())
        results: Results = journal.results(LiveResults())
        journal.plan(plan.to_data(), inputs={}, model=None)
        bus.run_id = run_id
        executor = Executor(
            plan,
            registry=registry,
            base_dir=BASE_DIR,
            events=bus,
            run_id=run_id,
            approver=approver,
            tool_results=results,
        )
        journal.watch(executor)
        result = asyncio.run(executor.run())
        journal.finish(result)
        return result
    finally:
        store.close()


def check_journal(path: Path, steps: int) -> None:
    """The newest run in the store at `path` is journaled whole: its plan, a result per
    step and per tool call, and its end."""
    store = open_store(path, create=False)
    try:
        [record] = store.runs(1)
        kinds = [entry.kind for entry in store.journal(record.id)]
    finally:
        store.close()
    counts = {kind: kinds.count(kind) for kind in set(kinds)}
    wanted = {"start": 1, "plan": 1, "step": steps, "end": 1}  # read-only calls: no entries
    if counts != wanted or record.status != "succeeded" or record.done != steps:
        raise SystemExit(f"the journal is not whole: {counts} (wanted {wanted}), {record}")


# -- the baseline --------------------------------------------------------------------------


async def noop(value: Any) -> Any:
    return value


async def bare_executor(nodes: Sequence[Node], max_parallel: int) -> dict[str, Any]:
    """Start-when-ready over the same DAG: in-degree counters, a completion queue, a cap."""
    by_id = {node.id: node for node in nodes}
    children: dict[str, list[str]] = {node.id: [] for node in nodes}
    waiting: dict[str, int] = {}
    for node in nodes:
        waiting[node.id] = len(node.parents)
        for parent in node.parents:
            children[parent].append(node.id)
    ready = deque(node.id for node in nodes if not node.parents)
    outputs: dict[str, Any] = {}
    done: asyncio.Queue[str] = asyncio.Queue()

    async def one(node: Node) -> None:
        value = outputs[node.parents[0]] if node.parents else node.literal
        outputs[node.id] = await noop(value)
        done.put_nowait(node.id)

    running = 0
    async with asyncio.TaskGroup() as group:
        while ready or running:
            while ready and running < max_parallel:
                group.create_task(one(by_id[ready.popleft()]))
                running += 1
            finished = await done.get()
            running -= 1
            for child in children[finished]:
                waiting[child] -= 1
                if waiting[child] == 0:
                    ready.append(child)
    return outputs


def run_baseline(nodes: Sequence[Node], max_parallel: int) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    outputs = asyncio.run(bare_executor(nodes, max_parallel))
    return time.perf_counter() - started, outputs


# -- measuring -----------------------------------------------------------------------------


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def check_engine(run: EngineRun, expected: dict[str, Any]) -> None:
    result = run.result
    if result.status != "succeeded":
        bad = {k: (s.status, s.error) for k, s in result.steps.items() if s.status != "succeeded"}
        raise SystemExit(f"engine run {result.status}: {list(bad.items())[:5]} {result.errors}")
    outputs = {k: s.output for k, s in result.steps.items()}
    if outputs != expected:
        raise SystemExit("engine outputs differ from the expected outputs")


def measure_overhead(args: argparse.Namespace, registry: Registry) -> dict[str, Any]:
    nodes = layered_dag(args.steps, args.width, args.seed)
    text = recipe_text(nodes, args.width)
    expected = expected_outputs(nodes)
    steps = len(nodes)

    # Warm-up: imports, Jinja environment, pydantic validators, the event loop policy.
    check_engine(run_engine(text, registry), expected)
    run_baseline(nodes, args.width)

    engine_runs: list[EngineRun] = []
    baseline_seconds: list[float] = []
    for _ in range(args.repeat):  # interleaved, so drift of the machine hits both alike
        gc.collect()
        run = run_engine(text, registry)
        check_engine(run, expected)
        engine_runs.append(run)
        gc.collect()
        seconds, outputs = run_baseline(nodes, args.width)
        if outputs != expected:
            raise SystemExit("baseline outputs differ from the expected outputs")
        baseline_seconds.append(seconds)

    def per_step(values: list[float]) -> float:
        return statistics.median(values) / steps * 1e6

    engine_us = per_step([r.total_seconds for r in engine_runs])
    load_us = per_step([r.load_seconds for r in engine_runs])
    parse_us = per_step([r.parse_seconds for r in engine_runs])
    validate_us = per_step([r.validate_seconds for r in engine_runs])
    gc_us = per_step([r.gc_seconds for r in engine_runs])
    exec_us = per_step([r.exec_seconds for r in engine_runs])
    baseline_us = per_step(baseline_seconds)
    overhead_us = engine_us - baseline_us
    return {
        "steps": steps,
        "width": args.width,
        "layers": -(-steps // args.width),
        "edges": sum(len(n.parents) for n in nodes),
        "repeat": args.repeat,
        "events_per_step": engine_runs[0].events / steps,
        "engine_us_per_step": engine_us,
        "engine_load_us_per_step": load_us,
        "engine_parse_us_per_step": parse_us,
        "engine_validate_us_per_step": validate_us,
        "engine_gc_us_per_step": gc_us,
        "engine_exec_us_per_step": exec_us,
        "engine_seconds": statistics.median(r.total_seconds for r in engine_runs),
        "engine_load_seconds": statistics.median(r.load_seconds for r in engine_runs),
        "engine_exec_seconds": statistics.median(r.exec_seconds for r in engine_runs),
        "baseline_us_per_step": baseline_us,
        "baseline_seconds": statistics.median(baseline_seconds),
        "overhead_us_per_step": overhead_us,
        "exec_overhead_us_per_step": exec_us - baseline_us,
        "validate_exec_overhead_us_per_step": validate_us + exec_us - baseline_us,
        "ratio": engine_us / baseline_us,
        "target_us_per_step": TARGET_US_PER_STEP,
        "target_met": overhead_us <= TARGET_US_PER_STEP,
        "exec_target_met": exec_us - baseline_us <= TARGET_US_PER_STEP,
        "validate_exec_target_met": validate_us + exec_us - baseline_us <= TARGET_US_PER_STEP,
    }


def measure_validation(args: argparse.Namespace, registry: Registry) -> dict[str, Any]:
    nodes = layered_dag(args.validate_steps, args.width, args.seed)
    text = recipe_text(nodes, args.width)
    parse_times: list[float] = []
    validate_times: list[float] = []
    for _ in range(3):
        clear_template_caches()
        gc.collect()
        parse_seconds, (data, source) = timed(lambda: parse_recipe_text(text, "<bench>"))
        validate_seconds, plan = timed(
            lambda: validate_plan(data, source, registry, base_dir=BASE_DIR)  # noqa: B023  # called at once
        )
        assert len(plan.steps) == len(nodes)
        parse_times.append(parse_seconds)
        validate_times.append(validate_seconds)
    totals = [p + v for p, v in zip(parse_times, validate_times, strict=True)]
    seconds = statistics.median(totals)
    return {
        "validate_steps": len(nodes),
        "validate_recipe_bytes": len(text.encode()),
        "validate_seconds": seconds,
        "validate_parse_seconds": statistics.median(parse_times),
        "validate_check_seconds": statistics.median(validate_times),
        "validate_target_seconds": TARGET_VALIDATE_SECONDS,
        "validate_target_met": seconds < TARGET_VALIDATE_SECONDS,
    }


def measure_store(args: argparse.Namespace, registry: Registry) -> dict[str, Any]:
    """The same DAG with its run journaled to a SQLite store ("on") and without ("off"),
    interleaved in this process; the added cost is the median of the paired differences
    of the execute phase (parsing and validating are the same either way)."""
    nodes = layered_dag(args.steps, args.width, args.seed)
    text = recipe_text(nodes, args.width)
    expected = expected_outputs(nodes)
    steps = len(nodes)
    with tempfile.TemporaryDirectory(prefix="planloom-bench-", dir=args.store_dir) as folder:
        path = Path(folder) / "runs.db"
        # Warm-up: the store's creation and the journal's code paths.
        check_engine(run_engine(text, registry, path), expected)
        check_journal(path, steps)
        off: list[EngineRun] = []
        on: list[EngineRun] = []
        for index in range(args.repeat):
            # alternate which goes first, so a drift of the machine hits both alike
            for journaled in (False, True) if index % 2 == 0 else (True, False):
                gc.collect()
                run = run_engine(text, registry, path if journaled else None)
                check_engine(run, expected)
                if journaled:
                    check_journal(path, steps)
                (on if journaled else off).append(run)
        store_bytes = sum(f.stat().st_size for f in Path(folder).iterdir())
    runs_in_store = args.repeat + 1
    pairs = list(zip(on, off, strict=True))
    added = [(a.exec_seconds - b.exec_seconds) / steps * 1e6 for a, b in pairs]
    added_cpu = [(a.exec_cpu_seconds - b.exec_cpu_seconds) / steps * 1e6 for a, b in pairs]
    off_exec = statistics.median(r.exec_seconds for r in off)
    on_exec = statistics.median(r.exec_seconds for r in on)
    off_total = statistics.median(r.total_seconds for r in off)
    on_total = statistics.median(r.total_seconds for r in on)
    added_us = statistics.median(added)
    return {
        "store_steps": steps,
        "store_repeat": args.repeat,
        "store_off_exec_us_per_step": off_exec / steps * 1e6,
        "store_on_exec_us_per_step": on_exec / steps * 1e6,
        "store_off_gc_us_per_step": statistics.median(r.gc_seconds for r in off) / steps * 1e6,
        "store_on_gc_us_per_step": statistics.median(r.gc_seconds for r in on) / steps * 1e6,
        "store_added_us_per_step": added_us,
        "store_added_us_per_step_min": min(added),
        "store_added_us_per_step_max": max(added),
        "store_added_cpu_us_per_step": statistics.median(added_cpu),
        "store_exec_ratio": on_exec / off_exec,
        "store_total_ratio": on_total / off_total,
        "store_bytes_per_run": store_bytes / runs_in_store,
        "store_target_us_per_step": TARGET_STORE_US_PER_STEP,
        "store_target_met": added_us <= TARGET_STORE_US_PER_STEP,
    }


def measure_tracing(args: argparse.Namespace, registry: Registry) -> dict[str, Any]:
    """Tracing off and on against no tracing at all, the same DAG interleaved in this
    process (execute phase; paired differences, median).

    "off" is what `planloom` does without `--otel` or an OTLP endpoint: it asks
    `Telemetry.start`, which adds nothing. "on" exports every span over OTLP/HTTP to a
    collector stand-in in another process (`bench/_collector.py`, which reads each payload
    and answers 200), the provider made, fed and shut down in the timed phase.
    """
    nodes = layered_dag(args.steps, args.width, args.seed)
    text = recipe_text(nodes, args.width)
    expected = expected_outputs(nodes)
    steps = len(nodes)
    with Collector() as collector:
        environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url}
        variants: dict[str, Mapping[str, str] | None] = {"none": None, "off": {}, "on": environ}
        check_engine(run_engine(text, registry, tracing=environ), expected)  # warm-up
        spans_before = collector.spans()
        runs: dict[str, list[EngineRun]] = {name: [] for name in variants}
        for index in range(args.repeat):
            order = list(variants) if index % 2 == 0 else list(reversed(variants))
            for name in order:
                gc.collect()
                run = run_engine(text, registry, tracing=variants[name])
                check_engine(run, expected)
                runs[name].append(run)
        exported = (collector.spans() - spans_before) / args.repeat
    # Each traced run exports a run span and a step, attempt and tool span per step.
    if exported != 1 + 3 * steps:
        raise SystemExit(f"the collector got {exported:g} spans per run, not {1 + 3 * steps}")

    def added(name: str) -> list[float]:
        pairs = zip(runs[name], runs["none"], strict=True)
        return [(a.exec_seconds - b.exec_seconds) / steps * 1e6 for a, b in pairs]

    off, on = added("off"), added("on")
    return {
        "tracing_steps": steps,
        "tracing_repeat": args.repeat,
        "tracing_none_exec_us_per_step": statistics.median(r.exec_seconds for r in runs["none"])
        / steps
        * 1e6,
        "tracing_off_added_us_per_step": statistics.median(off),
        "tracing_off_added_us_per_step_min": min(off),
        "tracing_off_added_us_per_step_max": max(off),
        "tracing_on_added_us_per_step": statistics.median(on),
        "tracing_on_added_us_per_step_min": min(on),
        "tracing_on_added_us_per_step_max": max(on),
        "tracing_on_ratio": statistics.median(r.exec_seconds for r in runs["on"])
        / statistics.median(r.exec_seconds for r in runs["none"]),
        "tracing_spans_per_run": exported,
        "tracing_off_target_us_per_step": TARGET_TRACING_OFF_US_PER_STEP,
        "tracing_off_target_met": statistics.median(off) <= TARGET_TRACING_OFF_US_PER_STEP,
    }


def profile_engine(args: argparse.Namespace, registry: Registry, limit: int = 25) -> str:
    """cProfile of one whole engine run (after a warm-up), by own time and by cumulative;
    then the same of one run journaled to a store, with where the journal's time goes."""
    nodes = layered_dag(args.steps, args.width, args.seed)
    text = recipe_text(nodes, args.width)
    out = io.StringIO()
    run_engine(text, registry)
    profiler = cProfile.Profile()
    profiler.enable()
    run_engine(text, registry)
    profiler.disable()
    stats = pstats.Stats(profiler, stream=out)
    for key in ("tottime", "cumulative"):
        out.write(f"\n=== engine run of {len(nodes)} steps, top {limit} by {key} ===\n")
        stats.sort_stats(key).print_stats(limit)
    with tempfile.TemporaryDirectory(prefix="planloom-bench-", dir=args.store_dir) as folder:
        path = Path(folder) / "runs.db"
        run_engine(text, registry, path)
        # GC off: a collection's pause would be charged to whatever function it interrupted,
        # and the journal's own costs are what this profile is for (GC is timed apart).
        gc.collect()
        gc.disable()
        profiler = cProfile.Profile()
        try:
            profiler.enable()
            run_engine(text, registry, path)
            profiler.disable()
        finally:
            gc.enable()
    stats = pstats.Stats(profiler, stream=out)
    for key in ("tottime", "cumulative"):
        out.write(
            f"\n=== engine run of {len(nodes)} steps journaled to a store (GC off), top "
            f"{limit} by {key} ===\n"
        )
        stats.sort_stats(key).print_stats(limit)
    out.write(journal_breakdown(stats, len(nodes)))
    return out.getvalue()


# Where a journaled run's extra time goes: the journal's seams, the store, and what they
# call (redaction, JSON, hashing, SQLite).
_JOURNAL_FILES = ("engine/journal.py", "engine/app/sqlite_store.py", "engine/store.py")
_JOURNAL_CALLEES = (
    ("engine/_secrets", ""),
    ("engine/recording/cassette.py", ""),
    ("engine/model.py", "to_data"),
    ("~", "<method 'execute"),
    ("~", "<method 'executemany"),
    ("json/", ""),
    ("~", "<built-in method _hashlib"),
)


def journal_breakdown(stats: pstats.Stats, steps: int, limit: int = 30) -> str:
    """The functions of the journal and the store, and the functions they lean on, by
    cumulative time (µs per step); a function's cumulative time includes its callees', so
    the rows overlap."""
    table: dict[tuple[str, int, str], tuple[int, int, float, float, dict[Any, Any]]]
    table = stats.stats  # type: ignore[attr-defined]  # pstats keeps its table untyped
    rows = []
    for (file, line, name), (_calls, ncalls, tottime, cumtime, _callers) in table.items():
        ours = file.endswith(_JOURNAL_FILES)
        leaned_on = any(where in file and name.startswith(what) for where, what in _JOURNAL_CALLEES)
        if ours or leaned_on:
            where = "/".join(Path(file).parts[-2:]) if file != "~" else ""
            rows.append((cumtime, tottime, ncalls, f"{where}:{line}({name})"))
    rows.sort(reverse=True)
    lines = [
        f"\n=== the journal's time, µs per step ({steps} steps), by cumulative ===",
        f"{'cumulative':>10}  {'own':>8}  {'calls':>8}  function",
    ]
    for cumtime, tottime, ncalls, label in rows[:limit]:
        lines.append(
            f"{cumtime / steps * 1e6:10.2f}  {tottime / steps * 1e6:8.2f}  {ncalls:8d}  {label}"
        )
    return "\n".join(lines) + "\n"


# -- output --------------------------------------------------------------------------------


def report(figures: dict[str, Any]) -> str:
    lines = []
    if "steps" in figures:
        lines.append(report_overhead(figures))
    if "store_steps" in figures:
        lines.append(report_store(figures))
    if "tracing_steps" in figures:
        lines.append(report_tracing(figures))
    return "\n".join(lines)


def report_tracing(f: dict[str, Any]) -> str:
    verdict = "MET" if f["tracing_off_target_met"] else "MISSED"
    return "\n".join(
        [
            f"tracing: {f['tracing_steps']} steps; execute phase against no tracing at all, "
            f"median of {f['tracing_repeat']} paired runs",
            f"  no tracing:          {f['tracing_none_exec_us_per_step']:8.1f} µs/step",
            f"  off, added:          {f['tracing_off_added_us_per_step']:8.2f} µs/step  "
            f"(paired runs: {f['tracing_off_added_us_per_step_min']:.2f} to "
            f"{f['tracing_off_added_us_per_step_max']:.2f}); target ≤ "
            f"{f['tracing_off_target_us_per_step']:g}: {verdict}",
            f"  on (OTLP/HTTP), added: {f['tracing_on_added_us_per_step']:6.1f} µs/step  "
            f"(paired runs: {f['tracing_on_added_us_per_step_min']:.1f} to "
            f"{f['tracing_on_added_us_per_step_max']:.1f}; {f['tracing_on_ratio']:.2f}x; "
            f"{f['tracing_spans_per_run']:.0f} spans exported per run)",
        ]
    )


def report_store(f: dict[str, Any]) -> str:
    verdict = "PASS" if f["store_target_met"] else "FAIL"
    return "\n".join(
        [
            f"store on vs off: {f['store_steps']} steps journaled to a SQLite run store in a "
            f"temp dir; execute phase, median of {f['store_repeat']} paired runs",
            f"  store off:            {f['store_off_exec_us_per_step']:8.1f} µs/step  "
            f"(gc {f['store_off_gc_us_per_step']:.1f})",
            f"  store on:             {f['store_on_exec_us_per_step']:8.1f} µs/step  "
            f"(gc {f['store_on_gc_us_per_step']:.1f}; "
            f"{f['store_bytes_per_run'] / 1e3:.0f} kB of store per run)",
            f"  added by the journal: {f['store_added_us_per_step']:8.1f} µs/step  "
            f"(paired runs: {f['store_added_us_per_step_min']:.1f} to "
            f"{f['store_added_us_per_step_max']:.1f}; CPU time of this process: "
            f"{f['store_added_cpu_us_per_step']:.1f})",
            f"  ratio on/off:         {f['store_exec_ratio']:8.2f}x execute, "
            f"{f['store_total_ratio']:.2f}x whole pipeline",
            f"  target ≤ {f['store_target_us_per_step']:g} µs/step added: {verdict}",
        ]
    )


def report_overhead(figures: dict[str, Any]) -> str:
    f = figures

    def verdict(key: str) -> str:
        return "MET" if f[key] else "MISSED"

    vmet = "MET" if f["validate_target_met"] else "MISSED"
    return "\n".join(
        [
            f"planloom overhead benchmark (Python {platform.python_version()}, "
            f"{platform.machine()})",
            f"DAG: {f['steps']} no-op steps, {f['layers']} layers of {f['width']}, "
            f"{f['edges']} edges, max_parallel {f['width']}; "
            f"median of {f['repeat']} runs after one warm-up",
            f"engine   (load + run):  {f['engine_us_per_step']:8.1f} µs/step  "
            f"({f['engine_seconds'] * 1e3:.1f} ms, {f['events_per_step']:.0f} events/step)",
            f"  load + validate:      {f['engine_load_us_per_step']:8.1f} µs/step  "
            f"({f['engine_load_seconds'] * 1e3:.1f} ms: parse "
            f"{f['engine_parse_us_per_step']:.1f} + validate "
            f"{f['engine_validate_us_per_step']:.1f} µs/step)",
            f"  execute:              {f['engine_exec_us_per_step']:8.1f} µs/step  "
            f"({f['engine_exec_seconds'] * 1e3:.1f} ms)",
            f"  of which in gc:       {f['engine_gc_us_per_step']:8.1f} µs/step  "
            "(cyclic garbage collector, across all three phases)",
            f"bare asyncio baseline:  {f['baseline_us_per_step']:8.1f} µs/step  "
            f"({f['baseline_seconds'] * 1e3:.1f} ms)",
            f"ratio engine/baseline:  {f['ratio']:8.1f}x  (whole pipeline)",
            f"overhead against the ≤ {f['target_us_per_step']:g} µs/step target, engine minus "
            "baseline:",
            f"  execution (templating, sandbox, events): {f['exec_overhead_us_per_step']:7.1f}"
            f" µs/step  {verdict('exec_target_met')}",
            f"  + validation:                            "
            f"{f['validate_exec_overhead_us_per_step']:7.1f} µs/step  "
            f"{verdict('validate_exec_target_met')}",
            f"  + YAML parsing (whole pipeline):         {f['overhead_us_per_step']:7.1f}"
            f" µs/step  {verdict('target_met')}",
            f"validate {f['validate_steps']}-step recipe: {f['validate_seconds']:.3f} s "
            f"(parse {f['validate_parse_seconds']:.3f} s + validate "
            f"{f['validate_check_seconds']:.3f} s, median of 3, "
            f"{f['validate_recipe_bytes'] / 1e6:.1f} MB); "
            f"target < {f['validate_target_seconds']:g} s: {vmet}",
        ]
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="steps in the timed DAG")
    parser.add_argument("--width", type=int, default=20, help="steps per layer = max_parallel")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs (median is shown)")
    parser.add_argument(
        "--validate-steps", type=int, default=10_000, help="steps in the validated recipe"
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="DAG shape seed")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also print (on stderr) a cProfile of one engine run, and of one journaled run",
    )
    parser.add_argument("--store-only", action="store_true", help="only the store on vs off figure")
    parser.add_argument(
        "--tracing-only", action="store_true", help="only the tracing off/on figures"
    )
    parser.add_argument(
        "--store-dir",
        default=None,
        metavar="DIR",
        help="where the temporary run store goes (default: the system's temp folder)",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.width <= 1024:
        parser.error("--width must be between 1 and 1024 (it is limits.max_parallel)")
    for name in ("steps", "repeat", "validate_steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    registry = make_registry()
    figures: dict[str, Any] = {}
    if not (args.store_only or args.tracing_only):
        figures |= measure_overhead(args, registry) | measure_validation(args, registry)
    if not args.tracing_only:
        figures |= measure_store(args, registry)
    if not args.store_only:
        figures |= measure_tracing(args, registry)
    print(json.dumps(figures, indent=2) if args.json else report(figures))
    if args.profile:
        print(profile_engine(args, registry), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
