"""Confirmation gates: who approves a side effect, and the binding of an answer to params.

The executor hands every gated call to a `Gatekeeper`, which asks its `Approver` once per
(step, action, exact rendered params): a retry with the same params is not asked again;
changed params are. Questions are asked one at a time, so parallel steps never get each
other's answers.

Every `Decision` says who made it, in `by`: `--yes`, `--no`, `terminal` (also `terminal
(approve all)`, `terminal (edited)`), `fail-closed` (no terminal and no flag), `policy:N`
(rule N of the `--policy` file; `policy:default` when no rule matched; `policy:N→terminal`
when the rule asked the person), `recorded` (replayed from a cassette, for a call whose
result is replayed too), `journal` (a resumed run's call that ran before the resume: its
result is reused, nothing runs), `--redo` / `--skip` (a resume's decision on a call in
doubt, named on the command line) or `error` (the approver broke, so the gate failed
closed).

A call *in doubt* (`GateRequest.in_doubt`: a resumed run's side-effect call that was in
flight when the run stopped, so it may already have happened) is approved only by a person:
at the terminal, or named on the command line (`InDoubtDecisions`: `resume --redo STEP`
makes it again, `by: --redo`; `--skip STEP` ends it failed without making it, `by:
--skip`). `--yes`, `--no`, a policy's `allow` and "approve all" deny it, saying why.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from engine._support.scope import current_scope
from engine.approval.prompt import ENDED, Menu, NoAnswer, ask, read_line
from engine.approval.questions import Question, parse_answer
from engine.errors import ApprovalDenied, ReplayMismatch, StepFailed
from engine.limits import loads_json
from engine.sanitize import neutralize, sanitize_for_llm

if TYPE_CHECKING:
    from engine.results import Decision

__all__ = [
    "REDO",
    "SKIP",
    "ApproveAll",
    "Approver",
    "DenyAll",
    "FailClosed",
    "GateRequest",
    "Gatekeeper",
    "InDoubtDecisions",
    "TerminalApprover",
    "in_doubt_reason",
    "params_hash",
]


_SHOWN_VALUE = 2000  # characters of one param value shown in a confirmation prompt


def params_hash(params: Any) -> str:
    """A stable hash of rendered params (canonical JSON, sorted keys)."""
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


class GateRequest(BaseModel):
    """One gated call, as shown to the approver."""

    step_id: str
    action: str
    params: Any
    params_hash: str
    reason: str
    problem: str | None = None  # why the person's last edit was refused, when re-asking
    replayed: bool = False
    """The call's result is served from a cassette, so nothing runs: only then may a
    decision recorded in the cassette answer it. A call that runs live is always decided
    by the live approver, whatever the cassette holds."""
    in_doubt: bool = False
    """The call may already have happened (it was in flight when the run being resumed
    stopped): only a person may approve making it again."""

    def decision(
        self,
        approved: bool,
        by: str,
        reason: str | None = None,
        *,
        edited_params: Any = None,
        quit: bool = False,
        skip: bool = False,
    ) -> Decision:
        """The decision on this call, bound to its exact params (`params_hash`)."""
        from engine.results import Decision  # the run's results: not what validation needs

        return Decision(
            step_id=self.step_id,
            action=self.action,
            params_hash=self.params_hash,
            approved=approved,
            by=by,
            reason=reason,
            edited_params=edited_params,
            quit=quit,
            skip=skip,
        )


class Approver(Protocol):
    """Decides gated calls and answers `human.ask` questions.

    `decide` must not raise for a normal "no"; `answer` raises `StepFailed` when it cannot
    answer.
    """

    async def decide(self, request: GateRequest) -> Decision: ...

    async def answer(self, step_id: str, question: Question) -> Any: ...


def _unattended(question: Question, who: str) -> Any:
    """The answer when nobody is at a terminal: the question's default, if it has one."""
    if question.has_default:
        return question.default
    raise StepFailed(
        f"human.ask: nobody to answer {question.question!r} ({who}) and the question has "
        "no default; run in a terminal to answer it, or give it a default"
    )


