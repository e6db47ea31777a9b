"""A run's journal: what the run store keeps of a run as it goes, and what a resume serves.

A `Journal` wraps the same seams a cassette's `Tape` does, in front of whatever is inside
them (the live world, or a cassette being recorded): `journal.results(inner)` is the
sandbox's `Results`, `journal.answers(inner)` the model client's `Answers`, and
`journal.approver(inner)` the approver of gates and questions. It watches the executor's
events for each step's result and timeline (`watch`).

Each tool call with side effects is journaled before it starts (its *intent*, committed
before the call is made) and after it ends (its result or error); model exchanges and
answers are committed as they happen; decisions and step results go in batches (an
approved call's intent commits its decision with it; losing either costs a harmless
repeat: a gate asks again, a step runs again with its calls served). Read-only calls are
not journaled on their own: their outputs are in their steps' results, and a resume makes
them again. Entries are the cassette's models (`ToolResult`, `LLMExchange`, `Approval`,
`Answer`), keyed the same way (a call by the hash of its params as redacted), with secrets
redacted: the run's one registry, which its executor shares, holds the environment's
secrets (variables a grant reads included), secret-named inputs (`Journal.plan`), and
credentials that tools' outputs show by name (`Secrets.learn`, as each call returns). So
no secret the run knows of is at rest in clear; a resume is given secret inputs again.

A resumed run (`Journal(resumed=...)`, see `engine.journal.resume`) is a replay of what
finished, then live: a call whose result is journaled is served, not made again; a
side-effect call whose intent is journaled with no result (it was in flight when the run
stopped) is *in doubt*: the sandbox runs it again only if its action or step is
idempotent, else it puts it to the gate, where only a person may approve it (`--yes` and
policies cannot), at the terminal or on the command line (`resume --redo STEP`; `--skip
STEP` ends it failed, unmade: its step's fallback runs, unless it is that very call).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from engine._support.scope import PLANNER, current_scope, step_of
from engine.approval import Approver, GateRequest
from engine.approval.questions import Question
from engine.errors import OutcomeUnknown, ReplayMismatch, StepError, StepFailed
from engine.events import Event
from engine.llm import Answers, ChatResult
from engine.recording.cassette import (
    canonical_request,
    digest,
    rebuild_error,
    record_error,
)
from engine.redaction import Secrets
from engine.results import KEPT, NO_USAGE, Decision, RunResult, StepResult, StepUsage
from engine.sandbox import Results, ToolCall
from engine.store import EntryKind, JSONText, RunStore

if TYPE_CHECKING:
    from engine.executor import Executor
    from engine.journal.resume import Intent, Resumed, ToolKey

__all__ = ["JOURNAL", "Journal"]

JOURNAL = "journal"
"""The `by` of a decision on a call served from the journal (it ran before the resume)."""

_ATTEMPT = ("n", "item", "started", "action", "finished", "outcome", "error")
"""An attempt in a step's timeline (`item`: a `for_each` item's, numbered within it)."""


def _spent(usage: StepUsage) -> dict[str, int]:
    """A step's usage as journaled: its counts that are not 0."""
    return {name: count for name, count in usage.__dict__.items() if count}


def _went_well_at_once(events: Sequence[Event]) -> bool:
    """The step's timeline is its start and one attempt that went well, and nothing else."""
    return (
        len(events) == 3
        and events[2].kind == "attempt.finished"
        and events[2].data.get("outcome") == "ok"
    )


