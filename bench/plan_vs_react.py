"""Plan-and-execute against ReAct: one fan-out task, wall time and model tokens for both.

The task: look up 8 cities (8 independent `test.run` calls, each taking `--tool-latency`
seconds through `ScriptedTools` `Wait`) and summarise them. One scripted model, served by
`FakeOpenAIServer` with `--model-latency` seconds per call, answers every request the same
competent way, whichever side asks:

- **Plan.** `LLMPlanner.plan()` sends one planning request; the model answers with 8
  independent `test.run` steps and an `llm.complete` summary step whose prompt reads the 8
  outputs through `${{ steps.X.output }}`. `Executor` runs the plan (`max_parallel` 8 by
  default, so the lookups run at once); the summary step is a second model call.
- **ReAct, sequential (the baseline).** One `agent` step over `test.run`, run by the same
  `Executor` with `ReactAgent`. The model calls one lookup per turn, reads its observation,
  calls the next, and answers after the 8th observation: 9 model calls, and every call
  re-sends the whole conversation so far.
- **ReAct, parallel (`--react-parallel`).** The same agent step, but the model emits all 8
  calls in its first turn (parallel tool calling) and answers in the second. This is the
  strongest ReAct: it has the plan's critical path and is shown for honesty, not as a target.

Prompt and completion tokens are the fake server's deterministic estimate,
ceil(len(json(messages + tools)) / 4) per request, summed by `client.budget`. Each run is
checked: every lookup ran once, the summary (plan) or final answer (ReAct) saw all 8
records, and the ReAct answer came only after 8 tool results; a wrong run exits non-zero.
The targets, against sequential ReAct: at least 2x lower latency and 3x fewer prompt tokens.

Usage:
    python bench/plan_vs_react.py [--model-latency 0.3] [--tool-latency 0.2] [--repeat 3]
                                  [--record-chars 400] [--max-parallel 8]
                                  [--react-parallel] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn

from capabilities import Registry, default_registry
from engine.approval import ApproveAll
from engine.executor import Executor
from engine.llm import Budget, LLMClient, LLMConfig
from engine.model import Limits, Plan
from engine.results import RunResult
from engine.testing import (
    ChatReply,
    ChatRequest,
    FakeOpenAIServer,
    ScriptedTools,
    ToolCall,
    Wait,
)
from engine.validation import validate_plan
from planners.llm import LLMPlanner, plan_to_yaml
from planners.react import ReactAgent
from planners.recipe import parse_recipe_text

TARGET_LATENCY_RATIO = 2.0
TARGET_PROMPT_RATIO = 3.0
BASE_DIR = Path(__file__).resolve().parent

# key → (name, country, population, mean temperature °C)
CITIES: dict[str, tuple[str, str, int, float]] = {
    "paris": ("Paris", "France", 2_102_650, 12.3),
    "tokyo": ("Tokyo", "Japan", 14_094_034, 15.8),
    "lagos": ("Lagos", "Nigeria", 15_388_000, 27.0),
    "lima": ("Lima", "Peru", 10_092_000, 19.2),
    "oslo": ("Oslo", "Norway", 717_710, 6.3),
    "delhi": ("Delhi", "India", 16_787_941, 25.0),
    "cairo": ("Cairo", "Egypt", 10_230_350, 22.1),
    "sydney": ("Sydney", "Australia", 5_450_496, 17.7),
}
GOAL = (
    'Look up the data of each of these cities with test.run (params: {"key": <the city\'s '
    "key>}), then write a short summary comparing them. Keys: " + ", ".join(CITIES) + "."
)
SUMMARY_PROMPT = "Summarise these city records in a short comparison."
REF = re.compile(r"LK-([a-z]+)-(\d{4})")
Side = Literal["plan", "react", "react_parallel"]


def ref_of(key: str) -> str:
    """The marker only the record of `key` carries: proof that a reader saw the record."""
    return f"LK-{key}-{sum(map(ord, key)) % 10_000:04d}"


def record(key: str, chars: int) -> dict[str, Any]:
    """What looking up `key` returns: a few fields, padded with notes to about `chars`."""
    name, country, population, temp = CITIES[key]
    data: dict[str, Any] = {
        "city": name,
        "country": country,
        "population": population,
        "mean_temp_c": temp,
        "ref": ref_of(key),
        "notes": "",
    }
    filler = f"{name}: climate, transport, economy and tourism notes from the almanac. "
    missing = max(chars - len(json.dumps(data)), 0)
    data["notes"] = (filler * (missing // len(filler) + 1))[:missing]
    return data


# -- the model -----------------------------------------------------------------------------


def summarise(text: str) -> str:
    """A summary of the records found in `text`; it names only the refs it saw."""
    seen = {key: f"LK-{key}-{digits}" for key, digits in REF.findall(text) if key in CITIES}
    parts = []
    for key, ref in seen.items():
        name, country, population, temp = CITIES[key]
        parts.append(f"{name} ({country}): {population / 1e6:.1f} M people, {temp} °C [{ref}]")
    biggest = max(seen, key=lambda k: CITIES[k][2], default=None)
    head = f"{len(seen)} cities. " + (f"Largest: {CITIES[biggest][0]}. " if biggest else "")
    return head + "; ".join(parts) + "."


def plan_answer() -> dict[str, Any]:
    """What a good planner answers: 8 independent lookups, then one summary step."""
    steps: list[dict[str, Any]] = [
        {"id": key, "tool": "test.run", "params": {"key": key}} for key in CITIES
    ]
    lines = [f"- {key}: ${{{{ steps.{key}.output }}}}" for key in CITIES]
    prompt = SUMMARY_PROMPT + "\n" + "\n".join(lines)
    steps.append({"id": "summary", "tool": "llm.complete", "params": {"prompt": prompt}})
    return {"goal": GOAL, "steps": steps}


@dataclass
class CityModel:
    """One competent model for both sides; `parallel` makes its ReAct turns fan out."""

    parallel: bool = False

    def __call__(self, request: ChatRequest) -> ChatReply | str | dict[str, Any]:
        system = str(request.messages[0].get("content", "")) if request.messages else ""
        if request.wants_json_schema() is not None and system.startswith("You are the planner"):
            if '"test.run"' not in system or '"llm.complete"' not in system:
                raise AssertionError("the planner did not offer test.run and llm.complete")
            return plan_answer()
        if not request.tools and request.last_user_text().startswith(SUMMARY_PROMPT):
            return summarise(request.last_user_text())
        if "test__run" in request.tool_names():
            return self._react_turn(request)
        raise AssertionError(f"unexpected request: {request.last_user_text()[:200]!r}")

    def _react_turn(self, request: ChatRequest) -> ChatReply | str:
        asked: list[str] = []
        for message in request.messages:
            for call in message.get("tool_calls") or []:
                asked.append(json.loads(call["function"]["arguments"])["key"])
        observations = [text for _, text in request.tool_results()]
        if len(observations) != len(asked):  # a model reads every observation it asked for
            raise AssertionError(f"{len(asked)} calls but {len(observations)} observations")
        pending = [key for key in CITIES if key not in asked]
        if not pending:
            return summarise("\n".join(observations))
        chosen = pending if self.parallel else pending[:1]
        return ChatReply(tool_calls=[ToolCall("test__run", {"key": key}) for key in chosen])


# -- one run -------------------------------------------------------------------------------


@dataclass
class Figures:
    wall_seconds: float
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    tool_calls: int
    peak_parallel_tools: int


def make_tools(args: argparse.Namespace) -> tuple[Registry, ScriptedTools]:
    registry = default_registry()
    tools = ScriptedTools(registry)
    for key in CITIES:
        tools.script(key, Wait(args.tool_latency, record(key, args.record_chars)))
    return registry, tools


def react_plan(registry: Registry, limits: dict[str, Any]) -> Plan:
    """The plan a pure ReAct run is: one agent step with the lookup tool."""
    step = {
        "id": "goal",
        "agent": {"goal": GOAL, "tools": ["test.run"], "max_iterations": len(CITIES) + 2},
    }
    recipe = {
        "version": 1,
        "name": "cities",
        "capabilities": {"test": {}},
        "limits": limits,
        "goal": GOAL,
        "steps": [step],
    }
    data, source = parse_recipe_text(plan_to_yaml(recipe), "react.yaml")
    return validate_plan(data, source, registry, base_dir=BASE_DIR)


async def solve(
    side: Side, base_url: str, registry: Registry, limits: dict[str, Any]
) -> tuple[float, RunResult, Budget]:
    """Plan (or not) and execute: the seconds it took, the run's result, the model usage."""
    parsed = Limits.model_validate(limits)
    budget = Budget(max_calls=parsed.max_llm_calls, max_tokens=parsed.max_llm_tokens)
    client = LLMClient(LLMConfig(model="fake-model", base_url=base_url), budget=budget)
    try:
        started = time.perf_counter()
        if side == "plan":
            base = {"name": "cities", "capabilities": {"test": {}, "llm": {}}, "limits": limits}
            outcome = await LLMPlanner(client, registry).plan(GOAL, base=base, base_dir=BASE_DIR)
            if outcome.fell_back or outcome.repairs:
                raise SystemExit(f"the plan needed repairs or fell back: {outcome.problems}")
            plan = outcome.plan
        else:
            plan = react_plan(registry, limits)
        executor = Executor(
            plan,
            registry=registry,
            base_dir=BASE_DIR,
            approver=ApproveAll(),
            agent_runner=ReactAgent(client),
            llm=client,
            run_id=f"bench-{side}",
        )
        result = await executor.run()
        seconds = time.perf_counter() - started
    finally:
        await client.aclose()
    return seconds, result, client.budget


