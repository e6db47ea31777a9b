"""A cassette's tool results: what the sandbox runs goes through here (its `Results`).

A call is found by its scope (the step, or `step[i]` for a `for_each` item), action, params
hash and repeat: how many calls with these params the scope made before it, over all its
attempts, as a run's journal keys its calls. The attempt is written with each call, to be
read, but finds nothing: a cassette recorded before items numbered their own attempts
numbered them across the step, in the order items happened to go.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from engine._support.scope import current_scope
from engine.errors import ReplayMismatch, StepError
from engine.recording._mismatch import tool_miss, where
from engine.recording.cassette import ToolResult, rebuild_error, record_error
from engine.recording.cassette import digest as hash_of
from engine.sandbox import ToolCall

if TYPE_CHECKING:
    from engine.recording._reel import Reel

__all__ = ["TapeResults"]

_ToolKey = tuple[str, str, str, int]
"""A recorded call's key: scope, action, params hash, repeat (see the module docstring)."""


def _by_repeat(entries: list[ToolResult]) -> dict[_ToolKey, ToolResult]:
    """Recorded calls by key. A scope's calls with the same params are counted in the order
    they were made: by attempt, then by ordinal (which older cassettes count within each
    attempt, newer ones over the scope's attempts: the order is the same)."""
    groups: dict[tuple[str, str, str], list[ToolResult]] = {}
    for entry in entries:
        groups.setdefault((entry.step, entry.action, entry.params_hash), []).append(entry)
    table: dict[_ToolKey, ToolResult] = {}
    for (scope, action, digest), group in groups.items():
        group.sort(key=lambda e: (e.attempt, e.ordinal))
        for repeat, entry in enumerate(group):
            table[scope, action, digest, repeat] = entry
    return table


class TapeResults:
    """Tool results: recorded ones served, live ones recorded (see `Reel`)."""

    def __init__(self, tape: Reel) -> None:
        self.tape = tape
        self._tools = _by_repeat(tape.recorded.tools)

    @property
    def timed(self) -> bool:
        return not (self.tape.replaying and not self.tape.recording)

    def serves(self, call: ToolCall) -> bool:
        """Whether this call will be answered from the cassette, nothing run: asked before
        the call's gate, since only such a call may be approved by a recorded decision.

        A pure replay runs nothing (a call with no recording fails as a mismatch), except
        read-only calls under `live_tools`. With `new_episodes`, a call is served when its
        result is recorded, for these params or for params a recorded decision edited them
        to; a call whose result is not recorded itself (`recorded` false: its model's or
        person's answers are) may reach a live model, so it is not.
        """
        step_id, action = call.step_id, call.action
        if not self.tape.replaying or (self.tape.live_tools and call.read_only):
            return False
        if not self.tape.recording:
            return True
        if not call.recorded:
            return False
        scope = current_scope() or step_id
        digest = hash_of(self.tape.redact(call.params))
        digests = {digest} | {
            hash_of(self.tape.redact(e.edited_params))
            for e in self.tape.recorded.approvals
            if (e.step, e.action, e.params_hash) == (step_id, action, digest)
            and e.approved
            and e.edited_params is not None
        }
        return any(
            (scope, action, d, self.tape.ordinals["tool", scope, action, d]) in self._tools
            for d in digests
        )

    def in_doubt(self, call: ToolCall) -> str | None:
        """A cassette holds whole calls only: none is in doubt."""
        return None

    def forget(self, step_id: str) -> None:
        """A thrown-away early step: its recorded calls are dropped, and its calls (and its
        items') are counted from the first again, as a replay that never ran it counts."""
        tools = self.tape.cassette.tools
        tools[:] = [tool for tool in tools if not _of(tool.step, step_id)]
        for key in [k for k in self.tape.ordinals if k[0] == "tool" and _of(k[1], step_id)]:
            del self.tape.ordinals[key]

    async def result(
        self, call: ToolCall, live: Callable[[], Awaitable[Any]], *, replayed: bool = False
    ) -> Any:
        """The call's result: the recording, or a live run that is recorded.

        In a replay, side effects are never made; read-only calls run live only with
        `live_tools`. `replayed` says the gate was asked on the promise that this call is
        served (`serves`), so a recorded decision may have approved it: if it cannot be
        served after all, it fails as a mismatch rather than run live.
        """
        if not call.recorded:
            return await live()
        step_id, attempt, action = call.step_id, call.attempt, call.action
        scope = current_scope() or step_id
        shown = self.tape.redact(call.params)
        digest = hash_of(shown)
        ordinal = self.tape.next_ordinal("tool", scope, action, digest)
        key = (scope, action, digest, ordinal)
        live_read = self.tape.live_tools and call.read_only
        if self.tape.replaying:
            entry = self.tape.take(self._tools, key)
            if entry is not None and not live_read:
                if entry.error is not None:
                    raise rebuild_error(entry.error, step_id)
                return entry.output
            if entry is None and not self.tape.recording and not live_read:
                raise self.tape.fail(
                    tool_miss(
                        self.tape.recorded,
                        self.tape.path,
                        scope,
                        attempt,
                        action,
                        shown,
                        digest,
                        ordinal,
                    ),
                    step_id,
                )
            if replayed:
                raise self.tape.fail(
                    f"replay: {where(scope)} (attempt {attempt}) called {action} on the "
                    f"promise that {self.tape.path} holds its result (params hash {digest}, "
                    f"repeat #{ordinal}), but it does not: it would run live under a "
                    f"recorded decision, so nothing was run",
                    step_id,
                )
            if entry is not None:  # --live-tools: run it, the recording stands
                return await live()
        entry = ToolResult(
            step=scope,
            attempt=attempt,
            action=action,
            params_hash=digest,
            ordinal=ordinal,
            params=shown,
        )
        try:
            output = await live()
        except StepError as exc:
            if self.tape.recording and not isinstance(exc, ReplayMismatch):
                entry.error = record_error(exc, self.tape.secrets.redact)
                self.tape.cassette.tools.append(entry)
            raise
        if self.tape.recording:
            entry.output = self.tape.redact(output)
            self.tape.cassette.tools.append(entry)
        return output


def _of(scope: object, step_id: str) -> bool:
    """Whether `scope` is the step's own or one of its `for_each` items'."""
    return isinstance(scope, str) and (scope == step_id or scope.startswith(f"{step_id}["))
