"""The one call a common step makes, found once and kept with the step.

Most steps of a large plan are a tool call with templated params and nothing else: no
`when`, no `for_each`, no fallback, no retry, no agent. What running one needs (its tool
and params, its templates and where they go, what the sandbox is told of them, its
`confirm`, `timeout`, `idempotent` and `can_fail`) is gathered here into one small object.
Validation finds it while the step is fresh in memory; the run then reads that object and
not the step's many fields, which on a plan of 100,000 steps are long out of the cache.
Steps of one shape share the paths of their templates and what is data among them.
"""

from __future__ import annotations

from typing import Any, Literal

from engine._graph import derived, step_dependencies, step_parsed
from engine.model import Step
from engine.templating import Template, begins_with_template

__all__ = ["StepCall", "step_call"]

Path = tuple[str | int, ...]
_EMPTY: frozenset[Any] = frozenset()
_NONE = object()  # (not looked for yet: a step found not to be common keeps None)


class StepCall:
    """A common step's call. `wheres[i]` is where in the params `templates[i]` goes
    (`engine.templating.render_at` renders them); `data_paths` and `data_literals` are
    what the sandbox is told of them (`CallContext.data_paths`)."""

    __slots__ = (
        "can_fail",
        "confirm",
        "data_literals",
        "data_paths",
        "idempotent",
        "params",
        "templates",
        "timeout",
        "tool",
        "wheres",
    )

    def __init__(
        self, step: Step, tool: str, templates: tuple[Template, ...], shape: Shape
    ) -> None:
        self.tool = tool
        self.params = step.params
        self.templates = templates
        self.wheres, self.data_paths = shape
        self.data_literals = _EMPTY
        for template in templates:
            if template.constants:
                self.data_literals = self.data_literals | template.constants
        self.confirm: Literal["auto", "always", "never"] = step.confirm
        self.timeout = step.timeout
        self.idempotent = step.idempotent
        self.can_fail = step.can_fail


Shape = tuple[tuple[Path, ...], frozenset[Path]]


def step_call(step: Step) -> StepCall | None:
    """`step`'s call, or None if the step needs more than one (a `when`, a `for_each`, a
    fallback, a retry, an agent, a template that does not parse or stands for the whole
    params). Found on first use and kept with the step.

    The call holds the step's templates: once it is found (and the steps the templates
    read), the step no longer keeps them parsed apart (`step_parsed` parses them again if
    asked), which spares a plan of 100,000 common steps 11 MB.
    """
    cache = step.__pydantic_private__  # (read here: a run asks once per step)
    found = _NONE if cache is None else cache.get("_call", _NONE)
    if found is _NONE:
        cache = derived(step)
        found = cache["_call"] = _made(step)
        if found is not None:
            step_dependencies(step)  # (kept: found from the templates before they go)
            del cache["_parsed"]
    return found  # type: ignore[return-value]


def _made(step: Step) -> StepCall | None:
    tool = step.tool
    if (
        tool is None
        or step.fallback is not None
        or step.for_each is not None
        or not (step.when is None or step.when is True)
        or (step.retry is not None and step.retry.attempts != 1)
    ):
        return None
    paths: list[Path] = []
    data: list[bool] = []  # whether the text begins with a template: data, not the author's
    templates: list[Template] = []
    for path, source, template in step_parsed(step):
        if path[0] != "params":
            continue
        if template is None or len(path) == 1:  # (unparsed, or the params one template)
            return None
        paths.append(path)
        # (one whole template begins with one: its text need not be read again)
        data.append(template.expression is not None or begins_with_template(source))
        templates.append(template)
    return StepCall(step, tool, tuple(templates), _shape(tuple(paths), tuple(data)))


def _shape(paths: tuple[Path, ...], data: tuple[bool, ...]) -> Shape:
    """Where the templates go in the params, and which are data: one pair for every step
    of the same shape (while there are few shapes)."""
    key = (paths, data)
    shape = _SHAPES.get(key)
    if shape is None:
        wheres = tuple(path[1:] for path in paths)
        shape = (wheres, frozenset(w for w, d in zip(wheres, data, strict=True) if d))
        if len(_SHAPES) < 4096:
            _SHAPES[key] = shape
    return shape


_SHAPES: dict[tuple[tuple[Path, ...], tuple[bool, ...]], Shape] = {}
