"""Where a call meets the rest of the run: the gate a call may have to pass (`Gate`), a call as
the run knows it (`ToolCall`) and as admission passed it (`Admitted`), and where its result
comes from (`Results`: live, a cassette, a journal)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from pydantic import BaseModel

from engine.capability import Action, CallContext


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

    def forget(self, step_id: str) -> None:
        """The step's calls so far no longer count (an early step of a streamed plan that
        the whole plan threw away): a recording keeps only what the plan's run used, and
        the step's calls are counted from the first again."""
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

    def forget(self, step_id: str) -> None:
        return None


@dataclass(slots=True)  # not frozen: a frozen one costs 4x to make, once per call
class Admitted:
    """A call past admission: its action, validated params and context, and what the gate
    and the `Results` layer need to know of it."""

    action: Action[Any]
    model: BaseModel
    ctx: CallContext
    call: ToolCall
    side_effects: bool
    served: bool  # a recording serves it with nothing run (for its params, once edited)
    replayed: bool = False  # its decision may come from the recording (set at the gate)
