"""`planloom plan` and model-backed `planloom run`, end to end: the real console script in a
subprocess, talking over 127.0.0.1 to a `FakeOpenAIServer` that runs in this test process.

Every call has a timeout and stdin on /dev/null (so no terminal approver). The README's
"Command line" and "Models": exit codes 0/1/2/3, `--json` on stdout, 401 and missing
configuration reported before any step runs, 429 retried with backoff.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _procs import env, planloom

from engine.testing import ChatReply, FakeOpenAIServer, Fault, ScriptedModel, ToolCall

GOAL = "Summarise a.txt and b.txt into out/summary.txt"

CAPABILITIES = """\
capabilities:
  fs: {root: work, read: true, write: ["out/**"]}
"""

WRITE_PLAN: dict[str, Any] = {
    "goal": GOAL,
    "steps": [
        {"id": "listing", "tool": "fs.list", "params": {"path": "."}},
        {"id": "read_a", "tool": "fs.read", "params": {"path": "a.txt"}},
        {"id": "read_b", "tool": "fs.read", "params": {"path": "b.txt"}},
        {
            "id": "save",
            "tool": "fs.write",
            "params": {
                "path": "out/summary.txt",
                "content": "${{ steps.read_a.output.content }}+${{ steps.read_b.output.content }}",
                "create_dirs": True,
            },
        },
    ],
}

READ = "Read a.txt"
READ_PLAN: dict[str, Any] = {
    "goal": READ,
    "steps": [{"id": "read_a", "tool": "fs.read", "params": {"path": "a.txt"}}],
}


def one_json(stdout: str) -> dict[str, Any]:
    decoder = json.JSONDecoder()
    text = stdout.strip()
    assert text, "stdout is empty"
    value, end = decoder.raw_decode(text)
    assert text[end:].strip() == "", f"extra text after the JSON object: {text[end:]!r:.200}"
    assert isinstance(value, dict)
    return value


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout, proc.stdout


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """tmp_path with `caps.yaml` granting fs in `work/`, which holds a.txt and b.txt."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "a.txt").write_text("apples", encoding="utf-8")
    (tmp_path / "work" / "b.txt").write_text("bananas", encoding="utf-8")
    (tmp_path / "caps.yaml").write_text(CAPABILITIES, encoding="utf-8")
    return tmp_path


def plan_args(server: FakeOpenAIServer, *extra: str, goal: str = GOAL) -> list[str]:
    return [
        "plan",
        goal,
        "--base-url",
        server.base_url,
        "--model",
        "m",
        "--capabilities",
        "caps.yaml",
        *extra,
    ]


# -- plan, approve, run, save; then run the saved recipe ---------------------------------------


@pytest.mark.slow
def test_plan_runs_the_planned_steps_and_saves_a_recipe_that_runs(workspace: Path) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(WRITE_PLAN)) as server:
        proc = planloom(*plan_args(server, "--yes", "--json", "-o", "out.yaml"), cwd=workspace)
        no_traceback(proc)
        assert proc.returncode == 0, proc.stderr
        result = one_json(proc.stdout)
        assert result["status"] == "succeeded"
        assert {k: v["status"] for k, v in result["steps"].items()} == {
            "listing": "succeeded",
            "read_a": "succeeded",
            "read_b": "succeeded",
            "save": "succeeded",
        }
        assert result["steps"]["read_a"]["output"]["content"] == "apples"
        assert result["usage"]["llm_calls"] == 1
        assert (workspace / "work" / "out" / "summary.txt").read_text() == "apples+bananas"
        assert "planning" in proc.stderr

        (request,) = server.requests
        assert request.model == "m"
        assert request.last_user_text() == GOAL
        assert "fs.write" in request.messages[0]["content"]
        assert "shell.run" not in request.messages[0]["content"]

        saved = workspace / "out.yaml"
        text = saved.read_text(encoding="utf-8")
        assert "fs.write" in text
        assert "${{ steps.read_a.output.content }}" in text
        (workspace / "work" / "out" / "summary.txt").unlink()

        again = planloom(
            "run", "out.yaml", "--yes", "--json", "--base-url", server.base_url,
            "--model", "m", cwd=workspace,
        )  # fmt: skip
        no_traceback(again)
        assert again.returncode == 0, again.stderr
        rerun = one_json(again.stdout)
        assert rerun["status"] == "succeeded"
        assert set(rerun["steps"]) == set(result["steps"])
        assert (workspace / "work" / "out" / "summary.txt").read_text() == "apples+bananas"
        assert saved.read_text(encoding="utf-8") == text  # run left the recipe unchanged
        assert len(server.requests) == 1  # a recipe with steps needs no planning


