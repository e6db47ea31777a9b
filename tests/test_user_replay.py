"""Tests written as a planloom user writes them: `replay()`, the `planloom` marker and the
`planloom_cassette` fixture, nothing private.

One test replays the shipped main-job recording (a goal planned by a scripted model);
the other runs a recipe of its own that needs a model, against a cassette at the default
path (`cassettes/test_user_replay/<test>.yaml`), recorded once with
`pytest --planloom-record-mode=once` and replayed offline by every later run: the fake
model server then receives no request at all.
"""

import pytest

from engine.testing import CassetteRef, ChatRequest, FakeOpenAIServer, ScriptedModel, replay

SUMMARY = "The importer is done and ships on Friday if staging is back by Thursday."


@pytest.mark.planloom(cassette="../recipes/main-job/cassette.yaml")
def test_shipped_main_job_recording_replays(planloom_cassette: CassetteRef) -> None:
    result = replay(planloom_cassette)

    assert result.status == "succeeded"
    assert {step_id: step.status for step_id, step in result.steps.items()} == {
        "files": "succeeded",
        "lines": "succeeded",
        "todos": "succeeded",
        "review": "succeeded",
        "save": "succeeded",
    }
    assert result.outputs["risks"].splitlines() == [
        "1. reserve() is not atomic: two clients can oversell stock.",
        "2. load_stock() crashes when the stock file is missing.",
        "3. reserve() has no tests (NOTES.md).",
    ]
    assert result.outputs["report"] == "out/report.md"
    assert result.usage.llm_calls == 3  # the planner, then the agent's two turns
    assert result.replay is not None
    assert result.replay.mismatches == []
    assert result.replay.unused == []


def summariser(request: ChatRequest) -> str:
    """The scripted model: a one-line summary of the notes it is given."""
    notes = request.last_user_text()
    if "importer" not in notes:
        return "There is nothing to summarise."
    return SUMMARY


@pytest.mark.planloom
def test_summarise_replays_without_reaching_the_model(
    planloom_cassette: CassetteRef, request: pytest.FixtureRequest
) -> None:
    recipe = request.path.parent / "data" / "user_replay" / "summarise.yaml"
    model = ScriptedModel(summariser)
    with FakeOpenAIServer(model) as server:
        result = replay(
            planloom_cassette,
            recipe,
            model="scripted-summariser",
            base_url=server.base_url,
            approve=True,
        )

    assert result.status == "succeeded"
    assert {step_id: step.status for step_id, step in result.steps.items()} == {
        "notes": "succeeded",
        "summary": "succeeded",
    }
    assert result.steps["notes"].output["content"].startswith("Standup, Tuesday.\n")
    assert result.outputs == {"summary": SUMMARY}
    assert result.usage.llm_calls == 1
    if planloom_cassette.mode == "none":  # a replay: every answer came from the cassette
        assert len(model.calls) == 0
