"""`planloom validate` reports a call the run is certain to refuse, located where the
recipe writes it: a whole `${{ inputs.X }}` of a type the param cannot take, a literal URL
of an address that is not public, a literal argument that writes outside the granted
folder, and a step's params next to a problem in another of its fields. What only the run
can tell stays unreported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests._procs import planloom


def validate_json(folder: Path, recipe: str) -> tuple[int, list[dict[str, Any]]]:
    """`planloom validate r.yaml --json` on `recipe`: the exit code and the problems."""
    (folder / "r.yaml").write_text(recipe)
    proc = planloom("validate", "r.yaml", "--json", cwd=folder)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else []


def column_of(recipe: str, line: int, token: str) -> int:
    """The 1-based column of `token` on the 1-based `line` of `recipe`."""
    return recipe.splitlines()[line - 1].index(token) + 1


INTEGER_INTO_ARGV = """\
version: 1
inputs:
  n: {type: integer, default: 3}
capabilities:
  shell: {allow: [echo]}
steps:
  - id: show
    tool: shell.run
    params: {argv: [echo, "${{ inputs.n }}"]}
"""


def test_an_integer_input_read_whole_into_a_string_param_is_a_located_type_error(
    tmp_path: Path,
) -> None:
    code, problems = validate_json(tmp_path, INTEGER_INTO_ARGV)

    assert code == 2
    assert [(p["line"], p["column"], p["rule"]) for p in problems] == [
        (9, column_of(INTEGER_INTO_ARGV, 9, '"${{'), "bad-params")
    ]
    (problem,) = problems
    assert problem["message"] == (
        "shell.run param 'argv[1]' takes a string, but inputs.n is an integer"
    )
    assert '"${{ inputs.n | string }}"' in problem["hint"]
    assert "declare input 'n' with type: string" in problem["hint"]


def test_the_text_form_shows_file_line_column_and_a_caret_under_the_value(
    tmp_path: Path,
) -> None:
    (tmp_path / "r.yaml").write_text(INTEGER_INTO_ARGV)

    proc = planloom("validate", "r.yaml", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    column = column_of(INTEGER_INTO_ARGV, 9, '"${{')
    lines = proc.stderr.splitlines()
    head = f"r.yaml:9:{column}: error[bad-params]: shell.run param 'argv[1]' takes a string"
    at = next(i for i, text in enumerate(lines) if text.startswith(head))
    source, caret = lines[at + 1], lines[at + 2]
    assert source.endswith('params: {argv: [echo, "${{ inputs.n }}"]}'), source
    assert caret.strip() == "^"
    # the caret sits under the first character of the value
    assert caret.index("^") - source.index("|") - 2 == column - 1
    assert "r.yaml: 1 problem" in proc.stderr


def test_a_type_error_only_the_run_can_see_says_so_not_denied(tmp_path: Path) -> None:
    """`inputs.n + 1` is computed, so validation cannot know its type; the run's error
    says the params do not fit the tool's schema, not that a rule denied the call."""
    recipe = INTEGER_INTO_ARGV.replace("${{ inputs.n }}", "${{ inputs.n + 1 }}")
    (tmp_path / "r.yaml").write_text(recipe)

    proc = planloom("run", "r.yaml", "--yes", "--json", cwd=tmp_path)

    assert proc.returncode == 1, proc.stderr
    error = json.loads(proc.stdout)["steps"]["show"]["error"]
    assert error.startswith(
        "params do not match the schema of shell.run (rule params-schema): params.argv.1: "
    ), error
    assert "denied" not in error


URLS = """\
version: 1
capabilities:
  http:
    allow: ["127.0.0.1", "10.0.0.1", localhost, "::1"]
    allow_http: true
    ports: [80, 8080]
steps:
  - id: loopback
    tool: http.request
    params: {url: "http://127.0.0.1:8080/x"}
  - id: private
    tool: http.request
    params: {url: "http://10.0.0.1/"}
  - id: by_name
    tool: http.request
    params: {url: "http://localhost/"}
  - id: loopback6
    tool: http.request
    params: {url: "http://[::1]/"}
"""


def test_a_literal_url_of_an_address_that_is_not_public_is_reported(tmp_path: Path) -> None:
    code, problems = validate_json(tmp_path, URLS)

    assert code == 2
    expected = [
        (line, column_of(URLS, line, '"http'), "http.address-not-public")
        for line in (10, 13, 16, 19)
    ]
    assert [(p["line"], p["column"], p["rule"]) for p in problems] == expected
    said = [p["message"] for p in problems]
    assert "'127.0.0.1' is not a public address (loopback)" in said[0]
    assert "'10.0.0.1' is not a public address (private)" in said[1]
    assert "'localhost' is this machine" in said[2]
    assert "'::1' is not a public address (loopback)" in said[3]
    assert all("private_networks" in message for message in said)


