"""What templates read of steps' outputs is checked before the run, and tool calls sure to
pass `limits.max_tool_calls` are warned of: through the real `planloom` command.

Reads (`${{ steps.a.output.FIELD }}`) are checked against the result model an action
declares: a field the output cannot have is a located error with a did-you-mean, and a
param whose whole value is such a read, of a type the param cannot take, is an error whose
hint is the fix (`| string`, `| tojson`). Only what is certain is refused: every field of
the built-in results is accepted, and is there when the recipe runs (the negatives run the
recipes they validate); outputs nothing is known of (user functions, agents without an
`output_schema`, an MCP tool without an `outputSchema`) accept any read.

Tool steps (and the items of a `for_each` over a literal list or `range(N)`) that certainly
make more calls than `limits.max_tool_calls` allows are a warning: `validate` shows it
located and exits 0; `run` shows it on stderr before running.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from _procs import planloom
from mcp_servers.project import Project, make_project, one_json

from capabilities.fs._models import ListEntry, ListResult, ReadResult
from capabilities.http._models import RequestResult
from capabilities.shell._models import ShellResult

COUNTER = Path(__file__).with_name("_validation_outputs_server.py")


def _write(folder: Path, text: str, name: str = "r.yaml") -> str:
    body = textwrap.dedent(text).lstrip("\n")
    (folder / name).write_text(body, encoding="utf-8")
    return body


def _at(text: str, needle: str) -> tuple[int, int, str]:
    """1-based line and column of `needle` in `text`, and that line."""
    offset = text.index(needle)
    line = text.count("\n", 0, offset) + 1
    start = text.rfind("\n", 0, offset) + 1
    return line, offset - start + 1, text.splitlines()[line - 1]


def _shown(text: str, needle: str, headline: str, hint: str, file: str = "r.yaml") -> list[str]:
    """A problem as `planloom` prints it: headline, the line, a caret under `needle`, hint."""
    line, column, source = _at(text, needle)
    return [
        f"{file}:{line}:{column}: {headline}",
        f"{line:>5} | {source}",
        " " * (8 + column - 1) + "^",
        f"  hint: {hint}",
    ]


def _json(proc: subprocess.CompletedProcess[str]) -> Any:
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def _problems(folder: Path) -> list[dict[str, Any]]:
    proc = planloom("validate", "r.yaml", "--json", cwd=folder)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    problems: list[dict[str, Any]] = _json(proc)
    return problems


def _valid(folder: Path, *plugin: str) -> None:
    proc = planloom(*plugin, "validate", "r.yaml", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


# -- a field the output cannot have -------------------------------------------------------

MISSPELT = """
version: 1
capabilities: {fs: {write: ["out/**"]}}
steps:
  - id: a
    tool: fs.read
    params: {path: notes.txt}
  - id: save
    tool: fs.write
    params: {path: out/copy.txt, content: "${{ steps.a.output.contents }}"}