@pytest.mark.slow
def test_validate_accepts_the_saved_plan(workspace: Path) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(READ_PLAN)) as server:
        proc = planloom(*plan_args(server, "-o", "read.yaml", goal=READ), cwd=workspace)
    assert proc.returncode == 0, proc.stderr
    check = planloom("validate", "read.yaml", "--json", cwd=workspace)
    assert check.returncode == 0, check.stdout + check.stderr
    assert json.loads(check.stdout) == []


@pytest.mark.slow
def test_a_plan_repaired_from_errors_runs(workspace: Path) -> None:
    typo = {"steps": [{"id": "read_a", "tool": "fs.raed", "params": {"path": "a.txt"}}]}
    with FakeOpenAIServer(ScriptedModel.sequence(typo, READ_PLAN)) as server:
        proc = planloom(*plan_args(server, "--json", goal=READ), cwd=workspace)
        assert len(server.requests) == 2
        assert "unknown-tool" in server.requests[1].last_user_text()
    assert proc.returncode == 0, proc.stderr
    assert "repaired 1 time" in proc.stderr
    assert one_json(proc.stdout)["steps"]["read_a"]["output"]["content"] == "apples"


# -- approval of the plan ------------------------------------------------------------------------


@pytest.mark.slow
def test_side_effects_without_a_terminal_or_yes_reject_the_plan(workspace: Path) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(WRITE_PLAN)) as server:
        proc = planloom(*plan_args(server, "--json"), cwd=workspace)
    no_traceback(proc)
    assert proc.returncode == 3, proc.stderr
    assert "--yes" in proc.stderr
    assert "rejected" in proc.stderr
    assert one_json(proc.stdout)["status"] == "rejected"
    assert not (workspace / "work" / "out").exists()


@pytest.mark.slow
def test_no_rejects_the_plan(workspace: Path) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(WRITE_PLAN)) as server:
        proc = planloom(*plan_args(server, "--no", "-o", "saved.yaml"), cwd=workspace)
    no_traceback(proc)
    assert proc.returncode == 3, proc.stderr
    assert not (workspace / "work" / "out").exists()
    assert (workspace / "saved.yaml").is_file()  # saved for review even when rejected


@pytest.mark.slow
def test_a_read_only_plan_runs_without_approval(workspace: Path) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(READ_PLAN)) as server:
        proc = planloom(*plan_args(server, "--json", goal=READ), cwd=workspace)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    result = one_json(proc.stdout)
    assert result["status"] == "succeeded"
    assert result["steps"]["read_a"]["output"]["content"] == "apples"


# -- configuration errors before any step ---------------------------------------------------------


@pytest.mark.slow
def test_a_refused_key_exits_2_before_any_step(workspace: Path) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(WRITE_PLAN), api_key="right") as server:
        proc = planloom(
            *plan_args(server, "--yes", "--json", "-o", "out.yaml"),
            cwd=workspace,
            environ=env(OPENAI_API_KEY="wrong"),
        )
        assert server.requests == []  # only the preflight reached the server
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    assert "401" in proc.stderr
    assert "wrong" not in proc.stderr
    result = one_json(proc.stdout)
    assert result["status"] == "invalid"
    assert result["steps"] == {}
    assert not (workspace / "out.yaml").exists()
    assert not (workspace / "work" / "out").exists()


@pytest.mark.slow
def test_the_right_key_is_sent(workspace: Path) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(READ_PLAN), api_key="right") as server:
        proc = planloom(
            *plan_args(server, goal=READ), cwd=workspace, environ=env(OPENAI_API_KEY="right")
        )
        assert server.headers[0]["authorization"] == "Bearer right"
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_a_missing_model_exits_2(workspace: Path) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(WRITE_PLAN)) as server:
        proc = planloom(
            "plan", GOAL, "--base-url", server.base_url, "--capabilities", "caps.yaml", "--yes",
            cwd=workspace,
        )  # fmt: skip
        assert server.requests == []
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    assert "--model" in proc.stderr
    assert not (workspace / "work" / "out").exists()


@pytest.mark.slow
def test_the_model_can_come_from_the_environment(workspace: Path) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(READ_PLAN)) as server:
        proc = planloom(
            "plan", READ, "--capabilities", "caps.yaml", cwd=workspace,
            environ=env(PLANLOOM_MODEL="env-model", OPENAI_BASE_URL=server.base_url),
        )  # fmt: skip
        assert [r.model for r in server.requests] == ["env-model"]
    assert proc.returncode == 0, proc.stderr


