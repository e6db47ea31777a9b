"""Per-call cost of an MCP tool called through planloom, against the bare SDK client.

Both sides talk to the same small MCP server over stdio: an `MCPServer` with one read-only
tool, `search(query) -> dict`, written into a temporary folder. Both make `--calls` (N)
sequential `search` calls and the figure is wall time per call.

- **Bare SDK** (the baseline): `async with Client(StdioServerParameters(python, server.py))`,
  one warm-up call (the server's start and the handshake are behind it), then N timed
  `await client.call_tool("search", {"query": "x"})`.
- **planloom**: a recipe grants the server (`capabilities: mcp: servers: ...`) and chains
  N + 1 steps `s0 → s1 → … → sN` through `depends_on`, each calling `mcp.bench.search`.
  The recipe is validated once (`load_recipe`, which starts the server, lists its tools
  and stops it); each timed run builds an `Executor` and runs it under `asyncio.run`.
  The server starts on the first call of a run, so step `s0` is the warm-up: an event
  subscriber notes the time of `step.finished` for `s0` and for `sN`, and the interval
  between them is N whole steps (scheduling, templating, params validation, the sandbox's
  checks, events, the call over the pipe, the output model) with nothing of the start-up
  or of the run's end in it. Start-up (run start to `s0` finished) and stop (`sN`
  finished to `run()` returned: the server and its process tree are stopped there) are
  shown apart. Timing the interval inside one run, rather than taking the difference of
  a 1-step and an (N + 1)-step run, keeps the start-up's jitter (tens of ms) out of the
  per-call figure.

planloom's server runs confined (namespaces, Landlock, a pids cgroup); the bare client's
does not. Confinement costs at start-up only: per call, both speak newline-delimited
JSON-RPC over the server's own stdin and stdout pipes. The event subscriber is what the
CLI always has (its log), so events are built and redacted as in a real run.

Beside wall time, each run shows the CPU time per call of this process (`process_time`:
the client, or planloom) and of the server (from /proc, in kernel ticks: 10 ms over the N
calls). Calls are a ping-pong, so wall ≈ client CPU + server CPU + wake-ups. CPU time
leaves out the waits for a free core, so on a busy machine it drifts less than wall time
(it still grows under contention: caches are shared); the client's is where planloom's
own cost shows. The machine's load moves single runs by up to 2x: compare runs made at the
same time, and read the median.

Runs alternate (bare, planloom) `--repeat` times after one short warm-up pair; each run
and the median of the per-run ratios planloom / bare are printed. The target is at most
1.3x. Every server carries a unique marker argument, and the bench fails if a process
with it is still alive at the end. `--profile` prints, to stderr, a cProfile of the N
calls of one more run on each side (the call phase only: start-up and stop left out) and
both sides' own time grouped by area (planloom's packages, the SDK, anyio, asyncio,
jsonschema, pydantic, waits), with what planloom adds to each.

Usage:
    python bench/mcp_overhead.py [--calls 500] [--repeat 3] [--json] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import platform
import pstats
import statistics
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from engine.app.registry import build_registry
from engine.capability import Registry
from engine.errors import ConfigurationError, PlanValidationError
from engine.events import Event, EventBus
from engine.executor import Executor
from engine.model import Plan
from planners.recipe import load_recipe

TARGET_RATIO = 1.3
PROJECT = Path(__file__).resolve().parent.parent
SERVER_NAME = "bench"
TOOL = f"mcp.{SERVER_NAME}.search"
QUERY = "x"
EXPECTED = {"query": QUERY, "hits": ["x marks the spot"], "count": 1}

SERVER_SOURCE = textwrap.dedent(
    '''
    """An MCP server with one read-only tool, for bench/mcp_overhead.py.

    Arguments after the script are ignored: the bench passes a marker to find it in /proc.
    """

    from typing import Any

    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    NOTES = ["x marks the spot", "release on friday", "lunch at noon"]
    server = MCPServer("bench")


    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def search(query: str) -> dict[str, Any]:
        """Notes that contain `query`."""
        hits = [note for note in NOTES if query in note]
        return {"query": query, "hits": hits, "count": len(hits)}


    if __name__ == "__main__":
        server.run()
    '''
).lstrip()


def recipe_text(calls: int, marker: str) -> str:
    """N + 1 `search` steps in a chain; the server's command carries `marker`."""
    lines = [
        "version: 1",
        "name: bench-mcp-overhead",
        "capabilities:",
        "  mcp:",
        "    servers:",
        f"      {SERVER_NAME}:",
        f"        command: [python3, server.py, {marker}]",
        '        tools: ["*"]',
        "limits: {max_parallel: 1, max_tool_calls: 1000000}",
        "steps:",
    ]
    for index in range(calls + 1):
        lines += [f"  - id: s{index}", f"    tool: {TOOL}", f"    params: {{query: {QUERY}}}"]
        if index:
            lines.append(f"    depends_on: [s{index - 1}]")
    return "\n".join(lines) + "\n"


