"""A cassette's decisions and answers: gate decisions, `human.ask` answers and the review of
a model-written plan, recorded or served (a recorded decision answers only a call whose
result is served too)."""

from __future__ import annotations

import difflib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from engine._support.scope import PLAN_REVIEW, current_scope
from engine.approval import GateRequest
from engine.approval.questions import Question
from engine.errors import ReplayMismatch
from engine.recording._mismatch import field_diff, gate_miss, where
from engine.recording.cassette import RECORDED, Answer, Approval
from engine.recording.cassette import digest as hash_of
from engine.results import Decision

if TYPE_CHECKING:
    from engine.recording._reel import Reel

__all__ = ["TapeDecisions"]


class TapeDecisions:
    """Gate decisions, answers and plan reviews: recorded ones served, live ones recorded."""

    def __init__(self, tape: Reel) -> None:
        self.tape = tape
        self._approvals = {
            (e.step, e.action, e.params_hash, e.ordinal): e for e in tape.recorded.approvals
        }
        self._answers = {(e.step, e.key, e.ordinal): e for e in tape.recorded.answers}

    async def decide(
        self, request: GateRequest, live: Callable[[GateRequest], Awaitable[Decision]]
    ) -> Decision:
        """The decision on a gated call: the recorded one if the call is served from the
        cassette (`request.replayed`), else the live approver's (recorded when recording).
        """
        shown = self.tape.redact(request.params)
        digest = hash_of(shown)
        ordinal = self.tape.next_ordinal("gate", request.step_id, request.action, digest)
        if self.tape.replaying and request.replayed:
            entry = self.tape.take(
                self._approvals, (request.step_id, request.action, digest, ordinal)
            )
            if entry is not None:
                decision = request.decision(
                    entry.approved,
                    RECORDED,
                    entry.reason,
                    edited_params=entry.edited_params,
                    quit=entry.quit,
                )
                # A cassette holds no times (re-recording a run gives the same bytes), so
                # neither does a decision it serves: two replays give the same result.
                decision.at = None
                return decision
            if not self.tape.recording:
                raise self.tape.fail(
                    gate_miss(
                        self.tape.recorded,
                        self.tape.path,
                        request.step_id,
                        request.action,
                        shown,
                        digest,
                    ),
                    request.step_id,
                )
        try:
            decision = await live(request)
        except ReplayMismatch:
            raise
        except Exception as exc:  # fails closed, as the gatekeeper would: record that
            decision = request.decision(
                False, "error", f"approver failed: {type(exc).__name__}: {exc}"
            )
        if self.tape.recording:
            self.tape.cassette.approvals.append(
                Approval(
                    step=request.step_id,
                    action=request.action,
                    params_hash=digest,
                    ordinal=ordinal,
                    approved=decision.approved,
                    by=decision.by,
                    reason=self.tape.secrets.redact(decision.reason) if decision.reason else None,
                    edited_params=self.tape.redact(decision.edited_params),
                    quit=decision.quit,
                )
            )
        return decision

    async def answer(
        self, step_id: str, question: Question, live: Callable[[], Awaitable[Any]]
    ) -> Any:
        asked = self.tape.redact(question.model_dump(mode="json", exclude_unset=True))
        key = hash_of(asked)
        step_id = current_scope() or step_id  # a for_each item's questions are its own
        ordinal = self.tape.next_ordinal("answer", step_id, key)
        if self.tape.replaying:
            entry = self.tape.take(self._answers, (step_id, key, ordinal))
            if entry is not None:
                return entry.answer
            if not self.tape.recording:
                texts = [e.question for e in self.tape.recorded.answers if e.step == step_id]
                near = difflib.get_close_matches(question.question, texts, n=1, cutoff=0)
                hint = (
                    "\nnearest recorded question: "
                    + "\n".join(field_diff(near[0], question.question, "question"))
                    if near
                    else ""
                )
                raise self.tape.fail(
                    f"replay: {where(step_id)} asked {question.question!r}, which {self.tape.path} "
                    f"has no answer for (key {key}, repeat #{ordinal}){hint}",
                    step_id,
                )
        value = await live()
        if self.tape.recording:
            self.tape.cassette.answers.append(
                Answer(
                    step=step_id,
                    question=self.tape.secrets.redact(question.question),
                    key=key,
                    ordinal=ordinal,
                    answer=self.tape.redact(value),
                )
            )
        return value

    async def review(
        self, text: str, live: Callable[[], Awaitable[tuple[bool, str | None]]]
    ) -> tuple[bool, str | None]:
        """The decision on a model-written plan: (approved, edited YAML or None).

        A recorded decision (and the plan edit it may carry) answers only a pure replay,
        where nothing runs live. When the run records too (`new_episodes`), steps that are
        not in the cassette run live, so the plan goes to the live reviewer: an edit added
        to the cassette by hand cannot bring in steps, grants or `confirm: never`.
        """
        shown = self.tape.secrets.redact(text)
        digest = hash_of(shown)
        ordinal = self.tape.next_ordinal("gate", PLAN_REVIEW, "plan", digest)
        if self.tape.replaying and not self.tape.recording:
            entry = self.tape.take(self._approvals, (PLAN_REVIEW, "plan", digest, ordinal))
            if entry is not None:
                return entry.approved, entry.edited_plan
            plans = [
                e
                for e in self.tape.recorded.approvals
                if e.step == PLAN_REVIEW and e.action == "plan"
            ]
            raise self.tape.fail(
                f"replay: the model's plan (hash {digest}) has no recorded decision in "
                f"{self.tape.path} ({len(plans)} plan decision(s) recorded for other plans); "
                f"the plan's requests are recorded, so the planner itself changed",
                None,
            )
        approved, edited = await live()
        if self.tape.recording:
            self.tape.cassette.approvals.append(
                Approval(
                    step=PLAN_REVIEW,
                    action="plan",
                    params_hash=digest,
                    ordinal=ordinal,
                    approved=approved,
                    by="review",
                    edited_plan=self.tape.secrets.redact(edited) if edited is not None else None,
                )
            )
        return approved, edited
