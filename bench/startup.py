"""Start-up time of the `planloom` command, against `python -c pass` in the same loop.

Each round runs every command once, each in a fresh process, interleaved with the floor
(`python -c pass`), so the machine's load at that moment weighs on all of them alike. The
figures are medians over the rounds, with the middle half of the runs (`p25..p75`) and the
fastest run as measures of noise, and each command's ratio to the floor.

With `--baseline DIR` (the packages of another version, e.g. made with
`git archive HEAD engine capabilities planners | tar -x -C DIR`), each command also runs
with `PYTHONPATH=DIR` in the same rounds, and its ratio to that baseline is printed.

With `--bytecode`, every process runs as an installed planloom does: with bytecode cached
(in a temporary `PYTHONPYCACHEPREFIX`, so the work tree is not written). Without it the
environment decides: where `PYTHONDONTWRITEBYTECODE` is set, planloom's own ~90 modules are
compiled from source on every start (site-packages has its bytecode from installation).

Targets (from the performance issue): `planloom --help` at most 0.15 s, `planloom validate
recipes/word-count.yaml` at most 0.25 s.

Usage:
    python bench/startup.py [--runs 9] [--baseline DIR] [--bytecode] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PLANLOOM = str(Path(sys.executable).parent / "planloom")
FLOOR = "python -c pass"
TARGETS = {"planloom --help": 0.15, "planloom validate word-count.yaml": 0.25}

COMMANDS: dict[str, tuple[list[str], Path]] = {
    "planloom --help": ([PLANLOOM, "--help"], ROOT),
    "planloom run --help": ([PLANLOOM, "run", "--help"], ROOT),
    "planloom validate word-count.yaml": (
        [PLANLOOM, "validate", "word-count.yaml"],
        ROOT / "recipes",
    ),
}


def _once(argv: list[str], cwd: Path, environ: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=environ, capture_output=True, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} (in {cwd}) failed: {done.stderr.decode()[-2000:]}")
    return took


def _row(name: str, values: list[float], floor: float) -> dict[str, Any]:
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    median = statistics.median(values)
    target = TARGETS.get(name)
    return {
        "command": name,
        "median_s": round(median, 4),
        "p25_s": round(q[0], 4),
        "p75_s": round(q[2], 4),
        "min_s": round(min(values), 4),
        "ratio_to_floor": round(median / floor, 2),
        "target_s": target,
        "met": None if target is None else median <= target,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="rounds (each command once a round)")
    parser.add_argument("--baseline", metavar="DIR", help="also time the packages in DIR")
    parser.add_argument(
        "--bytecode", action="store_true", help="cache bytecode, as an installed planloom has"
    )
    parser.add_argument("--json", action="store_true", help="the figures as JSON on stdout")
    args = parser.parse_args()
    here = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if args.bytecode:
        here.pop("PYTHONDONTWRITEBYTECODE", None)
        here["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="planloom-startup-pyc-")
    variants: dict[str, tuple[list[str], Path, dict[str, str]]] = {
        FLOOR: ([sys.executable, "-c", "pass"], ROOT, here)
    }
    for name, (argv, cwd) in COMMANDS.items():
        variants[name] = (argv, cwd, here)
        if args.baseline:
            before = {**here, "PYTHONPATH": str(Path(args.baseline).resolve())}
            variants[f"{name} (baseline)"] = (argv, cwd, before)
    for argv, cwd, environ in variants.values():  # warm the page cache and .pyc files
        _once(argv, cwd, environ)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.runs):
        for name, (argv, cwd, environ) in variants.items():
            times[name].append(_once(argv, cwd, environ))
    floor = statistics.median(times[FLOOR])
    rows = [_row(name, values, floor) for name, values in times.items()]
    for row in rows:
        base = times.get(f"{row['command']} (baseline)")
        if base is not None:
            row["ratio_to_baseline"] = round(row["median_s"] / statistics.median(base), 3)
    if args.json:
        print(json.dumps({"runs": args.runs, "bytecode": args.bytecode, "rows": rows}, indent=2))
        return
    cached = "bytecode cached" if args.bytecode else "bytecode as the environment has it"
    print(f"{args.runs} interleaved rounds ({cached}); median (p25..p75, min), ratio to {FLOOR}")
    for row in rows:
        target = row["target_s"]
        verdict = "" if target is None else f"  target {target} s: "
        verdict += "" if target is None else ("met" if row["met"] else "NOT met")
        against = row.get("ratio_to_baseline")
        versus = f"  {against:.3f}x the baseline" if against is not None else ""
        print(
            f"  {row['command']:<46} {row['median_s']:.3f} s "
            f"({row['p25_s']:.3f}..{row['p75_s']:.3f}, min {row['min_s']:.3f})  "
            f"x{row['ratio_to_floor']:<6}{verdict}{versus}"
        )


if __name__ == "__main__":
    main()
