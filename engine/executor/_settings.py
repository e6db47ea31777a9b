"""What one run of a plan is given, besides the plan, its registry and its folder."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from engine.agent import AgentRunner
from engine.approval import Approver
from engine.backend import Backend
from engine.capability import Registry
from engine.events import EventBus
from engine.executor._attempts import Sleep
from engine.executor._gates import RunGates
from engine.llm import LLMClient
from engine.model import Plan
from engine.redaction import Secrets
from engine.results import StepResult
from engine.sandbox import LiveResults, Results, Sandbox

__all__ = ["RunOptions", "RunSettings"]


@dataclass(frozen=True)
class RunSettings:
    """One run's settings and the collaborators it is given, each already built.

    Attributes:
        inputs: run inputs by name (strings are parsed by type when `inputs_from_text`).
        approver: decides gated calls; by default every gate is denied (fail closed).
        events: where transitions are published; by default a bus of the run's own.
        sleep: waits between retries (inject a fake to make retry tests instant).
        run_id: the run's id; by default a new one.
        secrets: values to redact wherever the run's data leaves it (events, errors,
            results); by default every secret-looking variable of the environment.
        agent_runner: carries out `agent` steps and natural-language fallbacks (the ReAct
            loop); without one such steps fail saying a model is needed.
        llm: the run's model client, for the `llm.*` capabilities and usage totals.
        preloaded: results of steps that already ran (a replan keeps what succeeded):
            these steps are not run again; their results stand.
        dry_run: read-only actions run; calls with side effects are reported (with their
            rendered params) instead of made, and steps needing their outputs are skipped.
        tool_results: where tool results come from: the actions, run live (the default),
            or a cassette that records or serves them (`Tape.results`; a cassette's
            `TapeApprover` wraps the approver, and the model client takes `Tape.answers`).
        backend: where admitted calls of the families it takes are made (a Dask cluster:
            `engine.backend`); by default, all of them in this process.
        growing: the plan grows while it runs (a plan the model is still writing): it
            starts with no step; steps join with `Executor.admit` until the whole plan is
            given to `Executor.settle`, and the run ends only after that.
        fast_path: steps that are one tool call and nothing more (no `when`, `for_each`,
            fallback, retry or agent) run on a short path (`engine.executor._fast`) with
            the same results and events; False runs every step the general way.
    """

    inputs: Mapping[str, Any] = field(default_factory=dict)
    inputs_from_text: bool = False
    approver: Approver | None = None
    events: EventBus | None = None
    sleep: Sleep = asyncio.sleep
    run_id: str | None = None
    secrets: Secrets | None = None
    agent_runner: AgentRunner | None = None
    llm: LLMClient | None = None
    preloaded: Mapping[str, StepResult] = field(default_factory=dict)
    dry_run: bool = False
    tool_results: Results | None = None
    backend: Backend | None = None
    growing: bool = False
    fast_path: bool = True

    def event_bus(self, run_id: str, secrets: Secrets) -> EventBus:
        """The run's bus: `events`, or one of its own; its sinks get what `secrets` redacts
        unless the bus has a redactor already."""
        if self.events is None:
            return EventBus(run_id, redact=secrets.redact_value)
        if self.events.redact is None:
            self.events.redact = secrets.redact_value
        return self.events

    def sandbox(
        self, plan: Plan, registry: Registry, base_dir: Path, gates: RunGates, events: EventBus
    ) -> Sandbox:
        """The run's sandbox: the plan's grants and limits, the run's gates and events."""
        return Sandbox(
            registry,
            plan.capabilities,
            base_dir,
            gate=gates.gate,
            events=events,
            default_timeout=plan.limits.timeout,
            max_tool_calls=plan.limits.max_tool_calls,
            per_family=plan.limits.per_family,
            ask=gates.ask,
            llm=self.llm,
            dry_run=self.dry_run,
            results=self.tool_results or LiveResults(),
            backend=self.backend,
            # Kept steps' calls count in this run's usage, and against its max_tool_calls.
            calls=sum(r.usage.tool_calls for r in self.preloaded.values()),
        )


class RunOptions(TypedDict, total=False):
    """`RunSettings`' fields, given by name to `Executor(...)` or `run_plan(...)`."""

    inputs: Mapping[str, Any] | None
    inputs_from_text: bool
    approver: Approver | None
    events: EventBus | None
    sleep: Sleep
    run_id: str | None
    secrets: Secrets | None
    agent_runner: AgentRunner | None
    llm: LLMClient | None
    preloaded: Mapping[str, StepResult] | None
    dry_run: bool
    tool_results: Results | None
    backend: Backend | None
    growing: bool
    fast_path: bool