class ApproveAll:
    """Approves everything (`--yes`)."""

    async def decide(self, request: GateRequest) -> Decision:
        if request.in_doubt:
            return request.decision(False, "--yes", in_doubt_reason(request.step_id))
        return request.decision(True, "--yes")

    async def answer(self, step_id: str, question: Question) -> Any:
        return _unattended(question, "--yes")


class DenyAll:
    """Denies everything (`--no`)."""

    def __init__(self, reason: str = "every gate denied by --no") -> None:
        self.reason = reason

    async def decide(self, request: GateRequest) -> Decision:
        return request.decision(False, "--no", self.reason)

    async def answer(self, step_id: str, question: Question) -> Any:
        return _unattended(question, "--no")


def in_doubt_reason(step_id: str) -> str:
    """The reason a call in doubt of step `step_id` is denied by anything but a person,
    and the ways forward."""
    return (
        "this call may already have happened, and only a person can decide to make it again "
        f"(--yes and policies cannot): resume in a terminal to answer, or with --redo {step_id} "
        f"to make it again, or --skip {step_id} to end the step failed without it (its "
        "fallback and can_fail apply); or mark the step 'idempotent: true' if making it twice "
        "is harmless"
    )


REDO = "--redo"
"""The `by` of a call in doubt made again because `resume --redo STEP` named its step."""
SKIP = "--skip"
"""The `by` of a call in doubt not made because `resume --skip STEP` named its step."""


class InDoubtDecisions:
    """A person's decisions on calls in doubt, given on the command line (`planloom resume
    ID --redo STEP --skip STEP`), for a resume with no terminal: a call in doubt of a step
    in `redo` is approved (`by: --redo`), one of a step in `skip` is not made and counts as
    failed (`by: --skip`, `Decision.skip`). Everything else goes to `inner`.

    The command checks the names first: each names a step with a call in doubt, and no
    step is in both.
    """

    def __init__(self, inner: Approver, *, redo: frozenset[str], skip: frozenset[str]) -> None:
        self.inner = inner
        self.redo = redo
        self.skip = skip

    async def decide(self, request: GateRequest) -> Decision:
        if request.in_doubt and request.step_id in self.redo:
            return request.decision(True, REDO, "made again: the person's decision (--redo)")
        if request.in_doubt and request.step_id in self.skip:
            reason = f"skipped by --skip: the call of {request.action} may already have happened"
            return request.decision(False, SKIP, reason, skip=True)
        return await self.inner.decide(request)

    async def answer(self, step_id: str, question: Question) -> Any:
        return await self.inner.answer(step_id, question)


class FailClosed:
    """No terminal and no flag: every gate is denied, saying how to approve."""

    reason = (
        "no terminal to ask for approval and no --yes; run in a terminal to answer, "
        "pass --yes to approve every gate, or --policy FILE to decide by rules"
    )

    async def decide(self, request: GateRequest) -> Decision:
        if request.in_doubt:
            reason = f"no terminal: {in_doubt_reason(request.step_id)}"
            return request.decision(False, "fail-closed", reason)
        return request.decision(False, "fail-closed", self.reason)

    async def answer(self, step_id: str, question: Question) -> Any:
        return _unattended(question, "no terminal")


_GATE = Menu(
    ("[a]pprove", "[d]eny", "[e]dit params", "[A]pprove all remaining", "[q]uit"),
    aliases={"y": "a", "yes": "a", "n": "n", "no": "n"},  # y/n as before: n denies at once
)


