"""Checking what templates read of steps' outputs against what the actions declare: a field
an output cannot have (`steps.a.output.contents` where `fs.read` gives `content`), and a
param whose whole value is a read of a type the param cannot take (a number where a string
is required), of a step's output or of an input (`${{ inputs.n }}` of an integer input).

What a step outputs is known when its action declares a result model (`Action.result_model`,
which may describe a field by a JSON Schema, as an MCP tool's `outputSchema`) or its agent
an `output_schema`; a fallback's output counts too (the output is the step's own or its
fallback's), and a `for_each` step outputs a list, one per item. Anything else is not
checked (`engine.validation._shapes.OPEN`). A template that tests what it reads (`is
defined`, `| default(...)`, any `is` test) is not checked either: it may mean to probe.
An input is of its declared type (`-i` values are parsed by it), or null when its
default is null.
"""

from __future__ import annotations

import functools
import re
import typing
from collections.abc import Iterable, Mapping, Sequence, Set
from typing import Any

from pydantic import BaseModel, BeforeValidator, PlainValidator, WrapValidator

from engine.capability import Registry
from engine.diagnostics import NodePath, did_you_mean
from engine.model import AgentSpec, FallbackAction, InputSpec, Step
from engine.templating import Reference, Template
from engine.validation._pydantic import dotted
from engine.validation._report import Report
from engine.validation._shapes import (
    OPEN,
    Kind,
    Missing,
    Shape,
    alternatives,
    list_of,
    model_shape,
    schema_shape,
)

__all__ = ["Outputs"]

# The code inside a template's `${{ }}` and `${% %}`, where a probe would be written.
_CODE = re.compile(r"\$\{[{%](.*?)[}%]\}", re.S)
_PROBE = re.compile(r"\|\s*(?:default|d)\b|\bis\b")  # `| default(...)`, `is defined`
# A plain read: names, `[0]` and `['key']`, nothing computed.
_PLAIN = re.compile(r"^\s*[A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[\d+\]|\[(['\"])\w+\1\])*\s*$")
_KIND_NAMES: dict[Kind, str] = {
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "array": "a list",
    "object": "an object",
    "null": "null",
    "string": "a string",
}
_COERCING = (BeforeValidator, PlainValidator, WrapValidator)


