"""One run of a session: the model client, planning and review, the executor under Ctrl-C
handling, and replanning after a failure."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from engine._support.clock import now
from engine.capability import Registry
from engine.errors import PlanValidationError, StepError
from engine.events import EventBus
from engine.executor import Executor, RunSettings
from engine.llm import Budget, LLMClient, LLMConfig
from engine.llm.events import ModelCallEvents
from engine.model import Limits, Plan
from engine.recording import OfflineModel, TapeApprover
from engine.redaction import Secrets
from engine.render import plan_has_side_effects
from engine.results import RunResult, StepResult, Usage
from engine.sandbox import LiveResults, Results
from engine.session._early import EarlyRun
from engine.session._replan import replan_context, replan_notice
from engine.session._signals import with_signals
from engine.validation import validate_plan
from engine.yaml import parse_recipe_text

if TYPE_CHECKING:
    from engine.session._parts import Attached, Frontend, SessionParts

__all__ = ["SessionResult", "SessionRun", "plan_from_text"]

_T = TypeVar("_T")


@dataclass
class SessionResult:
    """A session's result, the run's secrets (to redact what is printed), the run store it
    was journaled in, if any, and whether a plan ran (not when planning failed or the plan
    was rejected: there is nothing to resume)."""

    result: RunResult
    secrets: Secrets | None
    store: str | None = None
    ran: bool = True


@dataclass
class SessionRun:
    """One `Session.run`: the model client, the plans made, the runs made."""

    session: SessionParts
    frontend: Frontend
    base: dict[str, Any]
    base_dir: Path
    goal: str | None
    inputs: dict[str, str]
    limits: Limits
    config: LLMConfig | None
    kept: dict[str, StepResult] = field(default_factory=dict)
    planned: list[Plan | None] = field(default_factory=list)
    # A goal session's own events: its planning and replanning (`Frontend.watch`).
    events: EventBus | None = None
    # The run a streamed plan's read-only steps began, until the plan is approved.
    early: EarlyRun | None = None

    def _client(self) -> LLMClient | None:
        if self.config is None:
            return None
        budget = Budget(
            max_calls=self.limits.max_llm_calls,
            max_tokens=self.limits.max_llm_tokens,
            deadline=now() + self.limits.max_duration,
        )
        for step in self.kept.values():  # a resumed run: what its kept steps spent counts
            budget.calls += step.usage.llm_calls
            budget.prompt_tokens += step.usage.prompt_tokens
            budget.completion_tokens += step.usage.completion_tokens
        session = self.session
        client = LLMClient(
            self.config, budget=budget, client=OfflineModel() if session.offline else None
        )
        if session.tape is not None:
            client.answers = session.tape.answers
        if session.journal is not None:
            client.answers = session.journal.answers(client.answers)
        return client

    def _run_id(self) -> str:
        """The run's id: its journal's, a pure replay's (from the cassette), else "-"
        (the executor then makes one)."""
        journal = self.session.journal
        if journal is not None:
            return journal.run_id
        tape = self.session.tape
        replayed = tape.run_id if tape is not None else None
        return replayed or "-"

    async def go(self, plan: Plan | None) -> SessionResult:
        client = self._client()
        status = "cancelled"  # unless it ends
        try:
            if client is not None and not self.session.offline:
                await client.preflight(chat=self.session.options.preflight == "chat")
            if self.goal is not None:
                assert client is not None
                self._watch(client)
            outcome = await self._go(plan, client)
            status = outcome.result.status
            return outcome
        except Exception:
            status = "failed"
            raise
        finally:
            if self.events is not None:
                self.events.emit("session.finished", status=status)
            if client is not None:
                await client.aclose()

    def _watch(self, client: LLMClient) -> None:
        """The goal session's own events, for the frontend to follow: redacted as the
        model client redacts what it sends."""
        client.secrets.add_environ()
        events = EventBus(self._run_id(), redact=client.secrets.redact_value)
        self.frontend.watch(events)
        self.events = events
        events.emit("session.started", goal=self.goal)

    async def _go(self, plan: Plan | None, client: LLMClient | None) -> SessionResult:
        if self.goal is not None:
            assert client is not None
            try:
                plan = await self._plan(client)
                self.planned.append(plan)
            except StepError as exc:  # the model failed us: nothing ran
                self.frontend.say(f"planning failed: {exc.message}")
                failed = RunResult(
                    run_id=self._run_id(),
                    status="failed",
                    errors=[exc.message],
                    usage=_spent(client),
                )
                return SessionResult(failed, None, ran=False)
            if plan is None:
                rejected = RunResult(run_id=self._run_id(), status="rejected", usage=_spent(client))
                return SessionResult(rejected, None, ran=False)
        assert plan is not None
        return await self._run_and_replan(plan, client)

    async def _run_and_replan(self, plan: Plan, client: LLMClient | None) -> SessionResult:
        outcome = await self._execute(plan, client, self.kept)
        rounds = plan.replan.max if plan.replan and self.goal is not None else 0
        while outcome.result.status == "failed" and rounds > 0 and client is not None:
            rounds -= 1
            result = outcome.result
            kept = {
                step_id: step
                for step_id, step in result.steps.items()
                if step.status in ("succeeded", "fallback")
            }
            secrets = outcome.secrets if outcome.secrets is not None else Secrets()
            self.frontend.say(replan_notice(result, secrets, len(kept)))
            keep = [
                s.model_dump(by_alias=True, exclude_unset=True) for s in plan.steps if s.id in kept
            ]
            try:
                context = replan_context(result, secrets)
                replanned = await self._plan(client, context=context, keep=keep, before=kept)
            except StepError as exc:  # keep the failed run's result, say why it stands
                self.frontend.say(f"replanning failed: {exc.message}")
                result.errors.append(f"replanning failed: {exc.message}")
                break
            if replanned is None:
                break
            plan = replanned
            # The next run counts the kept steps' calls itself (their usage comes along);
            # the calls of the steps it drops were made all the same.
            dropped = result.usage.tool_calls - sum(s.usage.tool_calls for s in kept.values())
            outcome = await self._execute(plan, client, kept)
            outcome.result.usage.tool_calls += dropped
        return outcome

    async def _plan(
        self,
        client: LLMClient,
        *,
        context: str | None = None,
        keep: list[dict[str, Any]] | None = None,
        before: dict[str, StepResult] | None = None,
    ) -> Plan | None:
        """Plan the goal, show the plan, have it reviewed; None if it was rejected. Its
        model calls and how it ended are the session's events. `before`: the results of
        the steps the plan keeps (a replan's), which a streamed plan's run begins with."""
        before = self.kept if before is None else before
        events = self.events
        if events is None:
            return await self._planned(client, context=context, keep=keep, before=before)
        ModelCallEvents(client, events).install()  # a run's executor installs its own
        events.emit("plan.started", replan=context is not None)
        try:
            plan = await self._planned(client, context=context, keep=keep, before=before)
        except StepError as exc:
            events.emit("plan.finished", outcome="failed", error=exc.message)
            raise
        if plan is None:
            events.emit("plan.finished", outcome="rejected")
        else:
            events.emit("plan.finished", outcome="accepted", steps=len(plan.steps))
        return plan

    async def _planned(
        self,
        client: LLMClient,
        *,
        context: str | None,
        keep: list[dict[str, Any]] | None,
        before: dict[str, StepResult],
    ) -> Plan | None:
        if self.session.planner is None:
            raise StepError("this session has no planner for goals")
        if self._streams():
            self.early = EarlyRun(
                lambda plan: self._begin(plan, client, before, growing=True),
                self.session.registry,
                self.base_dir,
                self.events,
            )
        try:
            plan = await self._reviewed(client, context=context, keep=keep)
        except BaseException:  # (Ctrl-C too) what began must not outlive planning
            await self._abandon_early()
            raise
        if plan is None:
            await self._abandon_early()
        return plan

    def _streams(self) -> bool:
        """Whether the plan is read as it streams (`--stream`, or the recipe's `planner:
        {stream: true}`); not when answers come from a recording, which has them whole."""
        planner = self.base.get("planner")
        asked = self.session.options.stream or (
            isinstance(planner, dict) and planner.get("stream") is True
        )
        return asked and not self.session.offline

    async def _abandon_early(self) -> None:
        early, self.early = self.early, None
        if early is not None:
            await early.abandon()

    async def _reviewed(
        self,
        client: LLMClient,
        *,
        context: str | None = None,
        keep: list[dict[str, Any]] | None = None,
    ) -> Plan | None:
        session = self.session
        frontend = self.frontend
        assert session.planner is not None
        goal = self.goal or ""
        frontend.say(f"planning: {goal}")
        early = self.early
        outcome = await session.planner(client).plan(
            goal,
            base=self.base,
            base_dir=self.base_dir,
            context=context,
            keep=keep,
            **({"on_step": early.offer} if early is not None else {}),
        )
        if early is not None:
            outcome.early = early.states()
        await frontend.show_plan(outcome)
        bound = session.registry.bind(outcome.plan.capabilities, self.base_dir)
        if session.options.dry_run or not plan_has_side_effects(outcome.plan, bound):
            return outcome.plan  # nothing with side effects will run
        tape = session.tape
        if tape is not None:
            approved, edited = await tape.decisions.review(
                outcome.text, lambda: frontend.review(outcome)
            )
        else:
            approved, edited = await frontend.review(outcome)
        if tape is not None and tape.replaying and not tape.recording:
            verdict = "approved" if approved else "rejected"
            frontend.say(f"plan {verdict} (recorded decision{', edited' if edited else ''})")
        if not approved:
            return None
        if edited is None:
            return outcome.plan
        try:
            return plan_from_text(edited, session.registry, self.base_dir)
        except PlanValidationError as exc:
            frontend.invalid_plan(edited, exc)
            return None

    async def _execute(
        self, plan: Plan, client: LLMClient | None, preloaded: dict[str, StepResult]
    ) -> SessionResult:
        early, self.early = self.early, None
        running: asyncio.Task[RunResult] | None = None
        if early is not None and early.executor is not None and early.fits(plan):
            # The run began with the plan's read-only steps: it goes on as the whole plan.
            assert early.attached is not None
            executor, attached, running = early.executor, early.attached, early.task
            await executor.settle(plan)
            self._journal_plan(plan)
        else:  # (a person's edit changed the grants: the early steps' results are dropped)
            if early is not None:
                await early.abandon()
            executor, attached = self._begin(plan, client, preloaded)
        with attached.showing:
            result = await with_signals(executor, self.frontend.say, running)
        return SessionResult(result, executor.secrets)

    def _begin(
        self,
        plan: Plan,
        client: LLMClient | None,
        preloaded: dict[str, StepResult],
        *,
        growing: bool = False,
    ) -> tuple[Executor, Attached]:
        """The run of `plan`: its executor, journaled and recorded, and what the frontend
        attaches to it. A `growing` run (a plan still streaming) journals its plan once it
        is whole (`_journal_plan`)."""
        session = self.session
        journal = session.journal
        # One registry for the run and its journal: no secret is written in clear.
        secrets = journal.secrets if journal is not None else Secrets.from_environ()
        run_id = self._run_id() if self._run_id() != "-" else uuid.uuid4().hex[:12]
        events = EventBus(run_id, redact=secrets.redact_value)
        attached = self.frontend.attach(plan, events)
        approver = attached.approver
        if session.tape is not None:
            approver = TapeApprover(session.tape, approver)
        results: Results = session.tape.results if session.tape is not None else LiveResults()
        if journal is not None:
            approver = journal.approver(approver)
            results = journal.results(results)
            if not growing:
                self._journal_plan(plan)
        agent = session.agent(client) if client is not None and session.agent is not None else None
        settings = RunSettings(
            inputs=self.inputs,
            inputs_from_text=True,
            approver=approver,
            events=events,
            agent_runner=agent,
            llm=client,
            preloaded=preloaded,
            dry_run=session.options.dry_run,
            tool_results=results,
            secrets=secrets,
            run_id=run_id,
            backend=session.backend,
            growing=growing,
        )
        executor = Executor(
            plan, registry=session.registry, base_dir=self.base_dir, settings=settings
        )
        if journal is not None:
            journal.watch(executor)
        return executor, attached

    def _journal_plan(self, plan: Plan) -> None:
        journal = self.session.journal
        if journal is not None:
            model = self.config.model if self.config is not None else None
            journal.plan(plan.to_data(), inputs=self.inputs, model=model)


def plan_from_text(text: str, registry: Registry, base_dir: Path) -> Plan:
    """A plan's YAML (as a person edited it), validated as a recipe would be.

    Raises:
        PlanValidationError: it is not valid; the problems are located in `plan.yaml`.
    """
    data, source = parse_recipe_text(text, "plan.yaml")
    return validate_plan(data, source, registry, base_dir=base_dir, planned=True, owned=True)


def _spent(client: LLMClient) -> Usage:
    """What planning spent on the model, when no run followed (its calls, failed ones too)."""
    budget = client.budget
    return Usage(
        llm_calls=budget.calls,
        prompt_tokens=budget.prompt_tokens,
        completion_tokens=budget.completion_tokens,
    )
