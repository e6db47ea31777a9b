"""What a value looks like before the run, as far as it is certain: shapes read from a
pydantic model (an action's result model) or a JSON Schema (an agent's `output_schema`, a
result field annotated `WithJsonSchema`), and what reading a field or an index of one gives.

A shape is sound, never a guess: it says a read fails (`Missing`) only when the read fails
for every value the model or schema allows. What is not certain is `OPEN`, which accepts
every read: a pydantic model with `extra="allow"` or a custom serializer, `Any`, a JSON
Schema that does not forbid other properties (`additionalProperties: false`), a `$ref`
that does not resolve in the document, a type this module does not know.

Reads follow Jinja's rules for the plain data a step outputs: `x.name` on a mapping is a
dict method when `dict` has one (`items`, `get`), else the key; on a list it is a list
method, else nothing; `x[0]` indexes a list. Reading anything of null (a step skipped, or
an optional field) fails, but that alone is never reported: only a closed object that lacks
the field, or a list read by name.
"""

from __future__ import annotations

import collections.abc
import enum
import functools
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, RootModel, WithJsonSchema
from pydantic.functional_serializers import PlainSerializer, WrapSerializer

__all__ = [
    "OPEN",
    "Kind",
    "Missing",
    "Shape",
    "alternatives",
    "list_of",
    "model_shape",
    "schema_shape",
]

Kind = Literal["string", "integer", "number", "boolean", "null", "array", "object"]
"""The JSON type of a value."""

_MAX_DEPTH = 64  # `$ref` hops and nesting followed in one schema: a self-reference ends
_SEQUENCES = (
    list,
    set,
    frozenset,
    collections.abc.Sequence,
    collections.abc.MutableSequence,
    collections.abc.Set,
    collections.abc.MutableSet,
)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


class Shape:
    """A value nothing is known of: every read is accepted, its kind is unknown."""

    __slots__ = ()

    @property
    def kinds(self) -> frozenset[Kind] | None:
        """The JSON kinds the value can have; None when they are not known."""
        return None

    def read(self, part: str | int) -> Shape | Missing:
        """The shape of `value.part` (`value[part]` for an int), or why it always fails."""
        return OPEN


OPEN = Shape()
"""The shape of a value nothing is known of."""


@dataclass(frozen=True, slots=True)
class Missing:
    """A read that fails for every value of a shape.

    Attributes:
        fields: the fields of the closed object that lacks the one read (None: not an object).
        of_list: the value is a list, read by a name.
        within: the object's shape, to look one level down for the field (a hint).
    """

    fields: tuple[str, ...] | None = None
    of_list: bool = False
    within: Shape | None = None

    @property
    def reported(self) -> bool:
        """Whether the failure is worth reporting: reading null alone is not (a skipped
        step, an optional field), a closed object's missing field and a list read by a
        name are."""
        return self.fields is not None or self.of_list


_NULL_READ = Missing()


@dataclass(frozen=True, slots=True)
class _Scalar(Shape):
    kind: Kind

    @property
    def kinds(self) -> frozenset[Kind] | None:
        return frozenset((self.kind,))

    def read(self, part: str | int) -> Shape | Missing:
        # a string has methods (`upper`) and indexes; only null fails every read
        return _NULL_READ if self.kind == "null" else OPEN


@dataclass(frozen=True, slots=True)
class _Kinds(Shape):
    """A value whose kinds are known (a `const` or `enum` of a schema), not its fields."""

    known: frozenset[Kind]

    @property
    def kinds(self) -> frozenset[Kind] | None:
        return self.known


@dataclass(frozen=True, slots=True, eq=False)
class _Object(Shape):
    """A mapping with known fields; `closed` when it can have no others."""

    names: tuple[str, ...]
    accepted: frozenset[str]
    closed: bool
    field: Callable[[str], Shape]

    @property
    def kinds(self) -> frozenset[Kind] | None:
        return frozenset(("object",))

    def read(self, part: str | int) -> Shape | Missing:
        if isinstance(part, int) or hasattr(dict, part):
            return OPEN  # `d[0]`, or a dict method (`d.items`) before any key
        if part in self.accepted:
            return self.field(part)
        return Missing(self.names, within=self) if self.closed else OPEN


@dataclass(frozen=True, slots=True)
class _Map(Shape):
    """A mapping with any keys, each value of one shape (`dict[str, X]`)."""

    value: Shape

    @property
    def kinds(self) -> frozenset[Kind] | None:
        return frozenset(("object",))

    def read(self, part: str | int) -> Shape | Missing:
        if isinstance(part, int) or hasattr(dict, part):
            return OPEN
        return self.value


