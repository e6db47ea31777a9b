"""What a run produces: a status per step, outputs and usage, as in `--json`."""

from __future__ import annotations

import json
import time
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from engine._support.fields import MaySharedFields, shared

__all__ = [
    "KEPT",
    "NO_USAGE",
    "STATUS_STYLE",
    "TERMINAL",
    "Decision",
    "ReplayReport",
    "RunResult",
    "RunStatus",
    "StepResult",
    "StepStatus",
    "StepUsage",
    "Usage",
]

StepStatus = Literal[
    "succeeded",
    "fallback",
    "failed_acceptable",
    "failed",
    "skipped",
    "denied",
    "cancelled",
    "pending",
]
RunStatus = Literal["succeeded", "failed", "rejected", "cancelled"]

TERMINAL: frozenset[str] = frozenset(get_args(StepStatus))
"""Every status a step can end a run with (`pending` = never reached)."""

BLOCKING: frozenset[str] = frozenset({"failed", "denied"})
"""Statuses that stop dependents from running."""

KEPT: frozenset[str] = frozenset({"succeeded", "fallback", "failed_acceptable", "skipped"})
"""Statuses of steps a resumed run does not run again (their results stand)."""

STATUS_STYLE: dict[str, str] = {
    "succeeded": "green",
    "fallback": "yellow",
    "failed_acceptable": "yellow",
    "failed": "bold red",
    "denied": "bold red",
    "skipped": "dim",
    "cancelled": "magenta",
    "pending": "dim",
    "running": "cyan",
}
"""How each step status is shown (a `rich` style): the terminal's summary and the HTML
report draw a status in the same hue."""


class StepUsage(BaseModel):
    """Counted calls and tokens for one step: its attempts, fallback, `for_each` items and
    agent turns. Model calls that failed count, as in the run's usage.

    Frozen: steps that spent the same share one instance (most steps of a large plan make
    one tool call and nothing else; 100,000 copies would cost 50 MB).
    """

    model_config = ConfigDict(frozen=True)

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls: int = 0


NO_USAGE = StepUsage()


class StepResult(MaySharedFields):  # (`ended` results share theirs)
    """How one step ended."""

    status: StepStatus = "pending"
    output: Any = None
    error: str | None = None
    attempts: int = Field(
        0,
        description="How many times the step's action ran, retries and the fallback included; "
        "a `for_each` step's, summed over its items.",
    )
    items: int | None = Field(
        None, description="A `for_each` step: how many items it had; null for other steps."
    )
    usage: StepUsage = Field(NO_USAGE, description="What this step spent on models and tools.")
    duration: float | None = Field(
        None,
        description="Seconds from the step's start to its end, all attempts and waits "
        "included; null for a step that never started, and in a replay (a cassette holds "
        "no times).",
    )
    transcript: list[dict[str, Any]] | None = Field(
        None, description="Agent steps: every tool call as it really went."
    )
    warnings: list[str] | None = Field(
        None,
        description="What a person should know of a step that did not fail: each call "
        "whose output was cut at a limit (`truncated: true`), and so is incomplete.",
    )

    @classmethod
    def ended(cls, status: StepStatus, output: Any, error: str | None, attempts: int) -> StepResult:
        """`StepResult(status=..., output=..., error=..., attempts=...)`, made without
        validating what the engine made itself (a status of its own, JSON data from the
        sandbox): a 100,000-step run makes 100,000 of them, and validating each cost
        about a twentieth of a common step."""
        result = cls.__new__(cls)
        fields = {**_STEP_DEFAULTS, "status": status, "output": output, "error": error}
        fields["attempts"] = attempts
        _set(result, "__dict__", fields)
        _set(result, "__pydantic_fields_set__", _ENDED_FIELDS)  # (shared until a field is set)
        _set(result, "__pydantic_extra__", None)
        _set(result, "__pydantic_private__", None)
        return result


_STEP_DEFAULTS = {name: field.default for name, field in StepResult.model_fields.items()}
_ENDED_FIELDS = shared(("status", "output", "error", "attempts"))
_set = object.__setattr__


class Usage(BaseModel):
    """Counted calls and tokens for the run."""

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls: int = 0


class Decision(BaseModel):
    """An approver's answer to one gate, bound to the exact params it saw."""

    step_id: str
    action: str
    params_hash: str
    approved: bool
    by: str
    reason: str | None = None
    edited_params: Any = Field(None, description="Params the person changed before approving.")
    quit: bool = Field(False, description="The person chose to stop the whole run.")
    skip: bool = Field(
        False,
        exclude=True,  # `by: --skip` says it where decisions are shown
        description="A call in doubt not made, counted as failed (`resume --skip STEP`): "
        "the step's fallback and `can_fail` apply.",
    )
    at: float | None = Field(
        default_factory=time.time,
        description="When it was decided (epoch s); null for a decision a replay served: a "
        "cassette holds no times, so two replays of it give the same result.",
    )


class ReplayReport(BaseModel):
    """How a run went against its cassette (`--record` / `--replay`)."""

    cassette: str
    mode: str
    mismatches: list[str] = Field(
        default_factory=list, description="Requests the cassette had no recording of."
    )
    unused: list[str] = Field(
        default_factory=list, description="Recordings the replay never asked for."
    )
    written: bool = Field(False, description="Whether the cassette file was (re)written.")


class RunResult(BaseModel):
    """The whole run, as printed by `planloom run --json`."""

    run_id: str
    status: RunStatus
    steps: dict[str, StepResult] = Field(default_factory=dict)
    outputs: dict[str, Any] = Field(default_factory=dict)
    usage: Usage = Field(default_factory=Usage)
    errors: list[str] = Field(default_factory=list, description="Run-level problems.")
    approvals: list[Decision] = Field(default_factory=list)
    dry_run: list[dict[str, Any]] | None = Field(
        None, description="--dry-run: the calls with side effects that were not made."
    )
    unknown_outputs: dict[str, str] | None = Field(
        None,
        description="--dry-run: the outputs left null because they read a step the dry run "
        "did not run, each with the reason.",
    )
    replay: ReplayReport | None = None

    def snapshot(self) -> str:
        """The run as stable text for golden tests: keys sorted, steps by id, approvals by
        step; no run id, timestamps, durations or cassette path, so equal runs give equal text."""
        data: dict[str, Any] = {
            "status": self.status,
            "steps": {
                step_id: self.steps[step_id].model_dump(
                    mode="json", exclude_none=True, exclude={"duration"}
                )
                for step_id in sorted(self.steps)
            },
            "outputs": self.outputs,
            "usage": self.usage.model_dump(mode="json"),
            "errors": self.errors,
            "approvals": sorted(
                (d.model_dump(mode="json", exclude={"at"}) for d in self.approvals),
                key=lambda d: (d["step_id"], d["action"], d["params_hash"]),
            ),
        }
        if self.dry_run is not None:
            data["dry_run"] = sorted(self.dry_run, key=lambda c: json.dumps(c, sort_keys=True))
        if self.replay is not None:
            data["replay"] = {"mismatches": self.replay.mismatches, "unused": self.replay.unused}
        return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, default=repr) + "\n"

    def __repr__(self) -> str:
        # Short on purpose: asyncio formats the repr of a finished run's result on exit.
        return f"RunResult(run_id={self.run_id!r}, status={self.status!r}, steps={len(self.steps)})"
