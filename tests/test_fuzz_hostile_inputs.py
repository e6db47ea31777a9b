"""Fuzz: alias bombs, deep YAML nesting and deep JSON plans.

Each family generates hostile documents mixed into valid recipe structure, loads them the
way the CLI does (`parse_recipe_text` + `validate_plan`, `extract_json`, the real
`LLMPlanner` against the fake model over HTTP) and checks every case for:

- no exception but planloom's typed ones (no RecursionError, MemoryError, ruamel error);
- a bounded time per case (`CASE_SECONDS`): nothing hangs;
- over a cap: exactly one located error with the right rule, at the position where the
  cap is passed (computed here, independently of the loader); under it: no such error.

The figure to name is printed by each test (`pytest -s`) and asserted: at least
`MIN_CASES` cases in all, with the handful run through the real `planloom` command.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _procs import planloom
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from capabilities import default_registry
from engine.errors import PlanError, RecipeSyntaxError
from engine.llm import LLMClient, LLMConfig, NoJSON, extract_json
from engine.testing import ChatRequest, FakeOpenAIServer, ScriptedModel, instant_sleep
from engine.validation import validate_plan
from planners.llm import LLMPlanner
from planners.recipe import parse_recipe_text

REGISTRY = default_registry()
MAX_DEPTH = 100  # the caps the errors name (engine.limits)
MAX_ALIAS_NODES = 100_000
# CPU seconds per case (this process's: the case's and the fake model's threads), not
# wall time, which other processes stretch: a case took 5.9 s of wall time while a loaded
# 2-core machine ran three test workers and a model server. A hang still fails the case.
CASE_SECONDS = 5.0
MIN_CASES = 1_000
CASES: Counter[str] = Counter()
PASSED: set[str] = set()  # families whose every case held
SLOWEST = [0.0]  # CPU seconds, the slowest in-process case


def timed(started: float, bound: float = CASE_SECONDS) -> None:
    """The case that began at `started` (`time.process_time()`) used under `bound`."""
    elapsed = time.process_time() - started
    SLOWEST[0] = max(SLOWEST[0], elapsed)
    assert elapsed < bound, f"a case took {elapsed:.1f} s of CPU"


def fuzz(cases: int) -> settings:
    """`cases` fresh examples whatever the profile: the count is the figure."""
    return settings(
        max_examples=cases,
        deadline=None,  # the per-case bound is CASE_SECONDS, asserted in each case
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )


HEAD = "version: 1\nname: fuzz\n"
HTTP_GRANT = "capabilities: {http: {allow: [example.com]}}\n"


def load(text: str) -> PlanError | None:
    """Load `text` as the CLI loads a recipe: the typed error, or None if it is valid."""
    started = time.process_time()
    try:
        data, source = parse_recipe_text(text, "fuzz.yaml")
        validate_plan(data, source, REGISTRY)
        outcome: PlanError | None = None
    except PlanError as exc:  # anything else escapes and fails the case
        outcome = exc
    timed(started)
    return outcome


def rules(outcome: PlanError | None) -> list[str]:
    return [d.rule for d in getattr(outcome, "diagnostics", [])]


# -- alias bombs --------------------------------------------------------------------------------


@dataclass
class Chain:
    """An anchor chain: level 0 holds `width` scalars, level k `width` aliases of level
    k-1; then `uses` more aliases of the last level. Positions are 1-based."""

    lines: list[str] = field(default_factory=list)
    aliases: list[tuple[int, int, str, int]] = field(default_factory=list)  # line, col, name, size


def alias_chain(
    first_line: int, indent: int, width: int, levels: int, maps: list[bool], block: bool, uses: int
) -> Chain:
    chain = Chain()
    pad = " " * indent
    sizes: list[int] = []

    def add(text: str) -> None:
        chain.lines.append(text)

    for level in range(levels):
        name, prev = f"n{level}", f"n{level - 1}"
        items = ["v"] * width if level == 0 else [f"*{prev}"] * width
        child = 1 if level == 0 else sizes[-1]
        sizes.append(1 + width * ((1 + child) if maps[level] else child))
        if block:
            add(f"{pad}l{level}: &{name}")
            for index, item in enumerate(items):
                key = f"k{index}: " if maps[level] else "- "
                add(f"{pad}  {key}{item}")
                if level:
                    line = first_line + len(chain.lines) - 1
                    chain.aliases.append((line, indent + 3 + len(key), prev, child))
            continue
        text = f"{pad}l{level}: &{name} " + ("{" if maps[level] else "[")
        line = first_line + len(chain.lines)
        for index, item in enumerate(items):
            text += ", " if index else ""
            text += f"k{index}: " if maps[level] else ""
            if level:
                chain.aliases.append((line, len(text) + 1, prev, child))
            text += item
        add(text + ("}" if maps[level] else "]"))
    for use in range(uses):
        add(f"{pad}use{use}: *n{levels - 1}")
        line = first_line + len(chain.lines) - 1
        chain.aliases.append((line, indent + len(f"use{use}: ") + 1, f"n{levels - 1}", sizes[-1]))
    return chain


@st.composite
def alias_bombs(draw: st.DrawFn) -> tuple[str, tuple[int, int, str, int] | None]:
    """A recipe with an anchor chain at the top level or inside a step's params, and where
    the loader must stop (None: the aliases stay under the cap)."""
    width = draw(st.integers(1, 12))
    levels = draw(st.integers(1, 9))
    maps = draw(st.lists(st.booleans(), min_size=levels, max_size=levels))
    block = draw(st.booleans())
    uses = draw(st.integers(0, 3))
    inside_params = draw(st.booleans())
    if inside_params:
        head = (
            HEAD + HTTP_GRANT + "steps:\n  - id: send\n    tool: http.request\n    params:\n"
            "      url: https://example.com/\n      json:\n"
        )
        chain = alias_chain(head.count("\n") + 1, 8, width, levels, maps, block, uses)
        text = head + "\n".join(chain.lines) + "\n"
    else:
        head = HEAD + HTTP_GRANT
        chain = alias_chain(head.count("\n") + 1, 0, width, levels, maps, block, uses)
        text = head + "\n".join(chain.lines) + "\nsteps: []\n"
    total = 0
    for alias in chain.aliases:
        total += alias[3]
        if total > MAX_ALIAS_NODES:
            return text, alias
    return text, None


def check_alias_case(text: str, stop: tuple[int, int, str, int] | None) -> None:
    outcome = load(text)
    if stop is None:
        assert "yaml-too-large" not in rules(outcome), outcome
        return
    assert isinstance(outcome, RecipeSyntaxError), outcome
    (diag,) = outcome.diagnostics
    line, column, name, size = stop
    assert (diag.rule, diag.line, diag.column) == ("yaml-too-large", line, column), diag
    assert f"more than {MAX_ALIAS_NODES:,} nodes (here '*{name}' adds {size:,})" in diag.message
    assert diag.hint


@pytest.mark.slow
def test_fuzz_alias_bombs() -> None:
    refused = Counter[bool]()

    @fuzz(350)
    @given(alias_bombs())
    def case(bomb: tuple[str, tuple[int, int, str, int] | None]) -> None:
        CASES["alias bombs"] += 1
        refused[bomb[1] is not None] += 1
        check_alias_case(*bomb)

    case()
    PASSED.add("alias bombs")
    print(f"\nalias bombs: {sum(refused.values())} cases, {refused[True]} over the cap")
    assert refused[True] >= 50, refused
    assert refused[False] >= 50, refused


# -- deep nesting ---------------------------------------------------------------------------------


def nest_flow(kinds: list[bool]) -> tuple[str, list[int]]:
    """Nested flow collections (True: mapping) around a scalar, on one line, with the
    0-based offset of each opening bracket."""
    text, opens = "", []
    for is_map in kinds:
        opens.append(len(text))
        text += "{k: " if is_map else "["
    text += "v"
    for is_map in reversed(kinds):
        text += "}" if is_map else "]"
    return text, opens


def nest_block(kinds: list[bool], indent: int) -> tuple[list[str], list[tuple[int, int]]]:
    """Nested block collections, one level per line: the lines and, per level, the
    (line offset, 0-based column) where the collection starts (its first key or dash)."""
    lines: list[str] = []
    starts: list[tuple[int, int]] = []
    for level, is_map in enumerate(kinds):
        pad = " " * (indent + 2 * level)
        starts.append((len(lines), len(pad)))
        lines.append(pad + ("k:" if is_map else "-"))
    lines.append(" " * (indent + 2 * len(kinds)) + "v")
    return lines, starts


@st.composite
def deep_documents(draw: st.DrawFn) -> tuple[str, tuple[int, int] | None]:
    """A recipe with a nested value as the whole document, as the value of `steps`, or in a
    step's params; flow, block, or block outside flow; and where the loader must stop."""
    depth = draw(st.one_of(st.integers(1, 400), st.integers(MAX_DEPTH - 8, MAX_DEPTH + 4)))
    pattern = draw(st.sampled_from(["lists", "maps", "alternate", "random"]))
    seed = draw(st.integers(0, 2**32))
    rng = random.Random(seed)
    kinds = [
        {"lists": False, "maps": True, "alternate": level % 2 == 0, "random": rng.random() < 0.5}[
            pattern
        ]
        for level in range(depth)
    ]
    place = draw(st.sampled_from(["document", "steps", "params"]))
    style = draw(st.sampled_from(["flow", "block", "mixed"]))
    split = draw(st.integers(0, depth)) if style == "mixed" else (0 if style == "flow" else depth)
    # where the value sits: its first line and indent, and how many collections hold it
    head, indent, outer = {
        "document": ("", 0, 0),
        "steps": (HEAD + "steps:\n", 2, 1),
        "params": (
            HEAD + HTTP_GRANT + "steps:\n  - id: send\n    tool: http.request\n    params:\n"
            "      url: https://example.com/\n      json:\n",
            8,
            4,
        ),
    }[place]
    first_line = head.count("\n") + 1
    block_lines, starts = nest_block(kinds[:split], indent)
    inner, opens = nest_flow(kinds[split:])
    if split:
        block_lines[-1] = block_lines[-1][:-1] + inner  # the flow part replaces the leaf
        last_line, last_pad = len(block_lines) - 1, len(block_lines[-1]) - len(inner)
    else:
        block_lines, last_line, last_pad = [" " * indent + inner], 0, indent
    text = head + "\n".join(block_lines) + "\n"
    level = MAX_DEPTH - outer  # the 0-based level of the first collection over the cap
    if level >= depth:
        return text, None
    if level < split:
        offset, column = starts[level]
        return text, (first_line + offset, column + 1)
    return text, (first_line + last_line, last_pad + opens[level - split] + 1)


