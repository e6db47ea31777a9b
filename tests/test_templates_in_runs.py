"""What a new user meets in the first hour, in templates, through the real `planloom`
command: null `for_each` items read by filters (no traceback, a summary, a stored final
status), text around a template kept as text, and dry runs whose outputs read a step that
did not run.

The contract these hold to: a whole-value template gives JSON data (an `Undefined` anywhere
inside is the template's error, a generator a list); an attribute or item of null is null;
only a value that is exactly one `${{ }}` keeps its type.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _procs import planloom
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import TemplateError
from engine.templating import Template


def _recipe(folder: Path, text: str, name: str = "r.yaml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def _run(recipe: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    proc = planloom("run", str(recipe), "--json", *args, cwd=recipe.parent)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return proc, result


FANOUT = """\
    version: 1
    name: fanout-canfail
    capabilities:
      fs: {root: fe, read: true}
    steps:
      - id: read
        for_each: ["a.txt", "b.txt", "c.txt"]
        tool: fs.read
        params: {path: "${{ item }}"}
        can_fail: true
    outputs:
      texts: ${{ steps.read.output | map(attribute='content') | list }}
    """


def _fe(folder: Path) -> None:
    (folder / "fe").mkdir()
    (folder / "fe" / "a.txt").write_text("A\n")
    (folder / "fe" / "c.txt").write_text("C\n")


# -- 1. null for_each items ------------------------------------------------------------------


@pytest.mark.slow
def test_a_for_each_with_a_failed_item_maps_to_null_and_the_run_is_stored(
    tmp_path: Path,
) -> None:
    _fe(tmp_path)
    recipe = _recipe(tmp_path, FANOUT)
    proc, result = _run(recipe)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert result["status"] == "succeeded"
    assert result["outputs"] == {"texts": ["A\n", None, "C\n"]}
    assert "run succeeded" in proc.stderr  # the summary
    shown = planloom("show", result["run_id"], "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["status"] == "succeeded"


@pytest.mark.slow
def test_an_undefined_inside_a_value_is_a_located_template_error(tmp_path: Path) -> None:
    _fe(tmp_path)
    recipe = _recipe(
        tmp_path,
        FANOUT.replace("map(attribute='content')", "map(attribute='contents')"),
    )
    proc, result = _run(recipe)
    assert proc.returncode == 1
    assert result["status"] == "failed"
    assert result["outputs"] == {"texts": None}
    [error] = result["errors"]
    assert "output 'texts'" in error
    assert "has no attribute 'contents'" in error
    assert "run failed" in proc.stderr
    runs = json.loads(planloom("runs", "--json", cwd=tmp_path).stdout)
    assert [(r["id"], r["status"]) for r in runs] == [(result["run_id"], "failed")]


# Filters a user chains over a for_each's output, each keeping the chain's value a list
# of possibly-null items or ending it in a scalar.
_FILTERS = st.sampled_from(
    [
        "map(attribute='content')",
        "map(attribute='size')",
        "selectattr('size')",
        "rejectattr('truncated')",
        "select",
        "reject",
        "list",
        "map('string')",
        "join(',')",
        "length",
        "first",
        "last",
        "unique",
        "sort(attribute='size')",
    ]
)
_TAILS = st.sampled_from(["", ".content", ".size", "[0]", " | string", " | default('none')"])


@st.composite
def _cases(draw: st.DrawFn) -> tuple[list[str], str, str]:
    names = draw(st.lists(st.sampled_from(["a.txt", "b.txt", "c.txt"]), min_size=1, max_size=5))
    chain = draw(st.lists(_FILTERS, min_size=1, max_size=4))
    expression = "steps.read.output | " + " | ".join(chain)
    tail = draw(_TAILS)
    if tail and not tail.startswith(" "):
        expression = f"({expression}){tail}"
    else:
        expression += tail
    kind = draw(st.sampled_from(["output", "param", "when"]))
    return names, expression, kind


@pytest.mark.slow
def test_random_filters_over_null_items_never_crash_a_run(tmp_path: Path) -> None:
    _fe(tmp_path)
    store = tmp_path / "runs.db"
    ended: dict[str, str] = {}

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(_cases())
    def one(case: tuple[list[str], str, str]) -> None:
        names, expression, kind = case
        use = {
            "output": "",
            "param": f"""
              - id: use
                tool: fs.write
                params: {{path: out/x.txt, content: "v=${{{{ {expression} }}}}\\n"}}""",
            "when": f"""
              - id: use
                tool: fs.list
                params: {{path: .}}
                when: ${{{{ {expression} }}}}""",
        }[kind]
        steps = f"""\
            version: 1
            name: random-filters
            capabilities:
              fs: {{root: fe, read: true, write: ["out/**"]}}
            steps:
              - id: read
                for_each: {json.dumps(names)}
                tool: fs.read
                params: {{path: "${{{{ item }}}}"}}
                can_fail: true{use}
            outputs:
              value: ${{{{ {expression} }}}}
            """
        recipe = _recipe(tmp_path, steps, "random.yaml")
        proc = planloom(
            "run", str(recipe), "--json", "--yes", "--store", str(store), cwd=tmp_path
        )  # fmt: skip
        assert "Traceback" not in proc.stderr, (expression, proc.stderr[-3000:])
        assert proc.returncode in (0, 1), (expression, proc.returncode, proc.stderr[-2000:])
        result = json.loads(proc.stdout)
        assert result["status"] in ("succeeded", "failed")
        assert f"run {result['status']}" in proc.stderr  # the summary was printed
        json.dumps(result["outputs"])  # plain data
        ended[result["run_id"]] = result["status"]

    one()
    listed = planloom("runs", "--json", "--limit", "1000", "--store", str(store), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    stored = {run["id"]: run["status"] for run in json.loads(listed.stdout)}
    assert stored == ended  # every run stored with its final status, none `interrupted`


_ITEM = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {"content": st.text(max_size=5), "size": st.integers(0, 9), "truncated": st.booleans()}
    ),
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.lists(_ITEM, max_size=6), st.lists(_FILTERS, min_size=1, max_size=4), _TAILS)
def test_a_whole_value_is_always_data_or_a_template_error(
    items: list[Any], chain: list[str], tail: str
) -> None:
    source = "${{ (xs | " + " | ".join(chain) + ")" + tail + " }}"
    try:
        value = Template.parse(source).render({"xs": items})
    except TemplateError:
        return
    json.dumps(value, allow_nan=False)  # raises on anything that is not JSON data


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("${{ [1, 2] | map('string') }}", ["1", "2"]),  # a generator made a list
        ("${{ (1, 2) }}", [1, 2]),
        ("${{ [3, 1, 3] | unique }}", [3, 1]),
        ("${{ none.content }}", None),
        ("${{ xs[1].content }}", None),
        ("${{ xs | map(attribute='content') | join('|') }}", "a||c"),
    ],
)
def test_whole_values_are_made_data(source: str, expected: Any) -> None:
    xs = [{"content": "a"}, None, {"content": "c"}]
    assert Template.parse(source).render({"xs": xs}) == expected


# -- 2. text around a template -----------------------------------------------------------------


def test_a_newline_after_a_template_is_written(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    recipe = _recipe(
        tmp_path,
        """\
        version: 1
        name: lines
        capabilities:
          fs: {root: out, write: ["*.txt"]}
        steps:
          - id: one
            tool: fs.append
            params: {path: log.txt, content: "${{ 'line1' }}\\n"}
          - id: two
            tool: fs.append
            params: {path: log.txt, content: "${{ 'line2' }}\\n"}
            depends_on: [one]
          - id: three
            tool: fs.append
            params: {path: log.txt, content: "n=${{ 'line3' }}\\n"}
            depends_on: [two]
          - id: number
            tool: fs.append
            params: {path: n.txt, content: "${{ 40 + 2 }}\\n"}
        """,
    )
    proc, _ = _run(recipe, "--yes")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "out" / "log.txt").read_bytes() == b"line1\nline2\nn=line3\n"
    assert (tmp_path / "out" / "n.txt").read_bytes() == b"42\n"  # text, not a number


# -- 4. dry runs and outputs of steps that did not run ---------------------------------------

DRY = """\
    version: 1
    name: dry
    capabilities:
      fs: {root: ., read: true, write: ["*.txt"]}
      shell: {allow: [wc]}
    steps:
      - id: write
        tool: fs.write
        params: {path: out.txt, content: "hi\\n"}
      - id: count
        tool: shell.run
        params: {argv: [wc, -c, out.txt]}
        depends_on: [write]
    outputs:
      chars: ${{ steps.count.output.stdout }}
      wrote: ${{ steps.write.status }}
    """


def test_a_dry_run_completes_with_unknown_outputs_and_counts_no_call_it_did_not_make(
    tmp_path: Path,
) -> None:
    recipe = _recipe(tmp_path, DRY)
    proc, result = _run(recipe, "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert result["status"] == "succeeded"
    assert result["errors"] == []
    assert result["outputs"] == {"chars": None, "wrote": "skipped"}
    assert result["unknown_outputs"] == {
        "chars": "needs the output of 'count', unknown in a dry run"
    }
    assert result["usage"]["tool_calls"] == 0
    assert result["steps"]["write"]["usage"]["tool_calls"] == 0
    assert "unknown: needs the output of 'count'" in proc.stderr
    assert ", 0 tool calls)" in proc.stderr
    assert "error: output" not in proc.stderr
    assert not (tmp_path / "out.txt").exists()


def test_a_failed_run_whose_outputs_read_the_failed_step_has_no_output_error(
    tmp_path: Path,
) -> None:
    recipe = _recipe(
        tmp_path,
        """\
        version: 1
        name: failing
        capabilities:
          shell: {allow: [wc]}
        steps:
          - id: count
            tool: shell.run
            params: {argv: [wc, -c, missing.txt]}
        outputs:
          chars: ${{ steps.count.output.stdout }}
        """,
    )
    proc, result = _run(recipe, "--yes")
    assert proc.returncode == 1
    assert result["steps"]["count"]["status"] == "failed"
    assert result["outputs"] == {"chars": None}
    assert result["errors"] == []  # the step's own error says what failed, once
    assert "error: output" not in proc.stderr