def _timeline(events: Sequence[Event]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A step's attempts (each `_ATTEMPT`; a `for_each` item's are numbered within it)
    and gate decisions, from its events."""
    attempts: list[list[Any]] = []
    running: dict[tuple[Any, ...], list[Any]] = {}
    gates: list[dict[str, Any]] = []
    for event in events:
        data = event.data
        if event.kind == "attempt.started":
            attempt: list[Any] = [event.attempt, data.get("item"), event.ts, data.get("action")]
            running[(event.attempt, data.get("item"))] = attempt
            attempts.append(attempt)
        elif event.kind == "attempt.finished":
            ended = running.pop((event.attempt, data.get("item")), None)
            if ended is not None:
                ended += [event.ts, data.get("outcome"), data.get("error")]
        elif event.kind == "gate.decided":
            gates.append(
                {
                    "at": event.ts,
                    "action": data.get("action"),
                    "approved": data.get("approved"),
                    "by": data.get("by"),
                    "reason": data.get("reason"),
                }
            )
    shown = [
        {
            k: v
            for k, v in zip(_ATTEMPT, attempt, strict=False)
            if v is not None or k != "item"  # (a whole step's attempt has none)
        }
        for attempt in attempts
    ]
    return shown, gates


class Journal:
    """The journal of one run in a store (a new run, or a resumed one).

    Args:
        store: where entries go.
        run_id: the run's id (already begun or claimed in `store`).
        secrets: redacted from everything before it is written: the run's one registry
            (its executor is given it too, so every secret the run knows of, its secret
            inputs included, is redacted here; see `Journal.plan`).
        resumed: what the run's earlier segments left: served again, or in doubt.
    """

    def __init__(
        self,
        store: RunStore,
        run_id: str,
        *,
        secrets: Secrets | None = None,
        resumed: Resumed | None = None,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.secrets = secrets if secrets is not None else Secrets.from_environ()
        self.resumed = resumed
        self.ordinals: Counter[tuple[Any, ...]] = Counter()
        self.settled: set[ToolKey] = set()  # calls in doubt that were made again
        self.skipped: set[ToolKey] = set()  # calls in doubt skipped (`resume --skip`)
        self.done = len(resumed.kept) if resumed is not None else 0
        self.steps = 0
        self._events: dict[str, list[Event]] = {}  # each step's timeline, as it goes
        self._journaled: set[str] = set(resumed.steps) if resumed is not None else set()
        self._usage: dict[str, dict[str, int]] = {}

    # -- writing -------------------------------------------------------------------------

    def write(self, kind: EntryKind, scope: str | None, data: Any, *, durable: bool) -> None:
        self.store.append(self.run_id, kind, scope, data, durable=durable)

    def redact(self, value: Any) -> Any:
        """`value` (JSON data: params, outputs, requests) with secrets redacted."""
        return self.secrets.redact_value(value)

    def plan(self, plan: dict[str, Any], *, inputs: dict[str, Any], model: str | None) -> None:
        """The plan run from here on (a replan writes the new one), committed at once."""
        self.secrets.add_environ()  # variables grants declared secret as they validated
        self.secrets.add_inputs(inputs)  # and the executor, sharing `secrets`, adds no other
        self.steps = sum(len(plan.get(section) or []) for section in ("steps", "finally"))
        self.store.update(self.run_id, steps=self.steps)
        # A plan may be large: redacted as text, in one pass when nothing in it can need it.
        rest = self.secrets.redact_json({"inputs": inputs, "model": model})
        data = JSONText(f'{{"plan":{self.secrets.redact_json(plan)},{rest[1:]}')
        self.write("plan", None, data, durable=True)

    def finish(self, result: RunResult) -> None:
        """The run ended: its result (for `planloom show`: the steps' results are their
        `step` entries; only steps that never started are here), status and usage, in one
        transaction."""
        unstarted = {k: v for k, v in result.steps.items() if k not in self._journaled}
        data = self.redact(
            {
                **result.model_dump(mode="json", exclude={"replay", "steps"}),
                "steps": {k: v.model_dump(mode="json") for k, v in unstarted.items()},
            }
        )
        self.store.finish(self.run_id, result.status, result.usage.model_dump(), self.done, data)

    def next_ordinal(self, *key: Any) -> int:
        ordinal = self.ordinals[key]
        self.ordinals[key] += 1
        return ordinal

    # -- the seams -----------------------------------------------------------------------

    def results(self, inner: Results) -> Results:
        return _JournalResults(self, inner)

    def answers(self, inner: Answers) -> Answers:
        return _JournalAnswers(self, inner)

    def approver(self, inner: Approver) -> Approver:
        return _JournalApprover(self, inner)

    def watch(self, executor: Executor) -> None:
        """Journal each step's result and timeline as the executor ends it."""
        # This sees every event of a run (about six a step): one lookup for most of them.
        keep = {
            "step.started": self._events,
            "attempt.started": self._events,
            "attempt.finished": self._events,
            "gate.decided": self._events,
        }

        def seen(event: Event) -> None:
            kind, step_id = event.kind, event.step_id
            kept = keep.get(kind)
            if kept is not None:
                if step_id is not None:
                    timeline = kept.get(step_id)
                    if timeline is None:
                        kept[step_id] = [event]
                    else:
                        timeline.append(event)
            elif kind == "step.finished":
                if step_id is not None:
                    self._step_finished(executor.results[step_id], step_id, event.ts)
            elif kind == "llm.called":
                self._llm_called(event)

        executor.events.subscribe(seen)

    def _llm_called(self, event: Event) -> None:
        scope = current_scope()
        owner = step_of(scope) if scope is not None else None
        usage = self._usage.setdefault(owner or PLANNER, Counter())
        usage["calls"] += 1
        usage["prompt_tokens"] += int(event.data.get("prompt_tokens") or 0)
        usage["completion_tokens"] += int(event.data.get("completion_tokens") or 0)

    def _step_finished(self, result: StepResult, step_id: str, at: float) -> None:
        self._journaled.add(step_id)
        if result.status in KEPT:
            self.done += 1
        ended: dict[str, Any] = {"status": result.status, "attempts": result.attempts}
        output = result.output
        if output is not None:  # the error and transcript are redacted already
            if result.transcript is not None:  # a tool's output was learnt as it came
                self.secrets.learn(output)  # (an agent's answer may hold one)
            ended["output"] = self.redact(output)
        if result.error is not None:
            ended["error"] = result.error
        if result.transcript is not None:
            ended["transcript"] = result.transcript
        if result.usage is not NO_USAGE:  # a resumed run keeps what a kept step spent
            ended["usage"] = _spent(result.usage)
        if result.duration is not None:
            ended["duration"] = result.duration
        if result.warnings:
            ended["warnings"] = self.redact(result.warnings)
        events = self._events.pop(step_id, ())
        started = events[0].ts if events and events[0].kind == "step.started" else None
        data: dict[str, Any] = {"result": ended, "started": started, "finished": at}
        if not _went_well_at_once(events):
            attempts, gates = _timeline(events)
            # events reach subscribers unredacted: what leaves the process is redacted here
            if len(attempts) > 1 or (attempts and attempts[0].get("outcome") != "ok"):
                # (one attempt that went well is the step's own span)
                data["attempts"] = self.redact(attempts)
            if gates:
                data["gates"] = self.redact(gates)
        usage = self._usage.pop(step_id, None)
        if usage:
            data["llm"] = dict(usage)
        self.write("step", step_id, data, durable=False)

    def doubt(self, key: ToolKey) -> tuple[ToolKey, Intent] | None:
        """The intent with no result the call of `key` may repeat: its own, or, when its
        params changed since (an input given again, a read made again), one of the same step
        (or item) and action that no call has taken up yet (a skipped one stands for no
        other call: its step's fallback runs, unless it is that very call)."""
        resumed = self.resumed
        assert resumed is not None
        if key in resumed.tools:
            return None
        settled = self.settled
        if key in resumed.doubts and key not in settled:
            return key, resumed.doubts[key]
        for other, intent in resumed.doubts.items():
            if (
                other[:2] == key[:2]
                and other not in settled
                and other not in self.skipped
                and other not in resumed.tools
            ):
                return other, intent
        return None

    def _key(self, call: ToolCall, *, peek: bool) -> tuple[ToolKey, Any]:
        """The call's journal key (as a cassette's) and its redacted params."""
        scope = current_scope() or call.step_id
        shown = self.redact(call.params)
        params_hash = digest(shown)
        counter = ("tool", scope, call.action, params_hash)
        ordinal = self.ordinals[counter] if peek else self.next_ordinal(*counter)
        return (scope, call.action, params_hash, ordinal), shown