# -- the two sides -------------------------------------------------------------------------


@dataclass
class Run:
    side: str
    calls: int
    call_seconds: float  # wall time of the N timed calls
    client_cpu_seconds: float  # CPU time of this process (all its threads) during them
    server_cpu_seconds: float  # CPU time of the server's processes during them
    startup_seconds: float  # process start, handshake and the first (untimed) call
    stop_seconds: float  # leaving: the server stopped

    @property
    def us_per_call(self) -> float:
        return self.call_seconds / self.calls * 1e6

    @property
    def client_cpu_us(self) -> float:
        return self.client_cpu_seconds / self.calls * 1e6

    @property
    def server_cpu_us(self) -> float:
        return self.server_cpu_seconds / self.calls * 1e6


@dataclass(frozen=True)
class Mark:
    """One instant, on three clocks."""

    wall: float
    client_cpu: float
    server_cpu: float

    @classmethod
    def opening(cls, marker: str) -> Mark:
        """Taken before a timed stretch: the slow reading (of /proc) first, the wall last."""
        server = server_cpu(marker)
        client = time.process_time()
        return cls(time.perf_counter(), client, server)

    @classmethod
    def closing(cls, marker: str) -> Mark:
        """Taken after a timed stretch: the wall first, the slow reading last."""
        wall = time.perf_counter()
        client = time.process_time()
        return cls(wall, client, server_cpu(marker))


def stretch(side: str, calls: int, begin: Mark, end: Mark, started: float, stopped: float) -> Run:
    return Run(
        side,
        calls,
        end.wall - begin.wall,
        end.client_cpu - begin.client_cpu,
        end.server_cpu - begin.server_cpu,
        begin.wall - started,
        stopped - end.wall,
    )


async def _bare(server: Path, marker: str, calls: int, profiler: cProfile.Profile | None) -> Run:
    params = StdioServerParameters(command=sys.executable, args=[str(server), marker])
    started = time.perf_counter()
    client = Client(params)
    async with client:
        first = await client.call_tool("search", {"query": QUERY})
        begin = Mark.opening(marker)
        if profiler is not None:
            profiler.enable()
        for _ in range(calls):
            answer = await client.call_tool("search", {"query": QUERY})
        if profiler is not None:
            profiler.disable()
        end = Mark.closing(marker)
    stopped = time.perf_counter()
    for result in (first, answer):
        if result.is_error or result.structured_content != EXPECTED:
            raise SystemExit(f"bare client: unexpected result {result!r:.300}")
    return stretch("bare", calls, begin, end, started, stopped)


def run_bare(
    server: Path, marker: str, calls: int, profiler: cProfile.Profile | None = None
) -> Run:
    return asyncio.run(_bare(server, marker, calls, profiler))


class StepClock:
    """An event subscriber marking when the first and the last step finished; it can turn a
    profiler on and off there, so that only the calls in between are profiled."""

    def __init__(
        self, first: str, last: str, marker: str, profiler: cProfile.Profile | None
    ) -> None:
        self.first, self.last, self.marker = first, last, marker
        self.profiler = profiler
        self.marks: dict[str, Mark] = {}

    def __call__(self, event: Event) -> None:
        if event.kind != "step.finished":
            return
        if event.step_id == self.first:
            self.marks[self.first] = Mark.opening(self.marker)
            if self.profiler is not None:
                self.profiler.enable()
        elif event.step_id == self.last:
            if self.profiler is not None:
                self.profiler.disable()
            self.marks[self.last] = Mark.closing(self.marker)


