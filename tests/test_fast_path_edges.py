"""Edges of the engine's fast paths: the one-pass YAML loader on hostile input and on
large recipes with problems, family limits under for_each, fallbacks, timeouts, agents and
resume, cycles among repeated ids, a fallback agent told its step's params.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import resource
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _procs import env, planloom
from pydantic import SecretStr

from capabilities import default_registry
from engine.approval import ApproveAll
from engine.diagnostics import SourceMap
from engine.errors import RecipeSyntaxError
from engine.executor import Executor
from engine.llm import Budget, LLMClient, LLMConfig
from engine.results import RunResult
from engine.testing import (
    ChatReply,
    ChatRequest,
    Fail,
    FakeOpenAIServer,
    Hang,
    ScriptedTools,
    ToolCall,
    Wait,
    run_recipe_text,
)
from engine.validation import validate_plan
from engine.yaml import _tree as yaml_tree
from engine.yaml import parse_recipe_text
from planners.react import ReactAgent

# -- helpers -----------------------------------------------------------------------------


def _loaded(text: str) -> tuple[str, Any, list[str], set[Any]]:
    """What the one-pass loader makes of `text`: data (as repr), problems, values left out."""
    try:
        data, source = parse_recipe_text(text, "t.yaml")
    except RecipeSyntaxError as exc:
        return ("refused", None, sorted(d.headline() for d in exc.diagnostics), set())
    return ("loaded", repr(data), sorted({d.headline() for d in source.problems}), source.broken)


def _reference(text: str) -> tuple[str, Any, list[str], set[Any]]:
    """What the node-tree reference (engine.yaml._tree, which finds positions) makes of it."""
    try:
        data, _, problems, broken = yaml_tree.load(SourceMap("t.yaml", text=text))
    except Exception as exc:  # any refusal: the one-pass loader must refuse too
        return ("refused", None, [type(exc).__name__], set())
    return ("loaded", repr(data), sorted({d.headline() for d in problems}), broken)


def _max_overlap(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one instant."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def _recipe(body: dict[str, Any]) -> str:
    return json.dumps({"version": 1, "name": "edges", **body})  # JSON is YAML


# -- the one-pass loader -----------------------------------------------------------------

_LOL = "abcdefghi"  # each anchor holds nine aliases of the one before
HOSTILE = {
    "yaml-1.1 booleans": "%YAML 1.1\n---\n[yes, No, on, y, 0o17, 017, 1_000, 1:20]\n",
    "bom": "\ufeffa: 1\n",
    "bom inside": "a: 1\n\ufeffb: 2\n",
    "two documents": "a: 1\n---\nb: 2\n",
    "explicit document": "--- \na: 1\n...\n",
    "empty document": "---\n...\n",
    "set": "--- !!set\n? a\n? b\n",
    "tags": "a: !!binary aGk=\nb: !!omap [{x: 1}]\nc: !!python/object:os.system x\n"
    'd: !!int "7"\ne: !!int 0x1f\nf: !foo {k: v}\ng: ! 12\n',
    "tag directive": "%TAG !e! tag:example.com,2000:\n---\na: !e!foo bar\n",
    "alias as key": "&k a: 1\nb: *k\n*k : 3\n",
    "mapping alias as key": "a: &x {p: 1}\n*x : 2\n",
    "complex key": "? [a, b]\n: 1\nc: 2\n",
    "merge key": "a: &m {k: v}\nb:\n  <<: *m\n  c: 1\n",
    "anchor inside a left-out value": "a: 1\na: &h {x: 1}\nb: *h\n",
    "anchor inside a complex key": "? &h {x: 1}\n: 2\nb: *h\n",
    "duplicate key in an anchor": "a: &s {x: 1, x: 2}\nb: [*s, *s]\n",
    "alias cycle": "a: &a [*a]\n",
    "duplicate anchor": "a: &a 1\nb: &a 2\n",
    "deep": "a: " + "[" * 99 + "]" * 99 + "\n",
    "too deep": "a: " + "[" * 5000 + "]" * 5000 + "\n",
    "too deep once aliased": "a: &a " + "[" * 60 + "]" * 60 + "\nb: " + "[" * 50 + "*a" + "]" * 50,
    "billion laughs": "a: &a [x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in itertools.pairwise(_LOL)),
}


@pytest.mark.parametrize("text", list(HOSTILE.values()), ids=list(HOSTILE))
def test_the_one_pass_loader_matches_the_node_tree_on_hostile_yaml(text: str) -> None:
    """Data, problems, values left out and refusals as the node tree had them."""
    fast, slow = _loaded(text), _reference(text)
    if fast[0] == slow[0] == "refused":
        return
    assert fast == slow


def test_an_alias_does_not_report_what_its_anchor_left_out() -> None:
    """A problem inside a value the loader leaves out (here under a duplicate key) is
    reported neither where the anchor is nor where it is aliased, as the node tree has
    it; an anchor carries only what building it alone reports."""
    text = (
        "defaults: &defaults\n"
        "  path: a.txt\n"
        "  path: {{ inputs.file }}\n"  # a duplicate key, and an unquoted template under it
        "used: *defaults\n"
    )
    fast, slow = _loaded(text), _reference(text)
    assert fast[1] == slow[1]  # the data agree
    assert fast[2] == slow[2]  # no unquoted-template for line 3
    assert fast[3] == slow[3]  # no path holding None


# -- positions, found again when something is reported -----------------------------------


def _limit_memory() -> None:
    limit = 768 * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@pytest.mark.slow
def test_a_typo_in_a_large_recipe_is_reported_within_the_memory_loading_needs(
    tmp_path: Path,
) -> None:
    """A recipe of 2,000,000 nodes validates in ~75 MB, and one typo in it is reported
    (exit 2, located) within a 768 MB address space: the text is searched for the
    reported paths only, not composed again as a tree with a position for every node
    (~900 MB)."""
    items = ",".join(["a"] * 2_000_000)
    head = (
        "version: 1\nname: big\ncapabilities: {fs: {root: ., read: true}}\nsteps:\n"
        "  - {id: s, tool: %s, params: {path: x}}\noutputs:\n  big: [" + items + "]\n"
    )
    (tmp_path / "ok.yaml").write_text(head % "fs.read", encoding="utf-8")
    (tmp_path / "typo.yaml").write_text(head % "fs.raed", encoding="utf-8")
    ok = planloom("validate", "ok.yaml", cwd=tmp_path, preexec_fn=_limit_memory)
    assert ok.returncode == 0, ok.stderr[-2000:]  # the valid one fits easily
    typo = planloom("validate", "typo.yaml", cwd=tmp_path, preexec_fn=_limit_memory)
    assert "Traceback" not in typo.stderr, typo.stderr[-2000:]
    assert typo.returncode == 2
    assert "typo.yaml:5:19: error[unknown-tool]" in typo.stderr


# -- validation of the graph -------------------------------------------------------------


def test_a_cycle_is_reported_even_when_a_step_id_is_repeated(tmp_path: Path) -> None:
    """A repeated step id is one node of the graph, as networkx had it: the cycle
    a → b → a is reported beside the duplicate id, every problem at once."""
    (tmp_path / "r.yaml").write_text(
        "version: 1\nname: c\ncapabilities: {fs: {root: ., read: true}}\nsteps:\n"
        "  - {id: a, tool: fs.read, params: {path: x}, depends_on: [b]}\n"
        "  - {id: b, tool: fs.read, params: {path: x}, depends_on: [a]}\n"
        "  - {id: a, tool: fs.read, params: {path: y}}\n",
        encoding="utf-8",
    )
    done = planloom("validate", "r.yaml", "--json", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    rules = {problem["rule"] for problem in json.loads(done.stdout)}
    assert "cycle" in rules, done.stdout


CYCLES = {
    "self": [{"id": "a", "tool": "fs.read", "params": {"path": "x"}, "depends_on": ["a"]}],
    "through when and fallback": [
        {
            "id": "a",
            "tool": "fs.read",
            "params": {"path": "x"},
            "when": "${{ steps.b.status == 'succeeded' }}",
        },
        {
            "id": "b",
            "tool": "fs.read",
            "params": {"path": "x"},
            "fallback": {"tool": "fs.read", "params": {"path": "${{ steps.a.output.content }}"}},
        },
    ],
    "through for_each": [
        {
            "id": "a",
            "for_each": "${{ steps.b.output }}",
            "tool": "fs.read",
            "params": {"path": "x"},
        },
        {"id": "b", "tool": "fs.read", "params": {"path": "${{ steps.a.output[0].content }}"}},
    ],
}


@pytest.mark.parametrize("steps", list(CYCLES.values()), ids=list(CYCLES))
def test_cycles_are_still_found_without_networkx(
    steps: list[dict[str, Any]], tmp_path: Path
) -> None:
    """Self-loops and cycles through `when`, fallback params and `for_each`."""
    text = _recipe({"capabilities": {"fs": {"root": ".", "read": True}}, "steps": steps})
    (tmp_path / "r.yaml").write_text(text, encoding="utf-8")
    done = planloom("validate", "r.yaml", "--json", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert [p["rule"] for p in json.loads(done.stdout)] == ["cycle"]


# -- per-family limits -------------------------------------------------------------------

SLOW_PLUGIN = '''"""`slow.hold`: notes in started/ that it began, then waits."""

import asyncio
import itertools
from pathlib import Path


def register(registry):
    @registry.function("slow.hold")
    async def hold(name: str, seconds: float) -> str:
        Path("started", name).write_text("started")
        await asyncio.sleep(seconds)
        return name
'''


@pytest.mark.slow
def test_a_call_waiting_for_its_family_slot_is_not_in_doubt_on_resume(
    tmp_path: Path,
) -> None:
    """A call takes its family's slot before its intent is journaled: a run stopped
    while a call waits for its slot (limits.max_duration here; a crash or Ctrl-C alike)
    leaves no intent for it, and `resume --yes` runs it like any call that never
    started."""
    (tmp_path / "edges_slow_plugin.py").write_text(SLOW_PLUGIN, encoding="utf-8")
    (tmp_path / "started").mkdir()
    (tmp_path / "slots.yaml").write_text(
        "version: 1\nname: slots\n"
        "inputs: {seconds: {type: number, default: 30}}\n"
        "capabilities: {slow: {}}\n"
        "limits: {per_family: {slow: 1}, max_duration: 2}\n"
        "steps:\n"
        '  - {id: a, tool: slow.hold, params: {name: a, seconds: "${{ inputs.seconds }}"}}\n'
        '  - {id: b, tool: slow.hold, params: {name: b, seconds: "${{ inputs.seconds }}"}}\n',
        encoding="utf-8",
    )
    environ = env(PYTHONPATH=str(tmp_path), PYTHONDONTWRITEBYTECODE="1")
    plugin = ("--plugin", "edges_slow_plugin")
    first = planloom(*plugin, "run", "slots.yaml", "--yes", "--json", cwd=tmp_path, environ=environ)
    result = json.loads(first.stdout)
    assert {s["status"] for s in result["steps"].values()} == {"cancelled"}, first.stderr
    started = {p.name for p in (tmp_path / "started").iterdir()}
    assert len(started) == 1  # one call held the slot; the other never began
    (waited,) = {"a", "b"} - started

    again = planloom(
        *plugin,
        "resume",
        result["run_id"],
        "--yes",
        "--json",
        "-i",
        "seconds=0",
        cwd=tmp_path,
        environ=environ,
    )
    steps = json.loads(again.stdout)["steps"]
    (ran,) = started
    assert steps[ran]["status"] == "denied"  # it was in flight: rightly in doubt
    assert steps[waited]["status"] == "succeeded", steps[waited]["error"]


def test_per_family_bounds_for_each_items_and_fallbacks() -> None:
    """Items of two for_each steps and their fallbacks share one family's slots."""
    registry = default_registry()
    tools = ScriptedTools(registry)
    tools.script("flaky", Wait(0.05, Fail("down")))
    tools.script("fine", Wait(0.05, "ok"))
    steps = [
        {
            "id": f"fan{n}",
            "for_each": "${{ [1, 2, 3, 4] }}",
            "tool": "test.run",
            "params": {"key": "flaky"},
            "fallback": {"tool": "test.run", "params": {"key": "fine"}},
        }
        for n in range(2)
    ]
    text = _recipe(
        {"capabilities": {"test": {}}, "limits": {"per_family": {"test": 2}}, "steps": steps}
    )
    result = run_recipe_text(text, registry)
    assert {s.status for s in result.steps.values()} == {"fallback"}
    assert len(tools.calls) == 16
    spans = [(c.started, c.ended) for c in tools.calls if c.ended is not None]
    assert len(spans) == 16
    assert _max_overlap(spans) == 2


