"""A value tree rendered by placing each template's value at its path: what a step whose
templates were found (and parsed) at validation needs, with no renderer built per step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from engine.templating._limits import budget

__all__ = ["render_at"]

Path = tuple[str | int, ...]


class Template(Protocol):
    """What is asked of a template here (`engine.templating.Template`)."""

    @property
    def is_path(self) -> bool: ...

    def render(self, context: Mapping[str, Any]) -> Any: ...


def render_at(
    value: Any,
    wheres: Sequence[Path],
    templates: Sequence[Template],
    context: Mapping[str, Any],
) -> Any:
    """`value` (dicts and lists) with each template evaluated and put at its path
    (`templates[i]` at `wheres[i]`): what `compile_value(value).render(context)` gives. Each
    container on a template's path is a new one; everything else is `value`'s own. The
    templates share one time budget, unless each is a plain reference (walked, never
    evaluated by Jinja).

    Raises:
        TemplateError: a template failed.
    """
    if not templates:
        return value
    for template in templates:  # (a loop, not all() of a generator: a frame less)
        if not template.is_path:
            with budget():
                return _placed(value, wheres, templates, context)
    return _placed(value, wheres, templates, context)


def _placed(
    value: Any,
    wheres: Sequence[Path],
    templates: Sequence[Template],
    context: Mapping[str, Any],
) -> Any:
    root = value.copy()
    copied: set[int] | None = None  # the containers copied so far (made when one is)
    for path, template in zip(wheres, templates, strict=True):
        if len(path) == 1:  # (a key of the params themselves, the usual case)
            root[path[0]] = template.render(context)
            continue
        if copied is None:
            copied = {id(root)}
        node = root
        for key in path[:-1]:
            child = node[key]
            if id(child) not in copied:
                child = node[key] = child.copy()
                copied.add(id(child))
            node = child
        node[path[-1]] = template.render(context)
    return root
