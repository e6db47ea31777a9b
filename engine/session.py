"""A run session: plan a goal (or take a plan), have it approved, run it, replan if allowed.

The CLI's `run`, `plan` and `replay` and `engine.testing.replay()` all run one. What is
shown to a person and how they answer is the `Frontend`'s; where plans come from is the
`Planner`'s; the recorder (a cassette's `Tape`), when there is one, wraps the model's
answers, the tool results and the approver. Everything runs on one event loop.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Callable, Coroutine, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from engine._problems import validation_problems
from engine._secrets import Secrets
from engine._threads import DaemonThreadPool
from engine._yaml import parse_recipe_text
from engine.agent import AgentRunner
from engine.approval import Approver
from engine.capability import Registry
from engine.errors import ConfigurationError, PlanValidationError, StepError
from engine.events import EventBus
from engine.executor import Executor
from engine.inputs import input_text
from engine.llm import Budget, LLMClient, LLMConfig, resolve_llm_config
from engine.model import FallbackAction, Limits, LLMSettings, Plan
from engine.planning import Planner, PlanOutcome, PlanReview
from engine.recording import OfflineModel, Tape, TapeApprover
from engine.render import plan_has_side_effects
from engine.results import ReplayReport, RunResult, StepResult, Usage
from engine.validation import validate_plan

__all__ = ["Attached", "Frontend", "Session", "SessionOptions", "SessionResult", "plan_from_text"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class SessionOptions:
    """How a session runs (the run flags of `planloom run`, `plan` and `replay`).

    Attributes:
        dry_run: read-only actions run; side effects are reported, not made.
        model: the model name (else `PLANLOOM_MODEL`, else the recipe's).
        base_url: an OpenAI-compatible endpoint (else `OPENAI_BASE_URL`, else OpenAI).
    """

    dry_run: bool = False
    model: str | None = None
    base_url: str | None = None


@dataclass
class Attached:
    """What a frontend puts on one plan's run: the approver of its gates and questions, and
    what it shows while the run lasts (entered around it)."""

    approver: Approver
    showing: AbstractContextManager[object]


class Frontend(PlanReview, Protocol):
    """What a person sees and answers during a session."""

    def say(self, text: str) -> None:
        """One progress line (`planning: ...`, `replanning ...`)."""
        ...

    async def show_plan(self, outcome: PlanOutcome) -> None:
        """Show a model-written plan (and save it, if the person asked for that)."""
        ...

    def invalid_plan(self, text: str, error: PlanValidationError) -> None:
        """An edited plan is not valid: say where and why."""
        ...

    def attach(self, plan: Plan, events: EventBus) -> Attached:
        """Subscribe to a run's events; the approver for its gates."""
        ...


@dataclass
class SessionResult:
    """A session's result, and the run's secrets (to redact what is printed)."""

    result: RunResult
    secrets: Secrets | None


class Session:
    """Sessions over a registry, with a planner, an agent runner and maybe a recorder.

    Args:
        registry: the capabilities steps may use.
        options: dry run, model and endpoint.
        planner: makes the planner for a goal from the session's model client.
        agent: makes the runner of `agent` steps from the session's model client.
        recorder: a cassette's tape: model answers, tool results, decisions and answers
            are recorded into it, or served from it.
    """

    def __init__(
        self,
        registry: Registry,
        options: SessionOptions | None = None,
        *,
        planner: Callable[[LLMClient], Planner] | None = None,
        agent: Callable[[LLMClient], AgentRunner] | None = None,
        recorder: Tape | None = None,
    ) -> None:
        self.registry = registry
        self.options = options or SessionOptions()
        self.planner = planner
        self.agent = agent
        self.tape = recorder
        self._offline = recorder is not None and not recorder.recording

    def run(
        self,
        start: Plan | str,
        *,
        base: dict[str, Any],
        base_dir: Path,
        frontend: Frontend,
        inputs: Mapping[str, str] | None = None,
    ) -> SessionResult:
        """Run `start` and return what happened.

        `start` is a plan, or a goal to plan: a goal string, or a recipe with a `goal:` and
        no steps. `base` is the recipe the plan comes from (its capabilities, limits and
        llm settings are what a goal is planned within); `base_dir` is where its relative
        paths start; `frontend` shows progress and plans, reviews plans and approves gates;
        `inputs` are the run inputs as text (`-i KEY=VALUE`), parsed by their
        declared types (a replay's recorded inputs fill in the rest). A first Ctrl-C
        cancels running steps (`finally` steps still run); a second one raises
        `KeyboardInterrupt` out of here.

        Raises:
            ConfigurationError: the run needs a model and none is configured, or the
                recipe's `llm:` or `limits:` are invalid.
        """
        recipe = start if isinstance(start, Plan) else None
        goal = _goal_of(start)
        config = self.model_config(start, base)
        given = self._inputs(inputs or {})
        limits = _settings(Limits, base, "limits")
        run = _Run(self, frontend, base, base_dir, goal, given, limits, config)
        outcome = _run_async(run.go(recipe if goal is None else None))
        if self.tape is not None:
            first = run.planned[0] if run.planned else recipe
            self._finish_tape(
                frontend,
                outcome.result,
                plan=first.to_data() if first is not None else None,
                goal=goal,
                base=base if goal is not None else None,
                model=config.model if config is not None else None,
                inputs=given,
            )
        return outcome

    def model_config(self, start: Plan | str, base: dict[str, Any]) -> LLMConfig | None:
        """The model a run of `start` needs (None: it needs none), resolved from the
        options, the environment and `base`'s `llm:`; a replay takes the recorded model.

        Raises:
            ConfigurationError: no model is configured, or `llm:` is invalid.
        """
        needed = _goal_of(start) is not None or (isinstance(start, Plan) and _needs_model(start))
        if not needed:
            return None
        recipe_llm = _settings(LLMSettings, base, "llm") if base.get("llm") else None
        if self._offline:
            assert self.tape is not None
            recorded = self.tape.recorded.model or (recipe_llm.model if recipe_llm else None)
            return LLMConfig(model=self.options.model or recorded or "unrecorded")
        return resolve_llm_config(
            recipe_llm, model=self.options.model, base_url=self.options.base_url
        )

    def _inputs(self, given: Mapping[str, str]) -> dict[str, str]:
        """The run's inputs as text: a replay's recorded inputs, unless given again."""
        if self.tape is None or not self.tape.replaying:
            return dict(given)
        recorded = {k: input_text(v) for k, v in self.tape.recorded.inputs.items()}
        return {**recorded, **given}

    def _finish_tape(
        self,
        frontend: Frontend,
        result: RunResult,
        *,
        plan: dict[str, Any] | None,
        goal: str | None,
        base: dict[str, Any] | None,
        model: str | None,
        inputs: dict[str, Any],
    ) -> None:
        """Write the cassette (not for an interrupted run) and attach the replay report."""
        tape = self.tape
        assert tape is not None
        written = False
        if result.status != "cancelled":
            written = tape.save(plan=plan, goal=goal, base=base, model=model, inputs=inputs)
        elif tape.recording:
            partial = "was not written (the recording is partial)"
            frontend.say(f"interrupted: {tape.path} {partial}")
        result.replay = ReplayReport(
            cassette=str(tape.path),
            mode=tape.requested_mode,
            mismatches=list(tape.mismatches),
            unused=tape.unused(),
            written=written,
        )
        if tape.mismatches and result.status == "succeeded":
            result.status = "failed"  # a replay that diverged proves nothing


@dataclass
class _Run:
    """One `Session.run`: the model client, the plans made, the runs made."""

    session: Session
    frontend: Frontend
    base: dict[str, Any]
    base_dir: Path
    goal: str | None
    inputs: dict[str, str]
    limits: Limits
    config: LLMConfig | None
    planned: list[Plan | None] = field(default_factory=list)

    def _client(self) -> LLMClient | None:
        if self.config is None:
            return None
        budget = Budget(
            max_calls=self.limits.max_llm_calls,
            max_tokens=self.limits.max_llm_tokens,
            deadline=time.monotonic() + self.limits.max_duration,
        )
        session = self.session
        client = LLMClient(
            self.config, budget=budget, client=OfflineModel() if session._offline else None
        )
        if session.tape is not None:
            client.answers = session.tape.answers
        return client

    async def go(self, plan: Plan | None) -> SessionResult:
        client = self._client()
        try:
            if client is not None and not self.session._offline:
                await client.preflight()
            if self.goal is not None:
                assert client is not None
                try:
                    plan = await self._plan(client)
                    self.planned.append(plan)
                except StepError as exc:  # the model failed us: nothing ran
                    self.frontend.say(f"planning failed: {exc.message}")
                    failed = RunResult(
                        run_id="-", status="failed", errors=[exc.message], usage=_spent(client)
                    )
                    return SessionResult(failed, None)
                if plan is None:
                    rejected = RunResult(run_id="-", status="rejected", usage=_spent(client))
                    return SessionResult(rejected, None)
            assert plan is not None
            return await self._run_and_replan(plan, client)
        finally:
            if client is not None:
                await client.aclose()

    async def _run_and_replan(self, plan: Plan, client: LLMClient | None) -> SessionResult:
        outcome = await self._execute(plan, client, {})
        rounds = plan.replan.max if plan.replan and self.goal is not None else 0
        while outcome.result.status == "failed" and rounds > 0 and client is not None:
            rounds -= 1
            result = outcome.result
            kept = {
                step_id: step
                for step_id, step in result.steps.items()
                if step.status in ("succeeded", "fallback")
            }
            self.frontend.say(f"replanning after the failure ({len(kept)} steps kept)")
            keep = [
                s.model_dump(by_alias=True, exclude_unset=True) for s in plan.steps if s.id in kept
            ]
            try:
                replanned = await self._plan(client, context=_replan_context(result), keep=keep)
            except StepError as exc:  # keep the failed run's result, say why it stands
                self.frontend.say(f"replanning failed: {exc.message}")
                result.errors.append(f"replanning failed: {exc.message}")
                break
            if replanned is None:
                break
            plan = replanned
            earlier_calls = result.usage.tool_calls
            outcome = await self._execute(plan, client, kept)
            outcome.result.usage.tool_calls += earlier_calls
        return outcome

    async def _plan(
        self,
        client: LLMClient,
        *,
        context: str | None = None,
        keep: list[dict[str, Any]] | None = None,
    ) -> Plan | None:
        """Plan the goal, show the plan, have it reviewed; None if it was rejected."""
        session = self.session
        frontend = self.frontend
        if session.planner is None:
            raise StepError("this session has no planner for goals")
        goal = self.goal or ""
        frontend.say(f"planning: {goal}")
        outcome = await session.planner(client).plan(
            goal, base=self.base, base_dir=self.base_dir, context=context, keep=keep
        )
        await frontend.show_plan(outcome)
        if session.options.dry_run or not plan_has_side_effects(outcome.plan, session.registry):
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
        session = self.session
        events = EventBus("pending")
        attached = self.frontend.attach(plan, events)
        approver = attached.approver
        if session.tape is not None:
            approver = TapeApprover(session.tape, approver)
        executor = Executor(
            plan,
            registry=session.registry,
            base_dir=self.base_dir,
            inputs=self.inputs,
            inputs_from_text=True,
            approver=approver,
            events=events,
            agent_runner=session.agent(client)
            if client is not None and session.agent is not None
            else None,
            llm=client,
            preloaded=preloaded,
            dry_run=session.options.dry_run,
            tool_results=session.tape.results if session.tape is not None else None,
        )
        events.run_id = executor.run_id
        with attached.showing:
            result = await _with_signals(executor, self.frontend.say)
        return SessionResult(result, executor.secrets)


def plan_from_text(text: str, registry: Registry, base_dir: Path) -> Plan:
    """A plan's YAML (as a person edited it), validated as a recipe would be.

    Raises:
        PlanValidationError: it is not valid; the problems are located in `plan.yaml`.
    """
    data, source = parse_recipe_text(text, "plan.yaml")
    return validate_plan(data, source, registry, base_dir=base_dir)


def _needs_model(plan: Plan | None) -> bool:
    if plan is None:
        return False
    return "llm" in plan.capabilities or any(
        step.agent is not None
        or isinstance(step.fallback, str)
        or (isinstance(step.fallback, FallbackAction) and step.fallback.agent is not None)
        for step in plan.all_steps()
    )


def _goal_of(start: Plan | str) -> str | None:
    """The goal to plan: a goal string, or a recipe's `goal:` when it has no steps."""
    if isinstance(start, str):
        return start
    return start.goal if not start.steps else None


M = TypeVar("M", bound=BaseModel)


def _settings(model: type[M], base: dict[str, Any], key: str) -> M:
    """`base[key]` as `model`; a problem with it is a configuration error."""
    try:
        return model.model_validate(base.get(key) or {})
    except ValidationError as exc:
        problems = validation_problems(exc, prefix=(key,))
        raise ConfigurationError(f"the recipe's {key}: is invalid: {problems}") from None


def _spent(client: LLMClient) -> Usage:
    """What planning spent on the model, when no run followed (its calls, failed ones too)."""
    budget = client.budget
    return Usage(
        llm_calls=budget.calls,
        prompt_tokens=budget.prompt_tokens,
        completion_tokens=budget.completion_tokens,
    )


def _replan_context(result: RunResult) -> str:
    """What the planner is told after a failure: what ran, what it gave, what failed."""
    lines = [
        "The previous plan failed. Steps marked succeeded keep their outputs and must not be "
        "repeated (read them as ${{ steps.ID.output }}); plan the rest again.",
    ]
    for step_id, step in result.steps.items():
        line = f"- {step_id}: {step.status}"
        if step.status in ("succeeded", "fallback"):
            line += f"; output: {json.dumps(step.output, default=repr)[:300]}"
        elif step.error:
            line += f"; error: {step.error[:300]}"
        lines.append(line)
    return "\n".join(lines)


def _run_async(main: Coroutine[Any, Any, _T]) -> _T:
    """`asyncio.run(main)`, on worker threads that cannot hold up the exit: a step cancelled
    by Ctrl-C or its timeout may leave a thread running (a slow user function), and the
    default executor would be waited for without bound (see `engine._threads`)."""
    with asyncio.Runner() as runner:
        runner.get_loop().set_default_executor(DaemonThreadPool())
        return runner.run(main)


async def _with_signals(executor: Executor, say: Callable[[str], None]) -> RunResult:
    """Run; the first Ctrl-C (or SIGTERM) cancels running steps (`finally` steps still
    run), the second cancels everything."""
    loop = asyncio.get_running_loop()
    presses = 0
    current = asyncio.current_task()
    assert current is not None
    task: asyncio.Task[Any] = current

    def interrupt() -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            say("\ninterrupted: cancelling running steps (again to force)")
            executor.cancel()
        else:
            task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, interrupt)
    try:
        return await executor.run()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