def check_deep_case(text: str, stop: tuple[int, int] | None) -> None:
    outcome = load(text)
    if stop is None:
        assert "too-deep" not in rules(outcome), outcome
        return
    assert isinstance(outcome, RecipeSyntaxError), outcome
    (diag,) = outcome.diagnostics
    assert (diag.rule, diag.line, diag.column) == ("too-deep", *stop), (diag, stop)
    assert f"more than {MAX_DEPTH} levels" in diag.message
    assert diag.hint


def test_fuzz_deep_yaml() -> None:
    refused = Counter[bool]()

    @fuzz(350)
    @given(deep_documents())
    def case(document: tuple[str, tuple[int, int] | None]) -> None:
        CASES["deep YAML"] += 1
        refused[document[1] is not None] += 1
        check_deep_case(*document)

    case()
    PASSED.add("deep YAML")
    print(f"\ndeep YAML: {sum(refused.values())} cases, {refused[True]} over the cap")
    assert refused[True] >= 50, refused
    assert refused[False] >= 50, refused


# -- deep JSON from the model ------------------------------------------------------------------


def json_nest(kinds: list[bool], leaf: str = '"v"') -> str:
    text = "".join('{"k": ' if is_map else "[" for is_map in kinds) + leaf
    return text + "".join("}" if is_map else "]" for is_map in reversed(kinds))


