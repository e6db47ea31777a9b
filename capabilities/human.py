"""The `human` family: `human.ask` puts a typed question to the person running the plan.

The answer comes from the run's approver: asked at the terminal, or, when nobody is there
(`--yes`, `--no`, no terminal), the question's `default` — and with no default the step
fails saying how to answer it.
"""

from __future__ import annotations

from engine.approval.questions import Answer, Question, parse_answer
from engine.capability import Action, CallContext, EmptyGrant, Family, Registry
from engine.errors import StepFailed

__all__ = ["Answer", "Question", "parse_answer", "register"]


async def _ask(params: Question, ctx: CallContext) -> Answer:
    if ctx.ask is None:
        raise StepFailed("human.ask: nobody can be asked in this run")
    return Answer(answer=await ctx.ask(ctx.step_id or "?", params))


def register(registry: Registry) -> None:
    """Add the `human` family and `human.ask`."""
    registry.add_family(
        Family(
            "human",
            "questions to the person running the plan",
            EmptyGrant,
            for_agents=False,
            portable=False,  # the person is at this process's terminal
        )
    )
    registry.add(
        Action(
            "human.ask",
            "Ask the person a typed question (string, boolean, integer, number, choice)",
            Question,
            _ask,
            result_model=Answer,
            side_effects=False,
            recorded=False,  # the model's answers / the person's are recorded instead
            param_docs={
                "question": "What the person is asked.",
                "type": "The answer's type: string, boolean, integer, number or choice.",
                "choices": "The answers to choose from (type: choice).",
                "default": "The answer when the person just presses Enter.",
            },
        )
    )
