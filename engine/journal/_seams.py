"""The journal's seams: what a run's tool results, model answers and decisions pass
through, written before and after as they happen, and served again on a resume."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from engine._support.scope import PLANNER, current_scope
from engine.approval import Approver, GateRequest
from engine.approval.questions import Question
from engine.errors import OutcomeUnknown, ReplayMismatch, StepError, StepFailed
from engine.llm import Answers, ChatResult
from engine.recording.cassette import (
    canonical_request,
    digest,
    rebuild_error,
    record_error,
)
from engine.results import Decision
from engine.sandbox import Results, ToolCall

if TYPE_CHECKING:
    pass


from engine.journal._book import JOURNAL, JournalBook


class JournalResults:
    """Tool results: served from the journal on a resume, else made (through `inner`) and
    journaled, with an intent first. Read-only calls are neither journaled nor served (a
    resume makes them again: they change nothing); their outputs are in their steps'
    results."""

    def __init__(self, journal: JournalBook, inner: Results) -> None:
        self.journal = journal
        self.inner = inner

    @property
    def timed(self) -> bool:
        return self.inner.timed

    def forget(self, step_id: str) -> None:
        self.inner.forget(step_id)  # (its journal entry is voided on `step.discarded`)

    def serves(self, call: ToolCall) -> bool:
        resumed = self.journal.resumed
        if resumed is not None and call.recorded and not call.read_only:
            key, _ = self.journal.call_key(call, peek=True)
            if key in resumed.tools:
                return True
        return self.inner.serves(call)

    def in_doubt(self, call: ToolCall) -> str | None:
        if self.journal.resumed is not None and call.recorded and not call.read_only:
            key, _ = self.journal.call_key(call, peek=True)
            doubt = self.journal.doubt(key)
            if doubt is not None:
                _, intent = doubt
                when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(intent.at))
                changed = "" if intent.call.params_hash == key[2] else " (with other params)"
                return (
                    f"a call of {intent.call.action}{changed} was in flight when the run "
                    f"stopped ({when}): it may already have happened"
                )
        return self.inner.in_doubt(call)

    async def result(
        self, call: ToolCall, live: Callable[[], Awaitable[Any]], *, replayed: bool
    ) -> Any:
        if not call.recorded or call.read_only:  # see the class docstring
            output = await self.inner.result(call, live, replayed=replayed)
            self.journal.secrets.learn(output)  # a credential read: redacted wherever it goes
            return output
        journal = self.journal
        key, shown = journal.call_key(call, peek=False)
        scope, action, params_hash, ordinal = key
        resumed = journal.resumed
        if resumed is not None:
            entry = resumed.tools.get(key)
            if entry is not None:
                if entry.error is not None:
                    raise rebuild_error(entry.error, call.step_id)
                return entry.output
            if replayed:  # approved on the promise that it is served: never run it live
                raise StepFailed(
                    f"{action}: the journal was to serve this call (params hash "
                    f"{params_hash}, repeat #{ordinal}) but holds no result for it; nothing "
                    "was run"
                )
            if key in resumed.doubts:  # the call in doubt itself, approved: taken up
                journal.settled.add(key)
            # A call with other params that was asked about in its place does not take it
            # up: the call in flight may still be made, and would be asked about again.
        base = {
            "step": scope,
            "attempt": call.attempt,
            "action": action,
            "params_hash": params_hash,
            "ordinal": ordinal,
        }
        journal.write("intent", scope, {**base, "params": shown}, durable=True)  # before it
        try:
            output = await self.inner.result(call, live, replayed=replayed)
        except StepError as exc:
            # A call whose outcome is unknown (its worker was lost) keeps its intent open,
            # as a crash would: a resume asks a person about it.
            if not isinstance(exc, ReplayMismatch | OutcomeUnknown):
                error = record_error(exc, journal.secrets.redact).model_dump(exclude_none=True)
                journal.write("tool", scope, {**base, "error": error}, durable=True)
            raise
        journal.secrets.learn(output)
        journal.write("tool", scope, {**base, "output": journal.redact(output)}, durable=True)
        return output


class JournalAnswers:
    """Model answers: served from the journal on a resume, else asked and journaled."""

    def __init__(self, journal: JournalBook, inner: Answers) -> None:
        self.journal = journal
        self.inner = inner

    async def chat(
        self,
        request: dict[str, Any],
        live: Callable[[dict[str, Any]], Awaitable[ChatResult]],
        served: Callable[[ChatResult], None],
    ) -> ChatResult:
        journal = self.journal
        scope = current_scope() or PLANNER
        canonical = journal.redact(canonical_request(request))
        key = digest(canonical)
        ordinal = journal.next_ordinal("llm", scope, key)
        resumed = journal.resumed
        if resumed is not None:
            entry = resumed.llm.get((scope, key, ordinal))
            if entry is not None and entry.response is not None:
                result = ChatResult(**entry.response.model_dump())
                served(result)
                return result
        base = {"step": scope, "key": key, "ordinal": ordinal, "request": canonical}
        try:
            result = await self.inner.chat(request, live, served)
        except StepError as exc:
            if not isinstance(exc, ReplayMismatch):
                error = record_error(exc, journal.secrets.redact).model_dump(exclude_none=True)
                journal.write("llm", scope, {**base, "error": error}, durable=True)
            raise
        reply = journal.redact(
            {
                "content": result.content,
                "tool_calls": [call.model_dump() for call in result.tool_calls],
                "prompt_tokens": result.prompt_tokens,
                "completion_tokens": result.completion_tokens,
                "finish_reason": result.finish_reason,
            }
        )
        journal.write("llm", scope, {**base, "response": reply}, durable=True)
        return result


class JournalApprover:
    """Gate decisions and answers, journaled; a resumed run's served calls are approved
    (they ran before: nothing runs now) and its earlier answers are given again."""

    def __init__(self, journal: JournalBook, inner: Approver) -> None:
        self.journal = journal
        self.inner = inner

    async def decide(self, request: GateRequest) -> Decision:
        journal = self.journal
        shown = journal.redact(request.params)
        params_hash = digest(shown)
        ordinal = journal.next_ordinal("gate", request.step_id, request.action, params_hash)
        if journal.resumed is not None and request.replayed:
            # A resume has no cassette (the command refuses one): `replayed` is the
            # journal's promise that this call's result is served, so nothing runs.
            return request.decision(True, JOURNAL, "ran before the resume; its result is reused")
        decision = await self.inner.decide(request)
        if request.in_doubt and decision.skip:
            # Not made, and counted as failed: what runs next in its step (its fallback) is
            # taken for it only if it is that very call.
            scope = current_scope() or request.step_id
            ordinal = journal.ordinals[("tool", scope, request.action, params_hash)]
            doubt = journal.doubt((scope, request.action, params_hash, ordinal))
            if doubt is not None:
                journal.skipped.add(doubt[0])
        journal.write(
            "approval",
            request.step_id,
            {
                "step": request.step_id,
                "action": request.action,
                "params_hash": params_hash,
                "ordinal": ordinal,
                "approved": decision.approved,
                "by": decision.by,
                "reason": journal.secrets.redact(decision.reason) if decision.reason else None,
                "edited_params": journal.redact(decision.edited_params),
                "quit": decision.quit,
                "in_doubt": request.in_doubt,
            },
            durable=False,  # the call's intent, written next, commits it with itself
        )
        return decision

    async def answer(self, step_id: str, question: Question) -> Any:
        journal = self.journal
        asked = journal.redact(question.model_dump(mode="json", exclude_unset=True))
        key = digest(asked)
        scope = current_scope() or step_id
        ordinal = journal.next_ordinal("answer", scope, key)
        resumed = journal.resumed
        if resumed is not None:
            entry = resumed.answers.get((scope, key, ordinal))
            if entry is not None:
                return entry.answer
        value = await self.inner.answer(step_id, question)
        journal.write(
            "answer",
            scope,
            {
                "step": scope,
                "question": journal.secrets.redact(question.question),
                "key": key,
                "ordinal": ordinal,
                "answer": journal.redact(value),
            },
            durable=True,
        )
        return value
