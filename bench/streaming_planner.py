"""The streaming planner against the whole-answer planner, end to end, in the same run.

`planloom plan GOAL --yes` runs as a user runs it (the console script, a new process each
time) against a `FakeOpenAIServer` that streams its plan at `--tokens-per-second` (30 by
default: a small local model on a CPU), counting a token as 4 characters (the fake
server's own usage estimate). The plan has 10 steps: 6 read-only `bench.read` steps of
0.5 s each, each reading the one before (so 3 s one after the other), then 4
`bench.write` steps (side effects) that need them.

- **Streamed** (`--stream`): each read starts as soon as its step has arrived and the read
  before it has ended, while the model is still writing; the writes wait for the whole
  plan, validated and approved.
- **Whole** (the baseline): nothing starts before the whole plan has arrived.

Reported per side (median of `--repeat`, every run given): end-to-end seconds (the
process's wall time), time to the first step's start and to the first write's start
(from the log's `session.started`), and when the model's answer ended; then the ratio
whole/streamed (target: at least 1.5). Each run is checked: exit 0, status `succeeded`,
all 10 steps succeeded, each read made once, and with `--stream` no write started before
the plan was accepted (`plan.finished`), while at least one read did.

Usage:
    python bench/streaming_planner.py [--tokens-per-second 30] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from engine.testing import FakeOpenAIServer, Fault, ScriptedModel

TARGET_RATIO = 1.5
READ_SECONDS = 0.5  # bench.read's (bench/plugins/stream_bench_plugin.py)
CHARS_PER_TOKEN = 4  # the fake server's estimate of a token, and OpenAI's rule of thumb
PIECE_CHARS = 16  # the fake server streams content in pieces of 16 characters
PLUGIN = Path(__file__).resolve().parent / "plugins" / "stream_bench_plugin.py"
PLANLOOM = str(Path(sys.executable).parent / "planloom")
GOAL = "Follow the chain of keys from k0 six times, then write what was found to 4 places"
CAPABILITIES = "capabilities:\n  bench: {}\n"


def plan() -> dict[str, Any]:
    """The 10-step plan the model writes: a chain of 6 reads, then 4 writes."""
    steps: list[dict[str, Any]] = [{"id": "r1", "tool": "bench.read", "params": {"key": "k0"}}]
    for n in range(2, 7):
        key = f"${{{{ steps.r{n - 1}.output }}}}"
        steps.append({"id": f"r{n}", "tool": "bench.read", "params": {"key": key}})
    for n in range(1, 5):
        value = f"${{{{ steps.r{2 + n}.output }}}}"
        steps.append(
            {"id": f"w{n}", "tool": "bench.write", "params": {"key": f"w{n}", "value": value}}
        )
    return {"goal": GOAL, "steps": steps}


def _stamp(line: dict[str, Any]) -> float:
    return datetime.datetime.fromisoformat(line["timestamp"]).timestamp()


def run_once(folder: Path, streamed: bool, tokens_per_second: float) -> dict[str, Any]:
    """One `planloom plan` against a fresh server; its times, checked."""
    log = folder / f"events-{time.monotonic_ns()}.jsonl"
    with FakeOpenAIServer(ScriptedModel.sequence(plan())) as server:
        server.inject(Fault.slow(PIECE_CHARS / CHARS_PER_TOKEN / tokens_per_second))
        argv = [
            PLANLOOM, "plan", GOAL, "--yes", "--json", "--plugin", str(PLUGIN),
            "--capabilities", "caps.yaml", "--base-url", server.base_url, "--model", "m",
            "--log-file", str(log), *(["--stream"] if streamed else []),
        ]  # fmt: skip
        started = time.monotonic()
        proc = subprocess.run(
            argv, cwd=folder, capture_output=True, text=True, timeout=300,
            stdin=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"},
        )  # fmt: skip
        seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"planloom plan failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout)
    statuses = {k: v["status"] for k, v in result["steps"].items()}
    if (
        result["status"] != "succeeded"
        or set(statuses.values()) != {"succeeded"}
        or len(statuses) != 10
    ):
        raise SystemExit(f"the run did not succeed whole: {result['status']} {statuses}")
    if result["usage"]["tool_calls"] != 10:
        raise SystemExit(f"expected 10 tool calls (each read once), got {result['usage']}")
    lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    begun = _stamp(next(line for line in lines if line["event"] == "session.started"))
    starts = {line["step_id"]: _stamp(line) for line in lines if line["event"] == "step.started"}
    answered = _stamp(next(line for line in lines if line["event"] == "llm.called"))
    accepted = _stamp(next(line for line in lines if line["event"] == "plan.finished"))
    first_write = min(starts[f"w{n}"] for n in range(1, 5))
    if streamed:
        if first_write < accepted:
            raise SystemExit("a write started before the whole plan was accepted")
        if min(starts.values()) >= answered:
            raise SystemExit("no read started before the model's answer ended")
    return {
        "seconds": round(seconds, 3),
        "first_step": round(min(starts.values()) - begun, 3),
        "first_write": round(first_write - begun, 3),
        "answer_ended": round(answered - begun, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens-per-second", type=float, default=30.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"whole": [], "streamed": []}
    with tempfile.TemporaryDirectory(prefix="planloom-stream-bench-") as tmp:
        folder = Path(tmp)
        (folder / "caps.yaml").write_text(CAPABILITIES, encoding="utf-8")
        for _ in range(args.repeat):  # alternated, so a slow spell of the machine hits both
            runs["whole"].append(run_once(folder, False, args.tokens_per_second))
            runs["streamed"].append(run_once(folder, True, args.tokens_per_second))
    median = {
        side: {key: statistics.median(run[key] for run in sides) for key in sides[0]}
        for side, sides in runs.items()
    }
    ratio = median["whole"]["seconds"] / median["streamed"]["seconds"]
    report = {
        "python": platform.python_version(),
        "tokens_per_second": args.tokens_per_second,
        "plan_chars": len(json.dumps(plan())),
        "runs": runs,
        "median": median,
        "whole_over_streamed": round(ratio, 2),
        "target": TARGET_RATIO,
        "target_met": ratio >= TARGET_RATIO,
        "bound": round(
            (median["streamed"]["seconds"] + 6 * READ_SECONDS) / median["streamed"]["seconds"], 2
        ),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    chars, rate = report["plan_chars"], args.tokens_per_second
    print(f"plan of 10 steps, {chars} characters, at {rate:g} tokens/s")
    for side in ("whole", "streamed"):
        m = median[side]
        each = ", ".join(f"{run['seconds']:.2f}" for run in runs[side])
        print(
            f"{side:>9}: {m['seconds']:.2f} s end to end ({each}); first step at "
            f"{m['first_step']:.2f} s, first write at {m['first_write']:.2f} s, answer ended at "
            f"{m['answer_ended']:.2f} s"
        )
    verdict = "met" if report["target_met"] else "NOT met"
    print(f"whole / streamed = {ratio:.2f}x (target >= {TARGET_RATIO}x: {verdict})")
    # Writes wait for the whole answer, so streaming can at best hide the reads (3 s)
    # behind the answer: whole/streamed <= (streamed + 3 s) / streamed.
    bound = (median["streamed"]["seconds"] + 6 * READ_SECONDS) / median["streamed"]["seconds"]
    print(f"the most streaming can give here (the reads hidden whole): {bound:.2f}x")


if __name__ == "__main__":
    main()