@st.composite
def deep_answers(
    draw: st.DrawFn,
    places: tuple[str, ...] = ("params", "whole"),
    wraps: tuple[str, ...] = ("bare", "fenced", "prose"),
) -> tuple[str, int]:
    """A model answer with a nested value (inside a plan's params, or the whole answer;
    bare, in a code fence, or amid prose, which is not one JSON value), and how deep the
    answer's JSON nests."""
    depth = draw(st.one_of(st.integers(1, 3000), st.integers(MAX_DEPTH - 8, MAX_DEPTH + 4)))
    rng = random.Random(draw(st.integers(0, 2**32)))
    kinds = [rng.random() < 0.5 for _ in range(depth)]
    where = draw(st.sampled_from(places))
    if where == "params":
        body = (
            '{"goal": "g", "steps": [{"id": "send", "tool": "http.request", "params": '
            '{"url": "https://example.com/", "json": ' + json_nest(kinds) + "}}]}"
        )
        total = depth + 4
    else:
        body, total = json_nest(kinds), depth
    wrap = draw(st.sampled_from(wraps))
    text = {
        "bare": body,
        "fenced": f"```json\n{body}\n```\n",
        "prose": f"I'd suggest this [draft]: {body} -- ok?",
    }[wrap]
    return text, total


def test_fuzz_deep_json_answers() -> None:
    refused = Counter[bool]()

    @fuzz(300)
    @given(deep_answers())
    def case(answer: tuple[str, int]) -> None:
        CASES["deep JSON answers"] += 1
        text, total = answer
        started = time.process_time()
        try:
            extract_json(text)
            rule = None
        except NoJSON as exc:
            rule = exc.rule
        timed(started)
        # Too deep wherever it stands; else prose around the JSON is not one JSON value.
        prose = text.startswith("I'd suggest")
        expected = "too-deep" if total > MAX_DEPTH else ("bad-json" if prose else None)
        assert rule == expected, (rule, total)
        refused[rule == "too-deep"] += 1

    case()
    PASSED.add("deep JSON answers")
    print(f"\ndeep JSON answers: {sum(refused.values())} cases, {refused[True]} over the cap")
    assert refused[True] >= 50, refused
    assert refused[False] >= 50, refused


