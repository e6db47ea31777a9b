"""What completion reads from a recipe: its step ids and its inputs.

The recipe is read as YAML events by ruamel's parser alone, not loaded and validated (that
would import the plan's models, ~150 ms a TAB): the events become plain data with every
scalar as the text written, and an alias as nothing, so no anchor is expanded and the work
is bounded by the file's size, itself bounded. A `*.json` recipe is read by the JSON
parser, numbers kept as written. A file that does not parse completes nothing; a step or
input that does not look like one is left out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    DocumentEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceStartEvent,
)

__all__ = ["MAX_BYTES", "Input", "Recipe", "read_recipe"]

MAX_BYTES = 1_000_000
"""A larger file completes nothing: a TAB answers at once (recipes are a few kB)."""

_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # engine.model.ID_PATTERN: step ids and inputs
_SECTIONS = ("steps", "finally")
_SHOWN = 60  # characters of a description shown beside a candidate


@dataclass(frozen=True)
class Input:
    """A recipe's input: what it says it is, and the values it takes, if it names them."""

    description: str = ""
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class Recipe:
    """A recipe's step ids (each with its tool) and inputs, in the order written."""

    steps: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, Input] = field(default_factory=dict)

    @classmethod
    def of(cls, data: Any) -> Recipe:
        """What a recipe's (or a plan's) data holds."""
        if not isinstance(data, dict):
            return cls()
        return cls(steps=_steps(data), inputs=_inputs(data.get("inputs")))


def read_recipe(path: Path) -> Recipe:
    """The steps and inputs of the recipe at `path`.

    Raises:
        OSError: it cannot be read.
        ValueError: it is too large, not UTF-8 (a `UnicodeDecodeError`), or not YAML (not
            JSON, for a `*.json` file).
        RecursionError: a JSON recipe nests too deep for the JSON parser.
    """
    with open(path, "rb") as handle:
        raw = handle.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise ValueError(f"{path} is larger than {MAX_BYTES} bytes")
    text = raw.decode("utf-8-sig")
    if path.name.lower().endswith(".json"):  # as `engine.yaml.read_recipe` reads it
        return Recipe.of(json.loads(text, parse_int=str, parse_float=str, parse_constant=str))
    return Recipe.of(_plain(text))


def _plain(text: str) -> Any:
    """The first document of `text` as plain data: scalars as written, aliases as None."""
    stack: list[_Mapping | _Sequence] = []
    done: Any = None
    try:
        for event in YAML(typ="safe", pure=False).parse(text):
            if isinstance(event, MappingStartEvent):
                stack.append(_Mapping())
                continue
            if isinstance(event, SequenceStartEvent):
                stack.append(_Sequence())
                continue
            if isinstance(event, CollectionEndEvent):
                value = stack.pop().value
            elif isinstance(event, ScalarEvent):
                value = event.value
            elif isinstance(event, AliasEvent):
                value = None
            elif isinstance(event, DocumentEndEvent):
                break
            else:
                continue
            if stack:
                stack[-1].add(value)
            else:
                done = value
    except Exception as exc:  # ruamel's errors have no common base but Exception
        raise ValueError(f"not YAML: {exc}") from None
    return done


_NO_KEY = object()  # a mapping's next scalar is a key
_UNUSABLE = object()  # a key that is a list, a mapping or an alias: its value is left out


class _Mapping:
    """A mapping being read: its keys and values come one after the other."""

    def __init__(self) -> None:
        self.value: dict[str, Any] = {}
        self.key: object = _NO_KEY

    def add(self, item: Any) -> None:
        if self.key is _NO_KEY:
            self.key = item if isinstance(item, str) else _UNUSABLE
            return
        if isinstance(self.key, str):
            self.value.setdefault(self.key, item)  # the first of a duplicate key, as loaded
        self.key = _NO_KEY


class _Sequence:
    """A list being read."""

    def __init__(self) -> None:
        self.value: list[Any] = []

    def add(self, item: Any) -> None:
        self.value.append(item)


def _steps(data: dict[str, Any]) -> dict[str, str]:
    steps: dict[str, str] = {}
    for section in _SECTIONS:
        listed = data.get(section)
        for step in listed if isinstance(listed, list) else ():
            if not isinstance(step, dict):
                continue
            step_id, tool = step.get("id"), step.get("tool")
            if isinstance(step_id, str) and _ID.fullmatch(step_id) and step_id not in steps:
                steps[step_id] = _shown(tool) if isinstance(tool, str) else "agent"
    return steps


def _inputs(declared: Any) -> dict[str, Input]:
    if not isinstance(declared, dict):
        return {}
    inputs: dict[str, Input] = {}
    for name, spec in declared.items():
        if not _ID.fullmatch(name):
            continue
        spec = spec if isinstance(spec, dict) else {}
        about = spec.get("description") or spec.get("type") or ""
        values = spec.get("enum")
        if not isinstance(values, list):
            values = ["true", "false"] if spec.get("type") == "boolean" else []
        inputs[name] = Input(
            description=_shown(about) if isinstance(about, str) else "",
            values=tuple(v for v in values if isinstance(v, str) and _shown(v) == v),
        )
    return inputs


def _shown(text: str) -> str:
    """`text` on one line of printable characters, at most `_SHOWN` of them."""
    flat = "".join(c for c in " ".join(text.split()) if c.isprintable())
    return flat if len(flat) <= _SHOWN else flat[: _SHOWN - 1] + "…"