def run_planloom(
    plan: Plan,
    registry: Registry,
    base_dir: Path,
    marker: str,
    calls: int,
    profiler: cProfile.Profile | None = None,
) -> Run:
    last = f"s{calls}"
    clock = StepClock("s0", last, marker, profiler)
    bus = EventBus("bench")
    bus.subscribe(clock)
    executor = Executor(plan, registry=registry, base_dir=base_dir, events=bus, run_id="bench")
    started = time.perf_counter()
    result = asyncio.run(executor.run())
    stopped = time.perf_counter()
    if result.status != "succeeded":
        bad = {k: (s.status, s.error) for k, s in result.steps.items() if s.status != "succeeded"}
        raise SystemExit(f"planloom run {result.status}: {list(bad.items())[:3]} {result.errors}")
    for step_id, step in result.steps.items():
        output = step.output if isinstance(step.output, dict) else step.output.model_dump()
        if output.get("structured") != EXPECTED or output.get("is_error"):
            raise SystemExit(f"planloom step {step_id}: unexpected output {output!r:.300}")
    return stretch("planloom", calls, clock.marks["s0"], clock.marks[last], started, stopped)


# -- the server's processes ----------------------------------------------------------------


def processes_with(marker: str) -> list[int]:
    """Live processes whose command line holds `marker` (zombies have none)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if marker.encode() in cmdline.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def server_cpu(marker: str) -> float:
    """CPU seconds (user + system) of the live processes whose command line holds `marker`:
    the server (and, for planloom, its idle sandbox launcher). Kernel clock ticks: 10 ms
    over the N calls of a run."""
    ticks = 0
    for pid in processes_with(marker):
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


# -- measuring -----------------------------------------------------------------------------


def area(filename: str, function: str) -> str:
    """Where a profiled function belongs, for the by-area summary."""
    if filename == "~":  # built-ins, C methods
        if "epoll" in function:
            return WAITS[0]
        if "posix.write" in function:
            return WAITS[1]
        if "pydantic_core" in function:
            return "pydantic-core"
        return "other built-ins"
    path = Path(filename).resolve()
    for folder in ("engine", "capabilities", "planners"):
        if path.is_relative_to(PROJECT / folder):
            return f"planloom {folder}/"
    text = path.as_posix()
    for needle, name in (
        ("/mcp/", "MCP SDK"),
        ("/mcp_types/", "MCP SDK"),
        ("/anyio/", "anyio + sniffio"),
        ("/sniffio/", "anyio + sniffio"),
        ("/pydantic/", "pydantic"),
        ("/jsonschema", "jsonschema"),
        ("/referencing/", "jsonschema"),
        ("/asyncio/", "asyncio event loop"),
        ("/selectors.py", "asyncio event loop"),
    ):
        if needle in text:
            return name
    return "other Python"


def by_area(profiler: cProfile.Profile, calls: int) -> dict[str, float]:
    """Own time (tottime) per area, in µs per call."""
    stats = pstats.Stats(profiler)
    totals: dict[str, float] = {}
    raw: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]  # pstats keeps it untyped
    for (filename, _, function), (_, _, tottime, *_) in raw.items():
        key = area(filename, function)
        totals[key] = totals.get(key, 0.0) + tottime / calls * 1e6
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def profile_text(profiler: cProfile.Profile, title: str, limit: int = 25) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    for key in ("tottime", "cumulative"):
        out.write(f"\n=== {title}, top {limit} by {key} ===\n")
        stats.sort_stats(key).print_stats(limit)
    return out.getvalue()


WAITS = ("epoll wait (idle: the server works)", "pipe write (os.write, the server woken)")


def areas_text(bare: dict[str, float], engine: dict[str, float]) -> str:
    """Both sides' own time by area, under the profiler (which inflates Python code about
    threefold); the shares are of planloom's extra work, the waits shown apart."""
    lines = [
        "\n=== own time by area, µs/call under cProfile ===",
        f"{'area':42} {'bare':>9} {'planloom':>9} {'extra':>9} {'share of extra':>15}",
    ]

    def row(name: str, share: str = "") -> str:
        mine, theirs = engine.get(name, 0.0), bare.get(name, 0.0)
        return f"{name:42} {theirs:9.1f} {mine:9.1f} {mine - theirs:9.1f} {share}"

    work = sorted((set(bare) | set(engine)) - set(WAITS), key=lambda n: -engine.get(n, 0.0))
    extra = sum(engine.get(n, 0.0) - bare.get(n, 0.0) for n in work)
    for name in work:
        share = (engine.get(name, 0.0) - bare.get(name, 0.0)) / extra if extra > 0 else 0.0
        lines.append(row(name, f"{share:15.0%}"))
    lines.append(
        f"{'work (all but the waits)':42} {sum(bare.get(n, 0.0) for n in work):9.1f} "
        f"{sum(engine.get(n, 0.0) for n in work):9.1f} {extra:9.1f}"
    )
    lines += ["waits (the server's time; they vary with the machine's load):"]
    lines += [row(name) for name in WAITS]
    return "\n".join(lines) + "\n"