"""


def test_a_field_the_action_does_not_give_is_a_located_error_with_did_you_mean(
    tmp_path: Path,
) -> None:
    text = _write(tmp_path, MISSPELT)

    proc = planloom("validate", "r.yaml", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        *_shown(
            text,
            '"${{ steps.a.output.contents',
            "error[bad-reference]: steps.a.output has no field 'contents' "
            "(fs.read gives content, size, truncated)",
            "did you mean 'content'?",
        ),
        "r.yaml: 1 problem",
    ]


@pytest.mark.slow
def test_the_error_is_in_the_json_and_the_run_never_starts(tmp_path: Path) -> None:
    text = _write(tmp_path, MISSPELT)
    (tmp_path / "notes.txt").write_text("hello\n", encoding="utf-8")
    line, column, _ = _at(text, '"${{ steps.a.output.contents')
    expected = [
        {
            "file": "r.yaml",
            "line": line,
            "column": column,
            "rule": "bad-reference",
            "message": "steps.a.output has no field 'contents' "
            "(fs.read gives content, size, truncated)",
            "hint": "did you mean 'content'?",
        }
    ]

    assert _problems(tmp_path) == expected
    proc = planloom("run", "r.yaml", "--yes", "--json", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    result = _json(proc)
    assert (result["status"], result["errors"]) == ("invalid", expected)
    assert not (tmp_path / "out").exists()


def test_nested_fields_indexes_and_keys_are_checked(tmp_path: Path) -> None:
    _write(
        tmp_path,
        """
        version: 1
        capabilities: {fs: {}, shell: {allow: [echo]}}
        steps:
          - id: ls
            tool: fs.list
          - id: sh
            tool: shell.run
            params:
              argv:
                - echo
                - "${{ steps.ls.output.entries[0].pth }}"
                - "${{ steps.ls.output['pahts'][0] }}"
                - "${{ steps.ls.output.entries.path }}"
                - "first: ${{ steps.ls.output.entries[0].path }}"
        outputs:
          said: "${{ steps.sh.output.stdot }}"
        """,
    )

    problems = _problems(tmp_path)

    assert [(p["message"], p["hint"]) for p in problems] == [
        (
            "steps.ls.output.entries[0] has no field 'pth' (it has path, type, size)",
            "did you mean 'path'?",
        ),
        (
            "steps.ls.output has no field 'pahts' (fs.list gives entries, paths, truncated)",
            "did you mean 'paths'?",
        ),
        (
            "steps.ls.output.entries is a list, so it has no field 'path'",
            "index it, as in ${{ steps.ls.output.entries[0].path }}, or loop over it",
        ),
        (
            "steps.sh.output has no field 'stdot' "
            "(shell.run gives exit_code, stdout, stderr, truncated, confinement)",
            "did you mean 'stdout'?",
        ),
    ]
    assert {p["rule"] for p in problems} == {"bad-reference"}


def test_a_for_each_output_is_a_list_read_by_index(tmp_path: Path) -> None:
    text = _write(
        tmp_path,
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: each
            tool: fs.read
            for_each: [a.txt, b.txt]
            params: {path: "${{ item }}"}
        outputs:
          wrong: "${{ steps.each.output.content }}"
          right: "${{ steps.each.output[1].content }}"
          count: "${{ steps.each.output | length }}"
        """,
    )
    line, column, _ = _at(text, '"${{ steps.each.output.content')

    assert _problems(tmp_path) == [
        {
            "file": "r.yaml",
            "line": line,
            "column": column,
            "rule": "bad-reference",
            "message": "steps.each.output is the output of a for_each step, one per item, "
            "so it has no field 'content'",
            "hint": "index it, as in ${{ steps.each.output[0].content }}, or loop over it",
        }
    ]


