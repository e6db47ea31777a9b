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
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol

from pydantic import BaseModel, ValidationError

from engine._support.execute import execute, jsonable
from engine._support.problems import validation_problems
from engine._support.scope import current_item
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

__all__ = ["Gate", "LiveResults", "Results", "Sandbox", "ToolCall"]


class Gate(Protocol):
    """`gate(step_id, action, params, reason, validate, replayed=...)`: returns the params
    to run with (the person may have edited them; `validate` checks an edit against the
    schema; None means unchanged), or raises when denied. `replayed` says the call's result
    will be served from a cassette (nothing runs), the only case in which a recorded
    decision may answer it. `in_doubt` says the call may already have happened (it was in
    flight when the run it resumes stopped): only a person may approve it."""

    def __call__(
        self,
        step_id: str,
        action: str,
        params: Any,
        reason: str,
        validate: Callable[[Any], str | None],
        /,
        *,
        replayed: bool = False,
        in_doubt: bool = False,
    ) -> Awaitable[Any]: ...


Confirm = Literal["auto", "always", "never"]


class ToolCall(NamedTuple):
    """One admitted call, as the layer its result comes through sees it.

    `recorded` is false for actions whose own results are not recorded (their model's or
    person's answers are, e.g. `llm.*`, `human.ask`). `idempotent`: making the call twice
    has the effect of making it once (its action or its step says so; read-only calls are).
    """

    step_id: str
    attempt: int
    action: str
    params: Any
    read_only: bool
    recorded: bool = True
    idempotent: bool = False


class Results(Protocol):
    """Where a tool call's result comes from: the action run live (`LiveResults`), or a
    cassette that records it or serves it (`engine.recording.Tape`)."""

    def serves(self, call: ToolCall) -> bool:
        """Whether the result will be served with nothing run: settled before the call's
        gate, since only then may a recorded decision answer it."""
        ...

    async def result(
        self, call: ToolCall, live: Callable[[], Awaitable[Any]], *, replayed: bool
    ) -> Any:
        """The call's result; `live()` runs the action. `replayed` says the gate was asked
        on the promise that `serves(call)` holds."""
        ...

    def in_doubt(self, call: ToolCall) -> str | None:
        """Why this side-effect call may already have happened (a resumed run's journal
        has it starting and never ending), or None. Asked before the gate."""
        ...

    @property
    def timed(self) -> bool:
        """Whether the run's step durations are its own: not in a replay, whose result must
        be the same every time (a cassette holds no times)."""
        ...


