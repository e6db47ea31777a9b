"""`human.ask`: typed questions answered by the approver, a terminal, or a default."""

from __future__ import annotations

import sys
from pathlib import Path

import pexpect
import pytest

from capabilities import Registry
from engine.approval import ApproveAll, FailClosed
from engine.testing import ScriptedApprover, run_recipe_text

RECIPE = """
version: 1
name: ask
capabilities: {{human: {{}}}}
steps:
  - id: q
    tool: human.ask
    params: {params}
outputs:
  answer: ${{{{ steps.q.output.answer }}}}
"""


def recipe(params: str) -> str:
    return RECIPE.format(params=params)


def test_the_approver_answers_and_the_answer_flows_to_outputs(registry: Registry) -> None:
    approver = ScriptedApprover(answers={"q": [7]})
    result = run_recipe_text(
        recipe("{question: 'How many?', type: integer}"), registry, approver=approver
    )
    assert result.status == "succeeded"
    assert result.outputs == {"answer": 7}
    [(step_id, question)] = approver.questions
    assert (step_id, question.question, question.type) == ("q", "How many?", "integer")


def test_unattended_run_takes_the_default(registry: Registry) -> None:
    result = run_recipe_text(
        recipe("{question: 'Mode?', type: choice, choices: [fast, safe], default: safe}"),
        registry,
        approver=ApproveAll(),
    )
    assert result.outputs == {"answer": "safe"}


def test_unattended_run_without_default_fails_the_step_saying_how(registry: Registry) -> None:
    result = run_recipe_text(recipe("{question: 'Name?'}"), registry, approver=FailClosed())
    step = result.steps["q"]
    assert step.status == "failed"
    assert "no default" in (step.error or "")
    assert "terminal" in (step.error or "")


@pytest.mark.parametrize(
    ("params", "rule_text"),
    [
        ("{question: 'Pick', type: choice}", "needs 'choices'"),
        ("{question: 'Pick', choices: [a]}", "needs type: choice"),
        ("{question: 'N?', type: integer, default: many}", "whole number"),
        ("{question: ''}", "at least 1 character"),
    ],
)
def test_malformed_questions_are_validation_errors(
    registry: Registry, params: str, rule_text: str
) -> None:
    from engine.errors import PlanValidationError

    with pytest.raises(PlanValidationError) as info:
        run_recipe_text(recipe(params), registry)
    assert any(rule_text in d.message for d in info.value.diagnostics), info.value.diagnostics


def test_human_needs_a_grant(registry: Registry) -> None:
    from engine.errors import PlanValidationError

    text = recipe("{question: 'x'}").replace("capabilities: {human: {}}", "capabilities: {}")
    with pytest.raises(PlanValidationError) as info:
        run_recipe_text(text, registry)
    assert [d.rule for d in info.value.diagnostics] == ["not-granted"]


def test_terminal_asks_again_after_a_bad_answer(tmp_path: Path) -> None:
    path = tmp_path / "ask.yaml"
    path.write_text(recipe("{question: 'How many workers?', type: integer}"))
    planloom = str(Path(sys.executable).parent / "planloom")
    child = pexpect.spawn(
        planloom, ["run", str(path), "--json"], cwd=str(tmp_path), timeout=30, encoding="utf-8"
    )
    child.expect("step 'q' asks: How many workers\\? \\(a whole number\\)")
    child.sendline("lots")
    child.expect("answer with a whole number")
    child.sendline("12")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert '"answer": 12' in (child.before or "")
