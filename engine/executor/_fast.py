"""The common step on a short path: one attempt of a tool call, nothing around it.

Most steps of a large plan are a tool call with templated params and nothing else: no
`when`, no `for_each`, no fallback, no retry, no agent. For those the general path builds
a `CompiledStep` (closures over every template, the fallback, the retry policy) and goes
through four nested coroutines (`chain` → `_with_retries` → `_attempt` → the sandbox) to
make one call. Here such a step's params are rendered where validation found their
templates (`engine._graph.step_parsed`), and its one attempt runs in one frame.

The call itself goes through the same `Sandbox.call` (grant, params, budget, gate, the
journal or cassette): the short path skips no rule, only the executor's own machinery. It
gives the same results and events as the general path (`RunSettings.fast_path=False`
runs every step the general way; tests compare the two over random plans).
"""

from __future__ import annotations

from typing import Any

from engine._graph import step_parsed
from engine._support.scope import enter_attempt
from engine.errors import ApprovalDenied, ReplayMismatch, StepError, StepFailed
from engine.executor._attempts import Attempts
from engine.model import Step
from engine.results import StepStatus
from engine.templating import Template, render_at

__all__ = ["FastCall", "fast_call", "once"]

Path = tuple[str | int, ...]
_EMPTY: frozenset[Any] = frozenset()


class FastCall:
    """A common step's call: its params' templates where they are, and what the sandbox is
    told about them (`CompiledAction.data_paths` and `data_literals`)."""

    __slots__ = ("data_literals", "data_paths", "params", "templates", "tool")

    def __init__(
        self,
        tool: str,
        params: Any,
        templates: tuple[tuple[Path, Template], ...],
        data_paths: frozenset[Path],
        data_literals: frozenset[str],
    ) -> None:
        self.tool = tool
        self.params = params
        self.templates = templates
        self.data_paths = data_paths
        self.data_literals = data_literals

    def render(self, context: dict[str, Any]) -> Any:
        """The params with every template evaluated, as the general path renders them."""
        return render_at(self.params, self.templates, context)


def fast_call(step: Step) -> FastCall | None:
    """`step`'s call for the short path, or None if the step needs the general one."""
    if (
        step.tool is None
        or step.fallback is not None
        or step.for_each is not None
        or not (step.when is None or step.when is True)
        or (step.retry is not None and step.retry.attempts != 1)
    ):
        return None
    templates = []
    data: list[Path] = []  # where the text begins with a template: data, not the author's
    literals: frozenset[str] = _EMPTY
    for path, source, template in step_parsed(step):
        if path[0] != "params":
            continue
        if template is None or len(path) == 1:  # (unparsed, or the params one template)
            return None
        where = path[1:]
        templates.append((where, template))
        if source.lstrip().startswith("${"):
            data.append(where)
        if template.constants:
            literals = literals | template.constants
    # (not shared between steps as a compiled step's are: the call is dropped as it ends)
    paths = frozenset(data) if data else _EMPTY
    return FastCall(step.tool, step.params, tuple(templates), paths, literals)


async def once(
    attempts: Attempts, step: Step, call: FastCall, context: dict[str, Any]
) -> tuple[StepStatus, Any, str | None]:
    """The step's one attempt: `Attempts.chain` and `Attempts._attempt` for a step with
    no fallback and one attempt, with the same events and outcomes (`can_fail` applied)."""
    enter_attempt(1)
    events, step_id = attempts.events, step.id
    events.emit("attempt.started", step_id, 1, action=call.tool, agent=None, item=None)
    try:
        output = await attempts.sandbox.call(
            call.tool,
            call.render(context),
            step_id=step_id,
            confirm=step.confirm,
            timeout=step.timeout,
            data_paths=call.data_paths,
            data_literals=call.data_literals,
            idempotent=step.idempotent,
        )
    except StepError as exc:
        failed: StepError = exc
    except Exception as exc:  # a bug below us is this attempt's failure, not a crash
        failed = StepFailed(f"{type(exc).__name__}: {exc}", step_id=step_id, attempt=1)
    else:
        events.emit("attempt.finished", step_id, 1, item=None, outcome="ok")
        return "succeeded", output, None
    events.emit(
        "attempt.finished",
        step_id,
        1,
        item=None,
        outcome=type(failed).__name__,
        error=failed.message,
    )
    status: StepStatus = "failed"
    if isinstance(failed, ReplayMismatch):  # the replay cannot show what happened next
        attempts.mismatched.add(step_id)
    elif isinstance(failed, ApprovalDenied):
        status = "denied"
        if failed.in_doubt:  # it may have happened: can_fail does not make it acceptable
            attempts.in_doubt.add(step_id)
    if step.can_fail and step_id not in attempts.mismatched and step_id not in attempts.in_doubt:
        status = "failed_acceptable"
    return status, None, failed.message
