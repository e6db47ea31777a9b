"""Fakes for testing workflows without a network or real side effects.

`ScriptedTools` adds a capability family whose actions do what a script says, per key and
per attempt: return a value, fail, hang until the timeout, raise, or sleep first. It
records every call with start and end times, so tests can assert ordering and concurrency.

Example:
    ```python
    registry = default_registry()
    tools = ScriptedTools(registry)
    tools.script("fetch", Fail("503"), "ok")     # fails once, then returns "ok"
    result = run_recipe_text(RECIPE, registry)  # steps call test.run {key: fetch}
    assert result.steps["fetch"].attempts == 2
    ```
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, SecretStr

from capabilities import Action, CallContext, Family, Registry
from engine._support.clock import now
from engine.approval import Approver, GateRequest
from engine.approval.questions import Question
from engine.errors import ConfigurationError, ReplayMismatch, StepFailed, UsageError
from engine.events import EventBus
from engine.executor import Executor, Sleep
from engine.model import Plan
from engine.recording.cassette import RecordMode
from engine.redaction import Secrets
from engine.results import Decision, RunResult
from engine.testing._clock import FakeClock
from engine.testing._fakellm import (
    ChatReply,
    ChatRequest,
    FakeOpenAIServer,
    Fault,
    ModelFunction,
    ScriptedModel,
    ToolCall,
)
from engine.validation import validate_plan

__all__ = [
    "Call",
    "CassetteRef",
    "ChatReply",
    "ChatRequest",
    "Fail",
    "FakeClock",
    "FakeOpenAIServer",
    "Fault",
    "Hang",
    "ModelFunction",
    "Raise",
    "ScriptedApprover",
    "ScriptedModel",
    "ScriptedTools",
    "Sleep",
    "ToolCall",
    "UnusedRecordingWarning",
    "Wait",
    "instant_sleep",
    "replay",
    "run_recipe_text",
]


@dataclass(frozen=True)
class Fail:
    """The call fails with `StepFailed(message)`."""

    message: str = "scripted failure"


@dataclass(frozen=True)
class Hang:
    """The call never returns on its own (the attempt's timeout ends it)."""


@dataclass(frozen=True)
class Raise:
    """The call raises an arbitrary exception, as a buggy tool would."""

    exception: Exception


@dataclass(frozen=True)
class Wait:
    """The call sleeps `seconds` (on the run's clock: real, or a `FakeClock`'s), then
    behaves as `then`."""

    seconds: float
    then: Any = None


@dataclass
class Call:
    """One recorded call."""

    key: str
    attempt: int
    started: float
    ended: float | None = None
    outcome: str = "running"


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str
    value: Any = None


@dataclass
class ScriptedTools:
    """Registers `<family>.run` (read-only) and `<family>.write` (side effects).

    Each call looks up `params.key`; its n-th call plays the n-th scripted behaviour (the last
    one repeats). With no script, a call returns `params.value`.
    """

    registry: Registry
    family: str = "test"
    scripts: dict[str, list[Any]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    _counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def __post_init__(self) -> None:
        self.registry.add_family(Family(self.family, "scripted fake tools for tests"))
        for name, effects in (("run", False), ("write", True)):
            self.registry.add(
                Action(
                    f"{self.family}.{name}",
                    f"scripted fake ({'side effects' if effects else 'read-only'})",
                    _Params,
                    self._run,
                    side_effects=effects,
                )
            )

    def script(self, key: str, *behaviours: Any) -> None:
        """Set what calls with `key` do, one behaviour per call in order."""
        self.scripts[key] = list(behaviours)

    def calls_for(self, key: str) -> list[Call]:
        return [call for call in self.calls if call.key == key]

    async def _run(self, params: _Params, ctx: CallContext) -> Any:
        self._counts[params.key] += 1
        number = self._counts[params.key]
        call = Call(params.key, number, now())
        self.calls.append(call)
        script = self.scripts.get(params.key)
        behaviour = script[min(number, len(script)) - 1] if script else params.value
        try:
            result = await _play(behaviour)
        except asyncio.CancelledError:
            call.outcome = "cancelled"
            raise
        except Exception as exc:
            call.outcome = type(exc).__name__
            raise
        finally:
            call.ended = now()
        call.outcome = "ok"
        return result


async def _play(behaviour: Any) -> Any:
    if isinstance(behaviour, Wait):
        await asyncio.sleep(behaviour.seconds)
        return await _play(behaviour.then)
    if isinstance(behaviour, Fail):
        raise StepFailed(behaviour.message)
    if isinstance(behaviour, Hang):
        await asyncio.Event().wait()
    if isinstance(behaviour, Raise):
        raise behaviour.exception
    return behaviour


@dataclass
class ScriptedApprover:
    """An approver for tests: gate decisions and `human.ask` answers given per step.

    `decisions` maps a step id to True (approve), False (deny) or a string (deny with that
    reason); steps not listed are denied. `answers` maps a step id to the answers its
    questions get, in order. Every request and question is recorded.
    """

    decisions: dict[str, bool | str] = field(default_factory=dict)
    answers: dict[str, list[Any]] = field(default_factory=dict)
    requests: list[GateRequest] = field(default_factory=list)
    questions: list[tuple[str, Question]] = field(default_factory=list)

    async def decide(self, request: GateRequest) -> Decision:
        self.requests.append(request)
        verdict = self.decisions.get(request.step_id, False)
        reason = verdict if isinstance(verdict, str) else None
        return request.decision(verdict is True, "script", reason if verdict is not True else None)

    async def answer(self, step_id: str, question: Question) -> Any:
        self.questions.append((step_id, question))
        queue = self.answers.get(step_id)
        if not queue:
            raise StepFailed(f"human.ask: the script has no answer for step '{step_id}'")
        return queue.pop(0)


async def instant_sleep(seconds: float) -> None:
    """A retry sleep that does not wait (but still yields to the loop)."""
    await asyncio.sleep(0)


def run_recipe_text(
    text: str,
    registry: Registry,
    *,
    base_dir: Path | None = None,
    inputs: Mapping[str, Any] | None = None,
    approver: Approver | None = None,
    sleep: Sleep = instant_sleep,
    model: ScriptedModel | ModelFunction | None = None,
    faults: Sequence[Fault] = (),
    events: EventBus | None = None,
    secrets: Secrets | None = None,
    model_sleep: Sleep = instant_sleep,
    clock: FakeClock | None = None,
) -> RunResult:
    """Parse, validate and run a recipe given as text; returns the run result.

    With `model`, the run has one: the scripted function behind a `FakeOpenAIServer` on
    127.0.0.1 (its `faults` injected first), reached by the real `openai` client as model
    `m`; agent steps and natural-language fallbacks run the ReAct loop. `events` sees the
    run's events; `secrets` are what is redacted (by default, the environment's);
    `sleep` and `model_sleep` are the waits between a step's and a model call's retries
    (instant by default; pass a recorder to see them). With `clock`, the run keeps its
    virtual time: timeouts, `Wait`s and durations pass at once and exactly (a model's
    answers come over a socket: give such a clock a threshold, see `FakeClock`).

    Raises:
        PlanValidationError: the recipe is invalid.
    """
    from engine.llm import Budget, LLMClient, LLMConfig
    from engine.yaml import parse_recipe_text
    from planners.react import ReactAgent

    data, source = parse_recipe_text(text, "<test>")
    folder = base_dir or Path.cwd()
    plan = validate_plan(data, source, registry, base_dir=folder, owned=True)

    async def go(base_url: str | None) -> RunResult:
        client = None
        if base_url is not None:
            config = LLMConfig(model="m", base_url=base_url, api_key=SecretStr("k"))
            client = LLMClient(config, budget=Budget(), sleep=model_sleep)
        try:
            executor = Executor(
                plan,
                registry=registry,
                base_dir=folder,
                inputs=inputs,
                approver=approver,
                sleep=sleep,
                events=events,
                secrets=secrets,
                llm=client,
                agent_runner=ReactAgent(client) if client is not None else None,
            )
            return await executor.run()
        finally:
            if client is not None:
                await client.aclose()

    run = clock.run if clock is not None else asyncio.run
    if model is None:
        return run(go(None))
    with FakeOpenAIServer(model) as server:
        server.inject(*faults)
        return run(go(server.base_url))


@dataclass(frozen=True)
class CassetteRef:
    """A cassette file and how to use it; what the `planloom_cassette` fixture gives.

    Attributes:
        path: the cassette file.
        mode: `none` replays only; `once` records when the file is missing; `new_episodes`
            records what the cassette lacks; `all` records the whole run again.
        live_tools: in a replay, run read-only tools for real.
    """

    path: Path
    mode: RecordMode = "none"
    live_tools: bool = False


_HOW_TO_RECORD = (
    "if the change is intended, record again: run pytest with "
    "--planloom-record-mode=new_episodes (adds what is missing) or "
    "--planloom-record-mode=all (records the whole run again), or mark the test "
    "@pytest.mark.planloom(record_mode='new_episodes'); outside pytest, pass "
    "replay(..., mode='new_episodes')"
)


def _caller_folder() -> Path:
    """The folder of the file whose code called the caller (`replay()`'s caller: a test
    file); the current directory when that code has no file (an interactive session)."""
    name = sys._getframe(2).f_globals.get("__file__")
    return Path(name).resolve().parent if isinstance(name, str) else Path.cwd()


class UnusedRecordingWarning(UserWarning):
    """A replay left recordings unused: the workflow now does less than it did."""


def replay(
    cassette: str | Path | CassetteRef,
    recipe: str | Path | None = None,
    *,
    inputs: Mapping[str, Any] | None = None,
    mode: RecordMode | None = None,
    live_tools: bool | None = None,
    approve: bool | None = None,
    model: str | None = None,
    base_url: str | None = None,
    registry: Registry | None = None,
    strict: bool = True,
) -> RunResult:
    """Run a workflow against a cassette and return its result, as `planloom run --replay`.

    With `recipe`, that recipe is run (so a changed prompt shows up as a mismatch); without
    it, the cassette's own plan or goal is replayed, as `planloom replay` does. Relative
    `cassette` and `recipe` paths start at the folder of the file that calls `replay()`
    (the test file, as the `planloom` marker's `cassette=`), not the current directory. In mode
    `none` no model is called and no side effect is made: every answer, tool result and
    decision comes from the cassette. In a recording mode the model is reached through
    `model` / `base_url` (or `PLANLOOM_MODEL`, `OPENAI_BASE_URL`, `OPENAI_API_KEY`), and
    live gates are decided by `approve` (True: approve all, False: deny all, None: deny,
    failing closed).

    Unused recordings are reported in `result.replay.unused` and as an
    `UnusedRecordingWarning`.

    Raises:
        ReplayMismatch: with `strict` (the default), when the run asked for something the
            cassette has no recording of; the message names the step and shows the nearest
            recording with a field-level diff. Without `strict` the run's result says so.
        PlanValidationError: the recipe is invalid.
        ConfigurationError: the cassette is missing (in mode `none`) or unreadable.
    """
    import warnings

    from engine.app.launch import RunSettings, recorded_registry, run_session
    from engine.app.registry import build_registry
    from engine.inputs import input_text
    from engine.recording.cassette import Cassette
    from planners.recipe import load_recipe
    from planners.replay import plan_from_cassette

    here = _caller_folder()
    ref = cassette if isinstance(cassette, CassetteRef) else CassetteRef(Path(cassette))
    if not ref.path.is_absolute():
        ref = dataclasses.replace(ref, path=here / ref.path)
    if recipe is not None and not Path(recipe).is_absolute():
        recipe = here / recipe
    chosen_mode = mode or ref.mode
    registry = registry or build_registry()
    settings = RunSettings(
        inputs=tuple(f"{k}={input_text(v)}" for k, v in (inputs or {}).items()),
        yes=approve is True,
        no=approve is False,
        model=model,
        base_url=base_url,
        record=str(ref.path) if chosen_mode != "none" else None,
        replay=str(ref.path) if chosen_mode == "none" else None,
        record_mode=chosen_mode,
        live_tools=ref.live_tools if live_tools is None else live_tools,
        how_to_record=_HOW_TO_RECORD,
    )
    if chosen_mode == "none" and not ref.path.exists():
        raise ConfigurationError(
            f"cassette {ref.path} does not exist; record it with pytest "
            "--planloom-record-mode=once, @pytest.mark.planloom(record_mode='once'), or "
            "replay(..., mode='once')"
        )
    registry, tape = recorded_registry(settings, registry)
    start: Plan | str
    if recipe is not None:
        start, _ = load_recipe(recipe, registry)
        base, base_dir = start.to_data(), Path(recipe).resolve().parent
    elif ref.path.exists():
        recorded = Cassette.load(ref.path)
        base_dir = ref.path.resolve().parent
        if recorded.goal is not None:
            start, base = recorded.goal, recorded.base or {}
        else:
            start = plan_from_cassette(recorded, ref.path, registry, base_dir)
            base = start.to_data()
    else:
        raise UsageError(
            f"cassette {ref.path} does not exist and no recipe was given to record it: pass "
            "the recipe (and a recording mode such as 'once')"
        )
    result = run_session(settings, registry, start, base, base_dir, tape).result
    report = result.replay
    if report is not None and report.unused:
        warnings.warn(
            UnusedRecordingWarning(
                f"{len(report.unused)} recording(s) in {ref.path} were not used: "
                + "; ".join(report.unused[:10])
            ),
            stacklevel=2,
        )
    if strict and report is not None and report.mismatches:
        raise ReplayMismatch("\n\n".join(report.mismatches))
    return result