def test_a_call_that_times_out_gives_its_slot_back() -> None:
    """A hung call ends at its timeout and the calls waiting for its slot run."""
    registry = default_registry()
    tools = ScriptedTools(registry)
    tools.script("stuck", Hang())
    steps = [
        {"id": "stuck", "tool": "test.run", "params": {"key": "stuck"}, "timeout": 0.2},
        *({"id": f"s{n}", "tool": "test.run", "params": {"key": f"k{n}"}} for n in range(3)),
    ]
    text = _recipe(
        {"capabilities": {"test": {}}, "limits": {"per_family": {"test": 1}}, "steps": steps}
    )
    result = run_recipe_text(text, registry)
    assert result.steps["stuck"].status == "failed"
    assert "timed out" in (result.steps["stuck"].error or "")
    assert all(result.steps[f"s{n}"].status == "succeeded" for n in range(3))


def test_the_shell_family_is_bounded_by_the_cpu_count_by_default() -> None:
    """The shell family bounds its calls at once to the number of CPUs (with
    `max_parallel` 64, a recipe would otherwise start up to 64 confined processes)."""
    limit = default_registry().families["shell"].max_parallel
    assert limit is not None
    assert 1 <= limit <= (os.cpu_count() or 1)


def _run_with_model(text: str, base_dir: Path, model: Any) -> tuple[RunResult, FakeOpenAIServer]:
    registry = default_registry()
    data, source = parse_recipe_text(text, "<edges>")
    plan = validate_plan(data, source, registry, base_dir=base_dir)
    with FakeOpenAIServer(model) as server:

        async def go() -> RunResult:
            config = LLMConfig(model="m", base_url=server.base_url, api_key=SecretStr("k"))
            client = LLMClient(config, budget=Budget())
            try:
                executor = Executor(
                    plan,
                    registry=registry,
                    base_dir=base_dir,
                    approver=ApproveAll(),
                    agent_runner=ReactAgent(client),
                    llm=client,
                )
                return await executor.run()
            finally:
                await client.aclose()

        return asyncio.run(go()), server


