"""The recipe loader on bad input: every problem is a located `PlanValidationError`.

Also: YAML 1.2 scalar types, a 10,000-step recipe, fuzzing with garbage, and the
recipe → Plan → YAML → Plan round trip.
"""

from __future__ import annotations

import io
import os
import random
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from capabilities import default_registry
from engine.diagnostics import Diagnostic, SourceMap
from engine.errors import PlanValidationError, RecipeSyntaxError
from engine.model import Plan
from engine.validation import validate_plan
from planners.recipe import load_recipe, parse_recipe_text, read_recipe

REGISTRY = default_registry()
DEFAULT_YAML_HINT = "check indentation and quoting on this line or the one before"
TAB_HINT = "YAML does not allow tabs for indentation; use spaces"


def _syntax_error(text: str, file: str = "r.yaml") -> list[tuple[str, str | None]]:
    with pytest.raises(RecipeSyntaxError) as info:
        parse_recipe_text(text, file)
    return [(d.headline(), d.hint) for d in info.value.diagnostics]


def _dump(data: Any) -> str:
    buffer = io.StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.dump(data, buffer)
    return buffer.getvalue()


def _validate_text(text: str, file: str = "r.yaml") -> Plan:
    data, source = parse_recipe_text(text, file)
    return validate_plan(data, source, REGISTRY)


# -- malformed YAML ------------------------------------------------------------------------


MALFORMED = {
    "bad indentation under a list item": (
        "version: 1\nsteps:\n  - id: a\n     tool: x\n",
        [
            (
                "r.yaml:4:10: error[yaml-syntax]: mapping values are not allowed in this context",
                DEFAULT_YAML_HINT,
            )
        ],
    ),
    "indented top-level key": (
        "version: 1\n  name: x\nsteps: []\n",
        [
            (
                "r.yaml:2:7: error[yaml-syntax]: mapping values are not allowed in this context",
                DEFAULT_YAML_HINT,
            )
        ],
    ),
    "dedented list item": (
        "version: 1\nsteps:\n  - id: a\n  tool: x\n - id: b\n",
        [
            (
                "r.yaml:4:3: error[yaml-syntax]: did not find expected '-' indicator",
                DEFAULT_YAML_HINT,
            )
        ],
    ),
    "tab before a list item": (
        "version: 1\nsteps:\n\t- id: a\n",
        [("r.yaml:3:1: error[yaml-syntax]: found character that cannot start any token", TAB_HINT)],
    ),
    "tab indenting a key": (
        "version: 1\nsteps:\n  - id: a\n\ttool: x\n",
        [
            (
                "r.yaml:4:1: error[yaml-syntax]: found a tab character that violates indentation",
                TAB_HINT,
            )
        ],
    ),
    "unclosed flow sequence": (
        "version: 1\nsteps: [\n",
        [("r.yaml:3:1: error[yaml-syntax]: did not find expected node content", DEFAULT_YAML_HINT)],
    ),
    "undefined alias": (
        "version: 1\nname: *nope\n",
        [("r.yaml:2:7: error[yaml-syntax]: found undefined alias", DEFAULT_YAML_HINT)],
    ),
    "colon in a plain value": (
        "version: 1\nname: a: b\n",
        [
            (
                "r.yaml:2:8: error[yaml-syntax]: mapping values are not allowed in this context",
                DEFAULT_YAML_HINT,
            )
        ],
    ),
    "two documents": (
        "version: 1\n---\nversion: 1\n",
        [("r.yaml:2:1: error[yaml-syntax]: but found another document", DEFAULT_YAML_HINT)],
    ),
}


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_malformed_yaml_is_a_located_syntax_error(case: str) -> None:
    text, expected = MALFORMED[case]
    assert _syntax_error(text) == expected


# Problems the loader can read past: parsing goes on, and validation reports them together
# with every other problem in the recipe.
LOADER_PROBLEMS = {
    "merge key": (
        "base: &b {tool: fs.read}\nsteps:\n  - <<: *b\n    id: a\n",
        [
            (
                "r.yaml:3:5: error[merge-key]: YAML merge keys ('<<') are not supported",
                "write the keys out, or use YAML anchors per value",
            )
        ],
    ),
    "complex key": (
        "? [a, b]\n: 1\n",
        [("r.yaml:1:3: error[complex-key]: mapping keys must be plain strings", None)],
    ),
}