def peak_overlap(tools: ScriptedTools) -> int:
    edges = sorted(
        [(c.started, 1) for c in tools.calls] + [(c.ended or c.started, -1) for c in tools.calls],
        key=lambda edge: (edge[0], edge[1]),  # an end before a start at the same instant
    )
    peak = running = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def check(side: Side, result: RunResult, tools: ScriptedTools, server: FakeOpenAIServer) -> None:
    """Exit non-zero unless the run really did the task."""

    def fail(why: str) -> NoReturn:
        raise SystemExit(f"{side}: incorrect run: {why}")

    if result.status != "succeeded":
        bad = {k: (s.status, s.error) for k, s in result.steps.items() if s.status != "succeeded"}
        fail(f"status {result.status}: {bad} {result.errors}")
    keys = sorted(call.key for call in tools.calls)
    if keys != sorted(CITIES) or any(call.outcome != "ok" for call in tools.calls):
        fail(f"the lookups were {[(c.key, c.outcome) for c in tools.calls]}")
    if server.errors:
        fail(f"the model raised {server.errors!r}")
    every_ref = {ref_of(key) for key in CITIES}
    if side == "plan":
        summary_requests = [r for r in server.requests if not r.tools and not r.response_format]
        if len(summary_requests) != 1:
            fail(f"{len(summary_requests)} summary requests, expected 1")
        seen = set(REF.findall(summary_requests[0].last_user_text()))
        if {f"LK-{k}-{d}" for k, d in seen} != every_ref:
            fail(f"the summary prompt held {len(seen)} of the {len(CITIES)} records")
        answer = str((result.steps["summary"].output or {}).get("text", ""))
    else:
        last = server.requests[-1]
        if len(last.tool_results()) != len(CITIES):
            fail(f"the final answer came after {len(last.tool_results())} tool results")
        answer = str(result.steps["goal"].output or "")
        expected = 2 if side == "react_parallel" else len(CITIES) + 1
        if len(server.requests) != expected:
            fail(f"{len(server.requests)} model calls, expected {expected}")
    if {f"LK-{k}-{d}" for k, d in REF.findall(answer)} != every_ref:
        fail(f"the answer does not cover every record: {answer[:300]!r}")


