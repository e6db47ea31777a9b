"""Runs a validated `Plan`: step semantics on top of the start-when-ready scheduler.

Per step: `when` → (`for_each` items) → attempts with retries → fallback → `can_fail`.
Statuses and their rules are the README's "Step semantics". Every run ends with every
step in a terminal state; interruption (`cancel()`) and `limits.max_duration` end the
in-flight steps as `cancelled` (their children are killed by the capabilities), then the
`finally` steps run.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Unpack

from engine._graph import Edges, plan_edges
from engine._step_call import step_call
from engine._support.clock import loop_clock, now
from engine._support.gc import collector_paused, freeze_survivors, heap_frozen
from engine._support.scope import enter_scope
from engine.approval import FailClosed, Gatekeeper
from engine.capability import Registry
from engine.errors import StepError, TemplateError
from engine.executor._agent_steps import AgentSteps
from engine.executor._attempts import Attempts, Sleep, Tally
from engine.executor._compiled import CompiledAction, CompiledStep
from engine.executor._fast import once
from engine.executor._gates import RunGates, dry_skip
from engine.executor._open import Growth
from engine.executor._scheduler import Scheduler
from engine.executor._settings import RunOptions, RunSettings
from engine.executor._spending import Spending, plan_outputs
from engine.executor._unended import unended
from engine.inputs import resolve_inputs
from engine.llm.events import ModelCallEvents
from engine.model import Plan, Step
from engine.redaction import Secrets
from engine.results import BLOCKING, RunResult, RunStatus, StepResult, StepStatus
from engine.templating import Namespace
from engine.validation import ensure_valid

_NOT_DONE = frozenset({*BLOCKING, "pending"})
_SETTLE_EVERY = 5000  # steps ended between two freezes of what the run keeps

__all__ = ["Executor", "RunOptions", "RunSettings", "Sleep", "run_plan"]


class Executor:
    """One run of one plan.

    Args:
        plan: a validated plan.
        registry: the capabilities the plan's tools come from.
        base_dir: the recipe's folder; relative grant paths resolve against it.
        settings: the run's settings and collaborators (`RunSettings`), or its fields given
            by name (`approver=ApproveAll()`, ...): one or the other.
    """

    @collector_paused()  # it builds per-step state and frees nothing cyclic: no rescans
    def __init__(
        self,
        plan: Plan,
        *,
        registry: Registry,
        base_dir: Path,
        settings: RunSettings | None = None,
        **options: Unpack[RunOptions],
    ) -> None:
        if settings is not None and options:
            raise TypeError(f"Executor takes settings or {', '.join(sorted(options))}, not both")
        if settings is None:  # (None given for a field is its default)
            given: dict[str, Any] = {k: v for k, v in options.items() if v is not None}
            settings = RunSettings(**given)
        self.settings = settings
        plan = ensure_valid(plan, registry, base_dir=base_dir)  # a plan built in Python too
        self.plan = plan
        self.run_id = settings.run_id or uuid.uuid4().hex[:12]
        # Namespaces: `inputs.keys` / `steps.items` are the input and the step, as validated.
        self.inputs = Namespace(
            resolve_inputs(plan, settings.inputs, from_text=settings.inputs_from_text)
        )
        self.secrets = settings.secrets if settings.secrets is not None else Secrets.from_environ()
        self.secrets.add_inputs(self.inputs)  # `-i api_token=...`: as the journal sees it
        self.events = settings.event_bus(self.run_id, self.secrets)
        registry = registry.bind(plan.capabilities, base_dir)
        self.gatekeeper = Gatekeeper(
            settings.approver or FailClosed(), redact=self.secrets.redact_value, on_quit=self.cancel
        )
        self.gates = RunGates(self.gatekeeper, self.events)
        llm = settings.llm
        self.preloaded = dict(settings.preloaded)
        self.sandbox = settings.sandbox(plan, registry, base_dir, self.gates, self.events)
        self.registry = registry
        self.llm = llm
        # Model calls and tokens per running step; usages made, by value (see StepUsage).
        self.spending = Spending()
        if llm is not None:
            ModelCallEvents(llm, self.events, spend=self.spending.spend_model).install()
            if "llm" in plan.limits.per_family:  # agents' model turns too, not only llm.*
                llm.limit = asyncio.Semaphore(plan.limits.per_family["llm"])
        # Each step's result once it ended (a step not in it is pending): a pending result
        # made up front for every step cost a 100,000-step plan 50 MB.
        self.results: dict[str, StepResult] = {}
        self._undone: set[str] = set()  # steps that ended failed, denied, skipped...
        self._started: dict[str, float] = {}  # start of each running step, on the run's clock
        self._now: Callable[[], float] = now
        self.errors: list[str] = []
        # Compiled when a step starts and dropped when it ends: a plan of 100,000 steps
        # never holds 100,000 compiled steps at once.
        self._steps = {s.id: s for s in plan.all_steps()}
        for section in ("steps", "finally"):  # found here, with the collector paused
            plan_edges(plan, section)
        # A plan that grows while it runs starts with no step: they join (`admit`) until
        # the whole plan is settled (`settle`).
        self._growth: Growth | None = None
        if settings.growing:
            self._steps = {}
            main = self._scheduler(Edges({}, {}), plan.on_failure, growing=True)
            self._growth = Growth(main, self._steps, self.preloaded)
        self._compiled: dict[str, CompiledStep] = {}
        self.agents = AgentSteps(
            settings.agent_runner, registry, self.sandbox, plan.capabilities, self._primary
        )
        self.attempts = Attempts(
            self.events,
            self.sandbox,
            self.agents,
            self.secrets,
            settings.sleep,
            plan.limits.max_parallel,
        )
        self._final_ids = frozenset(s.id for s in plan.finally_)
        self._view: Namespace = Namespace()
        self._run_view: dict[str, Any] = {"id": self.run_id, "name": plan.name}
        self._main_context: dict[str, Any] = {"inputs": self.inputs, "steps": self._view}
        self._graph_task: asyncio.Task[None] | None = None
        self._fast = settings.fast_path and not settings.dry_run
        self._stop_reason: Literal["interrupted", "max_duration"] | None = None

    # -- control -------------------------------------------------------------------------

    def cancel(self) -> None:
        """Interrupt the run: in-flight steps are cancelled, then `finally` steps run."""
        if self._stop_reason is None:
            self._stop_reason = "interrupted"
        if self._graph_task is not None:
            self._graph_task.cancel()

    async def run(self) -> RunResult:
        """Run the plan to the end and return what happened.

        While it runs, objects that existed before it started (the plan, compiled
        templates, imported modules) are frozen out of the cyclic garbage collector, which
        then scans only what the run creates; on a large plan that is most of the engine's
        per-step cost (see `engine._support.gc.heap_frozen`).
        """
        with heap_frozen():
            async with contextlib.AsyncExitStack() as scopes:
                await self._enter_scopes(scopes)
                return await self._run()

    async def _enter_scopes(self, stack: contextlib.AsyncExitStack) -> None:
        """Enter each granted family's per-run state (`Family.scope`); left when the run
        ends, however it ends (the `mcp` family stops its servers there)."""
        backend = self.sandbox.backend
        if backend is not None:  # its connection, on this run's event loop
            await stack.enter_async_context(backend.scope())
        for name, grant in self.sandbox.granted().items():
            family = self.registry.families[name]
            if family.scope is not None:
                scope = family.scope(grant, self.sandbox.base_dir)
                self.sandbox.scopes[name] = await stack.enter_async_context(scope)

    async def _run(self) -> RunResult:
        self._now = loop_clock()  # the loop's clock, as cheap as time.monotonic on a stock loop
        started = self._now()
        # Kept steps (a resumed run's, a replan's) end here with no events of their own:
        # the run's start names them, so a subscriber counting ended steps counts them too.
        kept: dict[str, Any] = {"kept": list(self.preloaded)} if self.preloaded else {}
        self.events.emit("run.started", plan=self.plan.name, **kept)
        for step_id, result in self.preloaded.items():
            self._finish(step_id, result.model_copy(), emit=False)
        deadline = started + self.plan.limits.max_duration
        await self._run_graph("steps", self.plan.on_failure, deadline)
        main = self._status(final=False)
        self._run_view["status"] = main
        if self.plan.finally_:
            reason = self._stop_reason
            self._stop_reason = None
            final_deadline = max(deadline, self._now() + self.plan.limits.timeout)
            await self._run_graph("finally", "continue", final_deadline)
            self._stop_reason = self._stop_reason or reason
            if main == "succeeded" and self._status(final=True) == "failed":
                main = "failed"
        context = {"inputs": self.inputs, "steps": self._view, "run": self._run_view}
        unknown_steps = self.attempts.unknown if self.sandbox.dry_run else None
        outputs, unknown = plan_outputs(self.plan, context, unknown_steps, self.errors)
        if main == "succeeded" and self.errors:
            main = "failed"
        self.events.emit("run.finished", status=main, seconds=self._now() - started)
        return RunResult(
            run_id=self.run_id,
            status=main,
            steps={step_id: self.results.get(step_id) or StepResult() for step_id in self._steps},
            outputs=outputs,
            usage=self.spending.usage(self.sandbox.calls, self.llm),
            errors=[self.secrets.redact(error) for error in self.errors],
            approvals=list(self.gatekeeper.decisions),
            dry_run=self.attempts.would_run if self.sandbox.dry_run else None,
            unknown_outputs=unknown,
        )

    def _status(self, *, final: bool) -> RunStatus:
        """The main steps' status (`final`: the `finally` steps')."""
        if self._stop_reason == "interrupted":
            return "cancelled"
        if self._stop_reason == "max_duration":
            return "failed"
        # A step that never started is no success either, whatever stopped it.
        if any((step_id in self._final_ids) is final for step_id in self._undone):
            return "failed"
        return "succeeded"

    async def _run_graph(
        self,
        section: Literal["steps", "finally"],
        on_failure: Literal["stop", "continue"],
        deadline: float,
    ) -> None:
        steps = self.plan.steps if section == "steps" else self.plan.finally_
        if (not steps and self._growth is None) or self._stop_reason == "interrupted":
            return
        if section == "steps" and self._growth is not None:
            scheduler = self._growth.scheduler
        else:
            edges = plan_edges(self.plan, section)
            if self.preloaded:  # done already: their dependents only wait for the rest
                edges = edges.without(self.preloaded)
            scheduler = self._scheduler(edges, on_failure)
        task = asyncio.create_task(scheduler.run(), name="planloom-graph")
        self._graph_task = task
        timer = asyncio.get_running_loop().call_at(
            max(deadline, self._now()),
            self._expire,
        )
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # we are being cancelled ourselves, not just the graph
        finally:
            timer.cancel()
            self._graph_task = None
        if section == "steps" and self._growth is not None:  # the plan as it ended up
            steps = [step for step in self._steps.values() if step.id not in self._final_ids]
        limit = self.plan.limits.max_duration
        for step_id, result in unended(steps, scheduler, self.preloaded, self._stop_reason, limit):
            self._finish(step_id, result, emit=result.status == "cancelled")

    def _scheduler(
        self, edges: Edges, on_failure: Literal["stop", "continue"], *, growing: bool = False
    ) -> Scheduler[StepResult]:
        return Scheduler(
            edges,
            self._run_step,
            max_parallel=self.plan.limits.max_parallel,
            blocks=lambda result: result.status in BLOCKING,
            crash=self._crashed,
            skip=self._skipped,
            on_block=on_failure,
            open=growing,
        )

    # -- a plan that grows while it runs (`RunSettings.growing`) --------------------------

    def admit(self, step: Step) -> bool:
        """While the plan streams: `step` (valid among the steps so far, and read-only:
        the caller's to decide) joins, to start once the steps it reads have ended
        (`Growth.admit`). Returns whether it joined; `settle` decides what stays."""
        return self._growth is not None and self._growth.admit(step)

    async def settle(self, plan: Plan) -> set[str]:
        """The whole plan, validated and approved (with the capabilities, limits and
        inputs the run began with): the early steps it keeps (`kept_early`) go on or
        stand, the others are forgotten (`step.discarded`), the rest of it joins and the
        run goes on to its end. Returns the ids of the early steps kept."""
        growth = self._growth
        if growth is None:
            raise RuntimeError("settle() is for a run whose plan grows (RunSettings.growing)")
        plan = ensure_valid(plan, self.registry, base_dir=self.sandbox.base_dir)
        kept, dropped = await growth.prune(plan)
        for step_id in dropped:
            self._forget(step_id)
        self.plan = plan
        self._steps.clear()
        self._steps.update((step.id, step) for step in plan.all_steps())
        self._final_ids = frozenset(step.id for step in plan.finally_)
        growth.grow(plan, kept)
        self.events.emit("run.settled", steps=len(self._steps), kept=sorted(kept))
        return kept

    def _forget(self, step_id: str) -> None:
        """An early step the whole plan does not keep: as if it had never run."""
        ended = self.results.pop(step_id, None)
        self._undone.discard(step_id)
        sandbox, agents = self.sandbox, self.agents
        kept: tuple[dict[str, Any], ...] = (self._view, self._started, self._compiled)
        for held in (*kept, sandbox.step_calls, sandbox.step_warnings, agents.transcripts):
            held.pop(step_id, None)
        self.spending.step_usage(step_id, 0)
        sandbox.results.forget(step_id)
        status = ended.status if ended is not None else None
        self.events.emit("step.discarded", step_id, ended=ended is not None, status=status)

    def _expire(self) -> None:
        if self._stop_reason is None:
            self._stop_reason = "max_duration"
            self.errors.append(
                f"the run exceeded limits.max_duration ({self.plan.limits.max_duration:g} s)"
            )
        if self._graph_task is not None:
            self._graph_task.cancel()

    # -- one step ------------------------------------------------------------------------

    def _primary(self, step_id: str) -> CompiledAction:
        """The running step's own action (a fallback's agent is told what failed)."""
        return self._compiled[step_id].primary

    async def _run_step(self, step_id: str) -> StepResult:
        step = self._steps[step_id]
        call = step_call(step) if self._fast else None  # the common step's short path
        enter_scope(step_id)  # this step's task: what a cassette files its calls under
        self._started[step_id] = self._now()
        self.events.emit("step.started", step_id)
        if call is not None:
            status, output, error = await once(self.attempts, step_id, call, self._context(step_id))
            return self._finish(step_id, StepResult.ended(status, output, error, 1))
        compiled = self._compiled[step_id] = CompiledStep(step)
        if self.sandbox.dry_run:
            skipped = dry_skip(step, self.attempts.unknown, self.registry)
            if skipped is not None:
                return self._finish(step_id, skipped)
        context = self._context(step_id)
        try:
            if compiled.when is not None and not compiled.when.render(context):
                return self._finish(
                    step_id, StepResult(status="skipped", error="skipped: 'when' was false")
                )
            if step.when is False:
                return self._finish(
                    step_id, StepResult(status="skipped", error="skipped: 'when' is false")
                )
            if compiled.for_each is not None:
                return self._finish(step_id, await self.attempts.items(compiled, context))
        except TemplateError as exc:
            return self._finish(step_id, self._failed(step, exc, Tally()))
        tally = Tally()
        status, output, error = await self.attempts.chain(compiled, context, tally)
        # A replay cannot show what came next; a call in doubt must stay a failure.
        lost = step_id in self.attempts.mismatched or step_id in self.attempts.in_doubt
        if status in ("failed", "denied") and step.can_fail and not lost:
            status = "failed_acceptable"
        return self._finish(step_id, StepResult.ended(status, output, error, tally.attempts))

    # -- bookkeeping ---------------------------------------------------------------------

    def _context(self, step_id: str) -> dict[str, Any]:
        main = self._main_context  # what a step's templates see (steps share it: unchanged)
        return {**main, "run": self._run_view} if step_id in self._final_ids else main

    def _finish(self, step_id: str, result: StepResult, *, emit: bool = True) -> StepResult:
        usage = self.spending.step_usage(step_id, self.sandbox.step_calls.pop(step_id, 0))
        if usage is not None:  # a step kept from before keeps what it spent then
            # Not `result.usage = usage`: pydantic would also record the field as set,
            # growing each result's set of set fields to 32 slots (50 MB at 100,000 steps).
            result.__dict__["usage"] = usage
        warnings = self.sandbox.step_warnings
        if warnings and (kept := warnings.pop(step_id, None)):  # (a kept step keeps its own)
            result.__dict__["warnings"] = kept
        started = self._started.pop(step_id, None)
        if started is not None and self.sandbox.results.timed:  # (a kept step keeps its own)
            result.__dict__["duration"] = round(self._now() - started, 6)
        transcripts = self.agents.transcripts
        if transcripts and (transcript := transcripts.get(step_id)):
            result.transcript = self.secrets.redact_value(transcript)
        fields = result.__dict__  # (read as a dict: a result's attributes are a step up)
        status, error, attempts = fields["status"], fields["error"], fields["attempts"]
        if error:
            # Errors quote params, argv and URLs: they leave the run, so no secrets in them.
            result.error = error = self.secrets.redact(error)
        self.results[step_id] = result
        if status in _NOT_DONE:  # (kept as they end: a run's end reads no result)
            self._undone.add(step_id)
        elif self._undone:
            self._undone.discard(step_id)
        if self._compiled:
            self._compiled.pop(step_id, None)
        if len(self.results) % _SETTLE_EVERY == 0:
            freeze_survivors()  # the results so far: out of every later full collection
        self._view[step_id] = {
            "output": fields["output"],
            "status": status,
            "error": error,
            "attempts": attempts,
        }
        if emit:
            self.events.emit(
                "step.finished", step_id, status=status, attempts=attempts, error=error
            )
        return result

    def _failed(self, step: Step, exc: StepError, tally: Tally) -> StepResult:
        status: StepStatus = "failed_acceptable" if step.can_fail else "failed"
        return StepResult(status=status, error=exc.message, attempts=tally.attempts)

    def _crashed(self, step_id: str, exc: Exception) -> StepResult:
        return self._finish(
            step_id,
            StepResult(status="failed", error=f"internal error: {type(exc).__name__}: {exc}"),
        )

    def _skipped(self, step_id: str, cause: str) -> StepResult:
        return self._finish(
            step_id,
            StepResult(
                status="skipped",
                error=f"skipped: upstream step '{cause}' {self.results[cause].status}",
            ),
        )


async def run_plan(
    plan: Plan,
    *,
    registry: Registry,
    base_dir: Path,
    settings: RunSettings | None = None,
    **options: Unpack[RunOptions],
) -> RunResult:
    """Run `plan` once and return the result (see `Executor` for the arguments)."""
    executor = Executor(plan, registry=registry, base_dir=base_dir, settings=settings, **options)
    return await executor.run()