@pytest.mark.parametrize("case", sorted(LOADER_PROBLEMS))
def test_loader_problems_are_kept_for_validation(case: str) -> None:
    text, expected = LOADER_PROBLEMS[case]
    _, source = parse_recipe_text(text, "r.yaml")
    assert [(d.headline(), d.hint) for d in source.problems] == expected


def test_an_unclosed_quote_is_reported_where_the_quote_opens() -> None:
    text = 'version: 1\nname: "release\nsteps:\n  - id: a\n    tool: fs.read\n    params: {}\n'
    with pytest.raises(RecipeSyntaxError) as info:
        parse_recipe_text(text, "r.yaml")
    [diag] = info.value.diagnostics
    assert diag.rule == "yaml-syntax"
    # ruamel knows the scalar started at 2:7 ("while scanning a quoted scalar"); pointing at
    # the end of the file, 5 lines later, leaves the user hunting for the stray quote.
    assert (diag.line, diag.column) == (2, 7)
    assert "quote" in f"{diag.message} {diag.hint}"


@pytest.mark.parametrize(
    ("text", "rule", "message"),
    [
        ("", "empty", "the recipe is empty"),
        ("   \n\n", "empty", "the recipe is empty"),
        ("# only a comment\n", "empty", "the recipe is empty"),
    ],
    ids=["empty", "blank", "comment-only"],
)
def test_an_empty_recipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, rule: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("r.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(RecipeSyntaxError) as info:
        load_recipe("r.yaml", REGISTRY)
    assert [(d.headline(), d.hint) for d in info.value.diagnostics] == [
        (f"r.yaml:1:1: error[{rule}]: {message}", "start with 'version: 1'")
    ]


@pytest.mark.parametrize("text", ["- version: 1\n- steps: []\n", "just a scalar\n", "42\n"])
def test_a_document_that_is_not_a_mapping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("r.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(PlanValidationError) as info:
        load_recipe("r.yaml", REGISTRY)
    assert [(d.headline(), d.hint) for d in info.value.diagnostics] == [
        (
            "r.yaml:1:1: error[not-a-mapping]: a recipe is a mapping of keys "
            "(version, name, steps, ...)",
            "start the file with 'version: 1'",
        )
    ]


# -- files that are not text ---------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        bytes(random.Random(7).randrange(256) for _ in range(300)) + b"\x00\x01\x02",
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10",
        b"version: 1\nname: x\x00\n",
    ],
    ids=["random-bytes", "png-header", "nul-in-text"],
)
def test_a_binary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes) -> None:
    monkeypatch.chdir(tmp_path)
    Path("r.bin").write_bytes(content)
    with pytest.raises(RecipeSyntaxError) as info:
        load_recipe("r.bin", REGISTRY)
    assert [d.headline() for d in info.value.diagnostics] == [
        "r.bin:1:1: error[binary-file]: this is a binary file, not a YAML recipe"
    ]


def test_a_utf16_file_is_refused_before_yaml(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_bytes("version: 1\n".encode("utf-16"))
    with pytest.raises(RecipeSyntaxError) as info:
        read_recipe(path)
    assert [(d.line, d.column) for d in info.value.diagnostics] == [(1, 1)]
    assert info.value.diagnostics[0].rule in {"binary-file", "encoding"}


def test_invalid_utf8_names_the_bad_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("r.yaml").write_bytes("version: 1\nname: café\n".encode("latin-1"))
    with pytest.raises(RecipeSyntaxError) as info:
        read_recipe("r.yaml")
    assert [d.headline() for d in info.value.diagnostics] == [
        "r.yaml:2:10: error[encoding]: the file is not UTF-8 text: byte 0xE9 cannot be read "
        "as UTF-8"
    ]


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_bytes(
        b"\xef\xbb\xbfversion: 1\ncapabilities: {fs: {}}\n"
        b"steps:\n  - id: a\n    tool: fs.read\n    params: {path: x}\n"
    )
    plan, source = load_recipe(path, REGISTRY)
    assert [s.id for s in plan.steps] == ["a"]
    assert source.locate(("steps", 0, "tool")) == (5, 11)


def test_a_missing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RecipeSyntaxError) as info:
        load_recipe("nope.yaml", REGISTRY)
    assert [d.headline() for d in info.value.diagnostics] == [
        "nope.yaml:1:1: error[unreadable]: cannot read recipe: No such file or directory"
    ]


def test_a_directory_is_not_a_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("recipes").mkdir()
    with pytest.raises(RecipeSyntaxError) as info:
        read_recipe("recipes")
    assert [d.rule for d in info.value.diagnostics] == ["unreadable"]
    assert info.value.diagnostics[0].file == "recipes"