def run_once(side: Side, args: argparse.Namespace) -> Figures:
    registry, tools = make_tools(args)
    limits = {"max_parallel": args.max_parallel}
    with FakeOpenAIServer(
        CityModel(parallel=side == "react_parallel"), latency=args.model_latency
    ) as server:
        seconds, result, budget = asyncio.run(solve(side, server.base_url, registry, limits))
        check(side, result, tools, server)
    return Figures(
        wall_seconds=seconds,
        llm_calls=budget.calls,
        prompt_tokens=budget.prompt_tokens,
        completion_tokens=budget.completion_tokens,
        tool_calls=len(tools.calls),
        peak_parallel_tools=peak_overlap(tools),
    )


# -- measuring -----------------------------------------------------------------------------


def floor_seconds(side: Side, args: argparse.Namespace) -> float:
    """The critical path with a free engine: model and tool latencies only."""
    model, tool, n = float(args.model_latency), float(args.tool_latency), len(CITIES)
    if side == "react":
        return (n + 1) * model + n * tool
    waves = -(-n // args.max_parallel) if side == "plan" else 1
    return 2 * model + waves * tool


def measure(args: argparse.Namespace) -> dict[str, Any]:
    sides: list[Side] = ["plan", "react"]
    if args.react_parallel:
        sides.append("react_parallel")
    for side in sides:  # warm-up: imports, pydantic validators, Jinja, the HTTP stack
        run_once(side, args)
    runs: dict[Side, list[Figures]] = {side: [] for side in sides}
    for _ in range(args.repeat):  # interleaved, so drift of the machine hits all alike
        for side in sides:
            runs[side].append(run_once(side, args))

    def median(side: Side, pick: Callable[[Figures], float]) -> float:
        return statistics.median(pick(f) for f in runs[side])

    figures: dict[str, Any] = {
        "cities": len(CITIES),
        "record_chars": len(json.dumps(record("paris", args.record_chars))),
        "model_latency": args.model_latency,
        "tool_latency": args.tool_latency,
        "max_parallel": args.max_parallel,
        "repeat": args.repeat,
    }
    for side in sides:
        first = runs[side][0]
        for other in runs[side][1:]:  # tokens are a deterministic estimate: they must agree
            if (other.llm_calls, other.prompt_tokens) != (first.llm_calls, first.prompt_tokens):
                raise SystemExit(f"{side}: token counts differ between runs")
        figures[side] = {
            **asdict(first),
            "wall_seconds": median(side, lambda f: f.wall_seconds),
            "wall_seconds_all": [f.wall_seconds for f in runs[side]],
            "floor_seconds": floor_seconds(side, args),
        }
    for side in sides[1:]:
        plan, react = figures["plan"], figures[side]
        figures[f"{side}_over_plan"] = {
            "latency": react["wall_seconds"] / plan["wall_seconds"],
            "prompt_tokens": react["prompt_tokens"] / plan["prompt_tokens"],
            "llm_calls": react["llm_calls"] / plan["llm_calls"],
            "completion_tokens": react["completion_tokens"] / plan["completion_tokens"],
        }
    ratios = figures["react_over_plan"]
    figures["target_latency_ratio"] = TARGET_LATENCY_RATIO
    figures["target_prompt_ratio"] = TARGET_PROMPT_RATIO
    figures["latency_target_met"] = ratios["latency"] >= TARGET_LATENCY_RATIO
    figures["prompt_target_met"] = ratios["prompt_tokens"] >= TARGET_PROMPT_RATIO
    return figures


# -- output --------------------------------------------------------------------------------

LABELS: dict[str, str] = {
    "plan": "plan (LLMPlanner + Executor)",
    "react": "ReAct, one call a turn",
    "react_parallel": "ReAct, parallel calls",
}


def report(f: dict[str, Any]) -> str:
    def verdict(met: bool) -> str:
        return "MET" if met else "MISSED"

    lines = [
        f"planloom plan-and-execute vs ReAct (Python {platform.python_version()}, "
        f"{platform.machine()})",
        f"task: {f['cities']} independent test.run lookups ({f['tool_latency']:g} s each, "
        f"{f['record_chars']}-char records) then a summary; model {f['model_latency']:g} s "
        f"per call; max_parallel {f['max_parallel']}; median of {f['repeat']} runs after "
        "one warm-up",
        f"{'':30} {'wall s':>7} {'floor s':>7} {'LLM calls':>9} {'prompt tok':>10} "
        f"{'compl tok':>9} {'peak tools':>10}",
    ]
    for side, label in LABELS.items():
        if side in f:
            s = f[side]
            lines.append(
                f"{label:30} {s['wall_seconds']:7.2f} {s['floor_seconds']:7.2f} "
                f"{s['llm_calls']:9d} {s['prompt_tokens']:10,d} {s['completion_tokens']:9,d} "
                f"{s['peak_parallel_tools']:10d}"
            )
    r = f["react_over_plan"]
    lines += [
        f"ReAct/plan (sequential): latency {r['latency']:.2f}x "
        f"(target ≥ {f['target_latency_ratio']:g}x: {verdict(f['latency_target_met'])}), "
        f"prompt tokens {r['prompt_tokens']:.2f}x "
        f"(target ≥ {f['target_prompt_ratio']:g}x: {verdict(f['prompt_target_met'])}), "
        f"LLM calls {r['llm_calls']:.1f}x, completion tokens {r['completion_tokens']:.2f}x",
    ]
    if "react_parallel_over_plan" in f:
        p = f["react_parallel_over_plan"]
        lines.append(
            f"ReAct/plan (parallel):   latency {p['latency']:.2f}x, prompt tokens "
            f"{p['prompt_tokens']:.2f}x, LLM calls {p['llm_calls']:.1f}x, completion tokens "
            f"{p['completion_tokens']:.2f}x (no target: same critical path as the plan)"
        )
    lines.append("tokens: the fake server's estimate, ceil(len(json(messages + tools)) / 4)")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model-latency", type=float, default=0.3, help="seconds per call")
    parser.add_argument("--tool-latency", type=float, default=0.2, help="seconds per lookup")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs (median is shown)")
    parser.add_argument(
        "--record-chars", type=int, default=400, help="size of one lookup's JSON record"
    )
    parser.add_argument(
        "--max-parallel", type=int, default=8, help="the plan's limits.max_parallel"
    )
    parser.add_argument(
        "--react-parallel",
        action="store_true",
        help="also run ReAct with a model that makes all 8 calls in one turn",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if not 1 <= args.max_parallel <= 1024:
        parser.error("--max-parallel must be between 1 and 1024")
    if args.model_latency < 0 or args.tool_latency < 0:
        parser.error("latencies must not be negative")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    figures = measure(args)
    print(json.dumps(figures, indent=2) if args.json else report(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
