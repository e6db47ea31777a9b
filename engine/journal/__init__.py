"""A run's journal: what the run store keeps of a run as it goes, and what a resume serves.

A `Journal` wraps the same seams a cassette's `Tape` does, in front of whatever is inside
them (the live world, or a cassette being recorded): `journal.results(inner)` is the
sandbox's `Results`, `journal.answers(inner)` the model client's `Answers`, and
`journal.approver(inner)` the approver of gates and questions. It watches the executor's
events for each step's result and timeline (`watch`).

Each tool call with side effects is journaled before it starts (its *intent*, committed
before the call is made) and after it ends (its result or error); model exchanges and
answers are committed as they happen; decisions and step results go in batches (an
approved call's intent commits its decision with it; losing either costs a harmless
repeat: a gate asks again, a step runs again with its calls served). Read-only calls are
not journaled on their own: their outputs are in their steps' results, and a resume makes
them again. Entries are the cassette's models (`ToolResult`, `LLMExchange`, `Approval`,
`Answer`), keyed the same way (a call by the hash of its params as redacted), with secrets
redacted: the run's one registry, which its executor shares, holds the environment's
secrets (variables a grant reads included), secret-named inputs (`Journal.plan`), and
credentials that tools' outputs show by name (`Secrets.learn`, as each call returns). So
no secret the run knows of is at rest in clear; a resume is given secret inputs again.

A resumed run (`Journal(resumed=...)`, see `engine.journal.resume`) is a replay of what
finished, then live: a call whose result is journaled is served, not made again; a
side-effect call whose intent is journaled with no result (it was in flight when the run
stopped) is *in doubt*: the sandbox runs it again only if its action or step is
idempotent, else it puts it to the gate, where only a person may approve it (`--yes` and
policies cannot), at the terminal or on the command line (`resume --redo STEP`; `--skip
STEP` ends it failed, unmade: its step's fallback runs, unless it is that very call).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engine._support.scope import PLANNER, current_scope, step_of
from engine.approval import Approver
from engine.events import Event
from engine.llm import Answers
from engine.results import KEPT, NO_USAGE, RunResult, StepResult, StepUsage
from engine.sandbox import Results
from engine.store import JSONText

if TYPE_CHECKING:
    from engine.executor import Executor

from engine.journal._book import JOURNAL, JournalBook
from engine.journal._seams import JournalAnswers, JournalApprover, JournalResults

__all__ = ["JOURNAL", "Journal"]


_ATTEMPT = ("n", "item", "started", "action", "finished", "outcome", "error")
"""An attempt in a step's timeline (`item`: a `for_each` item's, numbered within it)."""


def _spent(usage: StepUsage) -> dict[str, int]:
    """A step's usage as journaled: its counts that are not 0 (shared: not to be changed).
    Steps that spent the same share one usage, so it is found by identity (a frozen
    model's hash reads every field)."""
    known = _SPENT.get(id(usage))
    if known is not None and known[0] is usage:
        return known[1]
    spent = {name: count for name, count in usage.__dict__.items() if count}
    if len(_SPENT) < 1024:
        _SPENT[id(usage)] = (usage, spent)  # (the usage kept, so its id is not reused)
    return spent


_SPENT: dict[int, tuple[StepUsage, dict[str, int]]] = {}


def _went_well_at_once(events: Sequence[Event]) -> bool:
    """The step's timeline is its start and one attempt that went well, and nothing else."""
    return (
        len(events) == 3
        and events[2].kind == "attempt.finished"
        and events[2].data.get("outcome") == "ok"
    )


def _timeline(events: Sequence[Event]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A step's attempts (each `_ATTEMPT`; a `for_each` item's are numbered within it)
    and gate decisions, from its events."""
    attempts: list[list[Any]] = []
    running: dict[tuple[Any, ...], list[Any]] = {}
    gates: list[dict[str, Any]] = []
    for event in events:
        data = event.data
        if event.kind == "attempt.started":
            attempt: list[Any] = [event.attempt, data.get("item"), event.ts, data.get("action")]
            running[(event.attempt, data.get("item"))] = attempt
            attempts.append(attempt)
        elif event.kind == "attempt.finished":
            ended = running.pop((event.attempt, data.get("item")), None)
            if ended is not None:
                ended += [event.ts, data.get("outcome"), data.get("error")]
        elif event.kind == "gate.decided":
            gates.append(
                {
                    "at": event.ts,
                    "action": data.get("action"),
                    "approved": data.get("approved"),
                    "by": data.get("by"),
                    "reason": data.get("reason"),
                }
            )
    shown = [
        {
            k: v
            for k, v in zip(_ATTEMPT, attempt, strict=False)
            if v is not None or k != "item"  # (a whole step's attempt has none)
        }
        for attempt in attempts
    ]
    return shown, gates


class Journal(JournalBook):
    """The journal of one run in a store (a new run, or a resumed one).

    Args:
        store: where entries go.
        run_id: the run's id (already begun or claimed in `store`).
        secrets: redacted from everything before it is written: the run's one registry
            (its executor is given it too, so every secret the run knows of, its secret
            inputs included, is redacted here; see `Journal.plan`).
        resumed: what the run's earlier segments left: served again, or in doubt.
    """

    def plan(self, plan: dict[str, Any], *, inputs: dict[str, Any], model: str | None) -> None:
        """The plan run from here on (a replan writes the new one), committed at once."""
        self.secrets.add_environ()  # variables grants declared secret as they validated
        self.secrets.add_inputs(inputs)  # and the executor, sharing `secrets`, adds no other
        self.steps = sum(len(plan.get(section) or []) for section in ("steps", "finally"))
        self.store.update(self.run_id, steps=self.steps)
        # A plan may be large: redacted as text, in one pass when nothing in it can need it.
        rest = self.secrets.redact_json({"inputs": inputs, "model": model})
        data = JSONText(f'{{"plan":{self.secrets.redact_json(plan)},{rest[1:]}')
        self.write("plan", None, data, durable=True)

    def finish(self, result: RunResult) -> None:
        """The run ended: its result (for `planloom show`: the steps' results are their
        `step` entries; only steps that never started are here), status and usage, in one
        transaction."""
        unstarted = {k: v for k, v in result.steps.items() if k not in self._journaled}
        data = self.redact(
            {
                **result.model_dump(mode="json", exclude={"replay", "steps"}),
                "steps": {k: v.model_dump(mode="json") for k, v in unstarted.items()},
            }
        )
        self.store.finish(self.run_id, result.status, result.usage.model_dump(), self.done, data)

    # -- the seams -----------------------------------------------------------------------

    def results(self, inner: Results) -> Results:
        return JournalResults(self, inner)

    def answers(self, inner: Answers) -> Answers:
        return JournalAnswers(self, inner)

    def approver(self, inner: Approver) -> Approver:
        return JournalApprover(self, inner)

    def watch(self, executor: Executor) -> None:
        """Journal each step's result and timeline as the executor ends it."""
        # This sees every event of a run (about six a step): one lookup for most of them.
        keep = {
            "step.started": self._events,
            "attempt.started": self._events,
            "attempt.finished": self._events,
            "gate.decided": self._events,
        }

        def seen(event: Event) -> None:
            kind, step_id = event.kind, event.step_id
            kept = keep.get(kind)
            if kept is not None:
                if step_id is not None:
                    timeline = kept.get(step_id)
                    if timeline is None:
                        kept[step_id] = [event]
                    else:
                        timeline.append(event)
            elif kind == "step.finished":
                if step_id is not None:
                    self._step_finished(executor.results[step_id], step_id, event.ts)
            elif kind == "llm.called":
                self._llm_called(event)
            elif kind == "step.discarded" and step_id is not None:
                self._step_discarded(step_id, event.data.get("status"))

        executor.events.subscribe(seen)

    def _llm_called(self, event: Event) -> None:
        scope = current_scope()
        owner = step_of(scope) if scope is not None else None
        usage = self._usage.setdefault(owner or PLANNER, Counter())
        usage["calls"] += 1
        usage["prompt_tokens"] += int(event.data.get("prompt_tokens") or 0)
        usage["completion_tokens"] += int(event.data.get("completion_tokens") or 0)

    def _step_discarded(self, step_id: str, status: Any) -> None:
        """An early step of a streamed plan that the whole plan did not keep: what was
        journaled of it no longer stands (a resume runs the plan's own version)."""
        self._events.pop(step_id, None)
        self._usage.pop(step_id, None)
        if step_id not in self._journaled:
            return
        self._journaled.discard(step_id)
        self.done -= 1 if status in KEPT else 0
        error = "discarded: the whole plan changed this step"
        data = {"result": {"status": "pending", "attempts": 0, "error": error}}
        self.write("step", step_id, data, durable=False)

    def _step_finished(self, result: StepResult, step_id: str, at: float) -> None:
        self._journaled.add(step_id)
        if result.status in KEPT:
            self.done += 1
        ended: dict[str, Any] = {"status": result.status, "attempts": result.attempts}
        output = result.output
        if output is not None:  # the error and transcript are redacted already
            if result.transcript is not None:  # a tool's output was learnt as it came
                self.secrets.learn(output)  # (an agent's answer may hold one)
            ended["output"] = self.redact(output)
        if result.error is not None:
            ended["error"] = result.error
        if result.transcript is not None:
            ended["transcript"] = result.transcript
        if result.usage is not NO_USAGE:  # a resumed run keeps what a kept step spent
            ended["usage"] = _spent(result.usage)
        if result.duration is not None:
            ended["duration"] = result.duration
        if result.warnings:
            ended["warnings"] = self.redact(result.warnings)
        events = self._events.pop(step_id, ())
        started = events[0].ts if events and events[0].kind == "step.started" else None
        data: dict[str, Any] = {"result": ended, "started": started, "finished": at}
        if not _went_well_at_once(events):
            attempts, gates = _timeline(events)
            # events reach subscribers unredacted: what leaves the process is redacted here
            if len(attempts) > 1 or (attempts and attempts[0].get("outcome") != "ok"):
                # (one attempt that went well is the step's own span)
                data["attempts"] = self.redact(attempts)
            if gates:
                data["gates"] = self.redact(gates)
        usage = self._usage.pop(step_id, None)
        if usage:
            data["llm"] = dict(usage)
        self.write("step", step_id, data, durable=False)
