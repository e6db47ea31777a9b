"""Recording and replaying a run: the `Tape` between the run and the world.

A `Tape` wraps the places a run meets the world: it is the model client's `Answers`, the
sandbox's `Results`, and (through `TapeApprover`) the approver. In a replay it serves every
recorded entry from the cassette (`engine.cassette`) and never calls a model or makes a side
effect; a request with no recording raises `ReplayMismatch`, which names the step and shows
the nearest recorded request with a field-level diff. Modes are vcrpy's: `none` (replay
only), `once` (replay if the cassette exists, else record), `new_episodes` (replay what is
recorded, record what is new) and `all` (record everything again). Secrets are redacted
before anything is hashed or written.

A recorded decision answers only a call whose result is served from the cassette too
(`Tape.serves`, asked before the gate): a call that will run live is always decided by the
live approver (terminal, `--yes`, `--no`, policy, or fail closed), whatever the cassette's
`approvals:` say, so an entry added by hand cannot approve a side effect. Decisions served
from a cassette say `by: recorded`.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from engine._mismatch import HOW, field_diff, gate_miss, llm_miss, tool_miss, where
from engine._scope import PLAN_REVIEW, PLANNER, current_scope, enter_scope
from engine._secrets import Secrets
from engine.approval import Approver, GateRequest
from engine.cassette import (
    RECORD_MODES,
    RECORDED,
    Answer,
    Approval,
    Cassette,
    LLMExchange,
    RecordedError,
    RecordedReply,
    RecordMode,
    ToolResult,
    canonical_request,
    json_data,
    rebuild_error,
    record_error,
    request_key,
)
from engine.cassette import (
    digest as hash_of,
)
from engine.errors import BudgetExceeded, ConfigurationError, ReplayMismatch, StepError
from engine.llm import ChatResult
from engine.questions import Question
from engine.results import Decision
from engine.sandbox import ToolCall

__all__ = [
    "PLANNER",
    "PLAN_REVIEW",
    "RECORDED",
    "RECORD_MODES",
    "Cassette",
    "OfflineModel",
    "RecordMode",
    "Tape",
    "TapeApprover",
    "current_scope",
    "enter_scope",
    "field_diff",
    "request_key",
]

E = TypeVar("E", bound=BaseModel)


class Tape:
    """Records a run into a cassette, replays one, or both (`new_episodes`).

    Args:
        path: the cassette file.
        mode: `none`, `once`, `new_episodes` or `all` (see the module docstring).
        secrets: redacted from everything before it is hashed or stored.
        live_tools: in a replay, read-only tools run for real instead of being served.
    """

    def __init__(
        self,
        path: str | Path,
        mode: RecordMode = "none",
        *,
        secrets: Secrets | None = None,
        live_tools: bool = False,
    ) -> None:
        if mode not in RECORD_MODES:
            raise ConfigurationError(
                f"record mode {mode!r} is not one of: {', '.join(RECORD_MODES)}"
            )
        self.path = Path(path)
        self.requested_mode = mode
        exists = self.path.exists()
        if mode == "once":
            mode = "none" if exists else "all"
        if mode in ("none", "new_episodes") and not exists:
            raise ConfigurationError(
                f"cassette {path} does not exist; record it first with --record {path} "
                "(or run with --record-mode once, which records when it is missing)"
            )
        self.mode: RecordMode = mode
        self.secrets = secrets if secrets is not None else Secrets.from_environ()
        self.live_tools = live_tools
        self.recorded = Cassette.load(self.path) if exists else Cassette()
        self.cassette = Cassette(note=self.recorded.note)  # what this run writes
        self.mismatches: list[str] = []
        self._used: set[int] = set()
        self._ordinals: Counter[tuple[Any, ...]] = Counter()
        self._llm = {(e.step, e.key, e.ordinal): e for e in self.recorded.llm}
        self._tools = {
            (e.step, e.attempt, e.action, e.params_hash, e.ordinal): e for e in self.recorded.tools
        }
        self._approvals = {
            (e.step, e.action, e.params_hash, e.ordinal): e for e in self.recorded.approvals
        }
        self._answers = {(e.step, e.key, e.ordinal): e for e in self.recorded.answers}

    @property
    def replaying(self) -> bool:
        """Recorded entries are served (`none`, `new_episodes`, `once` with a cassette)."""
        return self.mode in ("none", "new_episodes")

    @property
    def recording(self) -> bool:
        """Live calls are made and written (`all`, `new_episodes`, `once` without one)."""
        return self.mode in ("all", "new_episodes")

    def redact(self, value: Any) -> Any:
        return self.secrets.redact_value(json_data(value))

    def _next(self, *key: Any) -> int:
        ordinal = self._ordinals[key]
        self._ordinals[key] += 1
        return ordinal

    def _take(self, table: dict[Any, E], key: Any) -> E | None:
        entry = table.get(key)
        if entry is not None:
            self._used.add(id(entry))
        return entry

    def _fail(self, message: str, step_id: str | None) -> ReplayMismatch:
        self.mismatches.append(message)
        return ReplayMismatch(message, step_id=step_id)

    # -- model calls -------------------------------------------------------------------

    async def chat(
        self,
        request: dict[str, Any],
        live: Callable[[dict[str, Any]], Awaitable[ChatResult]],
        served: Callable[[ChatResult], None],
    ) -> ChatResult:
        """The answer to a model request: the recording, or a live call that is recorded.

        `served` is told about a replayed answer (to count it as the live call was).
        """
        scope = current_scope() or PLANNER
        canonical = self.redact(canonical_request(request))
        key = hash_of(canonical)
        ordinal = self._next("llm", scope, key)
        if self.replaying:
            entry = self._take(self._llm, (scope, key, ordinal))
            if entry is not None:
                if entry.error is not None or entry.response is None:
                    served(ChatResult())  # the live call failed, and was counted all the same
                    raise rebuild_error(
                        entry.error or RecordedError(type="LLMError", message="no answer"),
                        _step_of(scope),
                    )
                result = ChatResult(**entry.response.model_dump())
                served(result)
                return result
            if not self.recording:
                raise self._fail(
                    llm_miss(self.recorded, self.path, self._used, scope, canonical, key, ordinal),
                    _step_of(scope),
                )
        try:
            result = await live(request)
        except StepError as exc:
            if isinstance(exc, ReplayMismatch | BudgetExceeded):
                raise
            self.cassette.llm.append(
                LLMExchange(
                    step=scope,
                    key=key,
                    ordinal=ordinal,
                    request=canonical,
                    error=record_error(exc, self.secrets.redact),
                )
            )
            raise
        reply = RecordedReply.model_validate(
            self.redact(
                {
                    "content": result.content,
                    "tool_calls": [call.model_dump() for call in result.tool_calls],
                    "prompt_tokens": result.prompt_tokens,
                    "completion_tokens": result.completion_tokens,
                }
            )
        )
        self.cassette.llm.append(
            LLMExchange(step=scope, key=key, ordinal=ordinal, request=canonical, response=reply)
        )
        return result

    # -- tool calls --------------------------------------------------------------------

    def serves(self, call: ToolCall) -> bool:
        """Whether this call will be answered from the cassette, nothing run: asked before
        the call's gate, since only such a call may be approved by a recorded decision.

        A pure replay runs nothing (a call with no recording fails as a mismatch), except
        read-only calls under `live_tools`. With `new_episodes`, a call is served when its
        result is recorded, for these params or for params a recorded decision edited them
        to; a call whose result is not recorded itself (`recorded` false: its model's or
        person's answers are) may reach a live model, so it is not.
        """
        step_id, attempt, action = call.step_id, call.attempt, call.action
        if not self.replaying or (self.live_tools and call.read_only):
            return False
        if not self.recording:
            return True
        if not call.recorded:
            return False
        scope = current_scope() or step_id
        digest = hash_of(self.redact(call.params))
        digests = {digest} | {
            hash_of(self.redact(e.edited_params))
            for e in self.recorded.approvals
            if (e.step, e.action, e.params_hash) == (step_id, action, digest)
            and e.approved
            and e.edited_params is not None
        }
        return any(
            (scope, attempt, action, d, self._ordinals["tool", scope, attempt, action, d])
            in self._tools
            for d in digests
        )

    async def result(
        self, call: ToolCall, live: Callable[[], Awaitable[Any]], *, replayed: bool = False
    ) -> Any:
        """The call's result: the recording, or a live run that is recorded.

        In a replay, side effects are never made; read-only calls run live only with
        `live_tools`. `replayed` says the gate was asked on the promise that this call is
        served (`serves`), so a recorded decision may have approved it: if it cannot be
        served after all, it fails as a mismatch rather than run live.
        """
        if not call.recorded:
            return await live()
        step_id, attempt, action = call.step_id, call.attempt, call.action
        scope = current_scope() or step_id
        shown = self.redact(call.params)
        digest = hash_of(shown)
        ordinal = self._next("tool", scope, attempt, action, digest)
        key = (scope, attempt, action, digest, ordinal)
        live_read = self.live_tools and call.read_only
        if self.replaying:
            entry = self._take(self._tools, key)
            if entry is not None and not live_read:
                if entry.error is not None:
                    raise rebuild_error(entry.error, step_id)
                return entry.output
            if entry is None and not self.recording and not live_read:
                raise self._fail(
                    tool_miss(
                        self.recorded, self.path, scope, attempt, action, shown, digest, ordinal
                    ),
                    step_id,
                )
            if replayed:
                raise self._fail(
                    f"replay: {where(scope)} (attempt {attempt}) called {action} on the "
                    f"promise that {self.path} holds its result (params hash {digest}, "
                    f"repeat #{ordinal}), but it does not: it would run live under a "
                    f"recorded decision, so nothing was run\n{HOW}",
                    step_id,
                )
            if entry is not None:  # --live-tools: run it, the recording stands
                return await live()
        entry = ToolResult(
            step=scope,
            attempt=attempt,
            action=action,
            params_hash=digest,
            ordinal=ordinal,
            params=shown,
        )
        try:
            output = await live()
        except StepError as exc:
            if self.recording and not isinstance(exc, ReplayMismatch):
                entry.error = record_error(exc, self.secrets.redact)
                self.cassette.tools.append(entry)
            raise
        if self.recording:
            entry.output = self.redact(output)
            self.cassette.tools.append(entry)
        return output

    # -- approvals and answers ---------------------------------------------------------

    async def decide(
        self, request: GateRequest, live: Callable[[GateRequest], Awaitable[Decision]]
    ) -> Decision:
        """The decision on a gated call: the recorded one if the call is served from the
        cassette (`request.replayed`), else the live approver's (recorded when recording).
        """
        shown = self.redact(request.params)
        digest = hash_of(shown)
        ordinal = self._next("gate", request.step_id, request.action, digest)
        if self.replaying and request.replayed:
            entry = self._take(self._approvals, (request.step_id, request.action, digest, ordinal))
            if entry is not None:
                return request.decision(
                    entry.approved,
                    RECORDED,
                    entry.reason,
                    edited_params=entry.edited_params,
                    quit=entry.quit,
                )
            if not self.recording:
                raise self._fail(
                    gate_miss(
                        self.recorded, self.path, request.step_id, request.action, shown, digest
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
        if self.recording:
            self.cassette.approvals.append(
                Approval(
                    step=request.step_id,
                    action=request.action,
                    params_hash=digest,
                    ordinal=ordinal,
                    approved=decision.approved,
                    by=decision.by,
                    reason=self.secrets.redact(decision.reason) if decision.reason else None,
                    edited_params=self.redact(decision.edited_params),
                    quit=decision.quit,
                )
            )
        return decision

    async def answer(
        self, step_id: str, question: Question, live: Callable[[], Awaitable[Any]]
    ) -> Any:
        asked = self.redact(question.model_dump(mode="json", exclude_unset=True))
        key = hash_of(asked)
        step_id = current_scope() or step_id  # a for_each item's questions are its own
        ordinal = self._next("answer", step_id, key)
        if self.replaying:
            entry = self._take(self._answers, (step_id, key, ordinal))
            if entry is not None:
                return entry.answer
            if not self.recording:
                texts = [e.question for e in self.recorded.answers if e.step == step_id]
                near = difflib.get_close_matches(question.question, texts, n=1, cutoff=0)
                hint = (
                    "\nnearest recorded question: "
                    + "\n".join(field_diff(near[0], question.question, "question"))
                    if near
                    else ""
                )
                raise self._fail(
                    f"replay: {where(step_id)} asked {question.question!r}, which {self.path} "
                    f"has no answer for (key {key}, repeat #{ordinal}){hint}\n{HOW}",
                    step_id,
                )
        value = await live()
        if self.recording:
            self.cassette.answers.append(
                Answer(
                    step=step_id,
                    question=self.secrets.redact(question.question),
                    key=key,
                    ordinal=ordinal,
                    answer=self.redact(value),
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
        shown = self.secrets.redact(text)
        digest = hash_of(shown)
        ordinal = self._next("gate", PLAN_REVIEW, "plan", digest)
        if self.replaying and not self.recording:
            entry = self._take(self._approvals, (PLAN_REVIEW, "plan", digest, ordinal))
            if entry is not None:
                return entry.approved, entry.edited_plan
            plans = [
                e for e in self.recorded.approvals if e.step == PLAN_REVIEW and e.action == "plan"
            ]
            raise self._fail(
                f"replay: the model's plan (hash {digest}) has no recorded decision in "
                f"{self.path} ({len(plans)} plan decision(s) recorded for other plans); "
                f"the plan's requests are recorded, so the planner itself changed\n{HOW}",
                None,
            )
        approved, edited = await live()
        if self.recording:
            self.cassette.approvals.append(
                Approval(
                    step=PLAN_REVIEW,
                    action="plan",
                    params_hash=digest,
                    ordinal=ordinal,
                    approved=approved,
                    by="review",
                    edited_plan=self.secrets.redact(edited) if edited is not None else None,
                )
            )
        return approved, edited

    # -- the end -----------------------------------------------------------------------

    def unused(self) -> list[str]:
        """Recorded entries this replay never asked for, one line each."""
        if not self.replaying:
            return []
        lines: list[str] = []
        for entry in self.recorded.llm:
            if id(entry) not in self._used:
                lines.append(
                    f"model request of {where(entry.step)} #{entry.ordinal} (key {entry.key})"
                )
        for tool in self.recorded.tools:
            if id(tool) not in self._used:
                lines.append(
                    f"tool call of {where(tool.step)} attempt {tool.attempt}: {tool.action} "
                    f"#{tool.ordinal} (params hash {tool.params_hash})"
                )
        for approval in self.recorded.approvals:
            if id(approval) not in self._used:
                what = "the plan" if approval.step == PLAN_REVIEW else approval.action
                lines.append(f"decision on {what} in {where(approval.step)} #{approval.ordinal}")
        for answer in self.recorded.answers:
            if id(answer) not in self._used:
                lines.append(f"answer to {answer.question!r} in {where(answer.step)}")
        return lines

    def save(
        self,
        *,
        plan: dict[str, Any] | None,
        goal: str | None,
        base: dict[str, Any] | None,
        model: str | None,
        inputs: dict[str, Any],
    ) -> bool:
        """Write what was recorded (with what was replayed, for `new_episodes`); False when
        this mode writes nothing."""
        if not self.recording:
            return False
        cassette = self.cassette
        if self.mode == "new_episodes":
            # A live decision replaces a recorded one for the same gate: the recorded one
            # answered nothing (its call ran live), and a cassette holds one per gate.
            decided = {(e.step, e.action, e.params_hash, e.ordinal) for e in cassette.approvals}
            kept = [
                e
                for e in self.recorded.approvals
                if (e.step, e.action, e.params_hash, e.ordinal) not in decided
            ]
            cassette = cassette.model_copy(
                update={
                    "llm": [*self.recorded.llm, *cassette.llm],
                    "tools": [*self.recorded.tools, *cassette.tools],
                    "approvals": [*kept, *cassette.approvals],
                    "answers": [*self.recorded.answers, *cassette.answers],
                }
            )
        cassette = cassette.model_copy(
            update={
                "plan": self.redact(plan) if plan is not None else None,
                "goal": self.secrets.redact(goal) if goal is not None else None,
                "base": self.redact(base) if base is not None else None,
                "model": model,
                "inputs": self.redact(inputs),
            }
        )
        cassette.save(self.path)
        return True


def _step_of(scope: str) -> str | None:
    if scope in (PLANNER, PLAN_REVIEW):
        return None
    return scope.split("[", 1)[0]


class OfflineModel:
    """Stands in for the `openai` client in a replay: a live call is refused, loudly.

    The tape serves every answer in a replay, so this is never reached; it is here so
    that no path can reach the network by mistake.
    """

    @property
    def chat(self) -> OfflineModel:
        return self

    @property
    def completions(self) -> OfflineModel:
        return self

    @property
    def models(self) -> OfflineModel:
        return self

    async def create(self, **_: Any) -> Any:
        raise ReplayMismatch("replay: a live model call was attempted; replays are offline")

    async def list(self) -> Any:
        return []

    async def close(self) -> None:
        return None


class TapeApprover:
    """An approver whose decisions and answers go through a tape: a recorded decision
    answers a call served from the cassette (`GateRequest.replayed`); every other call is
    asked of `inner` (and recorded, when recording). Answers are replayed when recorded."""

    def __init__(self, tape: Tape, inner: Approver) -> None:
        self.tape = tape
        self.inner = inner

    async def decide(self, request: GateRequest) -> Decision:
        return await self.tape.decide(request, self.inner.decide)

    async def answer(self, step_id: str, question: Question) -> Any:
        return await self.tape.answer(
            step_id, question, lambda: self.inner.answer(step_id, question)
        )
