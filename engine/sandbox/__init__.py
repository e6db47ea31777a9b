"""The one gate every tool call passes.

grant check → params validated against the action's schema → budget → confirmation gate →
execution with a timeout → JSON-able output → audit event. Each refusal is a typed error
naming the rule that decided; none of them can crash the run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from engine._support.eager import as_task
from engine._support.execute import execute
from engine._support.problems import validation_problems
from engine._support.scope import current_item, current_tool_call
from engine._support.truncation import MAX_WARNINGS, truncation_warning
from engine.backend import Backend, RemoteCall
from engine.capability import Action, Asker, CallContext, ParamPath, Registry
from engine.errors import (
    ApprovalDenied,
    BudgetExceeded,
    CapabilityDenied,
    DryRun,
    StepError,
    UsageError,
)
from engine.events import EventBus
from engine.sandbox._rules import checker, gate_reason, grant_rules, rule, unchanged
from engine.sandbox._seams import Admitted, Gate, LiveResults, Results, ToolCall

__all__ = ["Gate", "LiveResults", "Results", "Sandbox", "ToolCall"]


Confirm = Literal["auto", "always", "never"]
_UNSET: Any = object()


@dataclass
class Sandbox:
    """Runs actions for one run, within the recipe's grants."""

    registry: Registry
    grants: dict[str, dict[str, Any]]
    base_dir: Path
    gate: Gate | None = None
    events: EventBus | None = None
    default_timeout: float = 30.0
    max_tool_calls: int | None = None
    ask: Asker | None = None
    llm: Any = None
    dry_run: bool = False
    results: Results = field(default_factory=LiveResults)
    scopes: dict[str, Any] = field(default_factory=dict)
    per_family: dict[str, int] = field(default_factory=dict)
    # Where admitted calls of the families it takes are made (`engine.backend`); None:
    # here, in this process.
    backend: Backend | None = None
    calls: int = 0
    # Calls counted per step until the step ends (`Executor` takes its count then).
    step_calls: dict[str, int] = field(default_factory=dict)
    # Warnings per step until the step ends (outputs cut at a limit; `Executor` takes them).
    step_warnings: dict[str, list[str]] = field(default_factory=dict)
    _grants: dict[str, BaseModel] = field(default_factory=dict, init=False)
    _slots: dict[str, asyncio.Semaphore | None] = field(default_factory=dict, init=False)
    _missing: dict[str, dict[str, str] | None] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        for family_name, raw in self.grants.items():
            family = self.registry.families.get(family_name)
            if family is None:
                raise UsageError(f"grant for unknown capability {family_name!r}")
            self._grants[family_name] = family.grant_model.model_validate(raw or {})

    def granted(self) -> dict[str, BaseModel]:
        """The recipe's grants, validated: family name → its grant model."""
        return dict(self._grants)

    def action(self, name: str) -> Action[Any]:
        action = self.registry.get(name)
        if action is None and name in self.registry.withheld:
            raise CapabilityDenied(self.registry.withheld[name], rule="not-granted")
        if action is None:
            hint = self.registry.suggest(name)
            raise CapabilityDenied(
                f"unknown tool '{name}'" + (f"; {hint}" if hint else ""), rule="unknown-tool"
            )
        return action

    async def call(
        self,
        name: str,
        params: Any,
        *,
        step_id: str,
        attempt: int = 1,
        confirm: Confirm = "auto",
        timeout: float | None = None,  # noqa: ASYNC109  # a per-call limit, enforced here
        data_paths: frozenset[ParamPath] = frozenset(),
        data_literals: frozenset[str] = frozenset(),
        idempotent: bool = False,
    ) -> Any:
        """Run one action call.

        `data_paths` are the params paths whose raw text began with a template (see
        `CallContext.data_paths`); the action decides what that means for it. `idempotent`:
        the step says its calls may be made twice (`idempotent: true`).

        A side-effect call that may already have happened (`Results.in_doubt`: a resumed
        run's call that was in flight when the run stopped) runs again unasked only if it
        is idempotent; otherwise it goes to the gate whatever its `confirm`, marked so that
        only a person can approve it.

        Raises:
            CapabilityDenied: ungranted, unknown or malformed call.
            ApprovalDenied: the gate refused it.
            StepTimeout: it ran past `timeout`.
            StepFailed: it failed.
            BudgetExceeded: the run's tool-call budget is used up.
        """
        number: int | None = None  # the call's number in the run, once it is counted
        limit = timeout if timeout is not None else self.default_timeout
        try:
            admitted = self._admit(
                name, params, step_id, attempt, limit, data_paths, data_literals, idempotent
            )
            if self.dry_run and admitted.side_effects:  # not made, so not counted as a call
                raise DryRun(name, params, step_id=step_id)
            number = self._spend(step_id)
            # Why the call may already have happened (a resumed run's call in flight when
            # the run stopped), unless it may be made twice.
            call = admitted.call
            doubt = None if call.idempotent else self.results.in_doubt(call)
            # The gate is for side effects (`confirm: auto`), `confirm: always`, a grant
            # that always asks, and a call in doubt (which only a person may approve).
            asks = (
                doubt is not None
                or confirm == "always"
                or (confirm == "auto" and admitted.side_effects)
                or admitted.action.confirm_always
            )
            if asks and self._gate_there(doubt):  # (most calls do not ask: no await)
                admitted = await self._pass_gate(admitted, doubt)
                call = admitted.call
        except StepError as exc:  # refused before anything ran
            self._audit(name, step_id, attempt, "denied", exc, number)
            raise
        item = current_item()  # (an item's attempts are numbered within it)
        self._record_called(admitted, number, item)
        run, slots = self._runner(admitted, limit)
        # Awaited here, not in a coroutine of its own: one frame less on every call.
        try:
            if slots is None:
                output = await self.results.result(call, run, replayed=admitted.replayed)
            else:
                async with slots:
                    output = await self.results.result(call, run, replayed=admitted.replayed)
        except StepError as exc:
            exc.step_id = exc.step_id or call.step_id
            exc.attempt = exc.attempt or call.attempt
            self._audit(call.action, call.step_id, call.attempt, "allowed", exc, number)
            raise
        self._record_finished(admitted, number, output, item)
        return output

    # -- the seams of a call: admit, budget, gate, execute, record ---------------------------

    def _admit(
        self,
        name: str,
        params: Any,
        step_id: str,
        attempt: int,
        limit: float,
        data_paths: frozenset[ParamPath],
        data_literals: frozenset[str],
        idempotent: bool,
    ) -> Admitted:
        """The grant, the params against the action's model and, unless a recording serves
        the call with nothing run, the action's own grant rules: checked before the gate,
        so nobody is asked about a call that would be refused.

        Raises:
            CapabilityDenied: ungranted, unknown or malformed call.
        """
        action = self.registry.actions.get(name) or self.action(name)  # (which says why not)
        grant = self._grants.get(action.family)
        if grant is None:
            raise CapabilityDenied(
                f"'{name}' needs the '{action.family}' capability, which is not granted; add "
                f"capabilities: {{{action.family}: {{...}}}} to the recipe",
                rule="not-granted",
                step_id=step_id,
            )
        try:
            # (the model's validator itself: `model_validate` is a frame more on every call)
            model = action.params_model.__pydantic_validator__.validate_python(params)
        except ValidationError as exc:
            problems = validation_problems(exc, prefix=("params",), root="params")
            raise CapabilityDenied.bad_params(name, problems, step_id=step_id) from None
        ctx = CallContext(  # (by position: one is made per call)
            grant,
            self.base_dir,
            limit,
            step_id,
            self.ask,
            self.llm,
            data_paths,
            data_literals,
            self.scopes.get(action.family),
        )
        side = action.side_effects  # (most are one for every call: no call to find out)
        side_effects = side if type(side) is bool else action.has_side_effects(model)
        call = ToolCall(
            step_id,
            attempt,
            name,
            params,
            not side_effects,
            action.recorded,
            idempotent or action.idempotent or not side_effects,
        )
        # Settled before the gate: only a call served with nothing run may be answered by a
        # recorded decision (a live call meets the live approver). A served call's rules
        # are not checked: a replay's machine may differ.
        served = self.results.serves(call)
        if not served and action.admit is not None:  # (most have no rules of their own)
            grant_rules(action, model, ctx)
        return Admitted(action, model, ctx, call, side_effects, served)

    def _gate_there(self, doubt: str | None) -> bool:
        """Whether there is a gate for a call that asks for one.

        Raises:
            ApprovalDenied: the call is in doubt and there is nobody to ask.
        """
        if doubt is not None and self.gate is None:
            raise ApprovalDenied(f"{doubt}; nobody can be asked to run it again", in_doubt=True)
        return self.gate is not None

    async def _pass_gate(self, admitted: Admitted, doubt: str | None) -> Admitted:
        """The confirmation gate, for a call that asks for it. What the person edits is
        checked as a call of its own and replaces the params.

        Raises:
            ApprovalDenied: the gate refused it.
            CapabilityDenied: the edited params are refused.
        """
        gate = self.gate
        if gate is None:  # (`_gate_there` says no gate: no call to it)
            return admitted
        action, call, side_effects = admitted.action, admitted.call, admitted.side_effects
        replayed = doubt is None and admitted.served
        reason = gate_reason(side_effects, action.gate_note)
        approved = await gate(
            call.step_id,
            call.action,
            call.params,
            reason if doubt is None else f"{reason}; {doubt}",
            checker(action, admitted.ctx, call.params),
            replayed=replayed,
            in_doubt=doubt is not None,
        )
        if approved is None or approved is call.params:
            return dataclasses.replace(admitted, replayed=replayed)
        # Edited by the person: what they rewrote is theirs; values left as rendered stay data.
        ctx = admitted.ctx
        ctx = dataclasses.replace(ctx, data_paths=unchanged(ctx.data_paths, call.params, approved))
        model = action.params_model.model_validate(approved)
        grant_rules(action, model, ctx)
        call = call._replace(params=approved)
        return dataclasses.replace(
            admitted,
            model=model,
            ctx=ctx,
            call=call,
            served=self.results.serves(call),  # for the params it runs with
            replayed=replayed,
        )

    def _runner(
        self, admitted: Admitted, limit: float
    ) -> tuple[Callable[[], Awaitable[Any]], asyncio.Semaphore | None]:
        """How the call is made, here or on the backend that takes its family, and the
        family slot it waits for first (none for a call served from a journal or a
        cassette: it runs nothing). The call goes through the `Results` layer (live, or
        served by a recording); a journal writes its intent there, so a call stopped while
        waiting for its slot never started, and the wait is not part of its timeout."""
        action, model, ctx, call = admitted.action, admitted.model, admitted.ctx, admitted.call
        backend = self.backend
        if backend is not None and not backend.takes(self.registry.families[action.family]):
            backend = None
        if backend is None:
            run: Callable[[], Awaitable[Any]] = partial(execute, action, model, ctx)
        else:
            remote = RemoteCall(
                key=f"planloom-{call.step_id}-{uuid.uuid4().hex}",
                step_id=call.step_id,
                action=call.action,
                params=call.params,
                grant=self.grants.get(action.family),
                base_dir=str(self.base_dir),
                timeout=limit,
                data_paths=tuple(ctx.data_paths),
                data_literals=tuple(ctx.data_literals),
                once=not call.idempotent,
            )

            async def run() -> Any:
                await as_task()  # (a backend waits for its worker within a deadline)
                return await backend.run(remote)

        if admitted.served:
            return run, None
        slots = self._slots.get(action.family, _UNSET)
        if slots is _UNSET:
            slots = self._family_slots(action.family, remote=backend is not None)
        return run, slots

    def _record_called(self, admitted: Admitted, number: int | None, item: int | None) -> None:
        """`tool.called`: the call was allowed (with the confinement layers it lacks)."""
        if self.events is None:
            return
        call, family = admitted.call, admitted.action.family
        # What was said (the arguments) only for subscribers that asked (`EventBus.content`).
        said = {"arguments": call.params} if self.events.content else None
        self.events.emit(
            "tool.called",
            call.step_id,
            call.attempt,
            item=item,
            call=number,
            action=call.action,
            decision="allowed",
            rule=f"grant.{family}",
            side_effects=admitted.side_effects,
            missing_confinement=(
                self._missing[family] if family in self._missing else self._missing_layers(family)
            ),
            tool_call_id=current_tool_call(),
            content=said,
        )

    def _record_finished(
        self, admitted: Admitted, number: int | None, output: Any, item: int | None
    ) -> None:
        """`tool.finished`, and a warning for the step when the output was cut at a limit."""
        call = admitted.call
        if self.events is not None:
            said = {"result": output} if self.events.content else None
            self.events.emit(
                "tool.finished",
                call.step_id,
                call.attempt,
                item=item,
                call=number,
                action=call.action,
                decision="allowed",
                rule=f"grant.{admitted.action.family}",
                outcome="ok",
                content=said,
            )
        if not isinstance(output, dict):  # only a result of fields says it was cut short
            return
        warning = truncation_warning(admitted.action, admitted.model, output, item)
        if warning is not None:
            self._warn(call.step_id, call.attempt, call.action, warning)

    def _warn(self, step_id: str, attempt: int, name: str, warning: str) -> None:
        """Keep `warning` for the step's result and announce it (`step.warning`)."""
        kept = self.step_warnings.setdefault(step_id, [])
        if warning in kept or len(kept) > MAX_WARNINGS:
            return
        if len(kept) == MAX_WARNINGS:
            warning = f"more calls than these {MAX_WARNINGS} had their output truncated"
        kept.append(warning)
        if self.events is not None:
            self.events.emit("step.warning", step_id, attempt, action=name, warning=warning)

    def _family_slots(self, family_name: str, *, remote: bool) -> asyncio.Semaphore | None:
        """The bound on the family's calls at once: the recipe's `limits.per_family`, else
        the family's own default (a bound on this machine's resources, so not for calls a
        backend makes elsewhere), else none."""
        if family_name not in self._slots:
            family = self.registry.families.get(family_name)
            default = None if remote or family is None else family.max_parallel
            limit = self.per_family.get(family_name) or default
            self._slots[family_name] = asyncio.Semaphore(limit) if limit else None
        return self._slots[family_name]

    def _missing_layers(self, family_name: str) -> dict[str, str] | None:
        """Confinement layers this machine lacks for the family (None: it lacks none):
        never silently absent. Probed once per family and run."""
        if family_name in self._missing:
            return self._missing[family_name]
        family = self.registry.families[family_name]
        report = family.confinement() if family.confinement is not None else {}
        missing = {k: v for k, v in report.items() if not v.startswith("active")} or None
        self._missing[family_name] = missing
        return missing

    def _spend(self, step_id: str) -> int:
        """The tool-call budget: the call counted, its number in the run returned."""
        if self.max_tool_calls is not None and self.calls >= self.max_tool_calls:
            raise BudgetExceeded(
                f"the run used all {self.max_tool_calls} tool calls (limits.max_tool_calls)",
                limit="max_tool_calls",
                step_id=step_id,
            )
        self.calls += 1
        self.step_calls[step_id] = self.step_calls.get(step_id, 0) + 1
        return self.calls

    def _audit(
        self,
        name: str,
        step_id: str,
        attempt: int,
        decision: str,
        error: StepError,
        number: int | None,
    ) -> None:
        """One event per refused or failed call, naming the rule that decided."""
        if self.events is not None:
            self.events.emit(
                "tool.finished",
                step_id,
                attempt,
                item=current_item(),
                call=number,
                action=name,
                decision=decision,
                rule=rule(error),
                outcome=type(error).__name__,
                error=error.message,
                tool_call_id=current_tool_call(),
            )