class Outputs:
    """The steps' output shapes, each found when a template first reads it.

    Args:
        steps: every step of the plan, `finally` steps included.
        registry: the bound registry (with the tools families discovered).
        inputs: the plan's declared inputs, whose types templates read.
    """

    def __init__(
        self,
        steps: Sequence[Step],
        registry: Registry,
        inputs: Mapping[str, InputSpec] | None = None,
    ) -> None:
        self._steps = steps
        self._registry = registry
        self._inputs = inputs or {}
        self._by_id: dict[str, Step | None] | None = None
        self._shapes: dict[str, Shape] = {}
        self._tools: dict[str | None, Shape] = {}
        self._params: dict[tuple[str | None, NodePath], frozenset[Kind]] = {}

    def shape(self, step_id: str) -> Shape:
        """What step `step_id` outputs (`OPEN` when that is not known)."""
        shape = self._shapes.get(step_id)
        if shape is None:
            shape = self._shapes[step_id] = self._find(step_id)
        return shape

    def check_read(self, report: Report, path: NodePath, ref: Reference, source: str) -> None:
        """Report `ref` (`steps.X.output.FIELD...`) when it reads what X's output cannot
        have: a field of a closed object it lacks, or a name of a list."""
        shape = self.shape(str(ref[1]))
        for at in range(3, len(ref)):
            if shape is OPEN:
                return
            found = shape.read(ref[at])
            if isinstance(found, Missing):
                if found.reported and not _probes(source):
                    self._missing(report, path, ref, at, found)
                return
            shape = found

    def check_param(
        self,
        report: Report,
        path: NodePath,
        step: Step,
        sub: NodePath,
        template: Template,
        visible: Set[str],
    ) -> None:
        """Report a param whose whole value is one read of a step's output (`"${{
        steps.a.output.size }}"`) or of an input (`"${{ inputs.n }}"`) of a type the param
        cannot take. `sub` is the template's path in the step (a param's: `("params", ...)`,
        `("fallback", "params", ...)`); `visible` the steps it may read."""
        if sub[0] == "params":
            tool = step.tool
        elif sub[:2] == ("fallback", "params") and isinstance(step.fallback, FallbackAction):
            tool = step.fallback.tool
        else:
            return
        # First what the param takes, once per tool and param: most take other things than
        # strings, and the steps reading outputs need not be looked at then.
        key = (tool, sub)
        accepted = self._params.get(key)
        if accepted is None:
            accepted = self._params[key] = self._param_kinds(tool, sub)
        if not accepted or template.expression is None:
            return
        ref = template.references[0]
        if len(ref) >= 3 and ref[0] == "steps" and ref[2] == "output" and ref[1] in visible:
            shape, parts = self.shape(str(ref[1])), ref[3:]
        elif len(ref) >= 2 and ref[0] == "inputs" and ref[1] in self._inputs:
            shape, parts = _input_shape(self._inputs[str(ref[1])]), ref[2:]
        else:
            return
        for part in parts:
            found = OPEN if shape is OPEN else shape.read(part)
            if not isinstance(found, Shape):
                return  # reported as a missing field, or reading null
            shape = found
        kinds = shape.kinds
        if kinds is None or kinds & accepted or not _PLAIN.match(template.expression):
            return  # a value that may fit, or computed (`| string`): its type is not read
        at = sub[1:] if sub[0] == "params" else sub[2:]
        expression = template.expression.strip()
        what = " or ".join(_KIND_NAMES[kind] for kind in sorted(kinds))
        fix = "tojson" if kinds & {"array", "object"} else "string"
        hint = f'convert it: "${{{{ {expression} | {fix} }}}}"'
        if ref[0] == "inputs" and len(ref) == 2:
            hint += f", or declare input '{ref[1]}' with type: string"
        report(
            (*path, *sub),
            "bad-params",
            f"{tool} param '{dotted(at)}' takes a string, but {expression} is {what}",
            hint,
        )

    def _param_kinds(self, tool: str | None, sub: NodePath) -> frozenset[Kind]:
        """The kinds the param at `sub` of `tool` takes when it takes only strings (and
        maybe null); empty when it may take others."""
        action = self._registry.get(tool) if tool else None
        at = sub[1:] if sub[0] == "params" else sub[2:]
        if action is None or not at:
            return frozenset()
        accepted = _accepts(action.params_model, at)
        return accepted if accepted is not None and "string" in accepted else frozenset()

    # -- what a step outputs --------------------------------------------------------------

    def _find(self, step_id: str) -> Shape:
        if self._by_id is None:
            self._by_id = {}
            for each in self._steps:
                # an id used twice is reported apart; which step it reads is not known
                self._by_id[each.id] = None if each.id in self._by_id else each
        step = self._by_id.get(step_id)
        if step is None:
            return OPEN
        shape = self._action(step.tool, step.agent)
        if isinstance(step.fallback, FallbackAction):
            shape = alternatives((shape, self._action(step.fallback.tool, step.fallback.agent)))
        elif step.fallback is not None:
            shape = OPEN  # natural-language instructions: an agent's answer
        return list_of(shape) if step.for_each is not None else shape

    def _action(self, tool: str | None, agent: AgentSpec | None) -> Shape:
        if agent is not None:
            return OPEN if agent.output_schema is None else schema_shape(agent.output_schema)
        shape = self._tools.get(tool)
        if shape is None:
            action = self._registry.get(tool) if tool else None
            model = action.result_model if action is not None else None
            shape = self._tools[tool] = OPEN if model is None else model_shape(model)
        return shape

    def _missing(
        self, report: Report, path: NodePath, ref: Reference, at: int, missing: Missing
    ) -> None:
        shown = _shown(ref[:at])
        name = str(ref[at])
        if missing.of_list:
            item = missing.within
            found = item.read(name) if item is not None else OPEN
            index = f"{shown}[0].{name}" if isinstance(found, Shape) else f"{shown}[0]"
            step = (self._by_id or {}).get(str(ref[1]))
            fanned = at == 3 and step is not None and step.for_each is not None
            what = "the output of a for_each step, one per item" if fanned else "a list"
            report(
                path,
                "bad-reference",
                f"{shown} is {what}, so it has no field '{name}'",
                f"index it, as in ${{{{ {index} }}}}, or loop over it",
            )
            return
        fields = missing.fields or ()
        whose = self._whose(str(ref[1])) if at == 3 else None
        listed = ", ".join(fields) if fields else "no fields"
        gives = f"{whose} gives {listed}" if whose else f"it has {listed}"
        hint = did_you_mean(name, fields) or _deeper(missing.within, fields, name)
        if hint is None and fields:
            hint = f"read one of its fields, as in ${{{{ {shown}.{fields[0]} }}}}"
        report(path, "bad-reference", f"{shown} has no field '{name}' ({gives})", hint)

    def _whose(self, step_id: str) -> str | None:
        """What makes the step's output, as a message names it: `fs.read`, or `fs.read or
        http.request` with a fallback."""
        step = (self._by_id or {}).get(step_id)
        if step is None:
            return None
        makers = [step.tool or "the agent"]
        if isinstance(step.fallback, FallbackAction):
            makers.append(step.fallback.tool or "the fallback's agent")
        return " or ".join(dict.fromkeys(makers))