class TerminalApprover:
    """Asks at the terminal: the step, the action, its rendered params, why it is gated.

    Answers: [a]pprove, [d]eny (with a reason), [e]dit the params (JSON; re-validated),
    approve [A]ll remaining gates, [q]uit the run; `y` approves and `n` denies. There is
    no default: an empty or unknown answer is asked again, saying what the answers are
    (`engine.approval.prompt`); the end of input, or no valid answer in `TRIES`, denies.

    Args:
        pause: a context manager factory held while asking, e.g. to stop a live progress
            view from drawing over the question.
    """

    MAX_EDITS = 5  # edits that are not JSON before the gate gives up (and denies)

    def __init__(self, pause: Callable[[], AbstractContextManager[object]] | None = None):
        self.pause = pause or contextlib.nullcontext
        self.approve_all = False

    async def decide(self, request: GateRequest) -> Decision:
        if self.approve_all and not request.in_doubt:
            return request.decision(True, "terminal (approve all)")
        # Long values folded, escapes made visible: params may come from tool output.
        folded, _ = sanitize_for_llm(request.params, limit=_SHOWN_VALUE)
        params = json.dumps(folded, indent=2, default=repr, ensure_ascii=True)
        problem = (
            f"\nyour edit was refused: {neutralize(request.problem)}" if request.problem else ""
        )
        head = (
            f"\nstep '{request.step_id}' wants to run {request.action} ({request.reason}):\n"
            f"{params}"
        )
        with self.pause():
            return await self._menu(request, head, problem)

    async def _menu(self, request: GateRequest, head: str, problem: str) -> Decision:
        prompt = f"{head}{problem}\n{_GATE.prompt}"
        for _ in range(self.MAX_EDITS):
            try:
                answer = await ask(prompt, _GATE.parse, again=_GATE.prompt)
            except NoAnswer as exc:
                return request.decision(False, "terminal", str(exc))
            if answer == "a":
                return request.decision(True, "terminal")
            if answer == "A":
                self.approve_all = True
                return request.decision(True, "terminal (approve all)")
            if answer == "q":
                decision = request.decision(False, "terminal", "the person quit the run")
                return decision.model_copy(update={"quit": True})
            if answer == "d":
                reason = (await read_line("reason (optional) > ") or "").strip()
                return request.decision(False, "terminal", reason or "denied at the terminal")
            if answer == "n":
                return request.decision(False, "terminal", "answered no")
            text = await read_line("new params as one line of JSON > ")
            if text is None:
                return request.decision(False, "terminal", ENDED)
            try:
                edited = loads_json(text)
            except ValueError as exc:  # a typo is not a "no": ask again
                prompt = f"{head}\nyour edit was refused: not JSON ({exc})\n{_GATE.prompt}"
                continue
            decision = request.decision(True, "terminal (edited)")
            return decision.model_copy(update={"edited_params": edited})
        return request.decision(False, "terminal", "no usable answer")

    async def answer(self, step_id: str, question: Question) -> Any:
        hint = {
            "boolean": " [y/n]",
            "integer": " (a whole number)",
            "number": " (a number)",
            "choice": "",
            "string": "",
        }[question.type]
        lines = [f"\nstep '{step_id}' asks: {neutralize(question.question)}{hint}"]
        for index, choice in enumerate(question.choices or [], start=1):
            lines.append(f"  {index}. {neutralize(choice)}")
        default = f" [{question.default}]" if question.has_default else ""
        again = f">{default} "

        def parse(text: str) -> Any:
            if not text.strip() and question.has_default:
                return question.default
            return parse_answer(question, text)

        try:
            with self.pause():
                return await ask("\n".join(lines) + f"\n{again}", parse, again=again)
        except NoAnswer as exc:
            if exc.ended:  # as if nobody were there: the default, or the step fails
                return _unattended(question, str(exc))
            raise StepFailed(f"human.ask: {exc} to {question.question!r}") from None