async def _client(config: LLMConfig) -> LLMClient:
    return LLMClient(config, sleep=instant_sleep)


@pytest.mark.slow
def test_fuzz_deep_plans_through_the_planner(tmp_path: Path) -> None:
    """The real planner: a too-deep plan is a `too-deep` problem sent back for repair,
    then the fallback; a plan under the cap is accepted as it is."""
    current: list[str] = [""]

    def model(request: ChatRequest) -> str:
        return current[0]

    refused = Counter[bool]()
    # One loop and one client for every case (a client is made for a loop): each case is
    # the planner's work, not the HTTP client's start-up.
    with FakeOpenAIServer(ScriptedModel(model)) as server, asyncio.Runner() as runner:
        config = LLMConfig(model="m", base_url=server.base_url, api_key=SecretStr("k"))
        client = runner.run(_client(config))
        base = {"version": 1, "name": "fuzz", "capabilities": {"http": {"allow": ["example.com"]}}}

        async def plan(text: str) -> Any:
            current[0] = text
            return await LLMPlanner(client, REGISTRY).plan("g", base=base, base_dir=tmp_path)

        @fuzz(150)
        # the planner keeps params' depth as is; answers amid prose are bad-json, not this
        @given(deep_answers(places=("params",), wraps=("bare", "fenced")))
        def case(answer: tuple[str, int]) -> None:
            CASES["deep plans (planner)"] += 1
            text, total = answer
            started = time.process_time()
            outcome = runner.run(plan(text))
            timed(started, 3 * CASE_SECONDS)  # up to three model calls
            if total > MAX_DEPTH:
                assert outcome.fell_back
                assert all([d.rule for d in ds] == ["too-deep"] for ds in outcome.problems)
            else:
                assert (outcome.fell_back, outcome.problems) == (False, [])
            refused[total > MAX_DEPTH] += 1

        case()
        runner.run(client.aclose())
    PASSED.add("deep plans (planner)")
    print(f"\ndeep plans (planner): {sum(refused.values())} cases, {refused[True]} over the cap")
    assert refused[True] >= 20, refused
    assert refused[False] >= 20, refused


# -- a handful through the real command, then the count ------------------------------------------


@pytest.mark.slow
def test_fuzz_through_the_cli(tmp_path: Path) -> None:
    rng = random.Random(10)
    for number in range(8):
        if number % 2:
            text, stop = _cli_bomb(rng)
            rule = "yaml-too-large"
        else:
            text, stop = _cli_deep(rng)
            rule = "too-deep"
        path = tmp_path / f"case{number}.yaml"
        path.write_text(text, encoding="utf-8")
        started = time.monotonic()
        done = planloom("validate", path.name, cwd=tmp_path)
        CASES["through the CLI"] += 1
        assert time.monotonic() - started < 30
        assert "Traceback" not in done.stderr, done.stderr
        assert done.returncode == 2, done.stderr
        assert f"{path.name}:{stop[0]}:{stop[1]}: error[{rule}]" in done.stderr
    PASSED.add("through the CLI")


def _cli_bomb(rng: random.Random) -> tuple[str, tuple[int, int]]:
    levels = rng.randint(6, 9)
    maps = [rng.random() < 0.5 for _ in range(levels)]
    chain = alias_chain(3, 0, 9, levels, maps, rng.random() < 0.5, 1)
    total = 0
    for line, column, _, size in chain.aliases:
        total += size
        if total > MAX_ALIAS_NODES:
            return HEAD + "\n".join(chain.lines) + "\n", (line, column)
    raise AssertionError("a nine-wide chain of six levels passes the cap")


def _cli_deep(rng: random.Random) -> tuple[str, tuple[int, int]]:
    kinds = [rng.random() < 0.5 for _ in range(rng.randint(MAX_DEPTH, 5 * MAX_DEPTH))]
    inner, opens = nest_flow(kinds)
    # `steps:` is the top-level mapping's value: level 2 onward
    return HEAD + "steps: " + inner + "\n", (3, len("steps: ") + opens[MAX_DEPTH - 1] + 1)


@pytest.mark.slow  # it counts the slow fuzz tests above: it runs when they do
def test_zz_at_least_a_thousand_cases_ran() -> None:
    """Runs last (file order): the figure for the issue."""
    total = sum(CASES.values())
    if set(CASES) != PASSED or len(CASES) < 5:
        pytest.fail(f"run the whole file, all passing, to count: {dict(CASES)}, held: {PASSED}")
    print(
        f"\nhostile-input fuzz: {total} cases ({dict(CASES)}), 0 tracebacks, 0 hangs; "
        f"slowest in-process case {SLOWEST[0]:.2f} s of CPU"
    )
    assert total >= MIN_CASES, CASES
