"""A run session: plan a goal (or take a plan), have it approved, run it, replan if allowed.

The CLI's `run`, `plan` and `replay` and `engine.testing.replay()` all run one. What is
shown to a person and how they answer is the `Frontend`'s; where plans come from is the
`Planner`'s; the recorder (a cassette's `Tape`), when there is one, wraps the model's
answers, the tool results and the approver. Everything runs on one event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from engine._support.problems import validation_problems
from engine.agent import AgentRunner
from engine.backend import Backend
from engine.capability import Registry
from engine.errors import ConfigurationError
from engine.inputs import input_text
from engine.journal import Journal
from engine.llm import LLMClient, LLMConfig, resolve_llm_config
from engine.model import FallbackAction, Limits, LLMSettings, Plan
from engine.planning import Planner
from engine.recording import Tape
from engine.results import ReplayReport, RunResult, StepResult
from engine.session._parts import Attached, Frontend, SessionOptions
from engine.session._run import SessionResult, SessionRun, plan_from_text
from engine.session._signals import run_async

__all__ = ["Attached", "Frontend", "Session", "SessionOptions", "SessionResult", "plan_from_text"]


class Session:
    """Sessions over a registry, with a planner, an agent runner and maybe a recorder.

    Args:
        registry: the capabilities steps may use.
        options: dry run, model and endpoint.
        planner: makes the planner for a goal from the session's model client.
        agent: makes the runner of `agent` steps from the session's model client.
        recorder: a cassette's tape: model answers, tool results, decisions and answers
            are recorded into it, or served from it.
        journal: the run's journal in a run store: everything the run does is written to
            it as it happens; a resumed run's journal serves what ran before.
        backend: where tool calls are made (`engine.backend`): a cluster's workers for
            the families it takes; by default, this process.
    """

    def __init__(
        self,
        registry: Registry,
        options: SessionOptions | None = None,
        *,
        planner: Callable[[LLMClient], Planner] | None = None,
        agent: Callable[[LLMClient], AgentRunner] | None = None,
        recorder: Tape | None = None,
        journal: Journal | None = None,
        backend: Backend | None = None,
    ) -> None:
        self.registry = registry
        self.options = options or SessionOptions()
        self.planner = planner
        self.agent = agent
        self.tape = recorder
        self.journal = journal
        self.backend = backend
        self._offline = recorder is not None and not recorder.recording

    @property
    def offline(self) -> bool:
        """Whether model answers come from a recording only (nothing is live)."""
        return self._offline

    def run(
        self,
        start: Plan | str,
        *,
        base: dict[str, Any],
        base_dir: Path,
        frontend: Frontend,
        inputs: Mapping[str, str] | None = None,
        kept: Mapping[str, StepResult] | None = None,
    ) -> SessionResult:
        """Run `start` and return what happened.

        `start` is a plan, or a goal to plan: a goal string, or a recipe with a `goal:` and
        no steps. `base` is the recipe the plan comes from (its capabilities, limits and
        llm settings are what a goal is planned within); `base_dir` is where its relative
        paths start; `frontend` shows progress and plans, reviews plans and approves gates;
        `inputs` are the run inputs as text (`-i KEY=VALUE`), parsed by their
        declared types (a replay's recorded inputs fill in the rest); `kept` are results of
        steps a resumed run does not run again. A first Ctrl-C
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
        run = SessionRun(
            self, frontend, base, base_dir, goal, given, limits, config, dict(kept or {})
        )
        outcome = run_async(run.go(recipe if goal is None else None))
        if self.journal is not None:
            self.journal.finish(outcome.result)
            outcome.store = self.journal.store.path
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
            offline = LLMConfig(model=self.options.model or recorded or "unrecorded")
            if self.options.llm_max_tokens is not None:  # as the cut-off message says it
                offline.max_tokens = self.options.llm_max_tokens
            # The prompts a replay makes are the ones recorded: for a context as recorded.
            offline.context_window = self.options.llm_context or (
                recipe_llm.context_window if recipe_llm else None
            )
            return offline
        options = self.options
        return resolve_llm_config(
            recipe_llm,
            model=options.model,
            base_url=options.base_url,
            timeout=options.llm_timeout,
            max_tokens=options.llm_max_tokens,
            context_window=options.llm_context,
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