class Gatekeeper:
    """Asks the approver once per exact call and remembers every decision.

    An approval binds to the hash of the exact params it saw; params the person edited are
    checked with `validate` (the action's schema) and asked about again until they pass.
    A decision to quit calls `on_quit` (the executor cancels the run).
    """

    MAX_EDITS = 5

    def __init__(
        self,
        approver: Approver,
        redact: Callable[[Any], Any] | None = None,
        on_quit: Callable[[], None] | None = None,
    ) -> None:
        # asyncio is imported where it is used: `planloom validate` imports this module
        # without running it, and asyncio (with ssl, which loads OpenSSL) is much of its start-up.
        import asyncio

        self.approver = approver
        self.redact = redact
        self.on_quit = on_quit
        self.decisions: list[Decision] = []
        self._cache: dict[tuple[str, str, str, bool, str], Decision] = {}
        self._lock = asyncio.Lock()

    async def ask(self, step_id: str, question: Question) -> Any:
        """The person's answer to a `human.ask` question (one question at a time)."""
        async with self._lock:
            return await self.approver.answer(step_id, question)

    async def decide(
        self,
        step_id: str,
        action: str,
        params: Any,
        reason: str,
        validate: Callable[[Any], str | None] | None = None,
        *,
        replayed: bool = False,
        in_doubt: bool = False,
    ) -> Decision:
        """The decision on one call, approving or not (with `edited_params` if the person
        changed them); asked once per exact call.

        Args:
            replayed: the call's result will be served from a cassette (see
                `GateRequest.replayed`). Decisions are remembered separately for replayed
                and live calls, so a recorded decision never answers a live call.
            in_doubt: the call may already have happened (see `GateRequest.in_doubt`).
        """
        digest = params_hash(params)
        # A call in doubt is asked about in its own item: one person's answer for one
        # `for_each` item's call does not cover another's, even with the same params.
        key = (step_id, action, digest, replayed, (current_scope() or "") if in_doubt else "")
        async with self._lock:
            decision = self._cache.get(key)
            if decision is None:
                decision = await self._ask(
                    step_id, action, params, digest, reason, validate, replayed, in_doubt
                )
                self._cache[key] = decision
                self.decisions.append(decision)
        if decision.quit and self.on_quit is not None:
            self.on_quit()
        return decision

    async def check(
        self,
        step_id: str,
        action: str,
        params: Any,
        reason: str,
        validate: Callable[[Any], str | None] | None = None,
        *,
        replayed: bool = False,
    ) -> Decision:
        """Return the approval (as `decide`), or raise `ApprovalDenied` with the
        approver's reason."""
        decision = await self.decide(step_id, action, params, reason, validate, replayed=replayed)
        if not decision.approved:
            raise ApprovalDenied(decision.reason, step_id=step_id)
        return decision

    async def _ask(
        self,
        step_id: str,
        action: str,
        params: Any,
        digest: str,
        reason: str,
        validate: Callable[[Any], str | None] | None,
        replayed: bool,
        in_doubt: bool = False,
    ) -> Decision:
        # The approver sees params with secrets redacted; the hash binds the real ones.
        shown = self.redact(params) if self.redact is not None else params
        request = GateRequest(
            step_id=step_id,
            action=action,
            params=shown,
            params_hash=digest,
            reason=reason,
            replayed=replayed,
            in_doubt=in_doubt,
        )
        for _ in range(self.MAX_EDITS):
            try:
                decision = await self.approver.decide(request)
            except ReplayMismatch:  # a replay with no recorded decision: the step says so
                raise
            except Exception as exc:  # a broken approver fails closed
                return request.decision(
                    False, "error", f"approver failed: {type(exc).__name__}: {exc}"
                )
            edited = decision.edited_params
            if edited is None or not decision.approved:
                return decision
            problem = validate(edited) if validate is not None else None
            if problem is None:  # the approval binds to the params as edited
                return decision.model_copy(update={"params_hash": params_hash(edited)})
            request = request.model_copy(update={"params": edited, "problem": problem})
        return request.decision(False, "terminal", "edited params never passed the schema")
