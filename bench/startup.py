"""Start-up time of the `planloom` command, against `python -c pass` in the same loop.

Each round runs every command once, each in a fresh process, interleaved with the floor
(`python -c pass`), so the machine's load at that moment weighs on all of them alike.
`python -S -c pass` is shown too: the interpreter without `site`, which in an editable
install (`pip install -e .`) loads planloom's import finder (and pathlib with it): most of
the floor's time. The
figures are medians over the rounds, with the middle half of the runs (`p25..p75`) and the
fastest run as measures of noise, and each command's ratio to the floor. Each process's CPU
time (user + system, from `getrusage` of the children) is given beside it: where it is
close to the wall time, the process did not wait for a core, and a slow figure is a slower
CPU (other work sharing its caches and cycles), not waiting. The targets are judged on wall
time.

With `--baseline DIR` (the packages of another version, e.g. made with
`git archive HEAD engine capabilities planners | tar -x -C DIR`), each command also runs
with `PYTHONPATH=DIR` in the same rounds, and its ratio to that baseline is printed.

With `--bytecode`, every process runs as an installed planloom does: with bytecode cached
(in a temporary `PYTHONPYCACHEPREFIX`, so the work tree is not written). Without it the
environment decides: where `PYTHONDONTWRITEBYTECODE` is set, planloom's own ~90 modules are
compiled from source on every start (site-packages has its bytecode from installation).

Targets: `planloom validate recipes/word-count.yaml` at most 15x `python -c pass` with
bytecode cached (so judged only with `--bytecode`: compiling ~90 modules is not start-up an
installed planloom pays), and `planloom --help` at most 0.15 s.

Usage:
    python bench/startup.py [--runs 9] [--baseline DIR] [--bytecode] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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
BARE = "python -S -c pass"  # the interpreter without `site` (.pth files, an editable finder)
TARGET_SECONDS = {"planloom --help": 0.15}
TARGET_RATIO = {"planloom validate word-count.yaml": 15.0}  # to the floor, bytecode cached

COMMANDS: dict[str, tuple[list[str], Path]] = {
    "planloom --help": ([PLANLOOM, "--help"], ROOT),
    "planloom run --help": ([PLANLOOM, "run", "--help"], ROOT),
    "planloom validate word-count.yaml": (
        [PLANLOOM, "validate", "word-count.yaml"],
        ROOT / "recipes",
    ),
}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _once(argv: list[str], cwd: Path, environ: dict[str, str]) -> tuple[float, float]:
    """The wall time and CPU time of one run of `argv` (runs are one at a time, so the
    children's CPU time grows by this one's alone)."""
    cpu = _children_cpu()
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=environ, capture_output=True, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} (in {cwd}) failed: {done.stderr.decode()[-2000:]}")
    return took, _children_cpu() - cpu


def _row(
    name: str, values: list[float], cpu: list[float], floor: tuple[float, float], bytecode: bool
) -> dict[str, Any]:
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    median = statistics.median(values)
    seconds = TARGET_SECONDS.get(name)
    ratio = TARGET_RATIO.get(name)
    met = None
    if seconds is not None:
        met = median <= seconds
    elif ratio is not None and bytecode:  # the ratio target is for bytecode cached
        met = median / floor[0] <= ratio
    return {
        "command": name,
        "median_s": round(median, 4),
        "p25_s": round(q[0], 4),
        "p75_s": round(q[2], 4),
        "min_s": round(min(values), 4),
        "ratio_to_floor": round(median / floor[0], 2),
        "cpu_median_s": round(statistics.median(cpu), 4),
        "cpu_ratio_to_floor": round(statistics.median(cpu) / floor[1], 2),
        "target_s": seconds,
        "target_ratio": ratio,
        "met": met,
    }


def _verdict(row: dict[str, Any]) -> str:
    if row["target_s"] is not None:
        target = f"target {row['target_s']} s"
    elif row["target_ratio"] is not None:
        target = f"target x{row['target_ratio']:g} the floor, bytecode cached"
    else:
        return ""
    met = row["met"]
    verdict = "– (needs --bytecode)" if met is None else "met" if met else "NOT met"
    return f"  {target}: {verdict}"


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
        FLOOR: ([sys.executable, "-c", "pass"], ROOT, here),
        BARE: ([sys.executable, "-S", "-c", "pass"], ROOT, here),
    }
    for name, (argv, cwd) in COMMANDS.items():
        variants[name] = (argv, cwd, here)
        if args.baseline:
            before = {**here, "PYTHONPATH": str(Path(args.baseline).resolve())}
            variants[f"{name} (baseline)"] = (argv, cwd, before)
    for argv, cwd, environ in variants.values():  # warm the page cache and .pyc files
        _once(argv, cwd, environ)
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.runs):
        for name, (argv, cwd, environ) in variants.items():
            wall, used = _once(argv, cwd, environ)
            times[name].append(wall)
            cpu[name].append(used)
    floor = (statistics.median(times[FLOOR]), statistics.median(cpu[FLOOR]))
    rows = [_row(name, values, cpu[name], floor, args.bytecode) for name, values in times.items()]
    for row in rows:
        base = times.get(f"{row['command']} (baseline)")
        if base is not None:
            row["ratio_to_baseline"] = round(row["median_s"] / statistics.median(base), 3)
    if args.json:
        print(json.dumps({"runs": args.runs, "bytecode": args.bytecode, "rows": rows}, indent=2))
        return
    cached = "bytecode cached" if args.bytecode else "bytecode as the environment has it"
    print(
        f"{args.runs} interleaved rounds ({cached}); wall time: median (p25..p75, min), ratio "
        f"to {FLOOR}; CPU time: median, ratio"
    )
    for row in rows:
        verdict = _verdict(row)
        against = row.get("ratio_to_baseline")
        versus = f"  {against:.3f}x the baseline" if against is not None else ""
        print(
            f"  {row['command']:<46} {row['median_s']:.3f} s "
            f"({row['p25_s']:.3f}..{row['p75_s']:.3f}, min {row['min_s']:.3f})  "
            f"x{row['ratio_to_floor']:<6} CPU {row['cpu_median_s']:.3f} s "
            f"x{row['cpu_ratio_to_floor']:<6}{verdict}{versus}"
        )


if __name__ == "__main__":
    main()
