"""One set of set fields for many pydantic models that set the same fields.

Pydantic gives each model instance a set of the fields it was given (216 bytes for a few
names): 21 MB over a 100,000-step plan, and again over its results. Models that set the
same fields can share one `SharedFields`, which refuses to change; a model about to
change gives itself a set of its own first (`own_fields_set`, called by the models'
`__setattr__` and `model_copy`). It is a `set`, as pydantic's serializer requires.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NoReturn, Self

from pydantic import BaseModel

__all__ = ["MaySharedFields", "SharedFields", "own_fields_set", "share_fields_set", "shared"]


class SharedFields(set[str]):
    """A set of field names shared by models: it does not change."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("a shared set of fields does not change: call own_fields_set first")

    add = discard = remove = pop = clear = update = _refuse
    difference_update = intersection_update = symmetric_difference_update = _refuse
    __ior__ = __iand__ = __isub__ = __ixor__ = _refuse


def share_fields_set(model: BaseModel) -> None:
    """`model`'s set of set fields becomes the one shared by every model that set the
    same fields (up to 1,024 such sets; past that, its own stays)."""
    fields: set[str] = model.__pydantic_fields_set__
    key = frozenset(fields)
    shared = _SHARED.get(key)
    if shared is None:
        if len(_SHARED) >= 1024:
            return
        shared = _SHARED[key] = SharedFields(key)
    object.__setattr__(model, "__pydantic_fields_set__", shared)


def own_fields_set(model: BaseModel) -> None:
    """Before `model` changes: a set of set fields of its own, if it shared one."""
    fields = model.__pydantic_fields_set__
    if type(fields) is SharedFields:
        object.__setattr__(model, "__pydantic_fields_set__", set(fields))


def shared(names: Iterable[str]) -> SharedFields:
    """The shared set of these names."""
    key = frozenset(names)
    found = _SHARED.get(key)
    if found is None:
        found = _SHARED[key] = SharedFields(key)
    return found


_SHARED: dict[frozenset[str], SharedFields] = {}


class MaySharedFields(BaseModel):
    """A model that may share its set of set fields: it takes its own before it changes."""

    def __setattr__(self, name: str, value: Any) -> None:
        own_fields_set(self)
        super().__setattr__(name, value)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        own_fields_set(self)
        return super().model_copy(update=update, deep=deep)
