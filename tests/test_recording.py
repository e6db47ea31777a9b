"""Record and replay, end to end: the real console script in a subprocess, a scripted
model behind a real OpenAI-compatible HTTP server on 127.0.0.1 (`FakeOpenAIServer`), real
tools on real files.

Shown here (the README's "Record and replay"):
- a recorded run replays with the server stopped: same statuses, outputs and call counts,
  with no side effect made and no model reached; a re-record is byte-identical;
- a changed prompt, a deleted entry or a changed gated call fails the replay, naming the
  step and showing the nearest recording with a field-level diff; `can_fail` does not hide
  it; unused recordings are reported;
- a planted API key and secret tool output never reach the cassette;
- the modes `none`, `once`, `new_episodes`, `all`, and `--live-tools`;
- broken cassettes are configuration errors (exit 2) that say what is wrong.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _procs import TIMEOUT, env, planloom
from ruamel.yaml import YAML

from engine.recording import Cassette, field_diff
from engine.testing import ChatReply, ChatRequest, FakeOpenAIServer, ScriptedModel, ToolCall

ROOT = Path(__file__).resolve().parent.parent

RECIPE = """\
version: 1
name: brief
inputs:
  topic: {type: string, default: stock}
llm: {model: scripted}
capabilities:
  fs: {root: data, read: true, write: ["out/**"]}
  llm: {}
  human: {}
steps:
  - id: notes
    tool: fs.read
    params: {path: notes.txt}
  - id: listing
    tool: fs.list
    params: {path: "."}
  - id: summary
    tool: llm.complete
    params:
      prompt: "Summarise the notes about ${{ inputs.topic }}: ${{ steps.notes.output.content }}"
  - id: research
    agent: {goal: "Find the risks in notes.txt", tools: [fs.read], max_iterations: 4}
  - id: audience
    tool: human.ask
    params: {question: "Who reads this?", default: team}
  - id: save
    tool: fs.write
    params:
      path: out/brief.md
      content: |-
        ${{ steps.summary.output.text }} | ${{ steps.research.output }}
        for: ${{ steps.audience.output.answer }}
      create_dirs: true
outputs:
  summary: ${{ steps.summary.output.text }}
  risks: ${{ steps.research.output }}
  files: ${{ steps.listing.output.paths }}
