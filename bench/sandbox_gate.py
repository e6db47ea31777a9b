"""Per-call cost of the capability sandbox for `fs.read` and `shell.run` (`true`).

Levels, measured in the same run with their batches interleaved (so that a noisy moment
on a shared machine hits every level alike), median of the batches:

1. raw: the operation itself (`open` + `read` in a worker thread; spawning `/bin/true` with
   `asyncio.create_subprocess_exec` and waiting for it);
2. action: the capability's implementation called directly (jailed path resolution;
   argv rules, scrubbed env and confinement for shell; outside a run, so `shell.run`
   starts the one-shot launcher, a fresh `python -I -S _launcher.py`, per call);
3. sandbox: the same call through `Sandbox.call` (grant check, params schema, budget,
   gate decision, timeout, audit events to a subscriber, JSON-able output), outside a run;
4. resident (shell only): `Sandbox.call` within the `shell` family's run scope, as the
   executor makes every call of a run: the run's resident launcher (zygote) forks each
   call's launcher, and a spare it prepared serves calls without network.

Shell calls are also timed one at a time after an idle pause (`--idle-ms`), as a step
that runs now and then in a run would meet them: the kernel's first move of a process
into a cgroup after an idle moment waits for an RCU grace period (~10 ms here), which the
resident launcher's spare takes before the call comes.

Printed: µs per call for each level, the gate's own overhead (3 - 2), the ratio of the
sandboxed call to the raw operation, and for shell the resident launcher's gain.

Usage:
    python bench/sandbox_gate.py [--calls 300] [--shell-calls 40] [--batches 5]
                                 [--idle-calls 15] [--idle-ms 50] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from capabilities import CallContext, Sandbox, default_registry
from engine.events import Event, EventBus

Call = Callable[[], Awaitable[Any]]


async def interleaved_us(
    levels: dict[str, Call], calls: int, batches: int
) -> dict[str, list[float]]:
    """µs per call of each level, one figure a batch; each batch runs every level in turn."""
    for call in levels.values():
        await call()  # warm-up (and the resident launcher's start)
    samples: dict[str, list[float]] = {level: [] for level in levels}
    for _ in range(batches):
        for level, call in levels.items():
            started = time.perf_counter()
            for _ in range(calls):
                await call()
            samples[level].append((time.perf_counter() - started) / calls * 1e6)
    return samples


async def idle_us(levels: dict[str, Call], calls: int, pause: float) -> dict[str, list[float]]:
    """µs of each call made after `pause` seconds of idleness, levels interleaved."""
    samples: dict[str, list[float]] = {level: [] for level in levels}
    for _ in range(calls):
        for level, call in levels.items():
            await asyncio.sleep(pause)
            started = time.perf_counter()
            await call()
            samples[level].append((time.perf_counter() - started) * 1e6)
    return samples


def medians(samples: dict[str, list[float]]) -> dict[str, Any]:
    """Each level's median, and its samples' range (`LEVEL_range_us`: the noise)."""
    figures: dict[str, Any] = {}
    for level, values in samples.items():
        figures[f"{level}_us"] = statistics.median(values)
        figures[f"{level}_range_us"] = [min(values), max(values)]
    return figures


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    registry = default_registry()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "data.txt").write_text("x" * 1024)
        events: list[Event] = []
        bus = EventBus("bench")
        bus.subscribe(events.append)
        grants = {"fs": {"root": ".", "read": True}, "shell": {"allow": ["true"]}}
        sandbox = Sandbox(registry, grants, root, events=bus)
        in_run = Sandbox(registry, grants, root, events=bus)

        fs_read = registry.actions["fs.read"]
        fs_ctx = CallContext(grant=sandbox._grants["fs"], base_dir=root, timeout=30)
        fs_params = fs_read.params_model.model_validate({"path": "data.txt"})

        def raw_read() -> bytes:
            with open(root / "data.txt", "rb") as handle:
                return handle.read()

        fs_levels: dict[str, Call] = {
            "raw": lambda: asyncio.to_thread(raw_read),
            "action": lambda: fs_read.run(fs_params, fs_ctx),
            "sandbox": lambda: sandbox.call("fs.read", {"path": "data.txt"}, step_id="b"),
        }

        shell_run = registry.actions["shell.run"]
        sh_ctx = CallContext(grant=sandbox._grants["shell"], base_dir=root, timeout=30)
        sh_params = shell_run.params_model.model_validate({"argv": ["true"]})

        async def raw_true() -> int:
            process = await asyncio.create_subprocess_exec("/bin/true")
            return await process.wait()

        shell_levels: dict[str, Call] = {
            "raw": raw_true,
            "action": lambda: shell_run.run(sh_params, sh_ctx),
            "sandbox": lambda: sandbox.call("shell.run", {"argv": ["true"]}, step_id="b"),
            "resident": lambda: in_run.call("shell.run", {"argv": ["true"]}, step_id="b"),
        }

        async with contextlib.AsyncExitStack() as run_scopes:
            # As the executor does at a run's start (`Executor._enter_scopes`).
            for name, grant in in_run.granted().items():
                scope = registry.families[name].scope
                if scope is not None:
                    in_run.scopes[name] = await run_scopes.enter_async_context(scope(grant, root))
            for name, levels, calls in (
                ("fs.read", fs_levels, args.calls),
                ("shell.run true", shell_levels, args.shell_calls),
            ):
                f = medians(await interleaved_us(levels, calls, args.batches))
                us = {level: f[f"{level}_us"] for level in levels}
                figures[name] = {
                    **f,
                    "gate_overhead_us": us["sandbox"] - us["action"],
                    "ratio_sandbox_to_raw": us["sandbox"] / us["raw"],
                    "ratio_sandbox_to_action": us["sandbox"] / us["action"],
                }
                if "resident" in us:
                    figures[name]["ratio_sandbox_to_resident"] = us["sandbox"] / us["resident"]
            if args.idle_calls:
                idle = {level: shell_levels[level] for level in ("sandbox", "resident")}
                f = medians(await idle_us(idle, args.idle_calls, args.idle_ms / 1000))
                figures["shell.run true, after an idle pause"] = {
                    "idle_ms": args.idle_ms,
                    **f,
                    "ratio_sandbox_to_resident": f["sandbox_us"] / f["resident_us"],
                }
    return figures


def report(figures: dict[str, Any]) -> str:
    lines = ["sandbox gate cost per call (median of interleaved batches)"]
    for name, f in figures.items():
        if "raw_us" not in f:
            continue
        resident = f" resident {f['resident_us']:9.1f} µs" if "resident_us" in f else ""
        lines.append(
            f"{name:<15} raw {f['raw_us']:9.1f} µs   action {f['action_us']:9.1f} µs   "
            f"sandbox {f['sandbox_us']:9.1f} µs{resident}"
        )
        lines.append(
            f"{'':<15} gate overhead {f['gate_overhead_us']:7.1f} µs/call   "
            f"sandbox/action {f['ratio_sandbox_to_action']:5.2f}x   "
            f"sandbox/raw {f['ratio_sandbox_to_raw']:6.2f}x"
        )
        if "ratio_sandbox_to_resident" in f:
            lines.append(
                f"{'':<15} one-shot launcher / resident launcher "
                f"{f['ratio_sandbox_to_resident']:5.2f}x"
            )
        ranges = ", ".join(
            f"{key.removesuffix('_range_us')} {span[0]:.0f}..{span[1]:.0f}"
            for key, span in f.items()
            if key.endswith("_range_us")
        )
        lines.append(f"{'':<15} batch range (noise), µs: {ranges}")
    idle = figures.get("shell.run true, after an idle pause")
    if idle is not None:
        lines.append(
            f"shell.run true, one call after {idle['idle_ms']:g} ms idle (median): "
            f"sandbox {idle['sandbox_us']:9.1f} µs   resident {idle['resident_us']:9.1f} µs   "
            f"{idle['ratio_sandbox_to_resident']:5.2f}x   (range: sandbox "
            f"{idle['sandbox_range_us'][0]:.0f}..{idle['sandbox_range_us'][1]:.0f}, resident "
            f"{idle['resident_range_us'][0]:.0f}..{idle['resident_range_us'][1]:.0f})"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=300, help="fs.read calls per batch")
    parser.add_argument("--shell-calls", type=int, default=40, help="shell.run calls per batch")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument(
        "--idle-calls", type=int, default=15, help="shell.run calls after a pause (0: none)"
    )
    parser.add_argument("--idle-ms", type=float, default=50.0, help="the pause, in ms")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = asyncio.run(measure(args))
    print(json.dumps(figures, indent=2) if args.json else report(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
