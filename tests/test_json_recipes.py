"""JSON recipes (`*.json`): the same schema as YAML, read by the JSON parser, with the YAML
reader's guarantees: located errors, the nesting and size caps, duplicate keys reported,
and validation's problems located in the JSON text."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _procs import planloom
from hypothesis import given, settings
from hypothesis import strategies as st

from capabilities import default_registry
from engine.errors import PlanValidationError, RecipeSyntaxError
from engine.limits import MAX_DEPTH
from engine.validation import validate_plan
from engine.yaml import parse_json_text, parse_recipe_text, read_recipe

RECIPE: dict[str, Any] = {
    "version": 1,
    "name": "json-recipe",
    "capabilities": {"fs": {"root": ".", "write": True}},
    "steps": [
        {"id": "list", "tool": "fs.list", "params": {"path": "data"}},
        {
            "id": "save",
            "tool": "fs.write",
            "params": {
                "path": "out/count.txt",
                "content": "${{ steps.list.output.entries | length }} entries",
            },
        },
    ],
    "outputs": {"count": "${{ steps.save.status }}"},
}


def _problems(error: PlanValidationError | RecipeSyntaxError) -> list[tuple[int, int, str]]:
    return [(d.line, d.column, d.rule) for d in error.diagnostics]


def _syntax(text: str) -> list[tuple[int, int, str]]:
    with pytest.raises(RecipeSyntaxError) as caught:
        parse_json_text(text, "r.json")
    return _problems(caught.value)


def test_a_json_recipe_runs_as_its_yaml_twin(tmp_path: Path) -> None:
    runs = []
    texts = (("r.json", json.dumps(RECIPE, indent="\t")), ("r.yaml", json.dumps(RECIPE)))
    for name, text in texts:  # (JSON text is YAML too)
        folder = tmp_path / name.replace(".", "-")
        folder.mkdir()
        (folder / name).write_text(text)
        (folder / "data").mkdir()
        for listed in ("a.txt", "b.txt"):
            (folder / "data" / listed).write_text(listed)
        done = planloom("run", name, "--yes", "--json", cwd=folder)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        for step in result["steps"].values():
            step.pop("duration")
        runs.append({k: v for k, v in result.items() if k not in ("run_id", "approvals")})
    assert runs[0] == runs[1]
    assert runs[0]["status"] == "succeeded"
    assert (tmp_path / "r-json" / "out" / "count.txt").read_text() == "2 entries"


def test_the_readmes_json_recipe_example_writes_a_recipe_that_runs(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    block = re.search(r"### JSON recipes.*?```python\n(.*?)```", readme, re.S)
    assert block, "the README's JSON recipes example is missing"
    subprocess.run([sys.executable, "-c", block.group(1)], cwd=tmp_path, check=True)
    done = planloom("run", "plan.json", "--yes", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "succeeded"
    written = (tmp_path / "out" / "n.txt").read_text()
    assert re.fullmatch(r"[1-9][0-9]* entries", written), written  # (plan.json at least)


def test_validation_problems_are_located_in_the_json_text(tmp_path: Path) -> None:
    text = (
        '{"version": 1, "name": "x", "capabilities": {"fs": {"root": "."}},\n'
        ' "steps": [\n'
        '  {"id": "a", "tool": "fs.list", "parms": {}},\n'
        '\t\t{"id": "b", "tool": "fs.red", "params": {"path": "\\u00e9\\ud83d\\ude00\\/x"}}\n'
        " ]}\n"
    )
    (tmp_path / "r.json").write_text(text)
    done = planloom("validate", "r.json", cwd=tmp_path)
    assert done.returncode == 2
    assert "r.json:3:34: error[unknown-key]: unknown key 'parms'" in done.stderr
    assert "r.json:4:23: error[unknown-tool]: unknown tool 'fs.red'" in done.stderr
    assert "did you mean 'fs.read'?" in done.stderr


def test_a_problem_far_along_one_long_line_is_located_at_its_column() -> None:
    """A 20,000-step recipe on one line (over a million characters: searched for the
    paths asked for only): the unknown tool of the last step, at its own column."""
    steps = [
        {"id": f"s{n}", "tool": "fs.list", "params": {"path": "d\\/\u00e9"}} for n in range(20_000)
    ]
    steps[-1]["tool"] = "fs.lst"
    recipe = {"version": 1, "name": "x", "capabilities": {"fs": {"root": "."}}, "steps": steps}
    text = json.dumps(recipe, ensure_ascii=False).replace("\\\\/", "\\/")
    assert len(text) > 1_000_000
    assert "\n" not in text
    data, source = parse_json_text(text, "r.json")
    with pytest.raises(PlanValidationError) as caught:
        validate_plan(data, source, default_registry(), base_dir=Path("."))
    [(line, column, rule)] = _problems(caught.value)
    assert (line, column, rule) == (1, text.index('"fs.lst"') + 1, "unknown-tool")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"version": 1,\n "steps": [\n  {"id": "a"},\n ]\n}', (4, 2, "json-syntax")),
        ('{"version": 1 "name": "x"}', (1, 15, "json-syntax")),
        ('{"version": 1,\n "limits": {"timeout": NaN}}', (2, 24, "json-value")),
        ('{"version": 1,\n "limits": {"timeout": -Infinity}}', (2, 24, "json-value")),
        ('{"version": 1,\n "x": ' + "9" * 5000 + "}", (2, 7, "json-value")),
        ("   \n\t", (1, 1, "empty")),
        ("[" * 100_000 + "]" * 100_000, (1, MAX_DEPTH + 1, "too-deep")),
    ],
)
def test_text_that_is_not_a_recipe_is_a_located_error(
    text: str, where: tuple[int, int, str]
) -> None:
    assert _syntax(text) == [where]


def test_nesting_past_the_cap_is_refused_where_it_passes_it() -> None:
    deep = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    parse_json_text('{"a": ' + deep[1:-1] + "}", "r.json")  # exactly the cap: read
    [(line, column, rule)] = _syntax('{\n"a": ' + deep + "}")
    assert (line, rule) == (2, "too-deep")
    assert column == 5 + MAX_DEPTH  # the first list past the cap (the object is one)


def test_a_repeated_key_is_reported_and_the_first_kept() -> None:
    text = '{"version": 1, "name": "x",\n "steps": [{"id": "a", "tool": "t.x", "id": "b"}]}'
    data, source = parse_json_text(text, "r.json")
    assert data["steps"][0]["id"] == "a"
    [problem] = source.problems
    line = text.split("\n")[1]
    assert (problem.line, problem.rule) == (2, "duplicate-key")
    assert problem.column == line.rindex('"id"') + 1
    assert "first defined on line 2" in problem.message
    assert source.locate(("steps", 0, "id")) == (2, line.index('"a"') + 1)  # the one kept


_keys = st.sampled_from(["a", "b", "a:", '"', "", " "])
_texts = st.sampled_from(['x": y', "a:b", "", '\\"', " : "])
_spaces = st.sampled_from(["", " ", "\n\t "])


@st.composite
def _objects(draw: st.DrawFn, depth: int = 0) -> tuple[str, Any, int]:
    """JSON text of an object whose keys may repeat, with strings that hold colons and
    text like a key's end, and space before colons: the text, the data with the first of
    each repeated key kept, and how many repeats."""
    parts: list[str] = []
    data: dict[str, Any] = {}
    repeats = 0
    for _ in range(draw(st.integers(0, 4))):
        key = draw(_keys)
        if depth < 2 and draw(st.booleans()):
            text, value, inner = draw(_objects(depth + 1))
            repeats += inner
        else:
            value = draw(_texts)
            text = json.dumps(value)
        parts.append(f"{json.dumps(key)}{draw(_spaces)}:{draw(_spaces)}{text}")
        repeats += key in data
        data.setdefault(key, value)
    return "{" + ",".join(parts) + "}", data, repeats


@settings(max_examples=300)
@given(_objects())
def test_repeated_keys_are_found_however_the_text_is_written(
    drawn: tuple[str, Any, int],
) -> None:
    text, expected, repeats = drawn
    data, source = parse_json_text(text, "r.json")
    assert data == expected
    assert len(source.problems) == repeats
    assert {problem.rule for problem in source.problems} <= {"duplicate-key"}


def test_a_bad_json_file_leaves_nothing_behind(tmp_path: Path) -> None:
    (tmp_path / "r.json").write_text('{"version": 1, "name": "x", "steps": [}')
    done = planloom("run", "r.json", "--yes", cwd=tmp_path)
    assert done.returncode == 2
    assert "r.json:1:39: error[json-syntax]" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / ".planloom").exists()


_HEAD = '{"version": 1, "name": "x", "capabilities": {"fs": {"root": ".", "write": true}},\n'
_WRITE = ' "steps": [{"id": "w", "tool": "fs.write", "params": {"path": "out.txt", "content": '
_AT = f"r.json:2:{len(_WRITE) + 1}"  # where the content's value starts
_DEEP = len(_WRITE) + MAX_DEPTH - 4 + 1  # the first list past the cap (four levels above)


@pytest.mark.parametrize(
    ("text", "where", "said"),
    [
        ('"x"}]\n', "r.json:2:89: error[json-syntax]", "Expecting ',' delimiter"),
        ("NaN}}]}", f"{_AT}: error[json-value]", "NaN is not a JSON number"),
        ("1e400}}]}", f"{_AT}: error[json-value]", "1e400 is too large a number"),
        ("9" * 5000 + "}}]}", f"{_AT}: error[json-value]", "an integer of 5,000 digits"),
        ('"\\udc00"}}]}', f"{_AT}: error[json-value]", "this string holds \\udc00, half"),
        ("[" * 5000, f"r.json:2:{_DEEP}: error[too-deep]", "nest more than 100 levels"),
    ],
    ids=["syntax", "nan", "1e400", "long-int", "lone-surrogate", "too-deep"],
)
def test_a_value_that_is_no_json_is_refused_where_it_stands_and_nothing_runs(
    tmp_path: Path, text: str, where: str, said: str
) -> None:
    _refused(tmp_path, (_HEAD + _WRITE + text).encode(), where, said)


@pytest.mark.parametrize(
    ("raw", "where", "said"),
    [
        ((_HEAD + _WRITE + '"caf\xe9"}}]}').encode("latin-1"), "r.json:2:89", "0xE9"),
        (_HEAD.encode("utf-16"), "r.json:1:1", "the file is UTF-16 text"),
        (b"\x00\x01\x02\x03" * 4, "r.json:1:1", "not a JSON recipe"),
        (b" \n\t\n", "r.json:1:1", "the recipe is empty"),
        (b'[{"version": 1}]', "r.json:1:1", "a recipe is a mapping of keys"),
        (b"x" * 20_000_001, "r.json:1:1", "larger than 20000000 bytes"),
    ],
    ids=["latin-1", "utf-16", "binary", "empty", "not-an-object", "too-large"],
)
def test_a_file_that_is_no_json_recipe_is_refused_and_nothing_runs(
    tmp_path: Path, raw: bytes, where: str, said: str
) -> None:
    _refused(tmp_path, raw, where, said)


def _refused(folder: Path, raw: bytes, where: str, said: str) -> None:
    """As `planloom run` and `validate --json` say it: located, exit 2 (a recipe that is
    not valid), a hint, no traceback, nothing written (no file, no run store)."""
    (folder / "r.json").write_bytes(raw)
    ran = planloom("run", "r.json", "--yes", cwd=folder)
    assert (ran.returncode, ran.stdout) == (2, ""), ran.stderr
    headline = next(line for line in ran.stderr.splitlines() if line.startswith("r.json:"))
    assert headline.startswith(f"{where}:"), ran.stderr
    assert said in headline, ran.stderr
    assert "hint: " in ran.stderr
    assert "Traceback" not in ran.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["r.json"]
    checked = planloom("validate", "r.json", "--json", cwd=folder)
    assert checked.returncode == 2, checked.stderr
    [problem] = json.loads(checked.stdout)
    file, line, column = where.split(":")[:3]
    assert (problem["file"], problem["line"], problem["column"]) == (file, int(line), int(column))
    assert problem["message"] in headline


def test_a_json_recipe_draws_and_runs_its_inputs_as_its_yaml_twin(tmp_path: Path) -> None:
    recipe = {
        "version": 1,
        "name": "twin",
        "inputs": {"who": {"type": "string", "default": "x"}},
        "capabilities": {"fs": {"root": "."}},
        "steps": [
            {"id": "a", "tool": "fs.list", "params": {"path": "."}},
            {"id": "b", "tool": "fs.list", "params": {"path": "."}, "depends_on": ["a"]},
        ],
        "outputs": {"who": "${{ inputs.who }}"},
    }
    (tmp_path / "r.json").write_text(json.dumps(recipe))
    (tmp_path / "r.yaml").write_text(json.dumps(recipe))
    for args in (("graph", "{}", "--format", "ascii"), ("run", "{}", "-i", "who=me", "--json")):
        json_out, yaml_out = (
            planloom(*(a.format(name) for a in args), cwd=tmp_path) for name in ("r.json", "r.yaml")
        )
        assert json_out.returncode == yaml_out.returncode == 0, json_out.stderr
        if args[0] == "graph":
            assert json_out.stdout == yaml_out.stdout
            assert "a" in json_out.stdout
        else:
            assert json.loads(json_out.stdout)["outputs"] == {"who": "me"}


def test_only_files_named_json_are_read_as_json(tmp_path: Path) -> None:
    (tmp_path / "r.JSON").write_text('{"version": 1, "name": "x", "steps": [], "goal": "g"}')
    (tmp_path / "r.yaml").write_text("version: 1\nname: x\n# a comment JSON would refuse\n")
    assert read_recipe(tmp_path / "r.JSON")[0]["goal"] == "g"
    assert read_recipe(tmp_path / "r.yaml")[0] == {"version": 1, "name": "x"}


_words = st.text("ab é$}{:-_#'\"\\\n\t", max_size=8)  # (YAML refuses control characters)
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6), _words)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_words, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def _recipes(draw: st.DrawFn) -> dict[str, Any]:
    """Recipe data, good and bad: known and unknown keys, right and wrong types, templates
    reading steps that exist or not."""
    steps = []
    for index in range(draw(st.integers(0, 4))):
        step: dict[str, Any] = {
            "id": draw(st.sampled_from([f"s{index}", "s0", "bad id"])),
            "tool": draw(st.sampled_from(["fs.read", "fs.list", "fs.red", 3])),
            "params": draw(
                st.sampled_from(
                    [{"path": "a"}, {"path": 3}, {"pth": "a"}, {"path": "${{ steps.s0.output }}"}]
                )
            ),
        }
        if draw(st.booleans()):
            step[draw(st.sampled_from(["depends_on", "retry", "when", "extra"]))] = draw(_values)
        steps.append(step)
    recipe: dict[str, Any] = {"version": 1, "name": "p", "capabilities": {"fs": {"root": "."}}}
    recipe["steps"] = steps
    if draw(st.booleans()):
        recipe[draw(st.sampled_from(["limits", "inputs", "outputs", "nonsense"]))] = draw(_values)
    return recipe


@settings(max_examples=200)
@given(_recipes(), st.sampled_from([None, 1, "\t"]))
def test_json_and_yaml_texts_of_one_recipe_validate_alike(
    recipe: dict[str, Any], indent: int | str | None
) -> None:
    """The same data written as JSON and read as JSON, or read by the YAML reader (JSON
    text without surrogate escapes is YAML), gives equal plans or the same problems."""
    text = json.dumps(recipe, indent=indent, ensure_ascii=False)
    outcomes = []
    for parse in (parse_json_text, parse_recipe_text):
        data, source = parse(text, "r.json")
        try:
            outcomes.append(validate_plan(data, source, default_registry(), base_dir=Path(".")))
        except PlanValidationError as exc:
            outcomes.append(_problems(exc))
    assert outcomes[0] == outcomes[1]


@pytest.mark.slow
def test_more_values_than_the_cap_are_refused() -> None:
    from engine.limits import MAX_NODES

    text = '{"version": 1, "inputs": [' + "0," * MAX_NODES + "0]}"
    [(line, _, rule)] = _syntax(text)
    assert (line, rule) == (1, "json-too-large")
    parse_json_text('{"version": 1, "inputs": [' + "0," * (MAX_NODES - 3) + "0]}", "r.json")