def validated(recipe: Path, registry: Registry) -> Plan:
    """The recipe as a plan; a server that cannot start (no namespaces, no Landlock...)
    ends the bench with planloom's own message."""
    try:
        plan, _ = load_recipe(recipe, registry)
    except (PlanValidationError, ConfigurationError) as exc:
        raise SystemExit(f"cannot validate the bench recipe:\n{exc}") from None
    return plan


def measure(args: argparse.Namespace, folder: Path, marker: str) -> tuple[dict[str, Any], str]:
    server = folder / "server.py"
    server.write_text(SERVER_SOURCE, encoding="utf-8")
    recipe = folder / "recipe.yaml"
    recipe.write_text(recipe_text(args.calls, marker), encoding="utf-8")

    started = time.perf_counter()
    registry = build_registry()
    plan = validated(recipe, registry)  # starts the server, lists its tools, stops it
    validate_seconds = time.perf_counter() - started
    warmup = min(args.calls, 20)
    warmup_recipe = folder / "warmup.yaml"
    warmup_recipe.write_text(recipe_text(warmup, marker), encoding="utf-8")
    warm_plan = validated(warmup_recipe, registry)

    # Warm-up: imports, pydantic validators, the SDK's and the engine's first-call paths.
    run_bare(server, marker, warmup)
    run_planloom(warm_plan, registry, folder, marker, warmup)

    runs: list[tuple[Run, Run]] = []
    for index in range(args.repeat):  # interleaved, so drift of the machine hits both alike
        bare = run_bare(server, marker, args.calls)
        engine = run_planloom(plan, registry, folder, marker, args.calls)
        runs.append((bare, engine))
        if not args.json:
            print(
                f"run {index + 1}: bare SDK {bare.us_per_call:6.0f} µs/call "
                f"(CPU {bare.client_cpu_us:4.0f} + server {bare.server_cpu_us:4.0f}) | "
                f"planloom {engine.us_per_call:6.0f} µs/call "
                f"(CPU {engine.client_cpu_us:4.0f} + server {engine.server_cpu_us:4.0f}; "
                f"start-up {engine.startup_seconds:.2f} s, stop {engine.stop_seconds:.2f} s) | "
                f"ratio {engine.us_per_call / bare.us_per_call:.2f}x",
                flush=True,
            )

    profiles = ""
    if args.profile:
        bare_profiler, engine_profiler = cProfile.Profile(), cProfile.Profile()
        run_bare(server, marker, args.calls, bare_profiler)
        run_planloom(plan, registry, folder, marker, args.calls, engine_profiler)
        profiles = (
            profile_text(bare_profiler, f"bare SDK, {args.calls} calls")
            + profile_text(engine_profiler, f"planloom, steps s1..s{args.calls}")
            + areas_text(by_area(bare_profiler, args.calls), by_area(engine_profiler, args.calls))
        )

    left = processes_with(marker)
    if left:
        raise SystemExit(f"server processes left running: {left}")

    def median(values: Sequence[float]) -> float:
        return statistics.median(values)

    bares, engines = [b for b, _ in runs], [e for _, e in runs]
    ratios = [e.us_per_call / b.us_per_call for b, e in runs]
    cpu_ratios = [
        (e.client_cpu_us + e.server_cpu_us) / (b.client_cpu_us + b.server_cpu_us) for b, e in runs
    ]
    bare_us = median([b.us_per_call for b in bares])
    engine_us = median([e.us_per_call for e in engines])
    ratio = median(ratios)
    figures = {
        "calls": args.calls,
        "repeat": args.repeat,
        "validate_seconds": validate_seconds,
        "bare_us_per_call": bare_us,
        "planloom_us_per_call": engine_us,
        "overhead_us_per_call": engine_us - bare_us,
        "ratio": ratio,
        "ratios": ratios,
        "bare_client_cpu_us_per_call": median([b.client_cpu_us for b in bares]),
        "planloom_client_cpu_us_per_call": median([e.client_cpu_us for e in engines]),
        "bare_server_cpu_us_per_call": median([b.server_cpu_us for b in bares]),
        "planloom_server_cpu_us_per_call": median([e.server_cpu_us for e in engines]),
        "cpu_ratio": median(cpu_ratios),
        "bare_startup_seconds": median([b.startup_seconds for b in bares]),
        "planloom_startup_seconds": median([e.startup_seconds for e in engines]),
        "bare_stop_seconds": median([b.stop_seconds for b in bares]),
        "planloom_stop_seconds": median([e.stop_seconds for e in engines]),
        "target_ratio": TARGET_RATIO,
        "target_met": ratio <= TARGET_RATIO,
        "servers_left": len(left),
        "runs": [[asdict(b), asdict(e)] for b, e in runs],
    }
    return figures, profiles


