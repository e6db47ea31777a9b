"""Tool calls on a Dask cluster against in-process calls: the speed-up of a CPU-bound
fan-out, and the dispatch cost of one call.

Two recipes run through the engine (`Executor`, as `planloom run` does), each twice in the
same process: with tool calls in this process (`--executor local`) and on a local Dask
cluster of `--workers` worker processes (`--executor dask-local:N`, one thread each):

- **CPU-bound fan-out**: a `for_each` of `--items` calls of `bench.burn`, each spinning
  pure Python for `--seconds` of CPU time. In this process the calls share one
  interpreter's GIL, so they run one at a time whatever `max_parallel` says; on the
  cluster each worker process runs one. The speed-up is local wall time / Dask wall time.
- **Dispatch**: a `for_each` of `--noops` calls of `bench.noop`, which does nothing: the
  wall time per call is the cost of sending it (local: the sandbox and the event loop;
  Dask: submitting the task, the scheduler, the worker's registry lookup and checks, the
  result coming back). A bare Dask client submitting the same number of no-op tasks (64
  in flight, as the recipe allows) gives Dask's own share.

The cluster is started once, before the timed runs (its start-up is printed apart). Each
run is checked: every item succeeded, and the burns ran in worker processes (on Dask) or
in this one (local). The plugin `bench/plugins/dask_bench_plugin.py` is found by the
workers through PYTHONPATH.

Usage:
    .venv/bin/python bench/dask.py [--items 64] [--seconds 0.25] [--workers 2]
                                   [--noops 400] [--repeat 1] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# This file is `dask.py`: its folder must not be where `import dask` looks.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
os.environ["PYTHONPATH"] = os.pathsep.join(  # the workers import the plugin too
    [str(HERE / "plugins"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
)
sys.path.insert(0, str(HERE / "plugins"))

from engine.app.dask_backend import DaskBackend, ExecutorSpec  # noqa: E402
from engine.app.registry import build_registry  # noqa: E402
from engine.backend import Backend  # noqa: E402
from engine.executor import Executor  # noqa: E402
from engine.model import Plan  # noqa: E402
from engine.results import RunResult  # noqa: E402
from engine.validation import validate_plan  # noqa: E402
from planners.recipe import parse_recipe_text  # noqa: E402

PLUGINS = ("dask_bench_plugin",)


def recipe(tool: str, items: int, params: str, parallel: int) -> str:
    return f"""\
version: 1
name: {tool.replace(".", "-")}
capabilities: {{bench: {{}}}}
limits: {{max_parallel: {parallel}, timeout: 600, max_tool_calls: {items + 10}}}
steps:
  - id: fan
    for_each: ${{{{ range({items}) | list }}}}
    tool: {tool}
    params: {params}