@pytest.mark.slow
def test_a_field_of_the_fallbacks_output_is_accepted(tmp_path: Path) -> None:
    text = """
        version: 1
        capabilities: {fs: {}, shell: {allow: [cat]}}
        steps:
          - id: get
            tool: fs.read
            params: {path: missing.txt}
            fallback: {tool: shell.run, params: {argv: [cat, notes.txt]}}
        outputs:
          text: >-
            ${{ steps.get.output.content if steps.get.status == 'succeeded'
                else steps.get.output.stdout }}
        """
    _write(tmp_path, text)
    (tmp_path / "notes.txt").write_text("from the fallback\n", encoding="utf-8")
    _valid(tmp_path)

    proc = planloom("run", "r.yaml", "--yes", "--json", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    result = _json(proc)
    assert result["steps"]["get"]["status"] == "fallback"
    assert result["outputs"]["text"] == "from the fallback\n"

    _write(tmp_path, text + '  neither: "${{ steps.get.output.stdut }}"\n')
    (problem,) = _problems(tmp_path)
    assert problem["message"] == (
        "steps.get.output has no field 'stdut' (fs.read or shell.run gives content, size, "
        "truncated, exit_code, stdout, stderr, confinement)"
    )
    assert problem["hint"] == "did you mean 'stdout'?"


def test_status_error_and_attempts_are_the_steps_not_its_outputs(tmp_path: Path) -> None:
    _write(
        tmp_path,
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.list
        outputs:
          status: "${{ steps.a.status }}"
          error: "${{ steps.a.error }}"
          attempts: "${{ steps.a.attempts }}"
          wrong: "${{ steps.a.output.status }}"
        """,
    )

    (problem,) = _problems(tmp_path)

    assert problem["message"] == (
        "steps.a.output has no field 'status' (fs.list gives entries, paths, truncated)"
    )


def test_a_template_that_probes_a_field_is_not_refused(tmp_path: Path) -> None:
    _write(
        tmp_path,
        """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: a
            tool: fs.list
        outputs:
          fallback: "${{ steps.a.output.missing | default('none') }}"
          tested: "${{ steps.a.output.missing is defined }}"
        """,
    )

    proc = planloom("run", "r.yaml", "--json", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    assert _json(proc)["outputs"] == {"fallback": "none", "tested": False}


# -- a whole value of a type the param cannot take ----------------------------------------


def test_a_number_or_an_object_where_a_string_is_required_is_an_error_with_the_fix(
    tmp_path: Path,
) -> None:
    text = _write(
        tmp_path,
        """
        version: 1
        capabilities: {fs: {write: ["out/**"]}, shell: {allow: [echo]}}
        steps:
          - id: a
            tool: fs.read
            params: {path: notes.txt}
          - id: size
            tool: fs.write
            params: {path: out/size.txt, content: "${{ steps.a.output.size }}"}
          - id: whole
            tool: fs.write
            params: {path: out/whole.json, content: "${{ steps.a.output }}"}
          - id: sh
            tool: shell.run
            params: {argv: [echo, "${{ steps.a.output.truncated }}"]}
        """,
    )

    proc = planloom("validate", "r.yaml", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        *_shown(
            text,
            '"${{ steps.a.output.size',
            "error[bad-params]: fs.write param 'content' takes a string, but "
            "steps.a.output.size is an integer",
            'convert it: "${{ steps.a.output.size | string }}"',
        ),
        *_shown(
            text,
            '"${{ steps.a.output }}',
            "error[bad-params]: fs.write param 'content' takes a string, but "
            "steps.a.output is an object",
            'convert it: "${{ steps.a.output | tojson }}"',
        ),
        *_shown(
            text,
            '"${{ steps.a.output.truncated',
            "error[bad-params]: shell.run param 'argv[1]' takes a string, but "
            "steps.a.output.truncated is a boolean",
            'convert it: "${{ steps.a.output.truncated | string }}"',
        ),
        "r.yaml: 3 problems",
    ]


@pytest.mark.slow
def test_the_fix_the_hint_gives_validates_and_runs(tmp_path: Path) -> None:
    _write(
        tmp_path,
        """
        version: 1
        capabilities: {fs: {write: ["out/**"]}}
        steps:
          - id: a
            tool: fs.read
            params: {path: notes.txt}
          - id: size
            tool: fs.write
            params: {path: out/size.txt, content: "${{ steps.a.output.size | string }}"}
          - id: whole
            tool: fs.write
            params: {path: out/whole.json, content: "${{ steps.a.output | tojson }}"}
          - id: text
            tool: fs.write
            params: {path: out/text.txt, content: "${{ steps.a.output.content }}"}
        """,
    )
    (tmp_path / "notes.txt").write_text("hello\n", encoding="utf-8")
    _valid(tmp_path)

    proc = planloom("run", "r.yaml", "--yes", "--json", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "size.txt").read_text(encoding="utf-8") == "6"
    assert json.loads((tmp_path / "out" / "whole.json").read_text(encoding="utf-8")) == {
        "content": "hello\n",
        "size": 6,
        "truncated": False,
    }


# -- what is accepted: every field there is -----------------------------------------------


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"a page\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the test reads the run's output, not the server's log


@pytest.fixture
def web() -> Iterator[int]:
    """A plain HTTP server on 127.0.0.1, its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


EVERY_FIELD = """
version: 1
capabilities:
  fs: {}
  shell: {allow: [echo]}
  http: {allow: ["127.0.0.1"], allow_http: true, ports: [PORT], private_networks: [127.0.0.1/32]}
steps:
  - id: read
    tool: fs.read
    params: {path: notes.txt}
  - id: ls
    tool: fs.list
  - id: sh
    tool: shell.run
    params:
      argv: [echo, "${{ steps.read.output.content }}", "${{ steps.ls.output.entries[0].path }}"]
  - id: get
    tool: http.request
    params: {url: "http://127.0.0.1:PORT/page"}
  - id: each
    tool: fs.read
    for_each: [notes.txt, notes.txt]
    params: {path: "${{ item }}"}
outputs:
  read:
    content: "${{ steps.read.output.content }}"
    size: "${{ steps.read.output.size }}"
    truncated: "${{ steps.read.output['truncated'] }}"
  ls:
    entries: "${{ steps.ls.output.entries }}"
    paths: "${{ steps.ls.output.paths }}"
    truncated: "${{ steps.ls.output.truncated }}"
  entry:
    path: "${{ steps.ls.output.entries[0].path }}"
    type: "${{ steps.ls.output.entries[0].type }}"
    size: "${{ steps.ls.output.entries[0].size }}"
  sh:
    exit_code: "${{ steps.sh.output.exit_code }}"
    stdout: "${{ steps.sh.output.stdout }}"
    stderr: "${{ steps.sh.output.stderr }}"
    truncated: "${{ steps.sh.output.truncated }}"
    confinement: "${{ steps.sh.output.confinement }}"
  get:
    status: "${{ steps.get.output.status }}"
    headers: "${{ steps.get.output.headers }}"
    body: "${{ steps.get.output.body }}"
    truncated: "${{ steps.get.output.truncated }}"
    url: "${{ steps.get.output.url }}"
    redirects: "${{ steps.get.output.redirects }}"
  type: "${{ steps.get.output.headers['content-type'] }}"
  second: "${{ steps.each.output[1].content }}"
  count: "${{ steps.ls.output.entries | length }}"
  size: "${{ steps.read.output.size | string }}"
"""


@pytest.mark.slow
def test_every_field_of_the_builtin_results_is_accepted_and_there_at_run_time(
    tmp_path: Path, web: int
) -> None:
    _write(tmp_path, EVERY_FIELD.replace("PORT", str(web)))
    (tmp_path / "notes.txt").write_text("hello\n", encoding="utf-8")
    _valid(tmp_path)

    proc = planloom("run", "r.yaml", "--yes", "--json", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    result = _json(proc)
    steps, outputs = result["steps"], result["outputs"]
    for name, model in (("read", ReadResult), ("ls", ListResult), ("sh", ShellResult)):
        # what each run gives is what its result model says, which validation reads
        assert outputs[name] == steps[name]["output"]
        assert list(outputs[name]) == list(model.model_fields)
    assert outputs["get"] == steps["get"]["output"]
    assert list(outputs["get"]) == list(RequestResult.model_fields)
    assert list(outputs["entry"]) == list(ListEntry.model_fields)
    assert outputs["entry"] == steps["ls"]["output"]["entries"][0]
    assert (outputs["get"]["body"], outputs["type"]) == ("a page\n", "text/plain")
    assert (outputs["second"], outputs["size"]) == ("hello\n", "6")
    assert outputs["count"] == len(steps["ls"]["output"]["entries"])


PLUGIN = '''
"""Actions for tests/test_validation_outputs.py: outputs known and not known."""

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, WithJsonSchema

from engine.capability import Action


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str


class Described(BaseModel):
    data: Annotated[
        dict[str, Any],
        WithJsonSchema(
            {"type": "object", "properties": {"title": {"type": "string"}},
             "additionalProperties": False}
        ),
    ]


async def _open(params: Any, ctx: Any) -> Open:
    return Open(name="n", more=1)


async def _described(params: Any, ctx: Any) -> Described:
    return Described(data={"title": "t"})


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


def register(registry):
    @registry.function("kit.lookup", side_effects=False)
    def lookup(user: str) -> dict:
        """Look a user up."""
        return {"user": user, "team": "core"}

    registry.add(Action("kit.open", "Extra keys.", _Params, _open, Open, side_effects=False))
    registry.add(
        Action("kit.described", "A described field.", _Params, _described, Described,
               side_effects=False)
    )
'''


def test_outputs_known_only_in_part_accept_what_they_may_hold(tmp_path: Path) -> None:
    (tmp_path / "kit_plugin.py").write_text(PLUGIN, encoding="utf-8")
    text = """
        version: 1
        capabilities: {kit: {}}
        steps:
          - id: fn
            tool: kit.lookup
            params: {user: ada}
          - id: open
            tool: kit.open
          - id: desc
            tool: kit.described
          - id: agent
            agent: {goal: anything}
        outputs:
          team: "${{ steps.fn.output.team }}"
          more: "${{ steps.open.output.more }}"
          title: "${{ steps.desc.output.data.title }}"
          said: "${{ steps.agent.output.whatever.deeper }}"
        """
    _write(tmp_path, text)
    _valid(tmp_path, "--plugin", "./kit_plugin.py")

    _write(tmp_path, text + '  wrong: "${{ steps.desc.output.data.titel }}"\n')
    proc = planloom("--plugin", "./kit_plugin.py", "validate", "r.yaml", "--json", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    (problem,) = _json(proc)
    assert problem["message"] == "steps.desc.output.data has no field 'titel' (it has title)"
    assert problem["hint"] == "did you mean 'title'?"


def test_an_agents_output_schema_is_its_result_model(tmp_path: Path) -> None:
    text = """
        version: 1
        capabilities: {fs: {}}
        steps:
          - id: closed
            agent:
              goal: name the project
              output_schema:
                type: object
                properties: {title: {type: string}, tags: {type: array, items: {type: string}}}
                additionalProperties: false
          - id: open
            agent:
              goal: name the project
              output_schema: {type: object, properties: {title: {type: string}}}
        outputs:
          title: "${{ steps.closed.output.title }}"
          tag: "${{ steps.closed.output.tags[0] }}"
          other: "${{ steps.open.output.other }}"
        """
    _write(tmp_path, text)
    _valid(tmp_path)

    _write(tmp_path, text + '  wrong: "${{ steps.closed.output.titel }}"\n')
    (problem,) = _problems(tmp_path)

    assert (
        problem["message"]
        == "steps.closed.output has no field 'titel' (the agent gives title, tags)"
    )
    assert problem["hint"] == "did you mean 'title'?"


# -- MCP tools ----------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return make_project(tmp_path)


@pytest.mark.slow
def test_an_mcp_tool_without_an_output_schema_accepts_any_structured_field(
    project: Project,
) -> None:
    text = """
        version: 1
        capabilities:
          mcp:
            servers:
              notes: {command: {command}, tools: [search]}
        steps:
          - id: find
            tool: mcp.notes.search
            params: {query: release}
        outputs:
          hits: "${{ steps.find.output.structured.hits }}"
          anything: "${{ steps.find.output.structured.anything }}"
          text: "${{ steps.find.output.content[0].text }}"
        """
    project.write(text)
    proc = project.planloom("validate", "r.yaml")
    assert proc.returncode == 0, proc.stderr

    project.write(text + '  wrong: "${{ steps.find.output.hits }}"\n')
    proc = project.planloom("validate", "r.yaml", "--json")

    assert proc.returncode == 2, proc.stderr
    (problem,) = one_json(proc.stdout)
    assert problem["message"] == (
        "steps.find.output has no field 'hits' "
        "(mcp.notes.search gives content, structured, is_error)"
    )
    assert problem["hint"] == "read one of its fields, as in ${{ steps.find.output.content }}"


COUNTED = """
version: 1
capabilities:
  fs: {write: ["out/**"]}
  mcp:
    servers:
      counter: {command: [python3, servers/counter.py, MARKER], tools: ["*"]}
steps:
  - id: count
    tool: mcp.counter.count
    params: {text: "two words"}
  - id: echo
    tool: mcp.counter.echo
    params: {text: "${{ steps.count.output.structured.words | string }}"}
  - id: save
    tool: fs.write
    params: {path: out/n.txt, content: "${{ steps.count.output.structured.lines | string }}"}
outputs:
  words: "${{ steps.count.output.structured.words }}"
  length: "${{ steps.echo.output.structured.length }}"
"""


@pytest.mark.slow
def test_an_mcp_tool_with_an_output_schema_is_checked_against_it(project: Project) -> None:
    shutil.copy(COUNTER, project.root / "servers" / "counter.py")
    valid = COUNTED.replace("MARKER", project.marker)  # found in /proc: none outlives a run
    project.write(valid)

    proc, result = project.run_json("r.yaml", "--yes")

    assert proc.returncode == 0, proc.stderr
    assert result["outputs"] == {"words": 2, "length": 1}
    assert (project.root / "out" / "n.txt").read_text(encoding="utf-8") == "1"

    wrong = (
        valid.replace('structured.words | string }}"}', 'structured.wrods }}"}')
        .replace("structured.lines | string", "structured.lines")
        .replace("steps.count.output.structured.words }}", "steps.count.output.words }}")
    )
    text = project.write(wrong)
    proc = project.planloom("validate", "r.yaml", "--json")

    assert proc.returncode == 2, proc.stderr
    problems = one_json(proc.stdout)
    where = [
        _at(text, needle)[:2]
        for needle in (
            '"${{ steps.count.output.structured.wrods',
            '"${{ steps.count.output.structured.lines',
            '"${{ steps.count.output.words',
        )
    ]
    assert [(p["line"], p["column"], p["rule"], p["message"], p["hint"]) for p in problems] == [
        (
            *where[0],
            "bad-reference",
            "steps.count.output.structured has no field 'wrods' (it has lines, words)",
            "did you mean 'words'?",
        ),
        (
            *where[1],
            "bad-params",
            "fs.write param 'content' takes a string, but "
            "steps.count.output.structured.lines is an integer",
            'convert it: "${{ steps.count.output.structured.lines | string }}"',
        ),
        (
            *where[2],
            "bad-reference",
            "steps.count.output has no field 'words' "
            "(mcp.counter.count gives content, structured, is_error)",
            "did you mean 'structured.words'?",
        ),
    ]


# -- limits.max_tool_calls ----------------------------------------------------------------

OVER_BUDGET = """
version: 1
capabilities: {fs: {}}
limits: {max_tool_calls: 2}
steps:
  - id: a
    tool: fs.list
  - id: b
    tool: fs.list
    depends_on: [a]
  - id: c
    tool: fs.list
    depends_on: [b]
"""
BUDGET_WARNING = (
    "warning[max-tool-calls]: this recipe makes at least 3 tool calls (3 tool steps), more "
    "than limits.max_tool_calls allows (2): a run stops when it reaches the limit"
)
BUDGET_HINT = "raise the limit if the calls are meant: limits: {max_tool_calls: 3}"


def test_validate_warns_of_tool_calls_past_the_limit_and_exits_0(tmp_path: Path) -> None:
    text = _write(tmp_path, OVER_BUDGET)

    proc = planloom("validate", "r.yaml", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == _shown(text, "2}", BUDGET_WARNING, BUDGET_HINT)
    assert proc.stdout == "r.yaml: ok (3 steps, 1 warning)\n"


def test_validate_json_gives_the_warning_with_its_severity(tmp_path: Path) -> None:
    text = _write(tmp_path, OVER_BUDGET)
    line, column, _ = _at(text, "2}")

    proc = planloom("validate", "r.yaml", "--json", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    assert _json(proc) == [
        {
            "file": "r.yaml",
            "line": line,
            "column": column,
            "rule": "max-tool-calls",
            "message": BUDGET_WARNING.split(": ", 1)[1],
            "hint": BUDGET_HINT,
            "severity": "warning",
        }
    ]


@pytest.mark.parametrize(
    ("items", "count"),
    [
        ("[" + ", ".join(["."] * 1000) + "]", 1000),
        ('"${{ range(1000) }}"', 1000),
        ('"${{ range(5, 2005, 2) | list }}"', 1000),
    ],
)
def test_for_each_items_over_a_literal_list_or_range_are_counted(
    tmp_path: Path, items: str, count: int
) -> None:
    text = _write(
        tmp_path,
        f"""
        version: 1
        capabilities: {{fs: {{}}}}
        steps:
          - id: first
            tool: fs.list
          - id: many
            tool: fs.list
            for_each: {items}
        """,
    )
    line, column, _ = _at(text, items[:3])

    proc = planloom("validate", "r.yaml", "--json", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    (warning,) = _json(proc)
    assert (warning["line"], warning["column"], warning["severity"]) == (line, column, "warning")
    assert warning["message"] == (
        f"this recipe makes at least {count + 1} tool calls (2 tool steps; 'many' makes "
        f"{count}, one per for_each item), more than limits.max_tool_calls allows (1000): a "
        "run stops when it reaches the limit"
    )


def test_calls_that_may_not_happen_are_not_counted(tmp_path: Path) -> None:
    _write(
        tmp_path,
        """
        version: 1
        capabilities: {fs: {}}
        inputs: {go: {type: boolean, default: false}}
        limits: {max_tool_calls: 2}
        steps:
          - id: a
            tool: fs.list
          - id: b
            tool: fs.list
            for_each: "${{ steps.a.output.paths }}"
          - id: maybe
            tool: fs.list
            when: "${{ inputs.go }}"
          - id: think
            agent: {goal: list the files, tools: [fs.list]}
        finally:
          - id: last
            tool: fs.list
        """,
    )

    proc = planloom("validate", "r.yaml", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    assert (proc.stdout, proc.stderr) == ("r.yaml: ok (5 steps)\n", "")


def test_run_shows_the_warning_before_running_into_the_limit(tmp_path: Path) -> None:
    text = _write(tmp_path, OVER_BUDGET)

    proc = planloom("run", "r.yaml", "--json", cwd=tmp_path)

    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines()[:4] == _shown(text, "2}", BUDGET_WARNING, BUDGET_HINT)
    result = _json(proc)
    assert [result["steps"][s]["status"] for s in "abc"] == ["succeeded", "succeeded", "failed"]
    assert "limits.max_tool_calls" in result["steps"]["c"]["error"]
