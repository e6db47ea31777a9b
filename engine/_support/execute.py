"""Making one admitted call: the action run within its timeout, every failure a
`StepError`, and its result as JSON data. The sandbox does it in this process; a worker
of a remote backend does it the same way (`engine.backend.run_remote`)."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_jsonable_python

from engine._support.eager import as_task
from engine.capability import Action, CallContext
from engine.errors import StepError, StepFailed, StepTimeout

__all__ = ["execute"]


async def execute(action: Action[Any], model: Any, ctx: CallContext) -> Any:
    """Run the action within its timeout; its result as JSON data. Every failure becomes a
    `StepError`."""
    name, limit = action.name, ctx.timeout
    deadline: asyncio.Timeout | None = None
    try:
        if not action.interruptible:  # an inline synchronous function: no timeout can fire
            return _jsonable(name, await action.run(model, ctx))
        await as_task()  # (its deadline cancels the task it runs in: its own)
        deadline = asyncio.timeout(limit)
        async with deadline:
            result = await action.run(model, ctx)
        return _jsonable(name, result)
    except TimeoutError as exc:
        if deadline is not None and deadline.expired():
            raise StepTimeout(f"{name} timed out after {limit:g} s") from None
        # the tool's own timeout (a socket, a lock): an ordinary failure
        raise StepFailed(f"{name} raised TimeoutError: {exc}") from None
    except StepError:
        raise
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise
        raise StepFailed(f"{name} raised CancelledError without being cancelled") from None
    except Exception as exc:  # a user function or action bug is that call's failure
        raise StepFailed(f"{name} raised {type(exc).__name__}: {exc}") from exc


_PLAIN = frozenset({type(None), str, int, float, bool})


def _jsonable(name: str, result: Any) -> Any:
    if type(result) in _PLAIN:
        return result
    if isinstance(result, BaseModel):
        return result.model_dump(mode="json")
    try:
        return to_jsonable_python(result)
    except PydanticSerializationError as exc:
        raise StepFailed(f"{name} returned a value that is not JSON data: {exc}") from exc