"""


def plan_of(text: str, registry: Any) -> Plan:
    data, source = parse_recipe_text(text, "<bench>")
    return validate_plan(data, source, registry, base_dir=HERE)


def run(plan: Plan, registry: Any, backend: Backend | None) -> tuple[float, RunResult]:
    async def go() -> RunResult:
        executor = Executor(plan, registry=registry, base_dir=HERE, backend=backend)
        return await executor.run()

    started = time.perf_counter()
    result = asyncio.run(go())
    return time.perf_counter() - started, result


def check(result: RunResult, items: int, *, remote: bool, burns: bool) -> int:
    """Every item succeeded; the burns ran where they should. Returns the processes used."""
    step = result.steps["fan"]
    if result.status != "succeeded" or step.status != "succeeded":
        raise SystemExit(f"the run {result.status}: {step.status} {step.error}")
    outputs = step.output
    if not isinstance(outputs, list) or len(outputs) != items:
        raise SystemExit(f"expected {items} outputs, got {outputs!r:.200}")
    if not burns:
        if outputs != list(range(items)):
            raise SystemExit("bench.noop returned other values than it was given")
        return 0
    pids = {o["pid"] for o in outputs}
    if remote == (os.getpid() in pids):
        raise SystemExit(f"burns ran in {pids}; this process is {os.getpid()}")
    return len(pids)


def bare_dask(address: str, calls: int, in_flight: int) -> float:
    """Seconds for `calls` no-op Dask tasks submitted by a bare asynchronous client,
    `in_flight` at once: Dask's own dispatch cost, the floor of planloom's."""
    from dask_bench_plugin import bare_noop
    from distributed import Client

    async def go() -> float:
        async with Client(address, asynchronous=True, set_as_default=False) as client:
            slots = asyncio.Semaphore(in_flight)

            async def one(value: int) -> int:
                async with slots:
                    result: int = await client.submit(bare_noop, value, pure=False)
                    return result

            await asyncio.gather(*(one(i) for i in range(8)))  # warm-up
            started = time.perf_counter()
            values = await asyncio.gather(*(one(i) for i in range(calls)))
            seconds = time.perf_counter() - started
            if values != list(range(calls)):
                raise SystemExit("bare Dask no-ops returned other values than given")
            return seconds

    return asyncio.run(go())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=64, help="CPU-bound calls in the fan-out")
    parser.add_argument("--seconds", type=float, default=0.25, help="CPU seconds per call")
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the cluster")
    parser.add_argument("--noops", type=int, default=400, help="no-op calls for dispatch cost")
    parser.add_argument("--repeat", type=int, default=1, help="runs per side (medians shown)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)
    registry = build_registry(PLUGINS)
    width = max(args.workers * 2, 8)
    burn = plan_of(
        recipe("bench.burn", args.items, f"{{seconds: {args.seconds}}}", width), registry
    )
    noop = plan_of(recipe("bench.noop", args.noops, "{value: '${{ item }}'}", 64), registry)

    started = time.perf_counter()
    backend = DaskBackend.start(ExecutorSpec("dask-local", workers=args.workers), PLUGINS)
    cluster_seconds = time.perf_counter() - started
    figures: dict[str, Any] = {"cluster_start_seconds": cluster_seconds}
    try:
        run(plan_of(recipe("bench.noop", 4, "{value: 1}", 4), registry), registry, backend)
        sides: dict[str, dict[str, list[float]]] = {"local": {}, "dask": {}}
        bare: list[float] = []
        used = 0
        for index in range(args.repeat):
            order = ("local", "dask") if index % 2 == 0 else ("dask", "local")
            for side in order:
                remote = side == "dask"
                chosen = backend if remote else None
                seconds, result = run(burn, registry, chosen)
                processes = check(result, args.items, remote=remote, burns=True)
                if remote:
                    used = processes
                sides[side].setdefault("burn", []).append(seconds)
                seconds, result = run(noop, registry, chosen)
                check(result, args.noops, remote=remote, burns=False)
                sides[side].setdefault("noop", []).append(seconds)
            bare.append(bare_dask(backend.address, args.noops, 64))
    finally:
        backend.close()

    def median(side: str, kind: str) -> float:
        return statistics.median(sides[side][kind])

    cpu = args.items * args.seconds
    local_burn, dask_burn = median("local", "burn"), median("dask", "burn")
    local_call = median("local", "noop") / args.noops * 1e6
    dask_call = median("dask", "noop") / args.noops * 1e6
    figures |= {
        "items": args.items,
        "seconds_per_item": args.seconds,
        "workers": args.workers,
        "worker_processes_used": used,
        "cpu_seconds": cpu,
        "burn_local_seconds": local_burn,
        "burn_dask_seconds": dask_burn,
        "speedup": local_burn / dask_burn,
        "ideal_speedup": float(args.workers),
        "noops": args.noops,
        "noop_local_us_per_call": local_call,
        "noop_dask_us_per_call": dask_call,
        "dispatch_ratio": dask_call / local_call,
        "noop_bare_dask_us_per_call": statistics.median(bare) / args.noops * 1e6,
        "repeat": args.repeat,
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    f = figures
    print(
        "\n".join(
            [
                f"planloom on Dask (Python {platform.python_version()}, {platform.machine()}, "
                f"{os.cpu_count()} CPUs); local cluster of {f['workers']} worker processes, "
                f"one thread each, started in {f['cluster_start_seconds']:.2f} s",
                f"CPU-bound fan-out: {f['items']} calls x {f['seconds_per_item']:g} s of CPU "
                f"({f['cpu_seconds']:g} s in all), median of {f['repeat']}",
                f"  local (one interpreter, one GIL): {f['burn_local_seconds']:7.2f} s",
                f"  dask-local:{f['workers']}:                    {f['burn_dask_seconds']:7.2f} s "
                f"({f['worker_processes_used']} worker processes used)",
                f"  speed-up:                         {f['speedup']:7.2f}x "
                f"(at most {f['ideal_speedup']:g}x)",
                f"dispatch: {f['noops']} no-op calls",
                f"  local: {f['noop_local_us_per_call']:8.0f} µs/call",
                f"  dask:  {f['noop_dask_us_per_call']:8.0f} µs/call "
                f"({f['dispatch_ratio']:.0f}x local)",
                f"  a bare Dask client, same no-op tasks, 64 in flight: "
                f"{f['noop_bare_dask_us_per_call']:.0f} µs/call (Dask's own floor)",
            ]
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
