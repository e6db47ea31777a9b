"""A run's gates and questions: each gate decision and each answer published as an event,
a denial or a skipped call raised as the step's error; and in a dry run, the steps skipped
rather than risk a side effect."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from engine._graph import step_dependencies
from engine.approval import Gatekeeper
from engine.approval.questions import Question
from engine.capability import Registry
from engine.errors import ApprovalDenied, OutcomeUnknown
from engine.events import EventBus
from engine.model import Step
from engine.results import StepResult


class RunGates:
    """What the sandbox asks for a gated call (`gate`) and a question (`ask`), through the
    run's `Gatekeeper`, with every decision audited on the run's events."""

    def __init__(self, gatekeeper: Gatekeeper, events: EventBus) -> None:
        self.gatekeeper = gatekeeper
        self.events = events

    async def ask(self, step_id: str, question: BaseModel) -> Any:
        assert isinstance(question, Question)
        answer = await self.gatekeeper.ask(step_id, question)
        self.events.emit("human.answered", step_id, question=question.question)
        return answer

    async def gate(
        self,
        step_id: str,
        action: str,
        params: Any,
        reason: str,
        validate: Callable[[Any], str | None],
        /,
        *,
        replayed: bool = False,
        in_doubt: bool = False,
    ) -> Any:
        decision = await self.gatekeeper.decide(
            step_id, action, params, reason, validate, replayed=replayed, in_doubt=in_doubt
        )
        # Every decision is audited with its source (`by`): approved or not.
        edited = decision.edited_params is not None
        detail = (
            {"params_hash": decision.params_hash, "edited": edited}
            if decision.approved
            else {"reason": decision.reason}
        )
        self.events.emit(
            "gate.decided",
            step_id,
            action=action,
            approved=decision.approved,
            by=decision.by,
            in_doubt=in_doubt or None,
            **detail,
        )
        if decision.skip:  # not made, as if its outcome were unknown: the step's rules apply
            raise OutcomeUnknown(decision.reason or "skipped", step_id=step_id)
        if not decision.approved:
            raise ApprovalDenied(decision.reason, step_id=step_id, in_doubt=in_doubt)
        return decision.edited_params if edited else params


def dry_skip(step: Step, unknown: set[str], registry: Registry) -> StepResult | None:
    """In a dry run: skip steps needing outputs no one produced (`unknown`, to which a
    skipped step is added), and agent steps that could make a call with side effects (one
    whose tools are all read-only runs)."""
    needs = [dep for dep in step_dependencies(step) if dep in unknown]
    if needs:
        unknown.add(step.id)
        return StepResult(
            status="skipped",
            error=f"dry run: needs the output of '{needs[0]}', unknown in a dry run",
        )
    if step.agent is not None:
        writers = [name for name in step.agent.tools if not _read_only(registry, name)]
        if writers:
            unknown.add(step.id)
            return StepResult(
                status="skipped",
                error=f"dry run: the agent may call {writers[0]}, which has side effects",
            )
    return None


def _read_only(registry: Registry, name: str) -> bool:
    action = registry.get(name)
    return action is not None and action.side_effects is False
