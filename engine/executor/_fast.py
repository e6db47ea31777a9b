"""The common step on a short path: one attempt of a tool call, nothing around it.

Most steps of a large plan are a tool call with templated params and nothing else: no
`when`, no `for_each`, no fallback, no retry, no agent. For those the general path builds
a `CompiledStep` (closures over every template, the fallback, the retry policy) and goes
through four nested coroutines (`chain` → `_with_retries` → `_attempt` → the sandbox) to
make one call. Here such a step's call, found at validation (`engine._step_call`), has
its params rendered where their templates go, and its one attempt runs in one frame.

The call itself goes through the same `Sandbox.call` (grant, params, budget, gate, the
journal or cassette): the short path skips no rule, only the executor's own machinery. It
gives the same results and events as the general path (`RunSettings.fast_path=False`
runs every step the general way; tests compare the two over random plans).
"""

from __future__ import annotations

from typing import Any

from engine._step_call import StepCall
from engine._support.scope import enter_attempt
from engine.errors import ApprovalDenied, ReplayMismatch, StepError, StepFailed
from engine.executor._attempts import Attempts
from engine.results import StepStatus
from engine.templating import render_at

__all__ = ["once"]


async def once(
    attempts: Attempts, step_id: str, call: StepCall, context: dict[str, Any]
) -> tuple[StepStatus, Any, str | None]:
    """The step's one attempt: `Attempts.chain` and `Attempts._attempt` for a step with
    no fallback and one attempt, with the same events and outcomes (`can_fail` applied)."""
    enter_attempt(1)
    events = attempts.events
    events.emit("attempt.started", step_id, 1, action=call.tool, agent=None, item=None)
    try:
        output = await attempts.sandbox.call(
            call.tool,
            render_at(call.params, call.wheres, call.templates, context),
            step_id=step_id,
            confirm=call.confirm,
            timeout=call.timeout,
            data_paths=call.data_paths,
            data_literals=call.data_literals,
            idempotent=call.idempotent,
        )
    except StepError as exc:
        failed: StepError = exc
    except Exception as exc:  # a bug below us is this attempt's failure, not a crash
        failed = StepFailed(f"{type(exc).__name__}: {exc}", step_id=step_id, attempt=1)
    else:
        events.emit("attempt.finished", step_id, 1, item=None, outcome="ok")
        return "succeeded", output, None
    events.emit(
        "attempt.finished",
        step_id,
        1,
        item=None,
        outcome=type(failed).__name__,
        error=failed.message,
    )
    status: StepStatus = "failed"
    if isinstance(failed, ReplayMismatch):  # the replay cannot show what happened next
        attempts.mismatched.add(step_id)
    elif isinstance(failed, ApprovalDenied):
        status = "denied"
        if failed.in_doubt:  # it may have happened: can_fail does not make it acceptable
            attempts.in_doubt.add(step_id)
    if call.can_fail and step_id not in attempts.mismatched and step_id not in attempts.in_doubt:
        status = "failed_acceptable"
    return status, None, failed.message
