"""The model preflight and the counting of model calls.

- Before any step runs, the preflight lists the models; with `--preflight chat` it also
  sends a one-token chat request: an endpoint that answers `GET /models` to anyone but
  refuses the key on `/chat/completions` is then a configuration error (exit 2) before any
  side effect. The probe is not counted in `usage`, not recorded in a cassette, and never
  sent in a replay. (Without it, the key is refused at the first real call:
  tests/test_llm_endpoint_limits.py.)
- `usage.llm_calls` counts every model call the run made, answered or failed (a 400, a
  500 after its retries), once each; `--json` and the summary agree, and a replay of the
  run counts the same.

Through the real `planloom` console script in a subprocess, talking over 127.0.0.1 to a
`FakeOpenAIServer` in this process; stdin on /dev/null.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _procs import env, planloom
from ruamel.yaml import YAML

from engine.testing import ChatRequest, FakeOpenAIServer, Fault

SIDE_EFFECT_THEN_AGENT = """\
version: 1
name: refused
llm: {model: scripted}
capabilities:
  fs: {root: work, read: true, write: true}
steps:
  - id: save
    tool: fs.write
    params: {path: written.txt, content: before the model}
  - id: think
    agent: {goal: "Read written.txt", tools: [fs.read], max_iterations: 2}
    depends_on: [save]
"""


def answer(request: ChatRequest) -> str:
    return f"answered {request.last_user_text()}"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    return tmp_path


@pytest.mark.slow
def test_a_401_on_chat_completions_stops_the_run_before_any_step(project: Path) -> None:
    (project / "job.yaml").write_text(SIDE_EFFECT_THEN_AGENT, encoding="utf-8")
    with FakeOpenAIServer(answer, chat_status=401) as server:
        base_url = server.base_url
        done = planloom(
            "run", "job.yaml", "--base-url", server.base_url, "--yes", "--json",
            "--preflight", "chat",
            cwd=project, environ=env(OPENAI_API_KEY="sk-refused-key-0123456789"),
        )  # fmt: skip
        probes = len(server.probes)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    assert not (project / "work" / "written.txt").exists()
    assert probes == 1
    assert server.requests == []
    message = done.stderr
    assert f"{base_url}/chat/completions refused the API key (401)" in message
    assert "OPENAI_API_KEY" in message
    assert "--base-url" in message
    assert "sk-refused-key" not in message
    result = json.loads(done.stdout)
    assert result["status"] == "invalid"
    assert result["steps"] == {}
    assert result["errors"][0]["rule"] == "configuration"


@pytest.mark.slow
def test_the_probe_is_not_counted_recorded_or_replayed(project: Path) -> None:
    (project / "job.yaml").write_text(SIDE_EFFECT_THEN_AGENT, encoding="utf-8")
    with FakeOpenAIServer(answer) as server:
        done = planloom(
            "run", "job.yaml", "--base-url", server.base_url, "--yes", "--json",
            "--record", "c.yaml", "--preflight", "chat", cwd=project,
        )  # fmt: skip
        assert len(server.probes) == 1
        assert len(server.requests) == 1  # the agent's one answer
    assert done.returncode == 0, done.stderr
    recorded = json.loads(done.stdout)
    assert recorded["usage"]["llm_calls"] == 1
    cassette = YAML(typ="safe").load((project / "c.yaml").read_text(encoding="utf-8"))
    assert len(cassette["llm"]) == 1
    # what decides an answer is recorded; the bound on its length (every request's) is not
    assert all("max_tokens" not in json.dumps(e["request"]) for e in cassette["llm"])

    # The server is gone: the replay makes no probe and no call, and counts the same.
    replayed = planloom("replay", "c.yaml", "--json", cwd=project)
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout)["usage"] == recorded["usage"]


LLM_STEPS = """\
version: 1
name: counted
llm: {model: scripted}
capabilities:
  llm: {}
steps:
  - id: bad_request
    tool: llm.complete
    params: {prompt: one}
    can_fail: true
  - id: server_down
    tool: llm.complete
    params: {prompt: two}
    can_fail: true
    depends_on: [bad_request]
  - id: fine
    tool: llm.complete
    params: {prompt: three}
    depends_on: [server_down]
"""


@pytest.mark.slow
def test_failed_model_calls_are_counted(project: Path) -> None:
    (project / "job.yaml").write_text(LLM_STEPS, encoding="utf-8")
    with FakeOpenAIServer(answer) as server:
        # a 400 (not retried), then a 500 on all four attempts (Retry-After: 0, no waiting)
        server.inject(Fault.status(400), *[Fault.status(500, retry_after=0)] * 4)
        done = planloom(
            "run", "job.yaml", "--base-url", server.base_url, "--json", "--record", "c.yaml",
            cwd=project,
        )  # fmt: skip
        sent = len(server.requests)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    statuses = {step_id: step["status"] for step_id, step in result["steps"].items()}
    assert statuses == {
        "bad_request": "failed_acceptable",
        "server_down": "failed_acceptable",
        "fine": "succeeded",
    }
    assert "400" in result["steps"]["bad_request"]["error"]
    assert "500" in result["steps"]["server_down"]["error"]
    assert sent == 6  # 1 + 4 attempts + 1 HTTP requests
    assert result["usage"]["llm_calls"] == 3  # logical calls: each once, answered or not
    assert "3 model calls" in done.stderr  # the summary says the same

    replayed = planloom("replay", "c.yaml", "--json", cwd=project)
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout)["usage"] == result["usage"]


@pytest.mark.slow
def test_a_planning_call_that_failed_is_counted(project: Path) -> None:
    (project / "caps.yaml").write_text("capabilities: {fs: {root: work, read: true}}\n")
    with FakeOpenAIServer(answer) as server:
        server.inject(*[Fault.status(500, retry_after=0)] * 4)  # every attempt fails
        done = planloom(
            "plan", "List the files", "--capabilities", "caps.yaml", "--model", "scripted",
            "--base-url", server.base_url, "--json", cwd=project,
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "planning failed" in done.stderr
    result = json.loads(done.stdout)
    assert result["usage"]["llm_calls"] == 1
    assert "1 model calls" in done.stderr
