"""End-to-end tests of the `planloom` command: the real console script in a subprocess.

Every call has a timeout and stdin on /dev/null (so no terminal approver). Recipes come
from `tests/data/cli/` and are copied into `tmp_path`, so whatever a run writes stays there.
Exit codes, `--json` and stderr/stdout separation are the README's "Command line".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import _procs
import pytest
from _procs import pids_with, until


def pids_with_arg(marker: str) -> list[int]:
    return pids_with(marker, whole_argument=True)


PLANLOOM = str(Path(sys.executable).parent / "planloom")
DATA = Path(__file__).parent / "data" / "cli"
RECIPES = Path(__file__).parent.parent / "recipes"

TIMEOUT = 60  # seconds; generous for a loaded 2-core machine, a hang still fails the test

RUN_KEYS = {"run_id", "status", "steps", "outputs", "usage"}
STEP_KEYS = {"status", "output", "error", "attempts", "usage"}
USAGE_KEYS = {"llm_calls", "prompt_tokens", "completion_tokens", "tool_calls"}


def _env(**extra: str) -> dict[str, str]:
    """The current environment without CI, LLM and Python-path settings, plus `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"CI", "PYTHONPATH", "COLUMNS", "LINES"}
        and not k.startswith(("OPENAI_", "PLANLOOM_", "GITHUB_", "OTEL_"))
    }
    env.update(extra)
    return env


def _plugin_env() -> dict[str, str]:
    """Plugins in `tests/data/cli` importable, without leaving `__pycache__` there."""
    return _env(PYTHONPATH=str(DATA), PYTHONDONTWRITEBYTECODE="1")


def planloom(
    *args: str | Path,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """Run the real `planloom` command and capture its output."""
    return _procs.planloom(
        *args, cwd=cwd, environ=env if env is not None else _env(), timeout=timeout
    )


def recipe(tmp_path: Path, name: str, dest: str | None = None) -> Path:
    """Copy `tests/data/cli/NAME` into `tmp_path` (or `tmp_path/DEST/`) and return the copy."""
    folder = tmp_path / dest if dest else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(DATA / name, folder / name))


def write_recipe(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def one_json(stdout: str) -> Any:
    """Parse stdout as exactly one JSON value (no banner, no trailing text)."""
    decoder = json.JSONDecoder()
    text = stdout.strip()
    assert text, "stdout is empty"
    value, end = decoder.raw_decode(text)
    assert text[end:].strip() == "", f"extra text after the JSON object: {text[end:]!r:.200}"
    return value


def run_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The `run --json` object, checked against the contract's shape."""
    result = one_json(proc.stdout)
    assert isinstance(result, dict)
    assert result.keys() >= RUN_KEYS, result.keys()
    assert set(result["usage"]) >= USAGE_KEYS
    assert all(isinstance(result["usage"][k], int) for k in USAGE_KEYS)
    for step_id, step in result["steps"].items():
        assert step.keys() >= STEP_KEYS, (step_id, step)
    return result


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout, proc.stdout


# -- approvals: --yes, --no, fail closed --------------------------------------------------


@pytest.mark.slow
def test_run_yes_writes_the_file(tmp_path: Path) -> None:
    recipe(tmp_path, "write.yaml")

    proc = planloom("run", "write.yaml", "--yes", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "greeting.txt").read_text() == "hello from planloom"
    # Progress and the summary are for people: stderr. Without --json stdout stays empty.
    assert proc.stdout == ""
    assert "save" in proc.stderr
    assert "succeeded" in proc.stderr


@pytest.mark.slow
def test_run_no_denies_and_writes_nothing(tmp_path: Path) -> None:
    recipe(tmp_path, "write.yaml")

    proc = planloom("run", "write.yaml", "--no", "--json", cwd=tmp_path)

    assert proc.returncode == 1, proc.stderr
    result = run_json(proc)
    assert result["status"] == "failed"
    assert result["steps"]["save"]["status"] == "denied"
    assert result["steps"]["save"]["output"] is None
    assert not (tmp_path / "out").exists()
    no_traceback(proc)


@pytest.mark.slow
def test_run_without_terminal_or_flag_fails_closed_and_says_how_to_approve(
    tmp_path: Path,
) -> None:
    recipe(tmp_path, "write.yaml")

    text = planloom("run", "write.yaml", cwd=tmp_path)
    as_json = planloom("run", "write.yaml", "--json", cwd=tmp_path)

    assert text.returncode == 1, text.stderr
    assert "--yes" in text.stderr
    assert text.stdout == ""
    assert as_json.returncode == 1, as_json.stderr
    save = run_json(as_json)["steps"]["save"]
    assert save["status"] == "denied"
    assert "--yes" in save["error"]
    assert not (tmp_path / "out").exists()
    no_traceback(text)


def test_run_json_is_one_object_with_the_contract_keys(tmp_path: Path) -> None:
    recipe(tmp_path, "write.yaml")

    proc = planloom("run", "write.yaml", "--yes", "--json", "-i", "text=hi", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    result = run_json(proc)
    assert result["status"] == "succeeded"
    assert isinstance(result["run_id"], str)
    assert result["run_id"]
    assert set(result["steps"]) == {"save"}
    save = result["steps"]["save"]
    assert save["status"] == "succeeded"
    assert save["output"]["bytes_written"] == 2
    assert save["error"] is None
    assert save["attempts"] == 1
    assert result["outputs"] == {"written": 2}
    assert result["usage"]["tool_calls"] == 1
    assert result["usage"]["llm_calls"] == 0
    # The summary went to stderr, and it names the same run.
    assert result["run_id"] in proc.stderr


# -- inputs -------------------------------------------------------------------------------


@pytest.mark.slow
def test_inputs_are_parsed_by_their_declared_type(tmp_path: Path) -> None:
    recipe(tmp_path, "inputs.yaml")

    proc = planloom(
        "run",
        "inputs.yaml",
        "--json",
        "-i",
        "name=a=b c",  # only the first `=` separates; spaces are kept
        "-i",
        "count=42",
        "-i",
        "ratio=2.5",
        "-i",
        "loud=yes",
        "-i",
        'tags=["x", "y"]',
        "-i",
        'extra={"k": 1, "nested": {"ok": true}}',
        cwd=tmp_path,
    )

    assert proc.returncode == 0, proc.stderr
    assert run_json(proc)["outputs"] == {
        "name": "a=b c",
        "count": 42,
        "ratio": 2.5,
        "loud": True,
        "tags": ["x", "y"],
        "extra": {"k": 1, "nested": {"ok": True}},
    }


def test_inputs_default_when_not_given(tmp_path: Path) -> None:
    recipe(tmp_path, "inputs.yaml")

    proc = planloom("run", "inputs.yaml", "--json", "-i", "name=x", "-i", "loud=0", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    outputs = run_json(proc)["outputs"]
    assert outputs == {
        "name": "x",
        "count": 1,
        "ratio": 0.5,
        "loud": False,
        "tags": [],
        "extra": {},
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("assignment", "input_name"),
    [
        ("count=abc", "count"),
        ("count=1.5", "count"),
        ("ratio=half", "ratio"),
        ("loud=maybe", "loud"),
        ("tags=not json", "tags"),
        ('tags={"a": 1}', "tags"),
        ("extra=[1, 2]", "extra"),
    ],
)
def test_bad_input_value_is_a_usage_error_naming_the_input(
    tmp_path: Path, assignment: str, input_name: str
) -> None:
    recipe(tmp_path, "inputs.yaml")

    proc = planloom("run", "inputs.yaml", "-i", "name=x", "-i", assignment, cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    assert f"'{input_name}'" in proc.stderr or f"-i {input_name}" in proc.stderr
    no_traceback(proc)


def test_unknown_input_suggests_the_close_name(tmp_path: Path) -> None:
    recipe(tmp_path, "inputs.yaml")

    proc = planloom("run", "inputs.yaml", "-i", "name=x", "-i", "cuont=3", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    assert "cuont" in proc.stderr
    assert "did you mean 'count'" in proc.stderr
    no_traceback(proc)


def test_missing_required_input(tmp_path: Path) -> None:
    recipe(tmp_path, "inputs.yaml")

    proc = planloom("run", "inputs.yaml", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    assert "name" in proc.stderr
    assert "-i name=" in proc.stderr
    no_traceback(proc)


def test_assignment_without_equals_sign(tmp_path: Path) -> None:
    recipe(tmp_path, "inputs.yaml")

    proc = planloom("run", "inputs.yaml", "-i", "novalue", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    assert "novalue" in proc.stderr
    assert "key=value" in proc.stderr
    no_traceback(proc)


def test_bad_input_with_json_prints_an_invalid_object(tmp_path: Path) -> None:
    recipe(tmp_path, "inputs.yaml")

    proc = planloom("run", "inputs.yaml", "--json", "-i", "name=x", "-i", "count=abc", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    result = one_json(proc.stdout)
    assert result["status"] == "invalid"
    assert result["errors"]
    assert any("count" in e["message"] for e in result["errors"])


# -- invalid recipes ----------------------------------------------------------------------


def test_invalid_recipe_reports_located_errors_with_a_caret(tmp_path: Path) -> None:
    recipe(tmp_path, "invalid.yaml")

    proc = planloom("run", "invalid.yaml", "--yes", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    no_traceback(proc)
    lines = proc.stderr.splitlines()
    headline = re.compile(r"^invalid\.yaml:(\d+):(\d+): error\[([a-z0-9.-]+)\]: .+")
    found = [(i, m) for i, line in enumerate(lines) if (m := headline.match(line))]
    rules = {m.group(3) for _, m in found}
    assert {"unknown-tool", "unknown-step"} <= rules, proc.stderr
    for index, match in found:
        line_no, column = int(match.group(1)), int(match.group(2))
        source, caret = lines[index + 1], lines[index + 2]
        gutter, _, code = source.partition(" | ")
        assert gutter.strip() == str(line_no)
        assert caret.strip() == "^"
        # The caret sits under the offending column of the quoted source line.
        assert caret.index("^") == len(gutter) + len(" | ") + column - 1
        assert code.rstrip() == (tmp_path / "invalid.yaml").read_text().splitlines()[line_no - 1]
    assert "did you mean 'fs.write'?" in proc.stderr
    assert "did you mean 'first'?" in proc.stderr


def test_invalid_recipe_with_json_prints_one_invalid_object(tmp_path: Path) -> None:
    recipe(tmp_path, "invalid.yaml")

    proc = planloom("run", "invalid.yaml", "--json", "--yes", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    no_traceback(proc)
    result = one_json(proc.stdout)
    assert result["status"] == "invalid"
    errors = result["errors"]
    assert isinstance(errors, list)
    assert {e["rule"] for e in errors} >= {"unknown-tool", "unknown-step"}
    for error in errors:
        assert {"file", "line", "column", "rule", "message", "hint"} <= error.keys()
        assert error["line"] >= 1
        assert error["column"] >= 1
    tool = next(e for e in errors if e["rule"] == "unknown-tool")
    assert (tool["line"], tool["column"]) == (7, 11)
    assert "fs.write" in tool["hint"]


@pytest.mark.slow
def test_validate_json_lists_problems(tmp_path: Path) -> None:
    recipe(tmp_path, "invalid.yaml")
    recipe(tmp_path, "write.yaml")

    bad = planloom("validate", "invalid.yaml", "--json", cwd=tmp_path)
    good = planloom("validate", "write.yaml", "--json", cwd=tmp_path)

    assert bad.returncode == 2
    assert {e["rule"] for e in one_json(bad.stdout)} >= {"unknown-tool", "unknown-step"}
    assert good.returncode == 0, good.stderr
    assert one_json(good.stdout) == []


@pytest.mark.slow
def test_missing_recipe_file_is_a_clear_usage_error(tmp_path: Path) -> None:
    for command in (["run", "nope.yaml", "--yes"], ["validate", "nope.yaml"]):
        proc = planloom(*command, cwd=tmp_path)
        assert proc.returncode == 2, (command, proc.stderr)
        assert "nope.yaml" in proc.stderr
        assert "No such file" in proc.stderr or "not found" in proc.stderr.lower()
        no_traceback(proc)


# -- failures -----------------------------------------------------------------------------


@pytest.mark.slow
def test_failing_step_fails_the_run(tmp_path: Path) -> None:
    recipe(tmp_path, "failing.yaml")

    proc = planloom("run", "failing.yaml", "--yes", "--json", cwd=tmp_path)

    assert proc.returncode == 1, proc.stderr
    result = run_json(proc)
    assert result["status"] == "failed"
    boom = result["steps"]["boom"]
    assert boom["status"] == "failed"
    assert "exited with code 1" in boom["error"]
    assert boom["attempts"] == 1
    assert result["steps"]["after"]["status"] == "pending"
    no_traceback(proc)


def test_can_fail_step_is_acceptable(tmp_path: Path) -> None:
    write_recipe(
        tmp_path,
        "tolerated.yaml",
        """\
        version: 1
        name: tolerated
        capabilities:
          shell: {allow: ["false", "true"]}
        steps:
          - id: boom
            tool: shell.run
            params: {argv: ["false"]}
            can_fail: true
          - id: after
            tool: shell.run
            params: {argv: ["true"]}
            depends_on: [boom]
        """,
    )

    proc = planloom("run", "tolerated.yaml", "--yes", "--json", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    result = run_json(proc)
    assert result["status"] == "succeeded"
    assert result["steps"]["boom"]["status"] == "failed_acceptable"
    assert result["steps"]["boom"]["output"] is None
    assert result["steps"]["boom"]["error"]
    assert result["steps"]["after"]["status"] == "succeeded"


_ON_FAILURE = """\
version: 1
name: on-failure
capabilities:
  shell: {{allow: ["false", "true"]}}
on_failure: {mode}
steps:
  - id: boom
    tool: shell.run
    params: {{argv: ["false"]}}
  - id: after
    tool: shell.run
    params: {{argv: ["true"]}}
    depends_on: [boom]
  - id: one
    tool: shell.run
    params: {{argv: ["true"]}}
  - id: two
    tool: shell.run
    params: {{argv: ["true"]}}
    depends_on: [one]
"""


def test_on_failure_continue_skips_only_dependents(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(_ON_FAILURE.format(mode="continue"))

    proc = planloom("run", "r.yaml", "--yes", "--json", cwd=tmp_path)

    assert proc.returncode == 1, proc.stderr
    result = run_json(proc)
    assert result["status"] == "failed"
    statuses = {k: v["status"] for k, v in result["steps"].items()}
    assert statuses == {
        "boom": "failed",
        "after": "skipped",
        "one": "succeeded",
        "two": "succeeded",
    }
    assert "boom" in result["steps"]["after"]["error"]


@pytest.mark.slow
def test_on_failure_stop_leaves_dependents_pending(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(_ON_FAILURE.format(mode="stop"))

    proc = planloom("run", "r.yaml", "--yes", "--json", cwd=tmp_path)

    assert proc.returncode == 1, proc.stderr
    result = run_json(proc)
    assert result["status"] == "failed"
    statuses = {k: v["status"] for k, v in result["steps"].items()}
    assert statuses["boom"] == "failed"
    assert statuses["after"] == "pending"
    # `one` may be in flight when `boom` fails (it then finishes); nothing new starts after.
    assert statuses["one"] in {"succeeded", "pending"}
    assert statuses["two"] in {"succeeded", "pending"}
    if statuses["one"] == "pending":
        assert statuses["two"] == "pending"


# -- paths --------------------------------------------------------------------------------


def test_relative_paths_resolve_against_the_recipe_folder(tmp_path: Path) -> None:
    project = tmp_path / "project"
    recipe(tmp_path, "relpaths.yaml", dest="project")
    (project / "data").mkdir()
    (project / "data" / "input.txt").write_text("from the recipe folder\n")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "data").mkdir(parents=True)
    (elsewhere / "data" / "input.txt").write_text("from the cwd: wrong\n")
    (elsewhere / "data" / "decoy-in-cwd.txt").write_text("")

    proc = planloom("run", "../project/relpaths.yaml", "--yes", "--json", cwd=elsewhere)

    assert proc.returncode == 0, proc.stderr
    outputs = run_json(proc)["outputs"]
    assert outputs["content"] == "from the recipe folder\n"
    assert "input.txt" in outputs["listing"].split()
    assert "decoy-in-cwd.txt" not in outputs["listing"]
    assert (project / "data" / "out" / "copy.txt").read_text() == "from the recipe folder\n"
    assert not (elsewhere / "data" / "out").exists()
    assert not (elsewhere / "out").exists()


# -- validate, graph, schema, tools -------------------------------------------------------


def test_validate_ok(tmp_path: Path) -> None:
    recipe(tmp_path, "interrupt.yaml")

    proc = planloom("validate", "interrupt.yaml", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout
    assert "interrupt.yaml" in proc.stdout


def test_graph_mermaid(tmp_path: Path) -> None:
    recipe(tmp_path, "interrupt.yaml")

    proc = planloom("graph", "interrupt.yaml", "--format", "mermaid", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    lines = [line.strip() for line in proc.stdout.splitlines()]
    assert lines[0].startswith(("flowchart", "graph"))
    assert "nap1 --> after" in lines
    assert "nap2 --> after" in lines
    assert not any(line.startswith("after -->") for line in lines)
    for step in ("nap1", "nap2", "after", "mark"):
        assert re.search(rf"^\s*{step}\[", proc.stdout, re.MULTILINE), step


def test_graph_dot(tmp_path: Path) -> None:
    recipe(tmp_path, "interrupt.yaml")

    proc = planloom("graph", "interrupt.yaml", "--format", "dot", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.lstrip().startswith("digraph")
    assert text.rstrip().endswith("}")
    lines = [line.strip() for line in text.splitlines()]
    assert '"nap1" -> "after";' in lines
    assert '"nap2" -> "after";' in lines
    for step in ("nap1", "nap2", "after", "mark"):
        assert any(line.startswith(f'"{step}" [') for line in lines), step


@pytest.mark.slow
def test_graph_ascii(tmp_path: Path) -> None:
    recipe(tmp_path, "interrupt.yaml")

    default = planloom("graph", "interrupt.yaml", cwd=tmp_path)
    explicit = planloom("graph", "interrupt.yaml", "--format", "ascii", cwd=tmp_path)

    assert default.returncode == 0, default.stderr
    assert default.stdout == explicit.stdout
    after = next(line for line in default.stdout.splitlines() if re.search(r"\bafter\b", line))
    assert "nap1" in after
    assert "nap2" in after
    for step in ("nap1", "nap2", "mark"):
        assert re.search(rf"\b{step}\b", default.stdout), step


def test_graph_bad_format_and_invalid_recipe(tmp_path: Path) -> None:
    recipe(tmp_path, "interrupt.yaml")
    recipe(tmp_path, "invalid.yaml")

    bad_format = planloom("graph", "interrupt.yaml", "--format", "png", cwd=tmp_path)
    invalid = planloom("graph", "invalid.yaml", cwd=tmp_path)

    assert bad_format.returncode == 2
    assert invalid.returncode == 2
    assert "error[unknown-tool]" in invalid.stderr
    no_traceback(bad_format)
    no_traceback(invalid)


def _schema(tmp_path: Path) -> dict[str, Any]:
    proc = planloom("schema", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    schema = one_json(proc.stdout)
    assert isinstance(schema, dict)
    return schema


def test_schema_is_json_describing_recipes(tmp_path: Path) -> None:
    from ruamel.yaml import YAML

    schema = _schema(tmp_path)

    assert schema.get("type") == "object"
    assert "steps" in schema["properties"]
    assert {"version", "name", "capabilities", "inputs", "finally", "outputs"} <= set(
        schema["properties"]
    )
    # Every top-level key the shipped example uses is described.
    shipped = YAML(typ="safe").load((RECIPES / "project-report.yaml").read_text())
    assert set(shipped) <= set(schema["properties"])


def test_schema_validates_recipes_with_jsonschema(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from ruamel.yaml import YAML

    schema = _schema(tmp_path)
    validator_cls = jsonschema.validators.validator_for(schema)
    validator_cls.check_schema(schema)
    validator = validator_cls(schema)
    yaml = YAML(typ="safe")
    # plugin.yaml's tool comes from a plugin: `planloom --plugin ... schema` knows it
    valid = [p for p in DATA.glob("*.yaml") if p.name not in ("invalid.yaml", "plugin.yaml")]
    for path in [RECIPES / "project-report.yaml", *valid]:
        errors = list(validator.iter_errors(yaml.load(path.read_text())))
        assert not errors, (path.name, [e.message for e in errors])
    invalid = yaml.load((DATA / "invalid.yaml").read_text())
    assert list(validator.iter_errors(invalid)), "the schema let a misspelt tool through"
    bad = yaml.load("version: 1\nname: x\nsteps: [{id: a, tool: fs.read}]\nbogus: 1\n")
    assert list(validator.iter_errors(bad)), "an unknown top-level key must not validate"


BUILTINS = {
    "fs.read": False,
    "fs.write": True,
    "fs.append": True,
    "fs.list": False,
    "fs.search": False,
    "fs.delete": True,
    "shell.run": True,
}


def test_tools_json_lists_every_builtin_with_schema_and_side_effects(tmp_path: Path) -> None:
    proc = planloom("tools", "--json", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    rows = one_json(proc.stdout)
    by_name = {row["name"]: row for row in rows}
    assert BUILTINS.keys() <= by_name.keys()
    for name, side_effects in BUILTINS.items():
        row = by_name[name]
        assert row["side_effects"] is side_effects, name
        assert row["params"]["type"] == "object", name
        assert isinstance(row["params"].get("properties"), dict), name
        assert row["description"], name
    assert {"path", "content"} <= set(by_name["fs.write"]["params"]["required"])
    assert "argv" in by_name["shell.run"]["params"]["properties"]


def test_tools_text_lists_every_builtin(tmp_path: Path) -> None:
    proc = planloom("tools", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for name, side_effects in BUILTINS.items():
        line = next((x for x in lines if x.split() and x.split()[0] == name), None)
        assert line is not None, name
        assert ("read-only" in line) is not side_effects, line


# -- plugins ------------------------------------------------------------------------------


@pytest.mark.slow
def test_plugin_adds_a_function_capability(tmp_path: Path) -> None:
    recipe(tmp_path, "plugin.yaml")
    env = _plugin_env()

    proc = planloom(
        "--plugin",
        "cli_demo_plugin",
        "run",
        "plugin.yaml",
        "--json",
        "-i",
        "who=Ada",
        cwd=tmp_path,
        env=env,
    )
    tools = planloom("--plugin", "cli_demo_plugin", "tools", "--json", cwd=tmp_path, env=env)

    # demo.greet is read-only, so no approval is needed even without --yes.
    assert proc.returncode == 0, proc.stderr
    result = run_json(proc)
    assert result["steps"]["greet"]["status"] == "succeeded"
    assert result["outputs"] == {"greeting": "Hello, Ada!"}
    greet = {row["name"]: row for row in one_json(tools.stdout)}["demo.greet"]
    assert greet["side_effects"] is False
    assert "name" in greet["params"]["properties"]


def test_recipe_needing_a_plugin_is_invalid_without_it(tmp_path: Path) -> None:
    recipe(tmp_path, "plugin.yaml")

    proc = planloom("run", "plugin.yaml", cwd=tmp_path, env=_plugin_env())

    assert proc.returncode == 2
    assert "demo.greet" in proc.stderr
    no_traceback(proc)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "message"),
    [("no_such_planloom_plugin", "cannot import"), ("cli_no_register", "register")],
)
def test_bad_plugin_is_a_configuration_error(tmp_path: Path, module: str, message: str) -> None:
    recipe(tmp_path, "write.yaml")

    proc = planloom(
        "--plugin",
        module,
        "run",
        "write.yaml",
        "--yes",
        cwd=tmp_path,
        env=_plugin_env(),
    )

    assert proc.returncode == 2
    assert module in proc.stderr
    assert message in proc.stderr
    assert not (tmp_path / "out").exists()
    no_traceback(proc)


@pytest.mark.slow
def test_plugin_whose_register_raises_is_a_configuration_error(tmp_path: Path) -> None:
    recipe(tmp_path, "write.yaml")

    proc = planloom(
        "--plugin",
        "cli_raising_plugin",
        "run",
        "write.yaml",
        "--yes",
        cwd=tmp_path,
        env=_plugin_env(),
    )

    assert proc.returncode == 2, proc.stderr
    assert "cli_raising_plugin" in proc.stderr
    assert "DEMO_TOKEN is not set" in proc.stderr
    assert not (tmp_path / "out").exists()
    no_traceback(proc)


# -- logging ------------------------------------------------------------------------------


def test_verbose_logs_events_on_stderr_only(tmp_path: Path) -> None:
    recipe(tmp_path, "write.yaml")

    proc = planloom("run", "write.yaml", "--yes", "--json", "-v", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    result = run_json(proc)  # stdout is still exactly one JSON object
    for kind in ("run.started", "step.started", "gate.decided", "step.finished", "run.finished"):
        assert kind in proc.stderr, kind
    started = next(line for line in proc.stderr.splitlines() if "step.started" in line)
    assert "save" in started
    assert result["run_id"] in started


def test_log_file_gets_json_lines(tmp_path: Path) -> None:
    recipe(tmp_path, "write.yaml")
    log = tmp_path / "logs" / "events.jsonl"
    log.parent.mkdir()

    proc = planloom("run", "write.yaml", "--yes", "--json", "--log-file", log, cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    run_id = run_json(proc)["run_id"]
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert records
    for record in records:
        assert record["run_id"] == run_id
        assert "step_id" in record
    kinds = [r.get("event", r.get("kind")) for r in records]
    assert kinds[0] == "run.started"
    assert kinds[-1] == "run.finished"
    assert {"step.started", "step.finished", "gate.decided"} <= set(kinds)
    finished = next(r for r in records if r.get("event", r.get("kind")) == "step.finished")
    assert finished["step_id"] == "save"
    assert finished["status"] == "succeeded"
    # Not verbose: no event log on stderr.
    assert "step.started" not in proc.stderr


def test_log_file_in_a_missing_folder_is_a_configuration_error(tmp_path: Path) -> None:
    recipe(tmp_path, "write.yaml")

    proc = planloom(
        "run",
        "write.yaml",
        "--yes",
        "--log-file",
        tmp_path / "missing" / "x.jsonl",
        cwd=tmp_path,
    )

    assert proc.returncode == 2
    assert "--log-file" in proc.stderr
    assert not (tmp_path / "out").exists()
    no_traceback(proc)


# -- usage errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["frobnicate"],
        [],
        ["run"],
        ["run", "write.yaml", "--frob"],
        ["run", "write.yaml", "--yes", "--no"],
        ["validate"],
        ["tools", "--bogus"],
    ],
    ids=[
        "unknown-command",
        "no-command",
        "no-recipe",
        "unknown-flag",
        "yes-and-no",
        "validate",
        "tools-flag",
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, argv: list[str]) -> None:
    recipe(tmp_path, "write.yaml")

    proc = planloom(*argv, cwd=tmp_path)

    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "error" in proc.stderr.lower() or "usage" in proc.stderr.lower()
    assert proc.stdout == ""
    assert not (tmp_path / "out").exists()
    no_traceback(proc)


def test_help_exits_0(tmp_path: Path) -> None:
    proc = planloom("--help", cwd=tmp_path)

    assert proc.returncode == 0
    for command in ("run", "validate", "graph", "schema", "tools"):
        assert command in proc.stdout


# -- interruption -------------------------------------------------------------------------


def test_sigint_cancels_running_steps_runs_finally_and_kills_children(tmp_path: Path) -> None:
    recipe(tmp_path, "interrupt.yaml")
    nap = f"600.{uuid.uuid4().int % 10**9:09d}"  # a unique argument to find the sleeps by
    proc = subprocess.Popen(
        [PLANLOOM, "run", "interrupt.yaml", "--yes", "--json", "-i", f"nap={nap}"],
        cwd=tmp_path,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        until(lambda: len(pids_with_arg(nap)) == 2 or proc.poll() is not None, 30, "sleeps")
        assert proc.poll() is None, proc.communicate()
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for pid in pids_with_arg(nap):  # never leave a 10-minute sleep behind
            os.kill(pid, signal.SIGKILL)

    assert proc.returncode == 130, stderr
    assert elapsed < 10, f"took {elapsed:.1f} s to stop after SIGINT"
    assert "Traceback" not in stderr
    result = one_json(stdout)
    assert result["status"] == "cancelled"
    statuses = {k: v["status"] for k, v in result["steps"].items()}
    assert statuses == {
        "nap1": "cancelled",
        "nap2": "cancelled",
        "after": "pending",
        "mark": "succeeded",
    }
    assert (tmp_path / "marker.txt").read_text() == "cancelled"
    until(lambda: not pids_with_arg(nap), 5, "the sleeps to be gone")


# -- the shipped example ------------------------------------------------------------------


@pytest.mark.slow
def test_shipped_project_report_recipe_runs(tmp_path: Path) -> None:
    """`recipes/project-report.yaml` in a small copy of the repository layout."""
    (tmp_path / "recipes").mkdir()
    shutil.copy(RECIPES / "project-report.yaml", tmp_path / "recipes" / "project-report.yaml")
    (tmp_path / "README.md").write_text("# demo\n\nA tiny project.\n")
    for package in ("engine", "planners", "capabilities"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
        (tmp_path / package / "core.py").write_text(f"class {package.title()}Thing:\n    pass\n")

    proc = planloom("run", "recipes/project-report.yaml", "--yes", "--json", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    result = run_json(proc)
    assert result["status"] == "succeeded"
    report = tmp_path / ".planloom" / "report" / "report.md"
    text = report.read_text()
    assert "Project report" in text
    assert "classes found: 3" in text
    assert re.search(r"entries per package: \[\d+, \d+, \d+\]", text), text
    assert "project-report.yaml" in text
    assert result["outputs"]["classes"] == 3
    assert result["steps"]["license"]["status"] == "fallback"  # no LICENSE: README read
    assert result["steps"]["big_project"]["status"] == "skipped"  # 3 classes is not big
    assert "ended succeeded" in (tmp_path / ".planloom" / "report" / "runs.log").read_text()


@pytest.mark.slow
def test_tools_lists_the_confinement_layers_of_this_machine(tmp_path: Path) -> None:
    text = planloom("tools", cwd=tmp_path)
    assert text.returncode == 0
    section = text.stdout.split("confinement on this machine:", 1)[1]
    for family, layer in [
        ("fs", "openat2 RESOLVE_BENEATH"),
        ("shell", "pid_namespace"),
        ("shell", "landlock"),
        ("http", "every resolved address public"),
    ]:
        assert any(
            line.split()[:1] == [family] and layer in line for line in section.splitlines()
        ), (family, layer)
    rows = json.loads(planloom("tools", "--json", cwd=tmp_path).stdout)
    shell_layers = next(r for r in rows if r["name"] == "shell.run")["confinement"]
    assert {"pid_namespace", "network_namespace", "landlock", "rlimits"} <= set(shell_layers)
    assert all(isinstance(state, str) and state for state in shell_layers.values())
    http_row = next(r for r in rows if r["name"] == "http.request")
    assert http_row["side_effects"] == "per call"