"""


def scripted(request: ChatRequest) -> ChatReply | str:
    """Answers that depend on the request, so a changed request gets a changed answer."""
    if request.tools:
        results = request.tool_results()
        if not results:
            return ChatReply(tool_calls=[ToolCall("fs__read", {"path": "notes.txt"}, id="c1")])
        return f"risk: {results[-1][1].count('late')} late deliveries"
    return f"{len(request.last_user_text().split())} words summarised"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text(
        "Supplier is late again.\nShipments late twice in May.\n", encoding="utf-8"
    )
    (tmp_path / "brief.yaml").write_text(RECIPE, encoding="utf-8")
    return tmp_path


def record(project: Path, cassette: str = "brief.cassette.yaml", *extra: str) -> dict[str, Any]:
    """Record the recipe against a fresh scripted server; the run's JSON result."""
    with FakeOpenAIServer(ScriptedModel(scripted)) as server:
        done = planloom(
            "run", "brief.yaml", "--base-url", server.base_url, "--record", cassette,
            "--yes", "--json", *extra, cwd=project,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    """What a replay reproduces: all but the step durations (a cassette holds no times)."""
    steps = {
        step_id: {k: v for k, v in step.items() if k != "duration"}
        for step_id, step in result["steps"].items()
    }
    return {"steps": steps, **{k: result[k] for k in ("status", "outputs", "usage")}}


def edit_cassette(path: Path, change: Any) -> None:
    yaml = YAML(typ="safe")
    data = yaml.load(path.read_text(encoding="utf-8"))
    change(data)
    with path.open("w", encoding="utf-8") as stream:
        yaml.dump(data, stream)


# -- record, stop the server, replay ----------------------------------------------------


@pytest.mark.slow
def test_a_replay_with_the_server_stopped_matches_the_recorded_run(project: Path) -> None:
    recorded = record(project)
    assert recorded["status"] == "succeeded"
    assert recorded["usage"]["llm_calls"] == 3  # summary, and the agent's two turns
    (project / "data" / "out" / "brief.md").unlink()  # made by the recorded run

    replayed = planloom(
        "run", "brief.yaml", "--replay", "brief.cassette.yaml", "--json", cwd=project
    )

    assert replayed.returncode == 0, replayed.stderr
    result = json.loads(replayed.stdout)
    assert comparable(result) == comparable(recorded)
    # the recording run timed its steps; a replay has no times of its own to give
    assert all(step["duration"] > 0 for step in recorded["steps"].values())
    assert all(step["duration"] is None for step in result["steps"].values())
    assert result["replay"]["mismatches"] == []
    assert result["replay"]["unused"] == []
    assert not (project / "data" / "out" / "brief.md").exists(), "a replay made a side effect"
    assert "nothing is live" in replayed.stderr


@pytest.mark.slow
def test_planloom_replay_runs_the_cassettes_own_plan(project: Path) -> None:
    recorded = record(project)
    (project / "brief.yaml").unlink()  # the cassette holds the plan

    replayed = planloom("replay", "brief.cassette.yaml", "--json", cwd=project)

    assert replayed.returncode == 0, replayed.stderr
    assert comparable(json.loads(replayed.stdout)) == comparable(recorded)


@pytest.mark.slow
def test_a_replay_reaches_no_model_even_when_one_is_up(project: Path) -> None:
    record(project)
    model = ScriptedModel(scripted)
    with FakeOpenAIServer(model) as server:
        replayed = planloom(
            "run", "brief.yaml", "--replay", "brief.cassette.yaml", "--base-url", server.base_url,
            cwd=project,
        )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    assert model.calls == []


@pytest.mark.slow
def test_recording_the_same_run_again_gives_a_byte_identical_cassette(project: Path) -> None:
    record(project, "first.yaml")
    shutil.rmtree(project / "data" / "out")  # what the first run wrote: fs.list would see it
    record(project, "second.yaml")
    first = (project / "first.yaml").read_bytes()
    assert first == (project / "second.yaml").read_bytes()
    assert b"run_id" not in first
    assert b"latency" not in first


@pytest.mark.slow
def test_a_cassette_holds_every_kind_of_entry(project: Path) -> None:
    record(project)
    cassette = Cassette.load(project / "brief.cassette.yaml")
    assert cassette.plan is not None
    assert cassette.plan["name"] == "brief"
    assert cassette.model == "scripted"
    # the agent's two turns differ (the second carries the tool result): two keys, #0 each
    assert sorted((e.step, e.ordinal) for e in cassette.llm) == [
        ("research", 0),
        ("research", 0),
        ("summary", 0),
    ]
    assert len({e.key for e in cassette.llm}) == 3
    assert {(t.step, t.action) for t in cassette.tools} == {
        ("notes", "fs.read"),
        ("listing", "fs.list"),
        ("research", "fs.read"),
        ("save", "fs.write"),
    }
    assert [(a.step, a.action, a.approved, a.by) for a in cassette.approvals] == [
        ("save", "fs.write", True, "--yes")
    ]
    assert [(a.step, a.question, a.answer) for a in cassette.answers] == [
        ("audience", "Who reads this?", "team")
    ]
    text = (project / "brief.cassette.yaml").read_text(encoding="utf-8")
    assert "authorization" not in text.lower()
    assert "headers" not in text


# -- mismatches ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_changed_prompt_fails_naming_the_step_with_a_diff(project: Path) -> None:
    record(project)
    recipe = project / "brief.yaml"
    recipe.write_text(recipe.read_text().replace("Summarise the notes", "Summarize the notes"))

    replayed = planloom(
        "run", "brief.yaml", "--replay", "brief.cassette.yaml", "--json", cwd=project
    )

    assert replayed.returncode == 1
    result = json.loads(replayed.stdout)
    assert result["status"] == "failed"
    assert result["steps"]["summary"]["status"] == "failed"
    assert "step 'summary' made a model request" in replayed.stderr
    assert "nearest recorded request: step 'summary'" in replayed.stderr
    assert "  messages[0].content:\n" in replayed.stderr  # a multi-line text: a line diff
    assert "-Summarise the notes about stock: Supplier is late again." in replayed.stderr
    assert "+Summarize the notes about stock: Supplier is late again." in replayed.stderr
    assert result["replay"]["mismatches"][0].startswith("replay: step 'summary'")


@pytest.mark.slow
def test_a_deleted_tool_entry_fails_naming_the_step_and_runs_nothing(project: Path) -> None:
    record(project)
    cassette = project / "brief.cassette.yaml"
    edit_cassette(
        cassette, lambda d: d.update(tools=[t for t in d["tools"] if t["step"] != "save"])
    )
    (project / "data" / "out" / "brief.md").unlink()

    replayed = planloom("run", "brief.yaml", "--replay", cassette, "--json", cwd=project)

    assert replayed.returncode == 1
    assert json.loads(replayed.stdout)["steps"]["save"]["status"] == "failed"
    assert "step 'save' (attempt 1) called fs.write with params that" in replayed.stderr
    assert "nothing was run" in replayed.stderr
    assert "the cassette has no tool calls for this step" in replayed.stderr
    assert not (project / "data" / "out" / "brief.md").exists()


@pytest.mark.slow
def test_a_deleted_model_entry_fails_naming_the_agent_step(project: Path) -> None:
    record(project)
    cassette = project / "brief.cassette.yaml"

    def drop_second_turn(data: dict[str, Any]) -> None:
        turns = [e for e in data["llm"] if e["step"] == "research"]
        data["llm"].remove(turns[1])

    edit_cassette(cassette, drop_second_turn)

    replayed = planloom("run", "brief.yaml", "--replay", cassette, "--json", cwd=project)

    assert replayed.returncode == 1
    assert json.loads(replayed.stdout)["steps"]["research"]["status"] == "failed"
    assert "step 'research' made a model request" in replayed.stderr
    # the nearest is the first turn: the second one adds the tool call and its result
    assert "messages[2]: absent in the recording" in replayed.stderr


@pytest.mark.slow
def test_a_changed_gated_call_has_no_decision_and_fails(project: Path) -> None:
    record(project)
    recipe = project / "brief.yaml"
    recipe.write_text(recipe.read_text().replace("out/brief.md", "out/other.md"))

    replayed = planloom("run", "brief.yaml", "--replay", "brief.cassette.yaml", cwd=project)

    assert replayed.returncode == 1
    assert "step 'save' reached a gate for fs.write" in replayed.stderr
    assert 'path: recorded "out/brief.md", now "out/other.md"' in replayed.stderr


@pytest.mark.slow
def test_can_fail_does_not_hide_a_mismatch(project: Path) -> None:
    record(project)
    recipe = project / "brief.yaml"
    text = recipe.read_text().replace("Summarise the notes", "Summarize the notes")
    recipe.write_text(
        text.replace("    tool: llm.complete\n", "    tool: llm.complete\n    can_fail: true\n")
    )

    replayed = planloom(
        "run", "brief.yaml", "--replay", "brief.cassette.yaml", "--json", cwd=project
    )

    assert replayed.returncode == 1
    assert json.loads(replayed.stdout)["steps"]["summary"]["status"] == "failed"


@pytest.mark.slow
def test_unused_recordings_are_reported(project: Path) -> None:
    record(project)
    recipe = project / "brief.yaml"
    text = recipe.read_text()
    text = text.replace('  - id: listing\n    tool: fs.list\n    params: {path: "."}\n', "")
    recipe.write_text(text.replace("  files: ${{ steps.listing.output.paths }}\n", ""))

    replayed = planloom(
        "run", "brief.yaml", "--replay", "brief.cassette.yaml", "--json", cwd=project
    )

    assert replayed.returncode == 0, replayed.stderr
    unused = json.loads(replayed.stdout)["replay"]["unused"]
    assert unused == ["tool call of step 'listing' attempt 1: fs.list #0 (params hash "
                      + unused[0].split("params hash ")[1]]  # fmt: skip
    assert "1 recording(s) in brief.cassette.yaml were not used" in replayed.stderr
    assert "unused: tool call of step 'listing'" in replayed.stderr


# -- secrets ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_planted_api_key_and_secret_tool_output_never_reach_the_cassette(
    project: Path,
) -> None:
    key = "sk-planted-0123456789abcdefXYZ"
    token = "tok-7c1d9e2f4a6b8c0d"
    notes = project / "data" / "notes.txt"
    notes.write_text(f"Supplier is late.\ndeploy token: {token}\n", encoding="utf-8")
    secrets = env(OPENAI_API_KEY=key, DEPLOY_TOKEN=token)
    with FakeOpenAIServer(ScriptedModel(scripted), api_key=key) as server:
        done = planloom(
            "run", "brief.yaml", "--base-url", server.base_url, "--record", "c.yaml", "--yes",
            cwd=project, environ=secrets,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = (project / "c.yaml").read_text(encoding="utf-8")
    for secret in (key, token):
        for form in (secret, base64.b64encode(secret.encode()).decode(), secret.encode().hex()):
            assert form not in text
    assert "deploy token: [REDACTED]" in text  # in the tool output and in the prompt
    assert text.count("[REDACTED]") >= 2

    # and the redacted recording still replays, with the secret gone from the environment
    replayed = planloom("run", "brief.yaml", "--replay", "c.yaml", cwd=project)
    assert replayed.returncode == 0, replayed.stderr


# -- modes -----------------------------------------------------------------------------


def test_mode_none_with_no_cassette_is_a_configuration_error(project: Path) -> None:
    done = planloom("run", "brief.yaml", "--replay", "missing.yaml", cwd=project)
    assert done.returncode == 2
    assert "cassette missing.yaml does not exist; record it first with --record" in done.stderr


@pytest.mark.slow
def test_mode_once_records_when_missing_then_replays(project: Path) -> None:
    model = ScriptedModel(scripted)
    with FakeOpenAIServer(model) as server:
        args = ("run", "brief.yaml", "--base-url", server.base_url, "--record", "c.yaml",
                "--record-mode", "once", "--yes")  # fmt: skip
        first = planloom(*args, cwd=project)
        assert first.returncode == 0, first.stderr
        calls = len(model.calls)
        second = planloom(*args, cwd=project)
    assert second.returncode == 0, second.stderr
    assert calls == 3
    assert len(model.calls) == 3
    assert "recording to c.yaml" in first.stderr
    assert "replaying c.yaml" in second.stderr


@pytest.mark.slow
def test_mode_new_episodes_records_only_what_is_missing(project: Path) -> None:
    record(project)
    cassette = project / "brief.cassette.yaml"
    edit_cassette(cassette, lambda d: d.update(llm=[e for e in d["llm"] if e["step"] != "summary"]))
    model = ScriptedModel(scripted)
    with FakeOpenAIServer(model) as server:
        done = planloom(
            "run", "brief.yaml", "--base-url", server.base_url, "--record", cassette,
            "--record-mode", "new_episodes", "--yes", cwd=project,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(model.calls) == 1  # only the summary was asked live
    assert "Summarise the notes" in model.calls[0].last_user_text()
    assert sorted(e.step for e in Cassette.load(cassette).llm) == [
        "research",
        "research",
        "summary",
    ]
    assert planloom("run", "brief.yaml", "--replay", cassette, cwd=project).returncode == 0


@pytest.mark.slow
def test_mode_all_records_everything_again(project: Path) -> None:
    record(project)
    model = ScriptedModel(scripted)
    with FakeOpenAIServer(model) as server:
        done = planloom(
            "run", "brief.yaml", "--base-url", server.base_url, "--record",
            "brief.cassette.yaml", "--record-mode", "all", "--yes", cwd=project,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(model.calls) == 3


@pytest.mark.slow
def test_live_tools_run_reads_for_real_and_still_serve_side_effects(project: Path) -> None:
    record(project)
    (project / "data" / "new.txt").write_text("added after the recording\n")
    (project / "data" / "out" / "brief.md").unlink()

    served = planloom("run", "brief.yaml", "--replay", "brief.cassette.yaml", "--json", cwd=project)
    live = planloom(
        "run", "brief.yaml", "--replay", "brief.cassette.yaml", "--live-tools", "--json",
        cwd=project,
    )  # fmt: skip

    assert served.returncode == 0, served.stderr
    assert live.returncode == 0, live.stderr
    assert "new.txt" not in json.loads(served.stdout)["outputs"]["files"]
    assert "new.txt" in json.loads(live.stdout)["outputs"]["files"]
    assert not (project / "data" / "out" / "brief.md").exists()


@pytest.mark.slow
def test_record_mode_without_a_cassette_and_dry_run_with_one_are_usage_errors(
    project: Path,
) -> None:
    alone = planloom("run", "brief.yaml", "--record-mode", "once", cwd=project)
    dry = planloom("run", "brief.yaml", "--replay", "x.yaml", "--dry-run", cwd=project)
    both = planloom("run", "brief.yaml", "--replay", "x.yaml", "--record", "y.yaml", cwd=project)
    assert alone.returncode == 2
    assert "need a cassette" in alone.stderr
    assert dry.returncode == 2
    assert "--dry-run cannot be combined" in dry.stderr
    assert both.returncode == 2
    assert "not allowed with argument" in both.stderr


# -- broken cassettes ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("steps: [\n", "not valid YAML"),
        ("version: 1\nsteps: []\n", "not a planloom cassette"),
        ("planloom_cassette: 9\n", "format 9 is not supported"),
        ("planloom_cassette: 1\nllm: [{step: x}]\n", "llm.0.key: Field required"),
        (
            "planloom_cassette: 1\ngoal: hi\nbase: {llm: {model: 5}}\n",
            "base.llm.model: Input should be a valid string",
        ),
    ],
)
def test_a_broken_cassette_says_what_is_wrong(project: Path, text: str, message: str) -> None:
    (project / "bad.yaml").write_text(text, encoding="utf-8")
    done = planloom("replay", "bad.yaml", cwd=project)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


# -- the shipped main job --------------------------------------------------------------


@pytest.mark.slow
def test_the_shipped_main_job_replays_offline() -> None:
    done = planloom("replay", "recipes/main-job/cassette.yaml", "--json", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert {k: v["status"] for k, v in result["steps"].items()} == dict.fromkeys(
        ["files", "lines", "todos", "review", "save"], "succeeded"
    )
    assert "scripted model" in done.stderr
    assert "planning: Review the sample project" in done.stderr
    assert "gate: save fs.write approved (recorded)" in done.stderr  # replayed, not re-asked
    assert 'agent review: fs.read {"path": "app.py"} → ok' in done.stderr
    assert result["usage"]["llm_calls"] == 3


@pytest.mark.slow
def test_re_recording_the_main_job_reproduces_the_shipped_cassette(tmp_path: Path) -> None:
    folder = tmp_path / "main-job"
    shutil.copytree(ROOT / "recipes" / "main-job", folder, ignore=shutil.ignore_patterns("out"))
    done = subprocess.run(
        [sys.executable, str(folder / "record.py"), str(tmp_path / "again.yaml")],
        env=env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "again.yaml").read_bytes() == (folder / "cassette.yaml").read_bytes()


# -- the diff --------------------------------------------------------------------------


def test_field_diff_names_each_differing_field() -> None:
    recorded = {"model": "a", "messages": [{"role": "user", "content": "x"}], "t": 1}
    now = {"model": "b", "messages": [{"role": "user", "content": "x"}, {"role": "x"}], "u": 2}
    assert field_diff(recorded, now) == [
        'model: recorded "a", now "b"',
        'messages[1]: absent in the recording, now {"role": "x"}',
        "t: recorded 1, now absent",
        "u: absent in the recording, now 2",
    ]
    assert field_diff({"a": [1, 2]}, {"a": [1, 2]}) == []
    assert field_diff(1, 1.0) == ["value: recorded 1, now 1.0"]


def test_field_diff_shows_long_texts_as_a_line_diff() -> None:
    diff = field_diff({"p": "one\ntwo\nthree"}, {"p": "one\n2\nthree"})
    assert diff[0] == "p:"
    assert "    -two" in diff
    assert "    +2" in diff


def test_snapshots_of_two_replays_are_equal_text_without_run_ids_or_times() -> None:
    from engine.testing import replay

    first = replay(ROOT / "recipes" / "main-job" / "cassette.yaml")
    second = replay(ROOT / "recipes" / "main-job" / "cassette.yaml")

    assert first.run_id == second.run_id  # made from the cassette, as everything else
    assert first.model_dump_json() == second.model_dump_json()
    assert first.snapshot() == second.snapshot()
    snapshot = json.loads(first.snapshot())
    assert list(snapshot["steps"]) == sorted(snapshot["steps"])
    assert first.run_id not in first.snapshot()
    assert all("at" not in decision for decision in snapshot["approvals"])
    assert snapshot["replay"] == {"mismatches": [], "unused": []}


@pytest.mark.slow
def test_for_each_items_have_their_own_answers_and_tool_results(tmp_path: Path) -> None:
    (tmp_path / "ask.yaml").write_text(
        """\
version: 1
name: ask
capabilities: {human: {}, fs: {root: ., read: true}}
steps:
  - id: ask
    for_each: [1, 2]
    tool: human.ask
    params: {question: "Continue?", type: boolean, default: true}
  - id: read
    for_each: ["ask.yaml", "ask.yaml"]
    tool: fs.read
    params: {path: "${{ item }}"}
""",
        encoding="utf-8",
    )
    done = planloom("run", "ask.yaml", "--record", "c.yaml", "--yes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    cassette = Cassette.load(tmp_path / "c.yaml")
    assert [(a.step, a.ordinal) for a in cassette.answers] == [("ask[0]", 0), ("ask[1]", 0)]
    assert [(t.step, t.ordinal) for t in cassette.tools] == [("read[0]", 0), ("read[1]", 0)]
    assert planloom("run", "ask.yaml", "--replay", "c.yaml", cwd=tmp_path).returncode == 0
