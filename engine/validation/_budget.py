"""Warning, before a run, of a plan whose tool calls certainly pass `limits.max_tool_calls`.

A run stops at its budget (`BudgetExceeded`) wherever it has got to; a recipe that is sure
to get there is told so at validation, as a warning (it is still valid: the run may be
meant to stop there, or be resumed with a higher limit). Only what is certain is counted:
one call for each tool step, or one for each item of a `for_each` over a literal list or a
`range(...)` of literal numbers; nothing for agent steps, steps with a `when`, retries or
fallbacks, which may make more calls or none.
"""

from __future__ import annotations

import re

from jinja2.sandbox import MAX_RANGE

from engine.diagnostics import Diagnostic, NodePath, SourceMap, render_diagnostics
from engine.errors import PlanValidationError
from engine.model import Plan, Step
from engine.yaml import read_recipe

__all__ = ["recipe_warnings", "step_tool_calls", "tool_call_warnings"]

RULE = "max-tool-calls"
# `${{ range(N) }}`, `range(A, B)`, `range(A, B, STEP)`, maybe `| list`: literal numbers.
_RANGE = re.compile(
    r"^\s*\$\{\{\s*range\(\s*(-?\d{1,12})\s*(?:,\s*(-?\d{1,12})\s*(?:,\s*(-?\d{1,12})\s*)?)?\)"
    r"\s*(?:\|\s*list\s*)?\}\}\s*$"
)


def step_tool_calls(step: Step) -> int:
    """The fewest tool calls `step` makes when it runs to its end (0 when unsure)."""
    if step.tool is None or step.when not in (None, True):
        return 0  # an agent decides its calls; a `when` may skip the step
    items = step.for_each
    if items is None:
        return 1
    if isinstance(items, list):
        return len(items)
    found = _RANGE.match(items)
    if found is None:
        return 0
    args = [int(number) for number in found.groups() if number is not None]
    if len(args) == 3 and args[2] == 0:
        return 0  # range() refuses a step of 0: the step fails, making no call
    count = len(range(*args))
    return count if count <= MAX_RANGE else 0  # the sandbox refuses a larger range


def tool_call_warnings(plan: Plan, source: SourceMap) -> list[Diagnostic]:
    """A warning when the plan's tool steps certainly make more calls than
    `limits.max_tool_calls` allows, located at the limit when the recipe sets it, else at
    the step that makes the most calls."""
    limit = plan.limits.max_tool_calls
    counts: list[tuple[int, NodePath, Step]] = [
        (step_tool_calls(step), (section, index), step)
        for section, steps in (("steps", plan.steps), ("finally", plan.finally_))
        for index, step in enumerate(steps)
    ]
    total = sum(count for count, _, _ in counts)
    if total <= limit:
        return []
    most, at, biggest = max(counts, key=lambda entry: entry[0])
    tools = sum(1 for count, _, _ in counts if count)
    detail = f"{tools} tool step{'s' if tools != 1 else ''}"
    if most > 1:
        detail += f"; '{biggest.id}' makes {most}, one per for_each item"
    path: NodePath = ("steps",)
    key = True
    if "max_tool_calls" in plan.limits.model_fields_set:
        path, key = ("limits", "max_tool_calls"), False
    elif most > 1:
        path, key = (*at, "for_each"), False
    line, column = source.locate(path, key=key)
    return [
        Diagnostic(
            file=source.file,
            line=line,
            column=column,
            rule=RULE,
            message=(
                f"this recipe makes at least {total} tool calls ({detail}), more than "
                f"limits.max_tool_calls allows ({limit}): a run stops when it reaches the limit"
            ),
            hint=f"raise the limit if the calls are meant: limits: {{max_tool_calls: {total}}}",
            severity="warning",
        )
    ]


def recipe_warnings(path: str, plan: Plan) -> tuple[list[Diagnostic], str]:
    """The warnings of the recipe at `path`, validated as `plan`, and them as shown on a
    terminal (empty when there are none). The file is read again only to locate one."""
    if sum(step_tool_calls(step) for step in plan.all_steps()) <= plan.limits.max_tool_calls:
        return [], ""
    try:
        _, source = read_recipe(path)
    except PlanValidationError:  # it changed since: no place to show
        return [], ""
    warnings = tool_call_warnings(plan, source)
    return warnings, render_diagnostics(warnings, source) + "\n" if warnings else ""
