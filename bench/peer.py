"""planloom against LangGraph on the same DAG, each against the asyncio floor in the same run.

The DAG is bench/overhead.py's (its builder, imported): layers of `--width` steps, each
step in layer k > 0 reading one parent of layer k−1 and depending on one or two more; every
step a no-op that returns its first parent's output (a root, its literal).

- **planloom, whole**: the pipeline as bench/scale.py times it (its functions, imported):
  recipe text → `parse_recipe_text` → `validate_plan` → `Executor(...).run()` with one
  counting `EventBus` subscriber, inside `engine._support.gc.heap_frozen`, as the
  `planloom` command runs it. **planloom, execute**: the executor's part of it alone.
- **LangGraph**: build + compile + `ainvoke` of a `StateGraph` expressing the same DAG
  (bench/_langgraph_side.py): a node per step, joined to all its parents, state merged by
  a reducer, no checkpointer, `recursion_limit` set from the DAG's depth.
- **floor**: overhead.py's bare start-when-ready asyncio executor of the same DAG.
- With `--journal`, also what keeping the run costs each: planloom with its run journal in
  a SQLite store, as `planloom run` keeps it (bench/_planloom_journal.py), and the same
  `StateGraph` compiled with LangGraph's `InMemorySaver`, each superstep saved before the
  next starts.

Every run is a fresh process (this script with a hidden `--child SIZE` flag; LangGraph's,
bench/_langgraph_side.py, which imports no part of planloom) that first runs a 200-step
warm-up, then the timed run, then checks every step's output against overhead.py's
`expected_outputs`; a wrong result exits non-zero, and so does this bench.
The sides take turns going first, `--repeat` rounds per size. Figures are medians in µs
per step, with every run's figure; the ratio LangGraph / planloom whole is the target's
(at least 10x at 2,000 steps).

LangGraph is a bench-only dependency (`pip install -e '.[peer]'`); without it this bench
says so and exits 2, unless `--planloom-only` (planloom and the floor alone).

Usage:
    .venv/bin/python bench/peer.py [--sizes 2000 10000] [--width 50] [--repeat 3]
                                   [--seed N] [--journal] [--planloom-only] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _langgraph_side import INSTALL_HINT, langgraph_problem, langgraph_version
from _planloom_journal import child_journal
from overhead import DEFAULT_SEED, expected_outputs, layered_dag
from scale import WARM_UP_STEPS, child_floor, child_pipeline, parse_sizes

DEFAULT_SIZES = (2_000, 10_000)  # 100,000 on request: LangGraph takes minutes there
DEFAULT_WIDTH = 50
TARGET_RATIO = 10.0  # LangGraph / planloom, whole pipeline
TARGET_AT = 2_000
SIDES = ("floor", "planloom", "langgraph")
PERSISTENT = ("planloom_journal", "langgraph_checkpointer")  # --journal
IN_THIS_SCRIPT = ("floor", "planloom", "planloom_journal")  # the others: _langgraph_side.py
CHILD_TIMEOUT = 3600  # seconds; a hung child fails the bench instead of hanging it


# -- in the child: one timed run in a fresh process ------------------------------------------


def run_in_child(
    side: str, size: int, width: int, seed: int, text_format: str = "yaml"
) -> dict[str, Any]:
    if side == "planloom":
        return child_pipeline(size, width, seed, False, text_format)
    if side == "planloom_journal":
        return child_journal(size, width, seed)
    return child_floor(size, width, seed)


def langgraph_input(size: int, width: int, seed: int, checkpointer: bool) -> str:
    """What the LangGraph side's process reads: the warm-up and timed DAGs, each with every
    step's expected output (overhead.py's functions, which that process cannot import
    without importing planloom), and whether to run with a checkpointer."""

    def dag(steps: int) -> dict[str, Any]:
        nodes = layered_dag(steps, width, seed)
        return {
            "nodes": [[node.id, node.parents, node.literal] for node in nodes],
            "expected": expected_outputs(nodes),
        }

    return json.dumps(
        {"warm": dag(WARM_UP_STEPS), "timed": dag(size), "checkpointer": checkpointer}
    )


# -- in the parent: take turns in fresh processes, take medians ------------------------------


def run_child(side: str, size: int, args: argparse.Namespace) -> dict[str, Any]:
    here = Path(__file__).resolve()
    if side.startswith("langgraph"):
        command = [sys.executable, str(here.with_name("_langgraph_side.py"))]
        given = langgraph_input(size, args.width, args.seed, side == "langgraph_checkpointer")
    else:
        command = [
            sys.executable,
            str(here),
            *("--child", str(size), "--side", side),
            *("--width", str(args.width), "--seed", str(args.seed)),
            *("--format", args.format),
        ]
        given = ""
    try:
        done = subprocess.run(
            command,
            input=given,
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT,
            check=False,
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


def whole_seconds(side: str, seconds: dict[str, float]) -> float:
    """A run's seconds from its input to its result."""
    if side.startswith("planloom"):
        return seconds["parse"] + seconds["validate"] + seconds["execute"]
    if side.startswith("langgraph"):
        return seconds["build"] + seconds["compile"] + seconds["invoke"]
    return seconds["floor"]


