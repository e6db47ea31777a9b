"""Where an admitted tool call runs: in this process, or on a remote backend's worker.

`Sandbox.call` admits a call (grant, params, budget, confirmation gate) and hands it to
its `Results` layer (the journal, a cassette); what then makes the call live is the action
in this process, unless the sandbox has a `Backend` that takes the call's family. The call
then goes out as a `RemoteCall` (plain data: the action's name, its params and grant as
the recipe gave them, its timeout) and comes back as an `Outcome`. The worker makes it
with `run_remote`, through the same checks as here: the grant and the params validated
again by the worker's own registry, the action's own confinement (fs roots, the shell
launcher), the same timeout.

Scheduling, gates, approvals, events, recording and the run store never leave this
process: a backend only ever sees calls that were admitted.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from engine._support.execute import execute
from engine._support.problems import validation_problems
from engine.capability import CallContext, Family, ParamPath, Registry
from engine.errors import (
    CapabilityDenied,
    OutcomeUnknown,
    StepError,
    StepFailed,
    StepTimeout,
)

__all__ = ["Backend", "Outcome", "RemoteCall", "run_remote"]

# The errors a worker can send back, by name (anything else arrives as StepFailed).
_ERRORS: dict[str, type[StepError]] = {
    cls.__name__: cls for cls in (StepFailed, StepTimeout, OutcomeUnknown)
}


@dataclass(frozen=True, slots=True)
class RemoteCall:
    """What a worker needs to make one call: plain data, so any backend can send it.

    Attributes:
        key: unique to this call (a backend may name its task after it).
        step_id: the calling step, for messages.
        action: `family.action`.
        params: the params as admitted here (after the gate, edits included).
        grant: the family's grant as the recipe wrote it; the worker validates it.
        base_dir: the recipe's folder, where the grant's relative paths start (the same
            path must hold the same files on the worker: a shared file system).
        timeout: seconds the call may take once it runs.
        data_paths / data_literals: as `CallContext` has them.
        once: a side effect that must not be made twice (not idempotent): if the worker
            making it is lost, the call ends `OutcomeUnknown` instead of running again.
    """

    key: str
    step_id: str
    action: str
    params: Any
    grant: Any
    base_dir: str
    timeout: float
    data_paths: tuple[ParamPath, ...] = ()
    data_literals: tuple[str, ...] = ()
    once: bool = False


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a worker sends back: the call's JSON result, or its error (the error's class
    name, message, and the rule of a refusal)."""

    result: Any = None
    error: str | None = None
    message: str = ""
    rule: str | None = None

    @classmethod
    def failed(cls, exc: StepError) -> Outcome:
        return cls(error=type(exc).__name__, message=exc.message, rule=getattr(exc, "rule", None))

    def unwrap(self, step_id: str) -> Any:
        """The result, or the error raised here as the worker raised it."""
        if self.error is None:
            return self.result
        if self.error == CapabilityDenied.__name__:
            # the worker's text as it worded it (a params mismatch is not "denied by rule")
            rule = self.rule or "worker"
            message = self.message.removeprefix(f"denied by rule {rule}: ")
            raise CapabilityDenied(message, rule=rule, step_id=step_id, text=self.message)
        raise _ERRORS.get(self.error, StepFailed)(self.message, step_id=step_id)


class Backend(Protocol):
    """Makes admitted calls of the families it takes, somewhere other than this process.

    `run` returns the call's JSON result or raises the `StepError` the call ended with;
    cancelling it cancels the call where it runs (its confined children are killed).
    """

    name: str

    def takes(self, family: Family) -> bool:
        """Whether calls of `family` go to this backend (never a family that is not
        `portable`)."""
        ...

    def scope(self) -> AbstractAsyncContextManager[object]:
        """What the backend holds for one run (its connection to the cluster), entered
        on the run's event loop when the run starts and left when it ends."""
        ...

    async def run(self, call: RemoteCall) -> Any: ...


async def run_remote(call: RemoteCall, registry: Registry) -> Outcome:
    """Make `call` as a worker does, with `registry` (the worker's own), and say how it
    went. The grant and the params are validated again here: a worker trusts nothing
    it was sent but the call's identity."""
    try:
        action = registry.get(call.action)
        if action is None:
            raise CapabilityDenied(
                f"{call.action} is unknown on this worker: the capability's package (or "
                "--plugin module) must be installed and importable on every worker",
                rule="unknown-tool",
            )
        family = registry.families[action.family]
        if not family.portable:
            raise CapabilityDenied(
                f"{call.action}: the '{family.name}' family runs only where planloom runs",
                rule="not-portable",
            )
        try:
            grant = family.grant_model.model_validate(call.grant or {})
        except ValidationError as exc:
            raise CapabilityDenied(
                f"bad grant for {family.name}: {validation_problems(exc, root=family.name)}",
                rule="grant-schema",
            ) from None
        try:
            model = action.params_model.model_validate(call.params)
        except ValidationError as exc:
            problems = validation_problems(exc, prefix=("params",), root="params")
            raise CapabilityDenied.bad_params(call.action, problems) from None
        ctx = CallContext(
            grant=grant,
            base_dir=Path(call.base_dir),
            timeout=call.timeout,
            step_id=call.step_id,
            data_paths=frozenset(call.data_paths),
            data_literals=frozenset(call.data_literals),
        )
        return Outcome(result=await execute(action, model, ctx))
    except StepError as exc:
        return Outcome.failed(exc)
