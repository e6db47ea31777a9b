"""Per-call cost of the capability sandbox for `fs.read` and `shell.run` (`true`).

Three levels, measured in the same run, median of several batches:

1. raw: the operation itself (`open` + `read` in a worker thread; spawning `/bin/true` with
   `asyncio.create_subprocess_exec` and waiting for it);
2. action: the capability's implementation called directly (jailed path resolution;
   argv rules, scrubbed env and confinement for shell);
3. sandbox: the same call through `Sandbox.call` (grant check, params schema, budget,
   gate decision, timeout, audit events to a subscriber, JSON-able output).

Printed: µs per call for each level, the gate's own overhead (3 - 2), and the ratio of the
sandboxed call to the raw operation.

Usage:
    python bench/sandbox_gate.py [--calls 300] [--shell-calls 40] [--batches 5] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
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


async def per_call_us(call: Call, calls: int, batches: int) -> float:
    await call()  # warm-up
    samples = []
    for _ in range(batches):
        started = time.perf_counter()
        for _ in range(calls):
            await call()
        samples.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(samples)


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
        }

        for name, levels, calls in (
            ("fs.read", fs_levels, args.calls),
            ("shell.run true", shell_levels, args.shell_calls),
        ):
            us = {
                level: await per_call_us(call, calls, args.batches)
                for level, call in levels.items()
            }
            figures[name] = {
                **{f"{level}_us": value for level, value in us.items()},
                "gate_overhead_us": us["sandbox"] - us["action"],
                "ratio_sandbox_to_raw": us["sandbox"] / us["raw"],
                "ratio_sandbox_to_action": us["sandbox"] / us["action"],
            }
    return figures


def report(figures: dict[str, Any]) -> str:
    lines = ["sandbox gate cost per call (median of batches)"]
    for name, f in figures.items():
        lines.append(
            f"{name:<15} raw {f['raw_us']:9.1f} µs   action {f['action_us']:9.1f} µs   "
            f"sandbox {f['sandbox_us']:9.1f} µs"
        )
        lines.append(
            f"{'':<15} gate overhead {f['gate_overhead_us']:7.1f} µs/call   "
            f"sandbox/action {f['ratio_sandbox_to_action']:5.2f}x   "
            f"sandbox/raw {f['ratio_sandbox_to_raw']:6.2f}x"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=300, help="fs.read calls per batch")
    parser.add_argument("--shell-calls", type=int, default=40, help="shell.run calls per batch")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = asyncio.run(measure(args))
    print(json.dumps(figures, indent=2) if args.json else report(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
