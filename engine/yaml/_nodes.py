"""What both loaders share: the event parser, scalar values, the caps of `engine.limits`
and the diagnostics for anchors and keys."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.composer import ComposerError
from ruamel.yaml.resolver import VersionedResolver

from engine.diagnostics import Diagnostic, SourceMap
from engine.limits import MAX_ALIAS_NODES, MAX_DEPTH, MAX_NODES

_INT = re.compile(r"^[-+]?[0-9][0-9_]*$")
_SPECIAL_FLOATS = {".inf": "inf", "+.inf": "inf", "-.inf": "-inf", ".nan": "nan"}
_TAG = "tag:yaml.org,2002:"
STR = _TAG + "str"


class OnceResolver(VersionedResolver):
    """Looks the document's YAML version up once.

    ruamel asks for it on every scalar, and with the C parser each ask raises and catches
    two AttributeErrors: a third of the parse time of a large recipe. The version is fixed
    by the time the first scalar is resolved (a `%YAML` directive precedes the document).
    """

    _table: Any = None

    @property
    def versioned_resolver(self) -> Any:
        if self._table is None:
            self._table = VersionedResolver.versioned_resolver.fget(self)  # type: ignore[attr-defined]  # a property
        return self._table


def event_parser(text: str) -> tuple[Any, Any]:
    """ruamel's parser over `text` (in C when it can) and what resolves its plain scalars'
    tags. The caller disposes of the parser."""
    yaml = YAML(typ="safe", pure=False)
    yaml.Resolver = OnceResolver
    loader, parser = yaml.get_constructor_parser(text)
    # With the C parser one object parses and resolves; the pure parser has a resolver apart.
    resolver = loader if hasattr(loader, "resolve") else yaml.resolver
    return parser, resolver


class LimitExceeded(Exception):
    """A cap of `engine.limits` was passed while loading, at `mark`."""

    def __init__(self, mark: Any, rule: str, message: str, hint: str) -> None:
        super().__init__(message)
        self.mark, self.rule, self.message, self.hint = mark, rule, message, hint

    def diagnostic(self, file: str) -> Diagnostic:
        line, column = self.mark.line + 1, self.mark.column + 1
        return Diagnostic(
            file=file,
            line=line,
            column=column,
            rule=self.rule,
            message=self.message,
            hint=self.hint,
        )


def too_many(mark: Any) -> LimitExceeded:
    return LimitExceeded(
        mark,
        "yaml-too-large",
        f"the document holds more than {MAX_NODES:,} YAML nodes (aliases expanded)",
        "split it into smaller files",
    )


def too_deep(mark: Any, where: str = "") -> LimitExceeded:
    return LimitExceeded(
        mark,
        "too-deep",
        f"lists and mappings nest more than {MAX_DEPTH} levels deep here{where}",
        "flatten this value: recipes, policies and plans need only a few levels",
    )


def too_many_aliased(mark: Any, name: str, size: int) -> LimitExceeded:
    return LimitExceeded(
        mark,
        "yaml-too-large",
        f"YAML aliases expand to more than {MAX_ALIAS_NODES:,} nodes "
        f"(here '*{name}' adds {size:,})",
        "each alias is a full copy of its anchor, and aliases of aliases multiply: "
        "use fewer aliases, or write the values out",
    )


class Caps:
    """The caps of `engine.limits`, counted as the document's nodes will be expanded.

    `size` is the number of nodes a subtree expands to (aliases copied out), `height` the
    number of nested lists/mappings in it. An alias adds its anchor's size and puts its
    anchor's height under the current depth, so caps hold for the data made of the text.
    """

    def __init__(self) -> None:
        self.nodes = 0
        self.aliased = 0

    def count(self, mark: Any, size: int = 1) -> None:
        self.nodes += size
        if self.nodes > MAX_NODES:
            raise too_many(mark)

    def open(self, mark: Any, depth: int) -> None:
        """A list or mapping starts at `depth`."""
        if depth >= MAX_DEPTH:
            raise too_deep(mark)
        self.count(mark)

    def alias(self, mark: Any, name: str, size: int, height: int, depth: int) -> None:
        """An alias of an anchor of `size` nodes and `height` levels, at `depth`."""
        if depth + height > MAX_DEPTH:
            raise too_deep(mark, f" once alias '*{name}' is expanded")
        self.aliased += size
        if self.aliased > MAX_ALIAS_NODES:
            raise too_many_aliased(mark, name, size)
        self.count(mark, size)


def no_anchor(name: str, open_anchors: Iterable[str | None], mark: Any) -> ComposerError:
    """An alias of `name`, which no node before it anchors."""
    if name in open_anchors:
        return ComposerError(
            None, None, f"alias '*{name}' is inside its own anchor (a cycle)", mark
        )
    return ComposerError(None, None, "found undefined alias", mark)


def anchored_twice(name: str, first: Any, mark: Any) -> ComposerError:
    return ComposerError(
        None, None, f"duplicate anchor '&{name}' (first defined on line {first.line + 1})", mark
    )


def scalar_value(tag: str, value: str, style: str | None) -> Any:
    """A scalar's data: text when quoted or tagged with a tag of its own, else by its tag."""
    if style or not tag.startswith(_TAG):
        return value
    kind = tag[len(_TAG) :]
    if kind == "null":
        return None
    if kind == "bool":
        return value.lower() == "true"
    if kind == "int":
        cleaned = value.replace("_", "")
        if _INT.match(value):
            return int(cleaned, 10)
        try:
            return int(cleaned, 0)
        except ValueError:
            return value
    if kind == "float":
        special = _SPECIAL_FLOATS.get(value.lower())
        try:
            return float(special or value.replace("_", ""))
        except ValueError:
            return value
    return value


def merge_key(file: str, line: int, column: int) -> Diagnostic:
    return Diagnostic(
        file=file,
        line=line,
        column=column,
        rule="merge-key",
        message="YAML merge keys ('<<') are not supported",
        hint="write the keys out, or use YAML anchors per value",
    )


def duplicate_key(
    file: str,
    line: int,
    column: int,
    key: str,
    first: int,
    hint: str = "remove one of them; YAML would silently keep only the last",
) -> Diagnostic:
    return Diagnostic(
        file=file,
        line=line,
        column=column,
        rule="duplicate-key",
        message=f"duplicate key '{key}' (first defined on line {first})",
        hint=hint,
    )


def complex_key(source: SourceMap, line: int, column: int) -> Diagnostic:
    """A key that is a list or mapping: most often an unquoted `{{`."""
    text = source.lines[line - 1] if line <= len(source.lines) else ""
    if "{{" in text:
        return Diagnostic(
            file=source.file,
            line=line,
            column=column,
            rule="unquoted-template",
            message="unquoted '{{': YAML reads it as a nested mapping, not a template",
            hint="write templates as '${{ ... }}' and quote them, "
            'e.g. path: "${{ inputs.file }}"',
        )
    return Diagnostic(
        file=source.file,
        line=line,
        column=column,
        rule="complex-key",
        message="mapping keys must be plain strings",
    )