@dataclass(frozen=True, slots=True)
class _List(Shape):
    item: Shape

    @property
    def kinds(self) -> frozenset[Kind] | None:
        return frozenset(("array",))

    def read(self, part: str | int) -> Shape | Missing:
        if isinstance(part, int):
            return self.item
        if hasattr(list, part):
            return OPEN  # a list method (`count`, `index`)
        return Missing(of_list=True, within=self.item)


@dataclass(frozen=True, slots=True)
class _Union(Shape):
    """One of several shapes: a read fails only when it fails for each of them."""

    members: tuple[Shape, ...]

    @property
    def kinds(self) -> frozenset[Kind] | None:
        found: set[Kind] = set()
        for member in self.members:
            kinds = member.kinds
            if kinds is None:
                return None
            found |= kinds
        return frozenset(found)

    def read(self, part: str | int) -> Shape | Missing:
        results = [member.read(part) for member in self.members]
        shapes = [r for r in results if isinstance(r, Shape)]
        if shapes:
            return alternatives(shapes)
        missing = [r for r in results if isinstance(r, Missing)]
        fields = [name for m in missing for name in m.fields or ()]
        objects = tuple(m.within for m in missing if m.fields is not None and m.within)
        return Missing(
            tuple(dict.fromkeys(fields)) if any(m.fields is not None for m in missing) else None,
            of_list=any(m.of_list for m in missing),
            within=alternatives(objects) if objects else None,
        )


def alternatives(shapes: Iterable[Shape]) -> Shape:
    """The shape of a value that has one of `shapes` (a step's output or its fallback's)."""
    members: list[Shape] = []
    for shape in shapes:
        if shape is OPEN:
            return OPEN
        more = shape.members if isinstance(shape, _Union) else (shape,)
        members.extend(m for m in more if m not in members)
    if not members:
        return OPEN
    return members[0] if len(members) == 1 else _Union(tuple(members))


def list_of(item: Shape) -> Shape:
    """The shape of a list of `item` (a `for_each` step's outputs)."""
    return _List(item)


# -- pydantic models ----------------------------------------------------------------------


@functools.lru_cache(maxsize=512)
def model_shape(model: type[BaseModel]) -> Shape:
    """The shape of `model.model_dump(mode="json")`: its fields, closed unless the model
    takes extra keys; `OPEN` when a serializer decides what comes out."""
    decorators = model.__pydantic_decorators__
    if issubclass(model, RootModel) or decorators.model_serializers:
        return OPEN
    serialized = {name for d in decorators.field_serializers.values() for name in d.info.fields}
    by_alias = bool(model.model_config.get("serialize_by_alias"))
    annotations: dict[str, tuple[Any, tuple[Any, ...]]] = {}
    names: list[str] = []
    accepted: set[str] = set()
    for name, info in model.model_fields.items():
        if info.exclude is True:
            continue  # never dumped
        alias = info.serialization_alias or info.alias
        shown = alias if by_alias and alias else name
        names.append(shown)
        # both names are read: which one the dump has depends on how it is called
        for key in [name] if not alias or alias == name else [name, alias]:
            accepted.add(key)
            annotations[key] = (
                (Any, ())
                if "*" in serialized or name in serialized  # a serializer decides
                else (info.annotation, tuple(info.metadata))
            )
    for name, computed in model.model_computed_fields.items():
        shown = computed.alias if by_alias and computed.alias else name
        names.append(shown)
        alias = computed.alias
        for key in [name] if not alias or alias == name else [name, alias]:
            accepted.add(key)
            annotations[key] = (computed.return_type, ())
    cache: dict[str, Shape] = {}

    def field(name: str) -> Shape:
        shape = cache.get(name)
        if shape is None:
            annotation, metadata = annotations[name]
            shape = cache[name] = _annotation_shape(annotation, metadata, 0)
        return shape

    closed = model.model_config.get("extra") != "allow"
    return _Object(tuple(names), frozenset(accepted), closed, field)