class _JournalResults:
    """Tool results: served from the journal on a resume, else made (through `inner`) and
    journaled, with an intent first. Read-only calls are neither journaled nor served (a
    resume makes them again: they change nothing); their outputs are in their steps'
    results."""

    def __init__(self, journal: Journal, inner: Results) -> None:
        self.journal = journal
        self.inner = inner

    @property
    def timed(self) -> bool:
        return self.inner.timed

    def serves(self, call: ToolCall) -> bool:
        resumed = self.journal.resumed
        if resumed is not None and call.recorded and not call.read_only:
            key, _ = self.journal._key(call, peek=True)
            if key in resumed.tools:
                return True
        return self.inner.serves(call)

    def in_doubt(self, call: ToolCall) -> str | None:
        if self.journal.resumed is not None and call.recorded and not call.read_only:
            key, _ = self.journal._key(call, peek=True)
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
        key, shown = journal._key(call, peek=False)
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


class _JournalAnswers:
    """Model answers: served from the journal on a resume, else asked and journaled."""

    def __init__(self, journal: Journal, inner: Answers) -> None:
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


class _JournalApprover:
    """Gate decisions and answers, journaled; a resumed run's served calls are approved
    (they ran before: nothing runs now) and its earlier answers are given again."""

    def __init__(self, journal: Journal, inner: Approver) -> None:
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