def test_a_url_the_grant_opens_to_a_private_network_is_not_reported(tmp_path: Path) -> None:
    opened = URLS.replace(
        "    ports: [80, 8080]\n",
        '    ports: [80, 8080]\n    private_networks: ["127.0.0.0/8", "10.0.0.0/8", "::1/128"]\n',
    )
    code, problems = validate_json(tmp_path, opened)

    assert (code, problems) == (0, [])


WRITES_OUTSIDE = """\
version: 1
capabilities:
  shell: {allow: [touch, sort]}
steps:
  - id: pwn
    tool: shell.run
    params: {argv: [touch, ../PWNED]}
  - id: sorted
    tool: shell.run
    params: {argv: [sort, -o, /tmp/sorted.txt, r.yaml]}
  - id: elsewhere
    tool: shell.run
    params: {argv: [touch, x.txt], cwd: ..}
"""


def test_a_literal_argument_writing_outside_the_folder_is_reported_at_it(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    code, problems = validate_json(folder, WRITES_OUTSIDE)

    assert code == 2
    assert [(p["line"], p["column"], p["rule"]) for p in problems] == [
        (7, column_of(WRITES_OUTSIDE, 7, "../PWNED"), "shell.output-path"),
        (10, column_of(WRITES_OUTSIDE, 10, "/tmp/sorted.txt"), "shell.output-path"),
        (13, column_of(WRITES_OUTSIDE, 13, "..}"), "shell.cwd"),
    ]
    assert f"writes to {tmp_path / 'PWNED'}, outside the granted folder" in problems[0]["message"]
    assert not (tmp_path / "PWNED").exists()


def test_a_problem_in_another_field_of_a_step_does_not_hide_its_params(tmp_path: Path) -> None:
    recipe = """\
version: 1
capabilities:
  shell: {allow: [wc]}
steps:
  - id: count
    tool: shell.run
    params: {argv: wc}
    retry: {attempts: 0}
"""
    code, problems = validate_json(tmp_path, recipe)

    assert code == 2
    assert [(p["line"], p["column"], p["rule"]) for p in problems] == [
        (7, column_of(recipe, 7, "wc}"), "bad-params"),
        (8, column_of(recipe, 8, "0}"), "bad-value"),
    ]
    assert problems[0]["message"] == "shell.run param 'argv': input should be a valid list"


def test_a_grant_that_does_not_validate_is_reported_once_at_the_grant(tmp_path: Path) -> None:
    """Not again at each step using it as "not granted, add it under capabilities" (it is
    there): its steps' own params are still checked; an undeclared family still is not
    granted."""
    recipe = """\
version: 1
capabilities:
  fs: {read: ["."]}
steps:
  - {id: a, tool: fs.read, params: {path: in.txt}}
  - {id: b, tool: fs.read, params: {pth: in.txt}}
  - {id: c, tool: shell.run, params: {argv: [ls]}}
"""
    code, problems = validate_json(tmp_path, recipe)

    assert code == 2
    assert [(p["line"], p["rule"]) for p in problems] == [
        (3, "bad-grant"),
        (6, "bad-params"),
        (6, "bad-params"),
        (7, "not-granted"),
    ]
    assert problems[0]["message"] == "fs grant read: input should be a valid boolean"


@pytest.mark.parametrize(
    "recipe",
    [
        """\
version: 1
inputs:
  n: {type: integer, default: 3}
  word: {type: string, default: hello}
capabilities:
  shell: {allow: [echo, touch, sort, sh]}
steps:
  - id: inside_text
    tool: shell.run
    params:
      argv: [echo, "count=${{ inputs.n }}", "${{ inputs.n | string }}", "${{ inputs.word }}"]
  - id: writes_inside
    tool: shell.run
    params: {argv: [touch, out.txt, ./made/later.txt]}
  - id: sorts_inside
    tool: shell.run
    params: {argv: [sort, -o, sorted.txt, r.yaml]}
  - id: script_made_later
    tool: shell.run
    params: {argv: [sh, tools/made-by-an-earlier-step.sh]}
""",
        """\
version: 1
capabilities:
  http:
    allow: [example.com, localhost]
    allow_http: true
    ports: [80, 443]
    private_networks: ["127.0.0.1/32", "::1/128"]
steps:
  - id: public
    tool: http.request
    params: {url: "https://example.com/releases"}
  - id: granted_loopback
    tool: http.request
    params: {url: "http://localhost/"}
""",
    ],
    ids=["shell", "http"],
)
def test_a_recipe_the_run_would_allow_validates_clean(tmp_path: Path, recipe: str) -> None:
    code, problems = validate_json(tmp_path, recipe)

    assert (code, problems) == (0, [])
