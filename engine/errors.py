"""Every exception planloom raises, in one tree.

```
PlanloomError
├── PlanError                  a recipe or plan cannot be loaded or is invalid (exit 2)
│   ├── RecipeSyntaxError      the file is not YAML, is binary, or has duplicate keys
│   └── PlanValidationError    the plan has problems; carries every `Diagnostic`
├── ConfigurationError         a bad CLI flag, input value, plugin or environment (exit 2)
│   └── InputError             a `-i key=value` that does not fit the recipe's inputs
├── StepError                  a step's attempt went wrong at run time; the executor turns
│   │                          these into step outcomes, they never escape a run
│   ├── StepFailed             the action ran and reported failure (e.g. non-zero exit)
│   ├── StepTimeout            an attempt ran past its timeout
│   ├── CapabilityDenied       the sandbox refused the call; `rule` names why
│   ├── ApprovalDenied         the approver refused a gated call
│   ├── DryRun                 --dry-run: a side effect reported instead of made
│   ├── TemplateError          a `${{ }}` expression failed while rendering
│   ├── BudgetExceeded         a run limit (duration, tool calls) was reached
│   └── ReplayMismatch         a replayed run asked for something the cassette lacks
└── UsageError                 the Python API was misused (a programming error)
```

Load-time errors carry locations (`file`, `line`, `column`, `rule`); run-time errors carry
`step_id`, `attempt` and, for denials, the `rule` that decided.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.diagnostics import Diagnostic, SourceMap

__all__ = [
    "ApprovalDenied",
    "BudgetExceeded",
    "CapabilityDenied",
    "ConfigurationError",
    "DryRun",
    "InputError",
    "OutcomeUnknown",
    "PlanError",
    "PlanValidationError",
    "PlanloomError",
    "RecipeSyntaxError",
    "ReplayMismatch",
    "StepError",
    "StepFailed",
    "StepTimeout",
    "TemplateError",
    "UsageError",
]


class PlanloomError(Exception):
    """Base of every planloom error."""


class PlanError(PlanloomError):
    """A recipe or plan cannot be loaded or is invalid."""


class PlanValidationError(PlanError):
    """The plan has one or more problems, all of them listed in `diagnostics`.

    Its text is the first problem's headline, or `report` when given: every problem with
    its source line, as `planloom validate` prints them.
    """

    def __init__(self, diagnostics: list[Diagnostic], report: str | None = None) -> None:
        self.diagnostics = diagnostics
        count = len(diagnostics)
        first = diagnostics[0].headline() if diagnostics else "invalid plan"
        more = f" (and {count - 1} more)" if count > 1 else ""
        super().__init__(report if report is not None else f"{first}{more}")


class RecipeSyntaxError(PlanValidationError):
    """The file could not be read as a YAML recipe (syntax, encoding, binary, duplicates),
    or a JSON one, or recipe data held a value JSON cannot hold.

    Attributes:
        source: for recipe data (`engine.yaml.read_recipe_data`), the map of the YAML it
            is shown as, which the diagnostics' lines are in; else `None`.
    """

    source: SourceMap | None = None


class ConfigurationError(PlanloomError):
    """A CLI flag, environment variable, input value or plugin is wrong."""


class InputError(ConfigurationError):
    """A run input does not fit the recipe's declared `inputs`."""


MAX_MESSAGE = 4000
"""Longest error message kept: messages quote params, and params can be megabytes."""


def _bounded(message: str) -> str:
    if len(message) <= MAX_MESSAGE:
        return message
    cut = len(message) - MAX_MESSAGE
    return f"{message[: MAX_MESSAGE // 2]}…[{cut} characters cut]…{message[-MAX_MESSAGE // 2 :]}"


class StepError(PlanloomError):
    """Something went wrong in one attempt of one step.

    Attributes:
        step_id: the step, when known.
        attempt: the 1-based attempt number, when known.
        kind: `error` or `timeout`, which is what `retry.on` matches.
        retryable: whether trying again could help (never for denials or template errors).
    """

    kind = "error"
    retryable = True

    def __init__(self, message: str, *, step_id: str | None = None, attempt: int | None = None):
        message = _bounded(message)
        super().__init__(message)
        self.message = message
        self.step_id = step_id
        self.attempt = attempt


class StepFailed(StepError):
    """The action ran and reported failure."""


class StepTimeout(StepError):
    """An attempt ran longer than its timeout."""

    kind = "timeout"


class OutcomeUnknown(StepFailed):
    """A call with side effects may or may not have happened (the worker making it was
    lost). It is not retried: trying again could make the side effect twice. A fallback
    and `can_fail` apply as to any failure."""

    retryable = False


class CapabilityDenied(StepError):
    """The sandbox refused a call. `rule` names the rule that decided."""

    retryable = False

    param: tuple[str | int, ...] | None = None
    """The param the rule refused (`("argv", 0)`), when one did: where validation points."""

    def __init__(
        self, message: str, *, rule: str, step_id: str | None = None, text: str | None = None
    ) -> None:
        """`text`: the whole error text, for a refusal that is not the grant's decision
        (see `bad_params`); by default `denied by rule RULE: MESSAGE`."""
        super().__init__(text or f"denied by rule {rule}: {message}", step_id=step_id)
        self.rule = rule
        self.reason = message

    @classmethod
    def bad_params(
        cls, action: str, problems: str, *, step_id: str | None = None
    ) -> CapabilityDenied:
        """The refusal of a call whose params do not fit its action's params model (rule
        `params-schema`): a type error in the plan (a template that gave a number where
        the action takes a string), worded as one, not as something a grant forbids."""
        return cls(
            f"{action}: {problems}",
            rule="params-schema",
            step_id=step_id,
            text=f"params do not match the schema of {action} (rule params-schema): {problems}",
        )


class ApprovalDenied(StepError):
    """The approver refused a gated call. `in_doubt`: the call may already have happened
    (a resumed run's call in flight at the crash), so its step ends `denied` at once: no
    fallback runs in its place and `can_fail` does not make it acceptable, and the next
    resume asks about it again."""

    retryable = False

    def __init__(
        self, reason: str | None = None, *, step_id: str | None = None, in_doubt: bool = False
    ) -> None:
        text = "denied by approver" + (f": {reason}" if reason else "")
        super().__init__(text, step_id=step_id)
        self.reason = reason
        self.in_doubt = in_doubt


class DryRun(StepError):
    """`--dry-run`: a call with side effects that was reported, not made."""

    retryable = False

    def __init__(self, action: str, params: object, *, step_id: str | None = None) -> None:
        super().__init__(f"dry run: would run {action}", step_id=step_id)
        self.action = action
        self.params = params


class TemplateError(StepError):
    """A template expression failed while rendering at run time."""

    retryable = False


class BudgetExceeded(StepError):
    """A run limit was reached."""

    retryable = False

    def __init__(self, message: str, *, limit: str, step_id: str | None = None) -> None:
        super().__init__(message, step_id=step_id)
        self.limit = limit


class ReplayMismatch(StepError):
    """A replayed run made a request (model, tool, gate, question) the cassette has no
    recording of. It ends the step as `failed`: no retry, fallback or `can_fail` applies,
    because the replay no longer shows what the recorded run did."""

    retryable = False


class UsageError(PlanloomError):
    """The Python API was called in a way it does not support."""