# -- output --------------------------------------------------------------------------------


def report(f: dict[str, Any]) -> str:
    met = "MET" if f["target_met"] else "MISSED"
    return "\n".join(
        [
            f"median of {f['repeat']} interleaved runs of {f['calls']} sequential "
            f"`search` calls each (Python {platform.python_version()}, {platform.machine()})",
            f"bare SDK client (stdio):  {f['bare_us_per_call']:7.0f} µs/call  "
            f"(CPU: client {f['bare_client_cpu_us_per_call']:.0f} + server "
            f"{f['bare_server_cpu_us_per_call']:.0f} µs; start-up + first call "
            f"{f['bare_startup_seconds']:.2f} s, stop {f['bare_stop_seconds']:.2f} s)",
            f"planloom (recipe steps):  {f['planloom_us_per_call']:7.0f} µs/call  "
            f"(CPU: planloom {f['planloom_client_cpu_us_per_call']:.0f} + server "
            f"{f['planloom_server_cpu_us_per_call']:.0f} µs; start-up + first step "
            f"{f['planloom_startup_seconds']:.2f} s, stop {f['planloom_stop_seconds']:.2f} s)",
            f"overhead:                 {f['overhead_us_per_call']:7.0f} µs/call",
            f"ratio planloom / bare:    {f['ratio']:7.2f}x  (median of the per-run ratios "
            f"{', '.join(f'{r:.2f}' for r in f['ratios'])}); target ≤ {f['target_ratio']:g}x: "
            f"{met}",
            f"CPU ratio (client + server): {f['cpu_ratio']:.2f}x  (median; no waits for a "
            "free core in it)",
            f"validating the {f['calls'] + 1}-step recipe (the server started, listed and "
            f"stopped): {f['validate_seconds']:.2f} s",
            "planloom's server runs confined (namespaces, Landlock, cgroup), the bare one "
            "does not: confinement costs at start-up only; per call, both use the server's "
            "stdin/stdout pipes.",
            f"server processes left: {f['servers_left']}",
        ]
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="timed calls per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side (median shown)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also print a cProfile of the calls of one more run of each side (stderr)",
    )
    args = parser.parse_args(argv)
    for name in ("calls", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    marker = f"mcp-bench-{uuid.uuid4().hex}"
    with tempfile.TemporaryDirectory(prefix="planloom-mcp-bench-") as folder:
        figures, profiles = measure(args, Path(folder), marker)
    print(json.dumps(figures, indent=2) if args.json else report(figures))
    if profiles:
        print(profiles, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
