"""`planloom schema` good enough for editors and CI: `$schema` and `$id`, a description on
every field, `tool` limited to the registry's actions, each action's params checked (by
`tool`), grants checked per family; checked with the real `check-jsonschema` CLI, next to
`planloom validate` on the same recipes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests._procs import planloom

ROOT = Path(__file__).resolve().parent.parent
CHECK = str(Path(sys.executable).parent / "check-jsonschema")

GOOD = """\
version: 1
name: good
inputs:
  depth: {type: integer, default: 2}
  files: {type: array, default: [a.txt]}
capabilities:
  fs: {root: ., read: true, write: ["out/**"]}
  shell: {allow: [wc], cwd: .}
  http: {allow: [example.com], ports: [443]}
steps:
  - id: listing
    tool: fs.list
    params: {path: ., recursive: true, max_depth: "${{ inputs.depth }}"}
  - id: count
    tool: shell.run
    params: {argv: "${{ ['wc', '-l'] + inputs.files }}", check: false}
  - id: fetch
    tool: http.request
    params: {url: "https://example.com/", method: GET}
    retry: {attempts: 2}
    fallback: {tool: fs.read, params: {path: a.txt}}
  - id: think
    agent: {goal: "Sum up ${{ steps.listing.output.paths }}", tools: [fs.read]}
finally:
  - {id: note, tool: fs.write, params: {path: out/n.txt, content: done}, confirm: never}
outputs:
  n: ${{ steps.count.output.stdout }}
"""


def schema_file(folder: Path) -> Path:
    proc = planloom("schema", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    path = folder / "planloom.schema.json"
    path.write_text(proc.stdout)
    return path


def check(schema: Path, recipe: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CHECK, "--schemafile", str(schema), str(recipe)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def schema_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return schema_file(tmp_path_factory.mktemp("schema"))


def undescribed(node: Any, where: str = "$") -> list[str]:
    """Every property (at any depth) that has no description, `$ref`s aside (the schema
    they point to is checked where it is defined)."""
    missing: list[str] = []
    if isinstance(node, dict):
        for name, prop in (node.get("properties") or {}).items():
            bare = isinstance(prop, dict) and "description" not in prop and "$ref" not in prop
            if bare and not where.endswith(".if"):  # `if: {properties: {tool: {const: ..}}}`
                missing.append(f"{where}.{name}")
        for key, value in node.items():
            if key in ("properties", "$defs") and isinstance(value, dict):
                for name, sub in value.items():
                    missing += undescribed(sub, f"{where}.{name}")
            elif isinstance(value, dict):
                missing += undescribed(value, f"{where}.{key}")
            elif isinstance(value, list):
                for index, item in enumerate(value):
                    missing += undescribed(item, f"{where}.{key}[{index}]")
    return missing


def test_the_schema_is_editor_grade(schema_path: Path, tmp_path: Path) -> None:
    schema = json.loads(schema_path.read_text())

    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].startswith("https://")
    jsonschema.Draft202012Validator.check_schema(schema)
    assert undescribed(schema) == []
    tools = json.loads(planloom("tools", "--json", cwd=tmp_path).stdout)
    names = schema["$defs"]["Step"]["properties"]["tool"]["anyOf"][0]["enum"]
    assert names == sorted(t["name"] for t in tools)
    assert set(schema["properties"]["capabilities"]["properties"]) == {
        "fs",
        "http",
        "human",
        "llm",
        "mcp",
        "shell",
    }


@pytest.mark.slow
def test_every_shipped_recipe_and_a_templated_one_pass(schema_path: Path, tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    recipes = [good, *sorted(ROOT.glob("recipes/*.yaml")), ROOT / "recipes/mcp-notes/notes.yaml"]

    assert planloom("validate", str(good), cwd=tmp_path).returncode == 0
    for recipe in recipes:
        done = check(schema_path, recipe)
        assert done.returncode == 0, f"{recipe}: {done.stdout}{done.stderr}"


def test_a_tool_a_server_lists_at_run_time_is_accepted(schema_path: Path, tmp_path: Path) -> None:
    recipe = tmp_path / "mcp.yaml"
    recipe.write_text(
        "version: 1\ncapabilities:\n  mcp: {servers: {notes: {command: [notes-server], "
        "tools: ['*']}}}\nsteps:\n  - {id: s, tool: mcp.notes.search, params: {q: x}}\n"
    )

    done = check(schema_path, recipe)

    assert done.returncode == 0, done.stdout + done.stderr


BAD = {
    "top-level typo": ("version: 1", "version: 1\nstpes: []"),
    "step key typo": ("  - id: listing", "  - id: listing\n    dependson: [count]"),
    "wrong type": ("retry: {attempts: 2}", "retry: {attempts: two}"),
    "bad enum": ("confirm: never", "confirm: sometimes"),
    "on_failure": ("version: 1", "version: 1\non_failure: halt"),
    "unknown tool": ("tool: fs.list", "tool: fs.lsit"),
    "unknown param": ("recursive: true", "recursive: true, hidden: true"),
    "missing param": ("content: done", "contents: done"),
    "param type": ("check: false", "check: maybe"),
    "param enum": ("method: GET", "method: FETCH"),
    "unknown family": ("  http: {allow", "  htp: {allow"),
    "grant key typo": ("shell: {allow: [wc], cwd: .}", "shell: {allow: [wc], cwdir: .}"),
    "grant type": ("shell: {allow: [wc], cwd: .}", "shell: {allow: wc, cwd: .}"),
    "fallback params": (
        "fallback: {tool: fs.read, params: {path: a.txt}}",
        "fallback: {tool: fs.read, params: {file: a.txt}}",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(BAD))
def test_what_validate_refuses_check_jsonschema_refuses(
    schema_path: Path, tmp_path: Path, case: str
) -> None:
    old, new = BAD[case]
    assert GOOD.count(old) == 1, f"{case}: {old!r} is not in the recipe once"
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(GOOD.replace(old, new))

    validated = planloom("validate", str(recipe), cwd=tmp_path)
    checked = check(schema_path, recipe)

    assert validated.returncode == 2, f"validate let '{case}' through"
    assert checked.returncode == 1, f"check-jsonschema let '{case}' through: {checked.stdout}"


def test_the_schema_follows_plugins(tmp_path: Path) -> None:
    (tmp_path / "extra.py").write_text(
        "from engine.capability import Registry\n\n"
        "def register(registry: Registry) -> None:\n"
        "    @registry.function('extra.shout', side_effects=False)\n"
        "    def shout(text: str) -> str:\n"
        "        return text.upper()\n"
    )

    proc = planloom("--plugin", "./extra.py", "schema", "--json", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    assert "extra.shout" in schema["$defs"]["Step"]["properties"]["tool"]["anyOf"][0]["enum"]
    assert schema["$defs"]["params.extra.shout"]["required"] == ["text"]


def test_readme_documents_the_yaml_language_server_line() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "# yaml-language-server: $schema=" in readme
    assert "planloom schema > " in readme