def test_per_family_llm_bounds_agent_steps_model_calls(tmp_path: Path) -> None:
    """`limits.per_family: {llm: 1}` (a rate-limited endpoint) bounds the model calls of
    agent steps too, not only `llm.complete` steps."""
    lock = threading.Lock()
    in_flight = [0, 0]  # now, most

    def model(request: ChatRequest) -> str:
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
        time.sleep(0.3)
        with lock:
            in_flight[0] -= 1
        return "done"

    steps = [{"id": f"s{n}", "agent": {"goal": "say done", "tools": []}} for n in range(3)]
    text = _recipe(
        {"capabilities": {"llm": {}}, "limits": {"per_family": {"llm": 1}}, "steps": steps}
    )
    result, _ = _run_with_model(text, tmp_path, model)
    assert {s.status for s in result.steps.values()} == {"succeeded"}
    assert in_flight[1] == 1


# -- steps compiled when they start ------------------------------------------------------


def test_a_for_each_fallback_agent_is_told_each_items_params(tmp_path: Path) -> None:
    """A string fallback's agent reads its step's compiled primary while the step
    runs (it is dropped only when the step ends), for every item of a for_each."""
    (tmp_path / "jail").mkdir()

    def model(request: ChatRequest) -> ChatReply | str:
        if not request.tool_results():
            return ChatReply(tool_calls=[ToolCall("fs__list", {"path": "."})])
        return "listed instead"

    steps = [
        {
            "id": "each",
            "for_each": "${{ ['one.md', 'two.md'] }}",
            "tool": "fs.read",
            "params": {"path": "${{ item }}"},
            "fallback": "list the folder instead",
        }
    ]
    grants = {"fs": {"root": "jail", "read": True}, "llm": {}}
    result, server = _run_with_model(
        _recipe({"capabilities": grants, "steps": steps}), tmp_path, model
    )
    assert result.steps["each"].status == "fallback", result.steps["each"].error
    assert result.steps["each"].output == ["listed instead", "listed instead"]
    told = " ".join(r.messages[1]["content"] for r in server.requests if not r.tool_results())
    assert '{"path": "one.md"}' in told
    assert '{"path": "two.md"}' in told