def _input_shape(spec: InputSpec) -> Shape:
    """What `inputs.NAME` holds: a value of the input's type (an `-i` value is parsed by
    it, a Python value checked against it), or null when its default is null."""
    kinds: list[str] = [spec.type]
    if not spec.required and spec.default is None:
        kinds.append("null")
    return schema_shape({"type": kinds})


def _probes(source: str) -> bool:
    """Whether the template tests what it reads, so a missing field may be what it means."""
    return any(_PROBE.search(code) for code in _CODE.findall(source))


def _shown(ref: Iterable[str | int]) -> str:
    text = ""
    for part in ref:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _deeper(within: Shape | None, fields: tuple[str, ...], name: str) -> str | None:
    """`did you mean 'structured.hits'?`: the field is one of a field's own fields."""
    if within is None:
        return None
    for field in fields:
        inner = within.read(field)
        if isinstance(inner, Shape) and _declares(inner, name):
            return f"did you mean '{field}.{name}'?"
    return None


def _declares(shape: Shape, name: str) -> bool:
    accepted = getattr(shape, "accepted", None)
    if isinstance(accepted, frozenset):
        return name in accepted
    return any(_declares(m, name) for m in getattr(shape, "members", ()))


def _accepts(model: type[BaseModel], at: NodePath) -> frozenset[Kind] | None:
    """The kinds the param at `at` takes, when it certainly takes no others (a string, or a
    string or null); None when that is not certain (a validator or setting may convert)."""
    schema = _schema(model)
    if schema is None or _converts(model, at[0]):
        return None
    node: Any = schema
    for part in at:
        if not isinstance(node, dict) or "$ref" in node:
            return None
        if isinstance(part, str):
            properties = node.get("properties")
            if not isinstance(properties, dict) or part not in properties:
                return None
            node = properties[part]
        else:
            node = node.get("items")
    return _strings(node)


def _strings(node: Any) -> frozenset[Kind] | None:
    """`{"string"}` (or with `"null"`) when the schema `node` takes only those; else None."""
    if not isinstance(node, dict) or "$ref" in node:
        return None
    kind = node.get("type")
    kinds = [kind] if isinstance(kind, str) else kind
    if isinstance(kinds, list) and kinds and set(kinds) <= {"string", "null"}:
        return frozenset(typing.cast(list[Kind], kinds))
    members = node.get("anyOf") or node.get("oneOf")
    if isinstance(members, list) and members:
        found: set[Kind] = set()
        for member in members:
            inner = _strings(member)
            if inner is None:
                return None
            found |= inner
        return frozenset(found)
    values = node.get("enum", [node["const"]] if "const" in node else None)
    if isinstance(values, list) and values and all(v is None or isinstance(v, str) for v in values):
        return frozenset("null" if v is None else "string" for v in values)
    return None


@functools.lru_cache(maxsize=512)
def _schema(model: type[BaseModel]) -> dict[str, Any] | None:
    try:
        schema = model.model_json_schema()
    except Exception:  # a model pydantic cannot describe: its params are not checked here
        return None
    return schema if isinstance(schema, dict) else None


def _converts(model: type[BaseModel], name: str | int) -> bool:
    """Whether the model may turn a value of another type into a string for param `name`:
    a validator that runs before its type's (before, plain, wrap), on it or on the whole
    model, or `coerce_numbers_to_str`."""
    if model.model_config.get("coerce_numbers_to_str"):
        return True
    decorators = model.__pydantic_decorators__
    if any(d.info.mode in ("before", "wrap") for d in decorators.model_validators.values()):
        return True
    for d in decorators.field_validators.values():
        if d.info.mode != "after" and (name in d.info.fields or "*" in d.info.fields):
            return True
    info = model.model_fields.get(str(name))
    if info is None:
        return bool(model.model_fields)  # a model of fields that lacks it; else a schema's
    return _coercing(info.metadata) or _coercing_type(info.annotation)


def _coercing(metadata: Iterable[Any]) -> bool:
    for meta in metadata:
        if isinstance(meta, _COERCING) or getattr(meta, "coerce_numbers_to_str", False):
            return True
        if _coercing(getattr(meta, "metadata", ())):  # a FieldInfo inside Annotated
            return True
    return False


def _coercing_type(annotation: Any, depth: int = 0) -> bool:
    if depth > 16:
        return True
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated and _coercing(args[1:]):
        return True
    return any(_coercing_type(arg, depth + 1) for arg in args)