# -- large recipes ---------------------------------------------------------------------------


def _chain_recipe(count: int) -> list[str]:
    lines = ["version: 1", "capabilities: {fs: {}}", "steps:"]
    lines += ["  - id: s0", "    tool: fs.read", "    params: {path: start.txt}"]
    for i in range(1, count):
        lines += [
            f"  - id: s{i}",
            "    tool: fs.read",
            f'    params: {{path: "${{{{ steps.s{i - 1}.output.content }}}}"}}',
        ]
    return lines


def test_ten_thousand_chained_steps_validate(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("\n".join(_chain_recipe(10_000)) + "\n", encoding="utf-8")
    started = time.perf_counter()
    plan, _ = load_recipe(path, REGISTRY)
    elapsed = time.perf_counter() - started
    assert len(plan.steps) == 10_000
    assert plan.steps[-1].params == {"path": "${{ steps.s9998.output.content }}"}
    assert elapsed < 10, f"validating 10,000 steps took {elapsed:.1f} s"


def test_one_error_among_ten_thousand_steps_is_found_at_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    lines = _chain_recipe(10_000)
    tool_line = 3 + 7777 * 3 + 2  # 1-based line of `tool:` in step s7777
    assert lines[tool_line - 2] == "  - id: s7777"
    lines[tool_line - 1] = "    tool: fs.raed"
    Path("big.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(PlanValidationError) as info:
        load_recipe("big.yaml", REGISTRY)
    assert [(d.headline(), d.hint) for d in info.value.diagnostics] == [
        (
            f"big.yaml:{tool_line}:11: error[unknown-tool]: unknown tool 'fs.raed'",
            "did you mean 'fs.read'?",
        )
    ]


# -- scalars ---------------------------------------------------------------------------------


def test_scalars_keep_their_yaml_1_2_types() -> None:
    data, _ = parse_recipe_text(
        textwrap.dedent(
            """\
            yes_word: yes
            no_word: no
            on_word: on
            big: 1_000
            quoted_one: '1'
            double_quoted: "2"
            hex: 0x1F
            octal: 0o17
            float: 1.5e3
            null_tilde: ~
            null_word: null
            true_word: true
            false_word: false
            quoted_true: "true"
            literal_block: |
              line ${{ x }}
            tagged_str: !!str 12
            text: hello world
            """
        )
    )
    assert data == {
        "yes_word": "yes",
        "no_word": "no",
        "on_word": "on",
        "big": 1000,
        "quoted_one": "1",
        "double_quoted": "2",
        "hex": 31,
        "octal": 15,
        "float": 1500.0,
        "null_tilde": None,
        "null_word": None,
        "true_word": True,
        "false_word": False,
        "quoted_true": "true",
        "literal_block": "line ${{ x }}\n",
        "tagged_str": "12",
        "text": "hello world",
    }
    assert type(data["big"]) is int
    assert type(data["true_word"]) is bool


def test_source_map_positions_are_one_based() -> None:
    _, source = parse_recipe_text("version: 1\nsteps:\n  - id: a\n    tool: fs.read\n", "r.yaml")
    assert source.locate(()) == (1, 1)
    assert source.locate(("steps",), key=True) == (2, 1)
    assert source.locate(("steps", 0)) == (3, 5)
    assert source.locate(("steps", 0, "tool")) == (4, 11)
    assert source.locate(("steps", 0, "tool"), key=True) == (4, 5)
    # A path that is not in the document falls back to its nearest located ancestor.
    assert source.locate(("steps", 0, "params", "path")) == (3, 5)


# -- fuzzing ---------------------------------------------------------------------------------

_YAMLISH = st.sampled_from(
    [
        *"{}[]:,-?!&*|>'\"%@`#\t\n \\$abc01.",
        "${{",
        "}}",
        "\n  ",
        "- ",
        ": ",
        "<<: ",
        "steps:",
        "version: 1",
        "id:",
        "tool: fs.read",
        "\x00",
        "\ufeff",
    ]
)


def _problems(call: Callable[[], object]) -> list[Diagnostic] | None:
    """The diagnostics `call` raises, or None when it returns; any other exception escapes."""
    try:
        call()
    except PlanValidationError as exc:
        return exc.diagnostics
    return None


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), st.lists(_YAMLISH, max_size=60).map("".join)))
def test_garbage_text_raises_only_plan_validation_errors(text: str) -> None:
    parsed: list[tuple[Any, SourceMap]] = []
    problems = _problems(lambda: parsed.append(parse_recipe_text(text, "fuzz.yaml")))
    if problems is None:
        [(data, source)] = parsed
        problems = _problems(lambda: validate_plan(data, source, REGISTRY))
        if problems is None:
            return
    assert problems
    assert all(d.file == "fuzz.yaml" and d.line >= 1 and d.column >= 1 for d in problems)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.binary(max_size=2000),
        st.lists(_YAMLISH, max_size=40).map(lambda parts: "".join(parts).encode()),
        st.binary(max_size=200).map(lambda b: b"version: 1\nname: " + b),
    )
)
def test_random_bytes_raise_only_plan_validation_errors(
    tmp_path_factory: pytest.TempPathFactory, content: bytes
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "r.yaml"
    path.write_bytes(content)
    try:
        problems = _problems(lambda: read_recipe(path))
    finally:
        os.unlink(path)
    if problems is not None:
        assert problems
        assert {d.file for d in problems} == {str(path)}


# -- round trip ------------------------------------------------------------------------------

FULL_RECIPE = """\
version: 1
name: release-notes
description: Draft release notes from git history
inputs:
  since: {type: string, default: "1 week ago"}
  count: {type: integer, default: 3, enum: [1, 3]}
  files: {type: array, description: which files}
  maybe: {type: string, default: null}
llm: {model: gpt-4o-mini, temperature: 0.5}
capabilities:
  fs: {root: ., read: true, write: ["notes/**", RELEASE.txt]}
  shell: {allow: [git]}
limits: {max_parallel: 2, timeout: 10, max_duration: 300, max_llm_calls: 5, max_tool_calls: 20}
on_failure: continue
steps:
  - id: log
    description: the history
    tool: shell.run
    params: {argv: [git, log, "--since=${{ inputs.since }}", --pretty=%s], check: false}
  - id: save
    tool: fs.write
    params: {path: notes/RELEASE.md, content: "${{ steps.log.output.stdout }}"}
    confirm: always
    can_fail: true
    fallback: {tool: fs.write, params: {path: RELEASE.txt, content: "x"}, timeout: 5}
    retry: {attempts: 3, backoff: fixed, initial: 0.5, max: 2, on: [timeout]}
    timeout: 10
    when: ${{ steps.log.output.exit_code == 0 }}
  - id: per_file
    for_each: ${{ inputs.files }}
    max_parallel: 2
    tool: fs.read
    params: {path: "${{ item }}"}
    depends_on: [save]
  - id: static
    tool: fs.read
    for_each: [a.txt, b.txt]
    when: false
    params: {path: "${{ item }}"}
finally:
  - id: notify
    tool: fs.append
    params: {path: notes/log.txt, content: "${{ run.status }}\\n"}
outputs:
  notes: ${{ steps.save.output }}
  nested: [1, {a: "${{ steps.log.output }}"}]
"""


def _round_trip(plan: Plan) -> Plan:
    return _validate_text(_dump(plan.to_data()), "again.yaml")


def test_a_full_recipe_round_trips_through_to_data_and_yaml(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(FULL_RECIPE, encoding="utf-8")
    plan, _ = load_recipe(path, REGISTRY)
    again = _round_trip(plan)
    assert again == plan
    assert again.to_data() == plan.to_data()
    assert [s.id for s in again.all_steps()] == ["log", "save", "per_file", "static", "notify"]


def test_round_trip_keeps_which_inputs_are_required(tmp_path: Path) -> None:
    """`default: null` makes an input optional; the round trip must not make it required."""
    path = tmp_path / "r.yaml"
    path.write_text(FULL_RECIPE, encoding="utf-8")
    plan, _ = load_recipe(path, REGISTRY)
    again = _round_trip(plan)
    required = {name: spec.required for name, spec in plan.inputs.items()}
    assert required == {"since": False, "count": False, "files": True, "maybe": False}
    assert {name: spec.required for name, spec in again.inputs.items()} == required


_IDENT = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"])
    | st.sampled_from("\n\t"),
    max_size=30,
).filter(lambda s: "${{" not in s)

_WORD = st.from_regex(r"[a-z0-9_]{1,12}", fullmatch=True)
_PATH = st.from_regex(r"[a-z0-9_]{1,8}(/[a-z0-9_ ]{1,8}){0,2}\.txt", fullmatch=True)


@st.composite
def _recipes(draw: st.DrawFn) -> dict[str, Any]:
    recipe: dict[str, Any] = {"version": 1}
    if draw(st.booleans()):
        recipe["name"] = draw(st.from_regex(r"[a-z0-9][a-z0-9_-]{0,12}", fullmatch=True))
    if draw(st.booleans()):
        recipe["description"] = draw(_TEXT)
    inputs = draw(
        st.dictionaries(
            _IDENT,
            st.one_of(
                st.builds(lambda d: {"type": "string", "default": d}, _TEXT),
                st.builds(
                    lambda d: {"type": "integer", "default": d}, st.integers(-(10**9), 10**9)
                ),
                st.builds(lambda d: {"type": "boolean", "default": d}, st.booleans()),
                st.just({"type": "array"}),
            ),
            max_size=3,
        )
    )
    if inputs:
        recipe["inputs"] = inputs
    recipe["capabilities"] = {"fs": {"write": True}, "shell": {"allow": ["git"]}}
    if draw(st.booleans()):
        recipe["limits"] = {
            "max_parallel": draw(st.integers(1, 16)),
            "timeout": draw(st.sampled_from([0.5, 1, 30, 120.25])),
        }
    recipe["on_failure"] = draw(st.sampled_from(["stop", "continue"]))

    def step(index: int, earlier: list[str], *, final: bool) -> dict[str, Any]:
        sid = f"{'f' if final else 's'}{index}"
        refs = [f"${{{{ steps.{e}.output | tojson }}}}" for e in earlier]
        # Every param here takes a string: a whole read of another type is a validation
        # error now, so those are converted
        refs += [
            f"${{{{ inputs.{name} }}}}"
            if spec["type"] == "string"
            else f"${{{{ inputs.{name} | tojson }}}}"
            for name, spec in inputs.items()
        ]
        if final:
            refs.append("${{ run.status }}")
        value = st.one_of(_TEXT, st.sampled_from(refs)) if refs else _TEXT
        # A path the grant allows: one it refuses (`/`, `..`) is a validation error now
        path = st.one_of(_PATH, st.sampled_from(refs)) if refs else _PATH
        tool = draw(st.sampled_from(["fs.read", "fs.write", "shell.run"]))
        params: dict[str, Any]
        if tool == "fs.read":
            params = {"path": draw(path)}
        elif tool == "fs.write":
            params = {"path": draw(path), "content": draw(value)}
            if draw(st.booleans()):
                params["create_dirs"] = draw(st.booleans())
        else:
            # Arguments git's rules allow: one they refuse is a validation error now
            arg = st.one_of(_WORD, st.sampled_from(refs)) if refs else _WORD
            params = {"argv": ["git", "log", *draw(st.lists(arg, max_size=3))]}
            if draw(st.booleans()):
                params["check"] = draw(st.booleans())
        result: dict[str, Any] = {"id": sid, "tool": tool, "params": params}
        if earlier and draw(st.booleans()):
            result["depends_on"] = draw(st.lists(st.sampled_from(earlier), unique=True))
        if draw(st.booleans()):
            result["can_fail"] = draw(st.booleans())
        if draw(st.booleans()):
            result["confirm"] = draw(st.sampled_from(["auto", "always", "never"]))
        if draw(st.booleans()):
            result["timeout"] = draw(st.sampled_from([1, 2.5, 600]))
        if draw(st.booleans()):
            result["retry"] = {
                "attempts": draw(st.integers(1, 5)),
                "backoff": draw(st.sampled_from(["fixed", "exponential"])),
                "on": draw(st.lists(st.sampled_from(["error", "timeout"]), unique=True)),
            }
        if draw(st.booleans()):
            result["when"] = draw(st.sampled_from([True, False, "${{ 1 < 2 }}"]))
        if draw(st.booleans()):
            result["description"] = draw(_TEXT)
        return result

    main: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1, 5))):
        main.append(step(index, [s["id"] for s in main], final=False))
    recipe["steps"] = main
    final: list[dict[str, Any]] = []
    for index in range(draw(st.integers(0, 2))):
        earlier = [s["id"] for s in main] + [s["id"] for s in final]
        final.append(step(index, earlier, final=True))
    if final:
        recipe["finally"] = final
    if draw(st.booleans()):
        recipe["outputs"] = {"last": f"${{{{ steps.{main[-1]['id']}.output }}}}"}
    return recipe


@pytest.mark.slow
@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(_recipes())
def test_generated_recipes_round_trip(recipe: dict[str, Any]) -> None:
    plan = _validate_text(_dump(recipe))
    again = _round_trip(plan)
    assert again == plan
    assert again.to_data() == plan.to_data()
    assert {n: s.required for n, s in again.inputs.items()} == {
        n: s.required for n, s in plan.inputs.items()
    }
