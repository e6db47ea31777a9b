"""What a journal's seams share: the store and run it writes to, the secrets it redacts,
the ordinals that key its calls, and what a resumed run left in doubt."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from engine._support.scope import current_scope
from engine.events import Event
from engine.recording.cassette import (
    digest,
)
from engine.redaction import Secrets
from engine.sandbox import ToolCall
from engine.store import EntryKind, RunStore

if TYPE_CHECKING:
    from engine.journal.resume import Intent, Resumed, ToolKey


JOURNAL = "journal"
"""The `by` of a decision on a call served from the journal (it ran before the resume)."""


class JournalBook:
    """The state a `Journal` and its seams share (see `engine.journal.Journal`)."""

    def __init__(
        self,
        store: RunStore,
        run_id: str,
        *,
        secrets: Secrets | None = None,
        resumed: Resumed | None = None,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.secrets = secrets if secrets is not None else Secrets.from_environ()
        self.resumed = resumed
        self.ordinals: Counter[tuple[Any, ...]] = Counter()
        self.settled: set[ToolKey] = set()  # calls in doubt that were made again
        self.skipped: set[ToolKey] = set()  # calls in doubt skipped (`resume --skip`)
        self.done = len(resumed.kept) if resumed is not None else 0
        self.steps = 0
        self._events: dict[str, list[Event]] = {}  # each step's timeline, as it goes
        self._journaled: set[str] = set(resumed.steps) if resumed is not None else set()
        self._usage: dict[str, dict[str, int]] = {}

    # -- writing -------------------------------------------------------------------------

    def write(self, kind: EntryKind, scope: str | None, data: Any, *, durable: bool) -> None:
        self.store.append(self.run_id, kind, scope, data, durable=durable)

    def redact(self, value: Any) -> Any:
        """`value` (JSON data: params, outputs, requests) with secrets redacted."""
        return self.secrets.redact_value(value)

    def next_ordinal(self, *key: Any) -> int:
        ordinal = self.ordinals[key]
        self.ordinals[key] += 1
        return ordinal

    def doubt(self, key: ToolKey) -> tuple[ToolKey, Intent] | None:
        """The intent with no result the call of `key` may repeat: its own, or, when its
        params changed since (an input given again, a read made again), one of the same step
        (or item) and action that no call has taken up yet (a skipped one stands for no
        other call: its step's fallback runs, unless it is that very call)."""
        resumed = self.resumed
        assert resumed is not None
        if key in resumed.tools:
            return None
        settled = self.settled
        if key in resumed.doubts and key not in settled:
            return key, resumed.doubts[key]
        for other, intent in resumed.doubts.items():
            if (
                other[:2] == key[:2]
                and other not in settled
                and other not in self.skipped
                and other not in resumed.tools
            ):
                return other, intent
        return None

    def call_key(self, call: ToolCall, *, peek: bool) -> tuple[ToolKey, Any]:
        """The call's journal key (as a cassette's) and its redacted params."""
        scope = current_scope() or call.step_id
        shown = self.redact(call.params)
        params_hash = digest(shown)
        counter = ("tool", scope, call.action, params_hash)
        ordinal = self.ordinals[counter] if peek else self.next_ordinal(*counter)
        return (scope, call.action, params_hash, ordinal), shown