def test_a_missing_key_for_a_remote_endpoint_exits_2(workspace: Path) -> None:
    proc = planloom(
        "plan", GOAL, "--base-url", "https://models.example.invalid/v1", "--model", "m",
        "--capabilities", "caps.yaml", "--yes", cwd=workspace,
    )  # fmt: skip
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    assert "OPENAI_API_KEY" in proc.stderr


@pytest.mark.slow
def test_an_agent_recipe_without_a_model_exits_2(tmp_path: Path) -> None:
    (tmp_path / "jail").mkdir()
    (tmp_path / "agent.yaml").write_text(AGENT_RECIPE, encoding="utf-8")
    proc = planloom("run", "agent.yaml", "--yes", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    assert "model" in proc.stderr


# -- an agent step through the sandbox ------------------------------------------------------------

AGENT_RECIPE = textwrap.dedent(
    """\
    version: 1
    name: scribe
    capabilities:
      fs: {root: jail, read: true, write: true}
    steps:
      - id: scribe
        agent:
          goal: Write the notes
          tools: [fs.write]
          max_iterations: 4
    """
)


@pytest.mark.slow
def test_an_agent_steps_tool_calls_go_through_the_sandbox(tmp_path: Path) -> None:
    (tmp_path / "jail").mkdir()
    (tmp_path / "agent.yaml").write_text(AGENT_RECIPE, encoding="utf-8")
    outside = tmp_path / "outside.txt"
    model = ScriptedModel.sequence(
        ChatReply(
            tool_calls=[
                ToolCall("fs__write", {"path": "inside.txt", "content": "in the jail"}),
                ToolCall("fs__write", {"path": "../outside.txt", "content": "escaped"}),
                ToolCall("fs__write", {"path": str(outside), "content": "escaped"}),
            ]
        ),
        "Wrote inside.txt; the two writes outside the folder were denied.",
    )
    with FakeOpenAIServer(model) as server:
        proc = planloom(
            "run", "agent.yaml", "--base-url", server.base_url, "--model", "m", "--yes",
            "--json", cwd=tmp_path,
        )  # fmt: skip
        assert len(server.requests) == 2
        observations = [text for _, text in server.requests[1].tool_results()]
        assert server.requests[0].tool_names() == ["fs__write"]
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "jail" / "inside.txt").read_text() == "in the jail"
    assert not outside.exists()

    result = one_json(proc.stdout)
    step = result["steps"]["scribe"]
    assert step["status"] == "succeeded"
    assert step["output"].startswith("Wrote inside.txt")
    # one turn's calls run concurrently: the transcript is in the order they ended
    by_path = {e["arguments"]["path"]: e for e in step["transcript"]}
    assert len(step["transcript"]) == 3
    assert {path: (e["tool"], e["status"]) for path, e in by_path.items()} == {
        "inside.txt": ("fs.write", "ok"),
        "../outside.txt": ("fs.write", "error"),
        str(outside): ("fs.write", "error"),
    }
    assert "fs.outside-root" in by_path["../outside.txt"]["detail"]
    assert "fs.absolute-path" in by_path[str(outside)]["detail"]
    assert len(observations) == 3
    assert not observations[0].startswith("error")
    assert observations[1].startswith("error")
    assert observations[2].startswith("error")
    assert result["usage"]["llm_calls"] == 2


@pytest.mark.slow
def test_an_agent_write_is_gated_without_yes(tmp_path: Path) -> None:
    (tmp_path / "jail").mkdir()
    (tmp_path / "agent.yaml").write_text(AGENT_RECIPE, encoding="utf-8")
    model = ScriptedModel.sequence(
        ChatReply(tool_calls=[ToolCall("fs__write", {"path": "inside.txt", "content": "x"})]),
        "The write was denied.",
    )
    with FakeOpenAIServer(model) as server:
        proc = planloom(
            "run", "agent.yaml", "--base-url", server.base_url, "--model", "m", "--json",
            cwd=tmp_path,
        )  # fmt: skip
    no_traceback(proc)
    assert not (tmp_path / "jail" / "inside.txt").exists()
    transcript = one_json(proc.stdout)["steps"]["scribe"]["transcript"]
    assert [(e["tool"], e["status"]) for e in transcript] == [("fs.write", "error")]


# -- transient model errors -----------------------------------------------------------------------


@pytest.mark.slow
def test_a_429_is_retried_and_the_run_succeeds(workspace: Path) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(READ_PLAN)) as server:
        server.inject(Fault.status(429))
        proc = planloom(*plan_args(server, "--json", goal=READ), cwd=workspace)  # really sleeps 1 s
        assert len(server.requests) == 2
        assert len(server.model.calls) == 1
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    result = one_json(proc.stdout)
    assert result["status"] == "succeeded"
    assert result["usage"]["llm_calls"] == 1