def _annotation_shape(annotation: Any, metadata: tuple[Any, ...], depth: int) -> Shape:
    if depth > _MAX_DEPTH:
        return OPEN
    for meta in metadata:
        if isinstance(meta, WithJsonSchema) and isinstance(meta.json_schema, dict):
            return schema_shape(meta.json_schema)  # what the field holds, said by a schema
        if isinstance(meta, PlainSerializer | WrapSerializer):
            return OPEN
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is typing.Annotated:
        return _annotation_shape(args[0], (*metadata, *args[1:]), depth + 1)
    if annotation is Any or annotation is object:
        return OPEN
    if annotation is None or annotation is type(None):
        return _Scalar("null")
    if origin is Union or origin is types.UnionType:
        return alternatives(_annotation_shape(arg, (), depth + 1) for arg in args)
    if origin is Literal:
        return _literal_kinds(args)
    if isinstance(annotation, type) and origin is None:
        return _class_shape(annotation, depth)
    if origin is tuple:
        item = args[0] if len(args) == 2 and args[1] is Ellipsis else Any
        return _List(_annotation_shape(item, (), depth + 1))
    if origin in _SEQUENCES:
        return _List(_annotation_shape(args[0], (), depth + 1) if args else OPEN)
    if origin in _MAPPINGS:
        return _Map(_annotation_shape(args[1], (), depth + 1) if len(args) == 2 else OPEN)
    return OPEN


def _class_shape(cls: type, depth: int) -> Shape:
    if issubclass(cls, enum.Enum):
        return OPEN  # dumped as its value, of any kind
    if issubclass(cls, bool):
        return _Scalar("boolean")
    if issubclass(cls, str):
        return _Scalar("string")
    if issubclass(cls, int):
        return _Scalar("integer")
    if issubclass(cls, float):
        return _Scalar("number")
    if issubclass(cls, BaseModel):
        return model_shape(cls)
    if cls in (list, tuple, set, frozenset):
        return _List(OPEN)
    if cls is dict:
        return _Map(OPEN)
    return OPEN


def _literal_kinds(values: Iterable[Any]) -> Shape:
    kinds: set[Kind] = set()
    for value in values:
        kind = _kind_of(value)
        if kind is None:
            return OPEN
        kinds.add(kind)
    if kinds == {"null"}:
        return _Scalar("null")
    return _Kinds(frozenset(kinds)) if kinds else OPEN


def _kind_of(value: Any) -> Kind | None:
    if isinstance(value, enum.Enum):
        return None
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return None


# -- JSON Schema --------------------------------------------------------------------------


def schema_shape(schema: Any, root: Any = None, depth: int = 0) -> Shape:
    """The shape of a value valid against the JSON Schema `schema` (whose `#` references
    resolve in `root`, by default `schema` itself).

    Every keyword narrows what is valid, so a shape drawn from some of them holds: `type`,
    `properties` with `additionalProperties: false`, `items`, `anyOf`/`oneOf`, `const` and
    `enum`, and local `$ref`s are read; the rest (`allOf`, `if`, `not`, ...) is left out.
    """
    root = schema if root is None else root
    if depth > _MAX_DEPTH or not isinstance(schema, dict):
        return OPEN  # `true`, `false`, or a schema too deep to follow
    ref = schema.get("$ref")
    if ref is not None:
        target = _resolve(root, ref)
        return OPEN if target is None else schema_shape(target, root, depth + 1)
    for key in ("anyOf", "oneOf"):
        members = schema.get(key)
        if isinstance(members, list) and members:
            return alternatives(schema_shape(m, root, depth + 1) for m in members)
    if "const" in schema:
        return _literal_kinds([schema["const"]])
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return _literal_kinds(schema["enum"])
    types_ = schema.get("type")
    if isinstance(types_, str):
        return _typed(schema, types_, root, depth)
    if isinstance(types_, list) and types_ and all(isinstance(t, str) for t in types_):
        return alternatives(_typed(schema, t, root, depth) for t in types_)
    return OPEN  # without a type, `properties` and the rest say nothing of other kinds


def _typed(schema: dict[str, Any], kind: str, root: Any, depth: int) -> Shape:
    if kind in ("string", "integer", "number", "boolean", "null"):
        return _Scalar(typing.cast(Kind, kind))
    if kind == "array":
        items = schema.get("items")
        if "prefixItems" in schema or not isinstance(items, dict):
            return _List(OPEN)
        return _List(schema_shape(items, root, depth + 1))
    if kind != "object":
        return OPEN
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    extra = schema.get("additionalProperties", True)
    if not properties and isinstance(extra, dict) and "patternProperties" not in schema:
        return _Map(schema_shape(extra, root, depth + 1))
    closed = extra is False and "patternProperties" not in schema

    def field(name: str) -> Shape:
        return schema_shape(properties[name], root, depth + 1)

    names = tuple(str(name) for name in properties)
    return _Object(names, frozenset(names), closed, field)


def _resolve(root: Any, ref: Any) -> Any:
    """The subschema a local reference (`#/$defs/Hit`) points at, or None."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    node = root
    for raw in ref[1:].split("/")[1:] if ref != "#" else ():
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node
