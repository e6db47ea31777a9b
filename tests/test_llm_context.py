"""A model's context window (`llm: context_window`, `--llm-context`, `PLANLOOM_LLM_CONTEXT`)
and a fixed structured-output mode (`llm: structured_output`,
`PLANLOOM_LLM_STRUCTURED_OUTPUT`), through the real `planloom plan` command and the real
openai client against `FakeOpenAIServer`.

A request estimated not to fit the window with its `max_tokens` is not sent: the planner
then lists its tools compactly (names and params), and when even that does not fit, says
so and sends nothing. A fixed mode is used from the first request, and a refusal of it is
reported, not downgraded.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _procs import env, planloom

from engine.llm import estimate_tokens
from engine.testing import FakeOpenAIServer, Fault, ScriptedModel

TOOLS = 40
DESCRIPTION = "Look a record up in the archive by its key and give back what it holds. " * 2

PLUGIN = f'''\
"""Forty read-only tools, each described at length: a grant a small context cannot list."""

from typing import Any


def _lookup(n: int) -> Any:
    def lookup(key: str, limit: int = 10) -> str:
        return f"record {{n}}:{{key}}"

    lookup.__doc__ = {DESCRIPTION!r}
    return lookup


def register(registry: Any) -> None:
    for n in range({TOOLS}):
        registry.function(f"archive.lookup_{{n:02d}}", side_effects=False)(_lookup(n))
'''

PLAN = {"steps": [{"id": "look", "tool": "archive.lookup_07", "params": {"key": "k1"}}]}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "archive_plugin.py").write_text(PLUGIN, encoding="utf-8")
    return tmp_path


def _caps(folder: Path, llm: str) -> None:
    text = f"capabilities:\n  archive: {{}}\nllm: {llm}\n"
    (folder / "caps.yaml").write_text(textwrap.dedent(text), encoding="utf-8")


def _plan(
    server: FakeOpenAIServer, folder: Path, *extra: str, **environ: str
) -> subprocess.CompletedProcess[str]:
    proc = planloom(
        "--plugin", "archive_plugin", "plan", "Look up the record k1 with lookup_07",
        "--capabilities", "caps.yaml", "--base-url", server.base_url, "--model", "m",
        "--yes", "--json", *extra,
        cwd=folder, environ=env(PYTHONPATH=str(folder), PYTHONDONTWRITEBYTECODE="1", **environ),
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _system(server: FakeOpenAIServer) -> str:
    content: str = server.requests[0].messages[0]["content"]
    return content


@pytest.mark.slow
def test_a_large_grant_fits_a_small_context_as_a_compact_catalogue(folder: Path) -> None:
    _caps(folder, "{context_window: 2048, max_tokens: 256}")
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN)) as server:
        proc = _plan(server, folder)
        system = _system(server)
        sent = server.requests[0].messages
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["steps"]["look"]["output"] == "record 7:k1"
    assert "archive.lookup_07(key, limit?: integer)\n" in system
    assert DESCRIPTION.strip() not in system  # names and params only
    assert estimate_tokens(sent) + 256 <= 2048
    assert len(server.requests) == 1  # the whole prompt was never sent


@pytest.mark.slow
def test_with_room_the_whole_catalogue_is_sent(folder: Path) -> None:
    _caps(folder, "{max_tokens: 256}")
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN)) as server:
        proc = _plan(server, folder, "--llm-context", "32768")
        system = _system(server)
        sent = server.requests[0].messages
    assert proc.returncode == 0, proc.stderr
    assert DESCRIPTION.strip() in system
    assert estimate_tokens(sent) + 256 > 2048  # what the small context could not take


@pytest.mark.slow
def test_a_context_even_the_compact_catalogue_overflows_sends_nothing(folder: Path) -> None:
    _caps(folder, "{max_tokens: 256}")
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN)) as server:
        proc = _plan(server, folder, PLANLOOM_LLM_CONTEXT="700")
        requests = list(server.requests)
    assert proc.returncode == 2, proc.stderr
    assert requests == []
    assert "does not fit the model's context window of 700" in proc.stderr
    assert "grant fewer tools" in proc.stderr


@pytest.mark.parametrize(
    ("args", "environ", "said"),
    [
        (("--llm-context", "many"), {}, "--llm-context 'many': expected a whole number"),
        (("--llm-context", "100"), {}, "at least 256"),
        ((), {"PLANLOOM_LLM_CONTEXT": "-1"}, "PLANLOOM_LLM_CONTEXT='-1'"),
        ((), {"PLANLOOM_LLM_STRUCTURED_OUTPUT": "grammar"}, "use one of json_schema, "),
    ],
)
def test_a_bad_context_or_mode_is_refused_before_any_request(
    folder: Path, args: tuple[str, ...], environ: dict[str, str], said: str
) -> None:
    _caps(folder, "{}")
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN)) as server:
        proc = _plan(server, folder, *args, **environ)
        requests = list(server.requests)
    assert proc.returncode == 2, proc.stderr
    assert said in proc.stderr
    assert requests == []


@pytest.mark.slow
def test_a_recipe_context_below_the_floor_is_located(folder: Path) -> None:
    _caps(folder, "{context_window: 10}")
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN)) as server:
        proc = _plan(server, folder)
    assert proc.returncode == 2
    assert "context_window" in proc.stderr
    assert "256" in proc.stderr


# -- a fixed structured-output mode ----------------------------------------------------------

REFUSAL = {"error": {"message": "response_format.type: Input should be 'text'", "code": None}}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("where", "mode", "sent"),
    [
        ("variable", "json_object", {"type": "json_object"}),
        ("recipe", "none", None),
    ],
)
def test_a_fixed_mode_is_asked_for_from_the_first_request(
    folder: Path, where: str, mode: str, sent: dict[str, Any] | None
) -> None:
    _caps(folder, f"{{structured_output: {mode}}}" if where == "recipe" else "{}")
    environ = {"PLANLOOM_LLM_STRUCTURED_OUTPUT": mode} if where == "variable" else {}
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN)) as server:
        proc = _plan(server, folder, **environ)
        formats = [r.response_format for r in server.requests]
    assert proc.returncode == 0, proc.stderr
    assert formats == [sent]


@pytest.mark.slow
def test_a_fixed_mode_the_endpoint_refuses_is_reported_not_downgraded(folder: Path) -> None:
    _caps(folder, "{structured_output: json_schema}")
    with FakeOpenAIServer(ScriptedModel.sequence(PLAN)) as server:
        server.inject(Fault.status(500, REFUSAL))
        proc = _plan(server, folder)
        formats = [(r.response_format or {}).get("type") for r in server.requests]
    assert proc.returncode != 0
    assert formats == ["json_schema"]  # no other mode tried, no retry
    assert "structured_output json_schema is set" in proc.stderr


# -- strict structured output ------------------------------------------------------------------

NULLS = {"depends_on": None, "when": None, "can_fail": None, "retry": None, "timeout": None}


@pytest.mark.slow
def test_a_plan_is_asked_for_strictly_and_its_nulls_are_fields_left_out(tmp_path: Path) -> None:
    """`json_schema` with `strict: true`: every field required, the optional ones nullable.
    The model's nulls are fields it left out: the plan runs as if they were not there."""
    (tmp_path / "a.txt").write_text("apples", encoding="utf-8")
    (tmp_path / "caps.yaml").write_text("capabilities:\n  fs: {root: ., read: true}\n")
    read = {"path": "a.txt"}
    plan = {"goal": None, "steps": [{"id": "r", "tool": "fs.read", "params": read, **NULLS}]}
    plan["steps"][0]["for_each"] = None
    with FakeOpenAIServer(ScriptedModel.sequence(plan)) as server:
        proc = planloom(
            "plan", "Read a.txt", "--capabilities", "caps.yaml", "--base-url", server.base_url,
            "--model", "m", "--json", cwd=tmp_path,
        )  # fmt: skip
        sent = server.requests[0].response_format or {}
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["steps"]["r"]["output"]["content"] == "apples"
    assert sent["type"] == "json_schema"
    assert sent["json_schema"]["strict"] is True
    strict = sent["json_schema"]["schema"]
    assert strict["required"] == ["goal", "steps"]
    assert strict["additionalProperties"] is False
    step = strict["properties"]["steps"]["items"]["anyOf"][0]
    assert set(step["required"]) == set(step["properties"])  # optional ones are nullable


@pytest.mark.slow
def test_an_agent_whose_conversation_would_not_fit_fails_unsent(tmp_path: Path) -> None:
    """The window guards every model call, an agent's too: the step fails saying what does
    not fit, and nothing reaches the endpoint (the run is stored: resume after a fix)."""
    (tmp_path / "a.txt").write_text("hi", encoding="utf-8")
    recipe = """\
        version: 1
        name: ctx
        capabilities:
          fs: {root: ., read: true}
        steps:
          - id: ask
            agent: {goal: "What does a.txt say?", tools: [fs.read]}
        """
    (tmp_path / "r.yaml").write_text(textwrap.dedent(recipe), encoding="utf-8")
    with FakeOpenAIServer(ScriptedModel.sequence("a.txt says hi")) as server:
        proc = planloom(
            "run", "r.yaml", "--base-url", server.base_url, "--model", "m",
            "--llm-context", "300", "--llm-max-tokens", "100", "--json", cwd=tmp_path,
        )  # fmt: skip
        requests = list(server.requests)
    assert proc.returncode == 1, proc.stderr
    assert requests == []
    step = json.loads(proc.stdout)["steps"]["ask"]
    assert step["status"] == "failed"
    assert "does not fit the model's context window of 300" in step["error"]
