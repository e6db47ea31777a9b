"""Reading a recipe: JSON (`*.json`, `parse_json_text`) against YAML (`parse_recipe_text`),
and a plan a program holds as data (`read_recipe_data`) against writing it as YAML and
parsing that back, as planning did.

The recipe is bench/overhead.py's DAG (its builder, imported: layers of `--width` no-op
steps, each reading one parent through a template and depending on one or two more),
written once as YAML (`recipe_text`) and once as JSON (`recipe_json`); the two texts read
to the same data, which the bench checks. For each of `--sizes` the two readers alternate,
`--repeat` rounds, the other one first in every other round, so a drift of a shared
machine hits both alike. Each read starts after a full collection, inside nothing (as
`planloom validate` reads a file), and its result is dropped before the next.

The data part (`--data-sizes`, 0 to leave it out) times a planner's plan, the same DAG as
data: the way planning read it before (`plan_to_yaml`, then `parse_recipe_text`), and
the way it reads it now (`read_recipe_data`: no YAML until someone wants it); and what
showing it then costs (the same, with the map's YAML written, as `-o` or a review does).

Figures are µs per step of process CPU time (not wall time: on a machine shared with
other work, time spent waiting for a core is not the reader's), medians with every
round's figure, and each round's ratio. Usage:

    .venv/bin/python bench/json_recipes.py [--sizes 10000 100000] [--repeat 5]
                                           [--data-sizes 50 2000] [--width 50] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from overhead import DEFAULT_SEED, layered_dag, recipe_json, recipe_text

from engine.yaml import parse_json_text, parse_recipe_text, read_recipe_data
from planners.llm import plan_to_yaml

Reader = Callable[[], Any]


def cpu_us_per_step(read: Reader, steps: int) -> float:
    """One read's process CPU time, µs per step (after a full collection; result dropped)."""
    gc.collect()
    start = time.process_time()
    result = read()
    seconds = time.process_time() - start
    del result
    return seconds / steps * 1e6


def alternate(readers: dict[str, Reader], steps: int, repeat: int) -> dict[str, list[float]]:
    """`repeat` rounds of every reader, in turn, the order reversed every other round."""
    runs: dict[str, list[float]] = {name: [] for name in readers}
    order = list(readers)
    for round_ in range(repeat):
        for name in order if round_ % 2 == 0 else order[::-1]:
            runs[name].append(cpu_us_per_step(readers[name], steps))
    return runs


def measure_texts(size: int, width: int, seed: int, repeat: int) -> dict[str, Any]:
    nodes = layered_dag(size, width, seed)
    yaml_text, json_text = recipe_text(nodes, width), recipe_json(nodes, width)
    from_yaml, _ = parse_recipe_text(yaml_text, "r.yaml")
    from_json, _ = parse_json_text(json_text, "r.json")
    if from_yaml != from_json:
        raise SystemExit(f"{size} steps: the YAML and JSON texts read to different data")
    del from_yaml, from_json
    runs = alternate(
        {
            "yaml": lambda: parse_recipe_text(yaml_text, "r.yaml"),
            "json": lambda: parse_json_text(json_text, "r.json"),
        },
        size,
        repeat,
    )
    return {
        "steps": size,
        "bytes": {"yaml": len(yaml_text.encode()), "json": len(json_text.encode())},
        **_summary(runs, "yaml", "json"),
    }


def measure_data(size: int, width: int, seed: int, repeat: int) -> dict[str, Any]:
    recipe = json.loads(recipe_json(layered_dag(size, width, seed), width))

    def shown() -> str | None:
        _, source = read_recipe_data(recipe, "plan.yaml", plan_to_yaml)
        return source.text

    runs = alternate(
        {
            "yaml round trip": lambda: parse_recipe_text(plan_to_yaml(recipe), "plan.yaml"),
            "data": lambda: read_recipe_data(recipe, "plan.yaml", plan_to_yaml),
            "data, then shown": shown,
        },
        size,
        repeat,
    )
    return {"steps": size, **_summary(runs, "yaml round trip", "data")}


def _summary(runs: dict[str, list[float]], slow: str, fast: str) -> dict[str, Any]:
    ratios = [a / b for a, b in zip(runs[slow], runs[fast], strict=True)]
    return {
        "us_per_step": {name: statistics.median(values) for name, values in runs.items()},
        "runs": runs,
        "ratio": statistics.median(ratios),
        "ratios": ratios,
    }


def report(figures: dict[str, Any]) -> str:
    lines = [
        f"python {figures['python']}, {figures['platform']}; DAG width {figures['width']}, "
        f"seed {figures['seed']}; {figures['repeat']} rounds, alternating; "
        "µs/step of process CPU time, median [every round]",
        "",
    ]
    for entry in figures["texts"]:
        sizes = entry["bytes"]
        lines.append(
            f"{entry['steps']:,} steps (YAML {sizes['yaml'] / 1e6:.1f} MB, "
            f"JSON {sizes['json'] / 1e6:.1f} MB)"
        )
        lines += _rows(entry, "YAML / JSON")
    for entry in figures["data"]:
        lines.append(f"a plan held as data, {entry['steps']:,} steps")
        lines += _rows(entry, "round trip / data")
    return "\n".join(lines)


def _rows(entry: dict[str, Any], ratio: str) -> list[str]:
    rows = []
    for name, values in entry["runs"].items():
        shown = " ".join(f"{value:.2f}" for value in values)
        rows.append(f"  {name:<18} {entry['us_per_step'][name]:>8.2f}   [{shown}]")
    shown = " ".join(f"{value:.1f}" for value in entry["ratios"])
    rows.append(f"  {ratio:<18} {entry['ratio']:>7.1f}x   [{shown}]")
    return [*rows, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--data-sizes", type=int, nargs="+", default=[50, 2_000])
    parser.add_argument("--width", type=int, default=50)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args()
    measure_texts(200, args.width, args.seed, 1)  # warm-up: imports, first calls
    figures = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "width": args.width,
        "seed": args.seed,
        "repeat": args.repeat,
        "texts": [measure_texts(n, args.width, args.seed, args.repeat) for n in args.sizes],
        "data": [measure_data(n, args.width, args.seed, args.repeat) for n in args.data_sizes if n],
    }
    print(json.dumps(figures, indent=2) if args.json else report(figures))


if __name__ == "__main__":
    sys.exit(main())
