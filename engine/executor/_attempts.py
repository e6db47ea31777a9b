"""One step's action carried out: attempts with retries, then its fallback, and `for_each`
items in parallel; what a dry run did not do, and which steps a replay could not follow."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from engine._support.eager import as_task
from engine._support.scope import enter_attempt, enter_scope
from engine.errors import (
    ApprovalDenied,
    DryRun,
    ReplayMismatch,
    StepError,
    StepFailed,
    TemplateError,
)
from engine.events import EventBus
from engine.executor._agent_steps import AgentSteps
from engine.executor._compiled import CompiledAction, CompiledStep, retry_wait, retryable
from engine.model import Step
from engine.redaction import Secrets
from engine.results import BLOCKING, StepResult, StepStatus
from engine.sandbox import Sandbox
from engine.templating import Template

__all__ = ["Attempts", "Sleep", "Tally"]

Sleep = Callable[[float], Awaitable[None]]


@dataclass
class Tally:
    """Attempts made for one step, or for one `for_each` item (retries and the fallback
    included). Each item has its own: an item's attempts are numbered within the item, so
    what a cassette or journal files its calls under does not depend on how fast the other
    items went."""

    attempts: int = 0


@dataclass
class Attempts:
    """Carries out steps' actions for one run.

    Attributes:
        events: where attempts are published.
        sandbox: the gate every tool call passes.
        agents: agent steps and natural-language fallbacks.
        secrets: redacted from what a dry run reports.
        sleep: waits between retries.
        max_parallel: the run's limit on `for_each` items at once (a step's own wins).
        mismatched: steps a replay had no recording for (`can_fail` does not apply).
        in_doubt: steps whose call in doubt was denied (no fallback; `can_fail` does not
            apply).
        unknown: dry run: steps whose outputs are unknown.
        would_run: dry run: the calls not made, with their rendered params.
    """

    events: EventBus
    sandbox: Sandbox
    agents: AgentSteps
    secrets: Secrets
    sleep: Sleep
    max_parallel: int
    mismatched: set[str] = field(default_factory=set)
    in_doubt: set[str] = field(default_factory=set)
    unknown: set[str] = field(default_factory=set)
    would_run: list[dict[str, Any]] = field(default_factory=list)

    async def items(self, compiled: CompiledStep, context: dict[str, Any]) -> StepResult:
        step = compiled.step
        items = compiled.for_each
        if isinstance(items, Template):
            items = items.render(context)
        if isinstance(items, range):  # `${{ range(3) }}`, as validation counts it
            items = list(items)
        if not isinstance(items, list):
            raise TemplateError(
                f"for_each must give a list, got {type(items).__name__}: {items!r:.80}"
            )
        limit = asyncio.Semaphore(step.max_parallel or self.max_parallel)
        tallies = [Tally() for _ in items]

        async def one(index: int, item: Any) -> tuple[StepStatus, Any, str | None]:
            enter_scope(f"{step.id}[{index}]")
            async with limit:
                context_of_item = {**context, "item": item, "index": index}
                return await self.chain(compiled, context_of_item, tallies[index])

        await as_task()  # (the group cancels the task it runs in if an item crashes)
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(i, item)) for i, item in enumerate(items)]
        outcomes = [task.result() for task in tasks]
        attempts = sum(tally.attempts for tally in tallies)
        bad = [(i, o) for i, o in enumerate(outcomes) if o[0] in BLOCKING]
        if bad:
            status: StepStatus = "denied" if all(o[0] == "denied" for _, o in bad) else "failed"
            if step.can_fail and step.id not in self.mismatched | self.in_doubt:
                status = "failed_acceptable"
            error = "; ".join(f"item {i}: {o[2]}" for i, o in bad[:5])
            more = f" (and {len(bad) - 5} more items)" if len(bad) > 5 else ""
            # What the items that succeeded produced is kept (null for the others): a
            # dependent of a `can_fail` fan-out reads the results it has.
            return StepResult(
                status=status,
                output=[o[1] for o in outcomes],
                error=error + more,
                attempts=attempts,
                items=len(items),
            )
        errors = [f"item {i}: {o[2]}" for i, o in enumerate(outcomes) if o[2]]
        if outcomes and all(o[0] == "skipped" for o in outcomes):  # --dry-run
            return StepResult(
                status="skipped", error=errors[0], attempts=attempts, items=len(items)
            )
        status = "fallback" if any(o[0] == "fallback" for o in outcomes) else "succeeded"
        return StepResult(
            status=status,
            output=[o[1] for o in outcomes],
            error="; ".join(errors) or None,
            attempts=attempts,
            items=len(items),
        )

    async def chain(
        self, compiled: CompiledStep, context: dict[str, Any], tally: Tally
    ) -> tuple[StepStatus, Any, str | None]:
        """Primary with retries, then the fallback. `can_fail` is the caller's business."""
        step = compiled.step
        try:
            output = await self._with_retries(compiled, compiled.primary, context, tally)
            return "succeeded", output, None
        except DryRun as exc:
            self.unknown.add(step.id)
            call = {"step_id": step.id, "action": exc.action, "params": exc.params}
            self.would_run.append(self.secrets.redact_value(call))
            return "skipped", None, f"{exc.message} (not run: --dry-run)"
        except ReplayMismatch as exc:  # the replay cannot show what happened next
            self.mismatched.add(step.id)
            return "failed", None, exc.message
        except ApprovalDenied as exc:
            if exc.in_doubt:  # it may have happened: nothing runs in its place
                self.in_doubt.add(step.id)
                return "denied", None, exc.message
            denied, error = True, exc.message
        except StepError as exc:
            denied, error = False, exc.message
        if compiled.fallback is not None:
            try:
                tally.attempts += 1
                output = await self._attempt(
                    step, compiled.fallback, context, tally.attempts, failure=error
                )
                return "fallback", output, f"primary failed: {error}"
            except ReplayMismatch as exc:
                self.mismatched.add(step.id)
                return "failed", None, f"{error}; fallback: {exc.message}"
            except StepError as exc:
                error = f"{error}; fallback failed: {exc.message}"
                if isinstance(exc, ApprovalDenied) and exc.in_doubt:
                    self.in_doubt.add(step.id)
                    return "denied", None, error
        return ("denied" if denied else "failed"), None, error

    async def _with_retries(
        self, compiled: CompiledStep, action: CompiledAction, context: dict[str, Any], tally: Tally
    ) -> Any:
        policy = compiled.step.retry
        if policy is None or policy.attempts == 1:
            tally.attempts += 1
            return await self._attempt(compiled.step, action, context, tally.attempts)
        step_id = compiled.step.id

        def waiting(state: RetryCallState) -> None:  # each retry's wait is an event
            failed = state.outcome.exception() if state.outcome is not None else None
            self.events.emit(
                "attempt.retrying",
                step_id,
                tally.attempts,
                item=context.get("index"),
                wait=round(state.next_action.sleep if state.next_action else 0.0, 3),
                error=failed.message if isinstance(failed, StepError) else str(failed),
            )

        retrying = AsyncRetrying(
            stop=stop_after_attempt(policy.attempts),
            wait=retry_wait(policy),
            retry=retry_if_exception(lambda exc: retryable(exc, policy)),
            sleep=self.sleep,
            before_sleep=waiting,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                tally.attempts += 1
                return await self._attempt(compiled.step, action, context, tally.attempts)
        raise AssertionError("unreachable: tenacity reraises the last error")  # pragma: no cover

    async def _attempt(
        self,
        step: Step,
        action: CompiledAction,
        context: dict[str, Any],
        attempt: int,
        failure: str | None = None,
    ) -> Any:
        enter_attempt(attempt)  # what a model call made by this attempt names
        item = context.get("index")  # a `for_each` item's attempts are numbered within it
        self.events.emit(
            "attempt.started",
            step.id,
            attempt,
            action=action.tool,
            agent=action.is_agent or None,
            item=item,
        )
        try:
            if action.is_agent:
                output = await self.agents.run(step, action, context, attempt, failure)
            else:
                output = await self.sandbox.call(
                    action.tool,
                    action.params.render(context),
                    step_id=step.id,
                    attempt=attempt,
                    confirm=action.confirm,
                    timeout=action.timeout,
                    data_paths=action.data_paths,
                    data_literals=action.data_literals,
                    idempotent=step.idempotent,
                )
        except StepError as exc:
            self.events.emit(
                "attempt.finished",
                step.id,
                attempt,
                item=item,
                outcome=type(exc).__name__,
                error=exc.message,
            )
            raise
        except Exception as exc:  # a bug below us is this attempt's failure, not a crash
            error = StepFailed(f"{type(exc).__name__}: {exc}", step_id=step.id, attempt=attempt)
            self.events.emit(
                "attempt.finished",
                step.id,
                attempt,
                item=item,
                outcome="StepFailed",
                error=error.message,
            )
            raise error from exc
        self.events.emit("attempt.finished", step.id, attempt, item=item, outcome="ok")
        return output
