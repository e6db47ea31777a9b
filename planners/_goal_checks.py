"""Checks of a planned plan against its goal: what validation cannot know, because a
hand-written recipe has no goal to answer to.

A small model writes plans that are valid and sure to "succeed" while doing something else:
its prompt's example copied (`goal-copies-example`), a placeholder where the text should
be (`placeholder`), none of the goal's paths used, or a file the goal asks for that no step
makes (`goal-path-unused`). Each is a problem the planner sends back to repair, like a
validation error; a plan still failing them falls back to an agent that must act.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from engine.diagnostics import Diagnostic
from engine.model import Plan

__all__ = ["goal_paths", "plan_problems"]

_PATH = re.compile(
    r"(?<![\w/.:-])((?:[\w.-]+/)+[\w.-]*\w|[\w-]+\.(?:txt|md|json|ya?ml|csv|py|js|ts|html|log"
    r"|ini|toml|cfg|sh|xml|sql))(?![\w/])"
)
"""A path a goal names: with a folder (`out/hello.txt`, `src/`), or a file with a common
extension (`notes.txt`). Not a URL's (`https://host/x`)."""

_PLACEHOLDER = re.compile(
    r"\s*(?:\.{2,}|…+|<[a-z_][\w -]{0,38}>|\{\s*[a-z_][\w ]{0,38}\}|\[[a-z_][\w -]{0,38}\]"
    r"|todo|tbd|fixme|placeholder|x{3,}|(?:your|the)[ _-]\w+(?:[ _-]\w+)?[ _-]here)\s*",
    re.IGNORECASE,
)
"""A value standing in for the text a model did not write: `...`, `<content>`, `{text}`,
`[file]`, `TODO`, `your_text_here`."""


def goal_paths(goal: str) -> list[str]:
    """The paths `goal` names, in order, once each."""
    return list(dict.fromkeys(_PATH.findall(goal)))


def plan_problems(
    goal: str,
    plan: Plan,
    file: str,
    *,
    roots: Sequence[Path] = (),
    example: Sequence[dict[str, Any]] = (),
    whole: bool = True,
) -> list[Diagnostic]:
    """What makes `plan` not a plan for `goal`: a step copied from the prompt's `example`
    steps, a placeholder param, the goal's paths unused. `roots`: the folders the goal's
    paths are relative to (a path under none of them is one the plan must make). A plan
    not `whole` (the steps of a streaming answer so far) is checked step by step only."""
    problems = [
        *_copied(plan, file, example),
        *_placeholders(plan, file, goal.casefold()),
    ]
    if problems or not whole:
        return problems
    return _unused_paths(goal, plan, file, roots)


def _copied(plan: Plan, file: str, example: Sequence[dict[str, Any]]) -> Iterator[Diagnostic]:
    shown = {_call(step.get("tool"), step.get("params")) for step in example}
    for step in plan.steps:
        if step.tool is not None and _call(step.tool, step.params) in shown:
            yield _problem(
                file,
                "goal-copies-example",
                f'step "{step.id}" is the prompt\'s example step, not a step for this goal',
                "write the steps this goal needs, with its own paths and text",
            )


def _call(tool: Any, params: Any) -> str:
    return json.dumps([tool, params], sort_keys=True, default=repr)


def _placeholders(plan: Plan, file: str, goal: str) -> Iterator[Diagnostic]:
    """Params that stand for a value, but the goal's own words ("find the TODOs")."""
    for step in plan.all_steps():
        for name, value in _strings(step.params, ""):
            if _PLACEHOLDER.fullmatch(value) and value.strip().casefold() not in goal:
                yield _problem(
                    file,
                    "placeholder",
                    f'step "{step.id}": param {name} is a placeholder ({value.strip()!r}), '
                    "not a value",
                    "write the real value, or read it from an earlier step with "
                    '"${{ steps.ID.output.FIELD }}"',
                )


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{where}[{index}]")


def _unused_paths(goal: str, plan: Plan, file: str, roots: Sequence[Path]) -> list[Diagnostic]:
    """A problem when the goal names paths and no step uses any of them (in its params, or
    an agent's goal), or names one that does not exist and no step uses it: a file the goal
    asks for that nothing makes. (An existing path may be reached another way: a search, a
    glob, a listing.)"""
    paths = goal_paths(goal)
    used = json.dumps(
        [[step.params, step.agent.goal if step.agent else None] for step in plan.all_steps()],
        ensure_ascii=False,
    )
    unused = [path for path in paths if path not in used]
    if not unused:
        return []
    if len(unused) < len(paths):  # some are used: only a file still to be made must be
        unused = [path for path in unused if not any((root / path).exists() for root in roots)]
        if not unused:
            return []
        named = ", ".join(repr(path) for path in unused)
        return [
            _problem(
                file,
                "goal-path-unused",
                f"the goal asks for {named}, which does not exist yet, and no step makes it",
                f"add the step that writes {named}, with the goal's own path",
            )
        ]
    named = ", ".join(repr(path) for path in paths)
    return [
        _problem(
            file,
            "goal-path-unused",
            f"the goal names {named}, but no step uses any of them: this plan does not do "
            "what the goal asks",
            "use the goal's own paths and text in the steps' params",
        )
    ]


def _problem(file: str, rule: str, message: str, hint: str) -> Diagnostic:
    return Diagnostic(file=file, line=1, column=1, rule=rule, message=message, hint=hint)
