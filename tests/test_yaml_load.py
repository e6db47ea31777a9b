"""The one-pass YAML loader against the node-tree reference it replaced.

`engine.yaml` builds data straight from the parser's events and keeps no positions;
`engine.yaml._tree` composes a node tree and walks it, the slow way, and is what finds
positions when something is to be reported. Both must agree on every document: the same
data, the same problems, the same values left out, the same refusals.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.diagnostics import SourceMap
from engine.errors import RecipeSyntaxError
from engine.yaml import _tree as yaml_tree
from engine.yaml import parse_recipe_text

SCALARS = [
    "a",
    "b",
    "id",
    '"q"',
    "'x'",
    "1",
    "-7",
    "0x1F",
    "0o17",
    "1_000",
    "3.5",
    ".inf",
    "-.Inf",
    ".NaN",
    "1e3",
    "true",
    "True",
    "FALSE",
    "yes",
    "no",
    "null",
    "~",
    '""',
    "!!str 12",
    '!!int "7"',
    "!!int 8",
    "!!float 1",
    "!!bool true",
    "!foo bar",
    "! 12",
    '"${{ steps.a.output }}"',
    "2024-01-01",
    "<<",
]
ANCHORS = ["a1", "a2", "a3"]
RECIPES = Path(__file__).resolve().parent.parent / "recipes"


@st.composite
def flow(draw: st.DrawFn, depth: int = 0) -> str:
    """A flow-style YAML value with anchors, aliases, duplicate, merge and complex keys."""
    choice = draw(st.integers(0, 9 if depth < 4 else 3))
    prefix = ""
    if draw(st.integers(0, 5)) == 0:
        prefix = f"&{draw(st.sampled_from(ANCHORS))} "
    if choice <= 2:
        return prefix + draw(st.sampled_from(SCALARS))
    if choice == 3:
        return f"*{draw(st.sampled_from(ANCHORS))}"
    if choice <= 5:
        items = draw(st.lists(flow(depth + 1), max_size=4))
        return prefix + "[" + ", ".join(items) + "]"
    pairs = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.integers(0, 7))
        if kind == 0:
            key = "{x: 1}"  # a mapping as a key
        elif kind == 1:
            key = "[k]"
        elif kind == 2:
            key = "*" + draw(st.sampled_from(ANCHORS))
        else:
            key = draw(st.sampled_from(["a", "b", "a", "<<", "'a'", "1", "true", "~"]))
        pairs.append(f"{key}: {draw(flow(depth + 1))}")
    return prefix + "{" + ", ".join(pairs) + "}"


def outcome(text: str) -> tuple[str, Any, list[str], set[Any]]:
    """What the one-pass loader makes of `text` (data as its repr: NaN is not NaN)."""
    try:
        data, source = parse_recipe_text(text, "t.yaml")
    except RecipeSyntaxError as exc:
        return ("refused", None, sorted(d.rule for d in exc.diagnostics), set())
    problems = list(dict.fromkeys(d.headline() for d in source.problems))
    return ("loaded", repr(data), problems, set(source.broken))


def reference(text: str) -> tuple[str, Any, list[str], set[Any]]:
    """What the node-tree reference makes of `text`."""
    source = SourceMap("t.yaml", text=text)
    try:
        if not text.strip() or text.lstrip().startswith("#"):
            probe = parse_recipe_text(text, "t.yaml")  # the empty document: both refuse
            del probe
        data, _, problems, broken = yaml_tree.load(source)
    except RecipeSyntaxError as exc:
        return ("refused", None, sorted(d.rule for d in exc.diagnostics), set())
    except Exception:  # any refusal; `outcome` says which rule
        return ("refused", None, [], set())
    # Through an alias a problem is found once per use, at the same place; validation
    # reports it once (`validate_plan` drops repeats), so repeats are not compared.
    return ("loaded", repr(data), list(dict.fromkeys(p.headline() for p in problems)), broken)


def same(text: str) -> None:
    fast, slow = outcome(text), reference(text)
    if fast[0] == "refused" and slow[0] == "refused":
        return
    assert fast == slow, text


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flow())
def test_the_one_pass_loader_agrees_with_the_node_tree(text: str) -> None:
    same(text)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "<<", "a"]), flow()), max_size=5))
def test_block_mappings_agree_too(pairs: list[tuple[str, str]]) -> None:
    same("".join(f"{key}: {value}\n" for key, value in pairs) or "a: 1\n")


def test_an_alias_is_a_copy_not_the_anchor_itself() -> None:
    data, _ = parse_recipe_text("a: &x {k: [1]}\nb: *x\n", "t.yaml")
    assert data == {"a": {"k": [1]}, "b": {"k": [1]}}
    assert data["a"] is not data["b"]
    assert data["a"]["k"] is not data["b"]["k"]


def test_an_alias_used_as_a_key_reads_as_its_anchors_text() -> None:
    data, source = parse_recipe_text("a: &t true\n*t : 2\n", "t.yaml")
    assert data == {"a": True, "true": 2}
    assert not source.problems


def test_a_left_out_value_inside_an_anchor_is_left_out_where_it_is_aliased() -> None:
    text = "a: &x {[k]: 2, ok: 3}\nb: *x\n"
    data, source = parse_recipe_text(text, "t.yaml")
    assert data == {"a": {"ok": 3}, "b": {"ok": 3}}
    assert source.broken == {("a",), ("b",)}
    assert {d.headline() for d in source.problems} == {
        "t.yaml:1:8: error[complex-key]: mapping keys must be plain strings"
    }


def test_positions_are_found_only_when_asked_for() -> None:
    text = "version: 1\nsteps:\n  - id: a\n    id: b\n"
    _, source = parse_recipe_text(text, "t.yaml")
    assert source.locate(("steps", 0, "id"), key=True) == (3, 5)
    assert source.locate(("steps", 0)) == (3, 5)
    assert [d.headline() for d in source.problems] == [
        "t.yaml:4:5: error[duplicate-key]: duplicate key 'id' (first defined on line 3)"
    ]


def test_validating_a_valid_recipe_never_composes_a_node_tree(tmp_path: Path) -> None:
    """Positions cost a table entry per node (a million for 100,000 steps): a recipe with
    nothing to report never builds one."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: x\ngoal: g\nsteps: []\nbad: 1\n", encoding="utf-8")
    code = (
        "import sys\n"
        "from capabilities import default_registry\n"
        "from planners.recipe import load_recipe\n"
        f"load_recipe({str(RECIPES / 'word-count.yaml')!r}, default_registry())\n"
        "print('engine.yaml._tree' in sys.modules)\n"
        "from engine.errors import PlanValidationError\n"
        "try:\n"
        f"    load_recipe({str(bad)!r}, default_registry())\n"
        "except PlanValidationError as exc:\n"
        "    print(exc.diagnostics[0].line)\n"
        "print('engine.yaml._tree' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["False", "5", "True"], done.stdout + done.stderr


def test_a_large_recipe_locates_its_problems_from_its_packed_text() -> None:
    """Past a million characters the text waits compressed; a problem near its end is
    still reported at its line, with the line shown."""
    lines = ["version: 1", "steps:"]
    for i in range(40_000):
        lines += [f"  - id: s{i}", "    tool: t.run"]
    lines += ["  - id: last", "    id: again"]
    text = "\n".join(lines) + "\n"
    assert len(text) > 1_000_000
    data, source = parse_recipe_text(text, "big.yaml")
    assert len(data["steps"]) == 40_001
    [problem] = source.problems
    assert problem.line == len(lines)
    assert source.locate(("steps", 40_000, "id"), key=True) == (len(lines) - 1, 5)
    assert source.lines[problem.line - 1] == "    id: again"
    assert source.text == text


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flow())
def test_searching_for_some_paths_finds_where_the_tree_puts_them(text: str) -> None:
    """A large document is searched for the paths asked for only: each position found
    is the one the whole tree gives (or the search says it cannot, past an alias)."""
    source = SourceMap("t.yaml", text=text)
    full = yaml_tree.locate(source)
    assert full is not None
    values, keys = full
    for table, index in ((values, 0), (keys, 1)):
        for path, position in list(table.items())[:12]:
            wanted = frozenset(path[:end] for end in range(len(path) + 1))
            found = yaml_tree.locate(source, wanted)
            if found is not None:
                assert found[index].get(path) == position, (text, path)
                assert set(found[index]) <= set(table)
