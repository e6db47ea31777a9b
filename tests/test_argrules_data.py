"""Templated arguments are never read as options (ATTACKS B7).

A file named `--output=pwned` listed by `fs.list` made `sort` write the file `pwned`. An
argument whose recipe text begins with a template is data: `shell.run` puts `--` before it
when the program accepts `--`, and refuses it (rule `shell.option-from-data`) when it starts
with `-` and nothing protects it. Through the `planloom` command; the rule itself is
pinned in `test_argrules_data_rule.py`.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from _procs import run_json

DASH_NAMES = ("--output=pwned", "-opwned2")


def _planloom(recipe: Path) -> dict[str, Any]:
    result: dict[str, Any] = run_json(recipe, recipe.parent)[1]
    return result


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """`files/` with `a.txt` and files whose names look like options."""
    files = tmp_path / "files"
    files.mkdir()
    (files / "a.txt").write_text("from a\n")
    for name in DASH_NAMES:
        (files / name).write_text(f"from {name}\n")
    return files


def _write(tmp_path: Path, steps: str, allow: str = "sort") -> Path:
    recipe = tmp_path / "recipe.yaml"
    header = f"""\
        version: 1
        name: option-like-names
        capabilities:
          fs: {{root: files, read: true}}
          shell: {{allow: [{allow}], cwd: files}}
        steps:
          - id: names
            tool: fs.list
            params: {{path: .}}
        """
    recipe.write_text(textwrap.dedent(header) + textwrap.indent(textwrap.dedent(steps), "  "))
    return recipe


def _no_file_written(folder: Path) -> None:
    assert sorted(p.name for p in folder.iterdir()) == sorted(["a.txt", *DASH_NAMES])


def test_cli_sort_over_listed_names_reads_them_as_files(tmp_path: Path, folder: Path) -> None:
    recipe = _write(
        tmp_path,
        """\
        - id: each
          for_each: ${{ steps.names.output.paths }}
          tool: shell.run
          params: {argv: [sort, "${{ item }}"]}
        - id: joined
          tool: shell.run
          params: {argv: "${{ ['sort'] + steps.names.output.paths }}"}
        """,
    )
    result = _planloom(recipe)
    _no_file_written(folder)
    assert result["status"] == "succeeded", result
    each = result["steps"]["each"]["output"]
    assert sorted(item["stdout"] for item in each) == sorted(
        ["from a\n", *(f"from {name}\n" for name in DASH_NAMES)]
    )
    joined = result["steps"]["joined"]["output"]["stdout"]
    assert sorted(joined.splitlines()) == sorted(
        ["from a", *(f"from {name}" for name in DASH_NAMES)]
    )


def test_cli_templated_name_before_a_literal_option_is_refused(
    tmp_path: Path, folder: Path
) -> None:
    recipe = _write(
        tmp_path,
        """\
        - id: each
          for_each: ${{ steps.names.output.paths }}
          tool: shell.run
          params: {argv: [sort, "${{ item }}", "-r"]}
        """,
    )
    result = _planloom(recipe)
    _no_file_written(folder)
    step = result["steps"]["each"]
    assert step["status"] == "failed"
    error = step["error"]
    for name in DASH_NAMES:
        assert f"argv[1] {name!r}" in error
    assert "shell.option-from-data" in error
    assert "put the recipe's own options before the templated arguments" in error
    assert "prefix the template with `./`" in error
    assert "'a.txt'" not in error  # a name that cannot be an option runs


def test_cli_echo_does_not_accept_double_dash_so_dash_data_is_refused(
    tmp_path: Path, folder: Path
) -> None:
    recipe = _write(
        tmp_path,
        """\
        - id: each
          for_each: ${{ steps.names.output.paths }}
          tool: shell.run
          params: {argv: [echo, "${{ item }}"]}
        - id: prefixed
          for_each: ${{ steps.names.output.paths }}
          tool: shell.run
          params: {argv: [echo, "./${{ item }}"]}
        """,
        allow="echo",
    )
    result = _planloom(recipe)
    assert result["steps"]["each"]["status"] == "failed"
    assert "echo is not known to accept `--`" in result["steps"]["each"]["error"]
    prefixed = result["steps"]["prefixed"]
    assert prefixed["status"] == "succeeded"
    assert "./--output=pwned\n" in [item["stdout"] for item in prefixed["output"]]


def test_cli_options_written_inside_a_whole_argv_template_stay_options(
    tmp_path: Path, folder: Path
) -> None:
    # `-r` is the author's own text inside the template; the listed names are data.
    recipe = _write(
        tmp_path,
        """\
        - id: joined
          tool: shell.run
          params: {argv: "${{ ['sort', '-r'] + steps.names.output.paths }}"}
        """,
    )
    result = _planloom(recipe)
    _no_file_written(folder)
    joined = result["steps"]["joined"]
    assert joined["status"] == "succeeded", joined
    lines = joined["output"]["stdout"].splitlines()
    assert lines == sorted(["from a", *(f"from {name}" for name in DASH_NAMES)], reverse=True)