class LiveResults:
    """Every result comes from running the action."""

    timed = True

    def serves(self, call: ToolCall) -> bool:
        return False

    def in_doubt(self, call: ToolCall) -> str | None:
        return None

    async def result(
        self, call: ToolCall, live: Callable[[], Awaitable[Any]], *, replayed: bool
    ) -> Any:
        return await live()


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
            action, grant, model = self._admit(name, params, step_id)
            ctx = CallContext(
                grant=grant,
                base_dir=self.base_dir,
                timeout=limit,
                step_id=step_id,
                ask=self.ask,
                llm=self.llm,
                data_paths=data_paths,
                data_literals=data_literals,
                scope=self.scopes.get(action.family),
            )
            side_effects = action.has_side_effects(model)
            gated = confirm == "always" or (confirm == "auto" and side_effects)
            call = ToolCall(
                step_id,
                attempt,
                name,
                params,
                not side_effects,
                action.recorded,
                idempotent or action.idempotent or not side_effects,
            )
            # Settled before the gate: only a call served with nothing run may be answered
            # by a recorded decision (a live call meets the live approver).
            served = self.results.serves(call)
            # Before the gate, so nobody is asked about a call that would be refused; not
            # for a call served with nothing run (a replay's: its machine may differ).
            if not served:
                _grant_rules(action, model, ctx)
            if self.dry_run and side_effects:  # not made, so not counted as a call
                raise DryRun(name, params, step_id=step_id)
            self._spend(step_id)
            number = self.calls
            replayed = False
            doubt = None if call.idempotent else self.results.in_doubt(call)
            if doubt is not None and self.gate is None:
                raise ApprovalDenied(f"{doubt}; nobody can be asked to run it again", in_doubt=True)
            if self.gate is not None and (gated or doubt is not None):
                replayed = doubt is None and served
                reason = _gate_reason(side_effects, action.gate_note)
                approved = await self.gate(
                    step_id,
                    name,
                    params,
                    reason if doubt is None else f"{reason}; {doubt}",
                    _checker(action, ctx, params),
                    replayed=replayed,
                    in_doubt=doubt is not None,
                )
                if approved is not None and approved is not params:  # edited by the person
                    # What the person rewrote is theirs; values left as rendered stay data.
                    data_paths = _unchanged(data_paths, params, approved)
                    params = approved
                    model = action.params_model.model_validate(params)
                    ctx = dataclasses.replace(ctx, data_paths=data_paths)
                    _grant_rules(action, model, ctx)
                    call = call._replace(params=params)
        except StepError as exc:  # refused before anything ran
            self._audit(name, step_id, attempt, "denied", exc, number)
            raise
        events = self.events
        if events is not None:
            events.emit(
                "tool.called",
                step_id,
                attempt,
                item=current_item(),  # (an item's attempts are numbered within it)
                call=number,
                action=name,
                decision="allowed",
                rule=f"grant.{action.family}",
                side_effects=side_effects,
                missing_confinement=self._missing_layers(action.family) or None,
            )

        family = self.registry.families[action.family]
        backend = self.backend if self.backend is not None and self.backend.takes(family) else None
        if backend is None:

            async def run() -> Any:
                return jsonable(name, await execute(action, model, ctx))

        else:
            remote = RemoteCall(
                key=f"planloom-{step_id}-{uuid.uuid4().hex}",
                step_id=step_id,
                action=name,
                params=params,
                grant=self.grants.get(action.family),
                base_dir=str(self.base_dir),
                timeout=limit,
                data_paths=tuple(data_paths),
                data_literals=tuple(data_literals),
                once=not call.idempotent,
            )

            async def run() -> Any:
                return await backend.run(remote)

        # A call waits for its family's slot before anything is recorded of it (a journal
        # writes its intent in `result`: a call stopped while waiting never started), and
        # the wait is not part of its timeout. A call served from a journal or a cassette
        # runs nothing and takes no slot.
        slots = self._family_slots(action.family, remote=backend is not None)
        if slots is not None and self.results.serves(call):
            slots = None
        try:
            if slots is None:
                output = await self.results.result(call, run, replayed=replayed)
            else:
                async with slots:
                    output = await self.results.result(call, run, replayed=replayed)
        except StepError as exc:
            exc.step_id = exc.step_id or step_id
            exc.attempt = exc.attempt or attempt
            self._audit(name, step_id, attempt, "allowed", exc, number)
            raise
        if events is not None:
            events.emit(
                "tool.finished",
                step_id,
                attempt,
                item=current_item(),
                call=number,
                action=name,
                decision="allowed",
                rule=f"grant.{action.family}",
                outcome="ok",
            )
        warning = truncation_warning(action, model, output, current_item())
        if warning is not None:
            self._warn(step_id, attempt, name, warning)
        return output

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

    def _admit(self, name: str, params: Any, step_id: str) -> tuple[Action[Any], BaseModel, Any]:
        """The grant check and the params schema: the action, its grant and its params."""
        action = self.action(name)
        grant = self._grants.get(action.family)
        if grant is None:
            raise CapabilityDenied(
                f"'{name}' needs the '{action.family}' capability, which is not granted; add "
                f"capabilities: {{{action.family}: {{...}}}} to the recipe",
                rule="not-granted",
                step_id=step_id,
            )
        try:
            model = action.params_model.model_validate(params)
        except ValidationError as exc:
            problems = validation_problems(exc, prefix=("params",), root="params")
            raise CapabilityDenied.bad_params(name, problems, step_id=step_id) from None
        return action, grant, model

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

    def _missing_layers(self, family_name: str) -> dict[str, str]:
        """Confinement layers this machine lacks for the family: never silently absent."""
        family = self.registry.families[family_name]
        if family.confinement is None:
            return {}
        return {k: v for k, v in family.confinement().items() if not v.startswith("active")}

    def _spend(self, step_id: str) -> None:
        if self.max_tool_calls is not None and self.calls >= self.max_tool_calls:
            raise BudgetExceeded(
                f"the run used all {self.max_tool_calls} tool calls (limits.max_tool_calls)",
                limit="max_tool_calls",
                step_id=step_id,
            )
        self.calls += 1
        self.step_calls[step_id] = self.step_calls.get(step_id, 0) + 1

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
                rule=_rule(error),
                outcome=type(error).__name__,
                error=error.message,
            )


def _grant_rules(action: Action[Any], model: Any, ctx: CallContext) -> None:
    """The action's own grant rules for this call (`Action.admit`).

    Raises:
        CapabilityDenied: the grant does not allow it.
    """
    if action.admit is not None:
        action.admit(model, ctx)


def _checker(action: Action[Any], ctx: CallContext, asked: Any) -> Callable[[Any], str | None]:
    """Checks params a person edited (from `asked`) against the action's schema and its
    grant rules, as the call will be checked: None, or what is wrong."""

    def check(params: Any) -> str | None:
        try:
            model = action.params_model.model_validate(params)
        except ValidationError as exc:
            return validation_problems(exc, root="params")
        edited = dataclasses.replace(ctx, data_paths=_unchanged(ctx.data_paths, asked, params))
        try:
            _grant_rules(action, model, edited)
        except CapabilityDenied as exc:
            return exc.message
        return None

    return check


def _unchanged(paths: frozenset[ParamPath], before: Any, after: Any) -> frozenset[ParamPath]:
    """The paths whose value is the same in both params trees."""
    return frozenset(p for p in paths if _value_at(before, p) == _value_at(after, p))


_MISSING = object()


def _value_at(tree: Any, path: ParamPath) -> Any:
    for key in path:
        in_dict = isinstance(tree, dict) and key in tree
        in_list = isinstance(tree, list) and isinstance(key, int) and 0 <= key < len(tree)
        if not (in_dict or in_list):
            return _MISSING
        tree = tree[key]
    return tree


def _gate_reason(side_effects: bool, note: str | None) -> str:
    reason = "has side effects" if side_effects else "confirm: always"
    return f"{reason}; {note}" if note else reason


def _rule(error: StepError) -> str:
    if isinstance(error, CapabilityDenied):
        return error.rule
    if isinstance(error, ApprovalDenied):
        return "gate"
    if isinstance(error, BudgetExceeded):
        return f"budget.{error.limit}"
    return "runtime"