def figures_of(values: list[float], size: int) -> dict[str, Any]:
    """µs per step: the median, and every run's figure in run order."""
    runs = [value / size * 1e6 for value in values]
    return {"median": statistics.median(runs), "runs": runs}


def measure_size(size: int, sides: Sequence[str], args: argparse.Namespace) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for index in range(args.repeat):
        turn = index % len(sides)  # each side goes first in turn
        for side in [*sides[turn:], *sides[:turn]]:
            started = time.perf_counter()
            runs[side].append(run_child(side, size, args))
            print(
                f"  {size:,} steps, {side} run {index + 1}/{args.repeat}: "
                f"{time.perf_counter() - started:.1f} s",
                file=sys.stderr,
                flush=True,
            )

    def us(side: str, key: str | None = None) -> dict[str, Any]:
        return figures_of(
            [
                whole_seconds(side, run["seconds"]) if key is None else run["seconds"][key]
                for run in runs[side]
            ],
            size,
        )

    def peak(side: str) -> float:
        return statistics.median(run["rss_peak_mib"] for run in runs[side])

    us_per_step: dict[str, Any] = {
        "floor": us("floor"),
        "planloom_whole": us("planloom"),
        "planloom_parse": us("planloom", "parse"),
        "planloom_validate": us("planloom", "validate"),
        "planloom_execute": us("planloom", "execute"),
        "planloom_gc": us("planloom", "gc"),
    }
    memory = {"planloom": peak("planloom"), "floor": peak("floor")}
    figures: dict[str, Any] = {"steps": size, "layers": -(-size // args.width)}
    if "langgraph" in sides:
        us_per_step |= {
            "langgraph_whole": us("langgraph"),
            "langgraph_build": us("langgraph", "build"),
            "langgraph_compile": us("langgraph", "compile"),
            "langgraph_invoke": us("langgraph", "invoke"),
            "langgraph_gc": us("langgraph", "gc"),
        }
        memory["langgraph"] = peak("langgraph")
        figures["recursion_limit"] = runs["langgraph"][0]["recursion_limit"]
    floor = us_per_step["floor"]["median"]
    figures |= {"us_per_step": us_per_step, "rss_peak_mib": memory}
    figures["ratio_to_floor"] = {
        key: us_per_step[f"{key}_whole"]["median"] / floor
        for key in ("planloom", "langgraph")
        if f"{key}_whole" in us_per_step
    }
    if "langgraph" in sides:
        planloom = us_per_step["planloom_whole"]
        langgraph = us_per_step["langgraph_whole"]
        ratio = langgraph["median"] / planloom["median"]
        figures["ratio_langgraph_planloom"] = {
            "median": ratio,
            # round by round: the two sides of one round ran back to back
            "runs": [lg / pl for lg, pl in zip(langgraph["runs"], planloom["runs"], strict=True)],
            "execute": langgraph["median"] / us_per_step["planloom_execute"]["median"],
        }
        figures["target_met"] = ratio >= TARGET_RATIO if size == TARGET_AT else None
    if "planloom_journal" in sides:
        us_per_step |= {
            "planloom_journal_whole": us("planloom_journal"),
            "planloom_journal_execute": us("planloom_journal", "execute"),
        }
        memory["planloom_journal"] = peak("planloom_journal")
        figures["persistence"] = persistence(us_per_step)
    if "langgraph_checkpointer" in sides:
        us_per_step["langgraph_checkpointer_whole"] = us("langgraph_checkpointer")
        memory["langgraph_checkpointer"] = peak("langgraph_checkpointer")
        figures["persistence"] = persistence(us_per_step)
    return figures


def persistence(us: dict[str, Any]) -> dict[str, Any]:
    """What keeping the run costs each side, µs/step: planloom's journal (its execute phase
    with the journal − without), LangGraph's checkpointer (its whole with − without). Each
    the median of the rounds' differences (the two runs of a round ran back to back), with
    every round's."""

    def added(kept: str, plain: str) -> dict[str, Any]:
        rounds = [a - b for a, b in zip(us[kept]["runs"], us[plain]["runs"], strict=True)]
        return {"median": statistics.median(rounds), "runs": rounds}

    figures: dict[str, Any] = {}
    if "planloom_journal_execute" in us:
        figures["journal_added"] = added("planloom_journal_execute", "planloom_execute")
    if "langgraph_checkpointer_whole" in us:
        figures["checkpointer_added"] = added("langgraph_checkpointer_whole", "langgraph_whole")
    if len(figures) == 2:
        figures["ratio_added"] = (
            figures["checkpointer_added"]["median"] / figures["journal_added"]["median"]
        )
        figures["ratio_whole"] = (
            us["langgraph_checkpointer_whole"]["median"] / us["planloom_journal_whole"]["median"]
        )
    return figures


def measure(args: argparse.Namespace) -> dict[str, Any]:
    sides = [*SIDES, *PERSISTENT] if args.journal else list(SIDES)
    if args.planloom_only:
        sides = [side for side in sides if not side.startswith("langgraph")]
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "langgraph": None if args.planloom_only else langgraph_version(),
        "width": args.width,
        "max_parallel": args.width,
        "seed": args.seed,
        "format": args.format,
        "repeat": args.repeat,
        "warm_up_steps": WARM_UP_STEPS,
        "sides": sides,
        "target": {"ratio_langgraph_planloom": TARGET_RATIO, "at_steps": TARGET_AT},
        "sizes": [measure_size(size, sides, args) for size in args.sizes],
    }


# -- output --------------------------------------------------------------------------------


def report(f: dict[str, Any]) -> str:
    with_langgraph = "langgraph" in f["sides"]
    lines = [
        f"planloom vs LangGraph (Python {f['python']}, {f['machine']}, {f['cpus']} CPUs, "
        + (f"LangGraph {f['langgraph']})" if with_langgraph else "LangGraph not run)"),
        f"DAG: bench/overhead.py's shape, width {f['width']} (= planloom's max_parallel), "
        f"seed {f['seed']}; every run a fresh process after a {f['warm_up_steps']}-step "
        f"warm-up; sides take turns going first; {f['repeat']} runs per side; medians; "
        f"planloom's recipe text: {f['format'].upper()}",
        "",
        f"{'steps':>8} {'floor':>7} {'planloom':>9} {'execute':>8} {'LangGraph':>10} "
        f"{'LG/planloom':>12} {'planloom/floor':>15} {'LG/floor':>9}   (µs/step)",
    ]
    for s in f["sizes"]:
        us = s["us_per_step"]
        lg = us.get("langgraph_whole")
        ratio = s.get("ratio_langgraph_planloom")
        lines.append(
            f"{s['steps']:>8,} {us['floor']['median']:7.1f} "
            f"{us['planloom_whole']['median']:9.1f} {us['planloom_execute']['median']:8.1f} "
            + (f"{lg['median']:10.1f} " if lg else f"{'–':>10} ")
            + (f"{ratio['median']:11.1f}x " if ratio else f"{'–':>12} ")
            + f"{s['ratio_to_floor']['planloom']:14.1f}x "
            + (f"{s['ratio_to_floor']['langgraph']:8.1f}x" if lg else f"{'–':>9}")
        )
    lines += ["", "every run, µs/step in run order:"]
    for s in f["sizes"]:
        us = s["us_per_step"]

        def runs(key: str, us: dict[str, Any] = us) -> str:
            return ", ".join(f"{value:.1f}" for value in us[key]["runs"])

        lines += [
            f"  {s['steps']:>8,}: floor {runs('floor')}",
            f"  {'':>8}  planloom whole {runs('planloom_whole')} (parse "
            f"{us['planloom_parse']['median']:.1f}, validate "
            f"{us['planloom_validate']['median']:.1f}, gc {us['planloom_gc']['median']:.1f})",
            f"  {'':>8}  planloom execute {runs('planloom_execute')}",
        ]
        if "langgraph_whole" in us:
            ratio = s["ratio_langgraph_planloom"]
            lines += [
                f"  {'':>8}  LangGraph whole {runs('langgraph_whole')} (build "
                f"{us['langgraph_build']['median']:.1f}, compile "
                f"{us['langgraph_compile']['median']:.1f}, ainvoke "
                f"{us['langgraph_invoke']['median']:.1f}, gc {us['langgraph_gc']['median']:.1f}"
                f"; recursion_limit {s['recursion_limit']})",
                f"  {'':>8}  LangGraph / planloom whole, round by round: "
                + ", ".join(f"{value:.1f}x" for value in ratio["runs"])
                + f"; LangGraph whole / planloom execute {ratio['execute']:.1f}x",
            ]
        lines += persistence_lines(s)
        peaks = ", ".join(f"{side} {mib:,.0f}" for side, mib in s["rss_peak_mib"].items())
        lines.append(f"  {'':>8}  peak RSS of the run's process, MiB: {peaks}")
    target = f["target"]
    lines.append("")
    at = [s for s in f["sizes"] if s["steps"] == target["at_steps"]]
    if not with_langgraph:
        lines.append("target LangGraph / planloom ≥ 10x: – (LangGraph not run)")
    elif not at:
        lines.append(f"target LangGraph / planloom ≥ 10x: applies at {target['at_steps']:,} steps")
    else:
        ratio = at[0]["ratio_langgraph_planloom"]["median"]
        verdict = "MET" if at[0]["target_met"] else "MISSED"
        lines.append(
            f"target at {target['at_steps']:,} steps: LangGraph / planloom whole {ratio:.1f}x "
            f"≥ {target['ratio_langgraph_planloom']:g}x: {verdict}"
        )
    return "\n".join(lines)


def persistence_lines(s: dict[str, Any]) -> list[str]:
    """--journal's lines for one size."""
    kept = s.get("persistence")
    if kept is None:
        return []
    us = s["us_per_step"]

    def runs(key: str) -> str:
        return ", ".join(f"{value:.1f}" for value in us[key]["runs"])

    def added(key: str) -> str:
        rounds = ", ".join(f"{value:.1f}" for value in kept[key]["runs"])
        return f"{kept[key]['median']:.1f} µs/step (rounds: {rounds})"

    lines = [
        f"  {'':>8}  planloom with its journal: whole {runs('planloom_journal_whole')}, "
        f"execute {runs('planloom_journal_execute')}; the journal adds {added('journal_added')}"
    ]
    if "checkpointer_added" in kept:
        lines += [
            f"  {'':>8}  LangGraph with InMemorySaver: whole "
            f"{runs('langgraph_checkpointer_whole')}; the checkpointer adds "
            f"{added('checkpointer_added')}",
            f"  {'':>8}  kept runs, LangGraph / planloom: whole {kept['ratio_whole']:.1f}x, "
            f"added {kept['ratio_added']:.1f}x",
        ]
    return lines


# -- command line --------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None,
        epilog=f"Run from the repository root: .venv/bin/python bench/peer.py. "
        f"LangGraph is a bench-only dependency: {INSTALL_HINT}",
    )
    parser.add_argument(
        "--sizes",
        nargs="+",
        type=parse_sizes,
        default=[list(DEFAULT_SIZES)],
        metavar="N",
        help="DAG sizes in steps, space- or comma-separated (default: 2000 10000; 100000 "
        "takes LangGraph minutes a run)",
    )
    parser.add_argument(
        "--width",
        type=int,
        default=DEFAULT_WIDTH,
        help=f"steps per layer, also planloom's max_parallel and the floor's cap "
        f"(default {DEFAULT_WIDTH})",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="fresh-process runs per side and size; medians are shown (default 3)",
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help=f"DAG shape seed (default {DEFAULT_SEED})"
    )
    parser.add_argument(
        "--planloom-only",
        action="store_true",
        help="run planloom and the floor only (no LangGraph needed)",
    )
    parser.add_argument(
        "--journal",
        action="store_true",
        help="also run planloom with its run journal (SQLite, as `planloom run` keeps one) "
        "and LangGraph with its in-memory checkpointer",
    )
    parser.add_argument(
        "--format",
        choices=("yaml", "json"),
        default="yaml",
        help="planloom's recipe text: YAML (default), or JSON (a plan a program wrote)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    # One timed run of one side in this process: what the parent spawns.
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--side", choices=IN_THIS_SCRIPT, default="planloom", help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    args.sizes = sorted({size for group in args.sizes for size in group})
    if not 1 <= args.width <= 1024:
        parser.error("--width must be between 1 and 1024 (it is planloom's max_parallel)")
    if not args.sizes or min(args.sizes) < 1:
        parser.error("--sizes must be whole numbers of steps, at least 1")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        figures = run_in_child(args.side, args.child, args.width, args.seed, args.format)
        print(json.dumps(figures))
        return 0
    if not args.planloom_only and (problem := langgraph_problem()):
        print(
            f"bench/peer.py: {problem}. LangGraph is a bench-only dependency; install it "
            f"with: {INSTALL_HINT}\n(or run planloom and the floor alone: --planloom-only)",
            file=sys.stderr,
        )
        return 2
    figures = measure(args)
    print(json.dumps(figures, indent=2) if args.json else report(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
