"""Load YAML recipes into plain data plus a `SourceMap`, then into a validated `Plan`.

ruamel.yaml composes the node tree (with the C parser when it is installed, ~6x faster on
large recipes); this module turns nodes into data itself so that duplicate keys and an
unquoted `{{` are reported with their positions instead of stopping at the first problem.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.resolver import VersionedResolver

from capabilities import Registry
from engine._gc import collector_paused
from engine.diagnostics import Diagnostic, NodePath, SourceMap
from engine.errors import RecipeSyntaxError
from engine.model import Plan
from engine.validation import validate_plan

__all__ = ["load_recipe", "parse_recipe_text", "read_recipe"]

MAX_RECIPE_BYTES = 20_000_000

_INT = re.compile(r"^[-+]?[0-9][0-9_]*$")
_SPECIAL_FLOATS = {".inf": "inf", "+.inf": "inf", "-.inf": "-inf", ".nan": "nan"}
_TAG = "tag:yaml.org,2002:"


def load_recipe(path: str | Path, registry: Registry) -> tuple[Plan, SourceMap]:
    """Read, parse and validate a recipe file.

    Raises:
        RecipeSyntaxError: the file is unreadable, binary, not YAML, or has duplicate keys.
        PlanValidationError: the recipe has problems; every one of them is listed.
    """
    data, source = read_recipe(path)
    base_dir = Path(path).resolve().parent
    return validate_plan(data, source, registry, base_dir=base_dir), source


def read_recipe(path: str | Path) -> tuple[Any, SourceMap]:
    """Read a recipe file into plain data and a `SourceMap`."""
    name = str(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_RECIPE_BYTES + 1)
    except OSError as exc:
        raise _syntax(name, "unreadable", f"cannot read recipe: {exc.strerror or exc}") from exc
    if len(raw) > MAX_RECIPE_BYTES:
        raise _syntax(name, "too-large", f"recipe is larger than {MAX_RECIPE_BYTES} bytes")
    if b"\x00" in raw:
        raise _syntax(name, "binary-file", "this is a binary file, not a YAML recipe")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _syntax(
            name, "encoding", f"recipe is not UTF-8 text (bad byte at offset {exc.start})"
        ) from exc
    return parse_recipe_text(text, name)


def parse_recipe_text(text: str, file: str = "<recipe>") -> tuple[Any, SourceMap]:
    """Parse YAML text into plain data and a `SourceMap`.

    Duplicate keys (the first one is kept) and an unquoted `{{` do not stop parsing: they
    are left in `source.problems`, which `validate_plan` reports with every other problem.

    Raises:
        RecipeSyntaxError: the text is not YAML, or is empty.
    """
    source = SourceMap(file=file, lines=text.splitlines())
    try:
        with collector_paused():
            node = _compose(text)
    except MarkedYAMLError as exc:
        raise RecipeSyntaxError([_yaml_error(exc, source)]) from exc
    except YAMLError as exc:
        raise RecipeSyntaxError([source.at((), "yaml-syntax", str(exc))]) from exc
    if node is None:
        raise RecipeSyntaxError(
            [source.at((), "empty", "the recipe is empty", "start with 'version: 1'")]
        )
    builder = _Builder(source)
    with collector_paused():
        data = builder.build(node, ())
    source.problems.extend(builder.problems)  # reported by validation, with the rest
    return data, source


class _OnceResolver(VersionedResolver):
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


def _compose(text: str) -> Node | None:
    try:
        yaml = YAML(typ="safe", pure=False)
        yaml.Resolver = _OnceResolver
        node: Node | None = yaml.compose(text)
    except AttributeError:  # pragma: no cover - the C parser is missing; use the pure one
        yaml = YAML(typ="safe", pure=True)
        yaml.Resolver = _OnceResolver
        node = yaml.compose(text)
    return node


class _Builder:
    """Node tree → plain data, recording positions and collecting structural problems."""

    def __init__(self, source: SourceMap) -> None:
        self.source = source
        self.problems: list[Diagnostic] = []

    def build(self, node: Node, path: NodePath) -> Any:
        self.source.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, ScalarNode):
            return _scalar(node)
        if isinstance(node, SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        if isinstance(node, MappingNode):
            return self._mapping(node, path)
        return None  # pragma: no cover - composer yields only the three node kinds

    def _mapping(self, node: MappingNode, path: NodePath) -> dict[str, Any]:
        result: dict[str, Any] = {}
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            line, column = key_node.start_mark.line + 1, key_node.start_mark.column + 1
            if not isinstance(key_node, ScalarNode):
                self.problems.append(self._unquoted_braces(line, column, key_node))
                self.source.broken.add(path)
                continue
            key = str(key_node.value)
            if key == "<<":
                self.problems.append(
                    self._diag(
                        line,
                        column,
                        "merge-key",
                        "YAML merge keys ('<<') are not supported",
                        "write the keys out, or use YAML anchors per value",
                    )
                )
                continue
            if key in seen:
                self.problems.append(
                    self._diag(
                        line,
                        column,
                        "duplicate-key",
                        f"duplicate key '{key}' (first defined on line {seen[key]})",
                        "remove one of them; YAML would silently keep only the last",
                    )
                )
                continue
            seen[key] = line
            self.source.keys[(*path, key)] = (line, column)
            result[key] = self.build(value_node, (*path, key))
        return result

    def _unquoted_braces(self, line: int, column: int, key_node: Node) -> Diagnostic:
        text = self.source.lines[line - 1] if line <= len(self.source.lines) else ""
        if "{{" in text:
            return self._diag(
                line,
                column,
                "unquoted-template",
                "unquoted '{{': YAML reads it as a nested mapping, not a template",
                "write templates as '${{ ... }}' and quote them, e.g. path: \"${{ inputs.file }}\"",
            )
        return self._diag(line, column, "complex-key", "mapping keys must be plain strings", None)

    def _diag(
        self, line: int, column: int, rule: str, message: str, hint: str | None
    ) -> Diagnostic:
        return Diagnostic(
            file=self.source.file, line=line, column=column, rule=rule, message=message, hint=hint
        )


def _scalar(node: ScalarNode) -> Any:
    tag = node.tag or ""
    value: str = node.value
    if not tag.startswith(_TAG) or node.style:  # quoted or explicitly tagged: keep text
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


def _yaml_error(exc: MarkedYAMLError, source: SourceMap) -> Diagnostic:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or exc.context or "invalid YAML"
    hint = "check indentation and quoting on this line or the one before"
    if exc.context_mark is not None and "quoted scalar" in (exc.context or ""):
        # e.g. an unclosed quote: the end of the file is not where the mistake is
        mark = exc.context_mark
        problem = f"{problem} {exc.context}".strip()
        if "quoted" in (exc.context or ""):
            hint = "this quote is never closed: add the closing quote"
    line = mark.line + 1 if mark is not None else 1
    column = mark.column + 1 if mark is not None else 1
    text = source.lines[line - 1] if 1 <= line <= len(source.lines) else ""
    if "{{" in text or (line >= 2 and "{{" in source.lines[line - 2]):
        hint = "quote template values: path: \"${{ item }}\" (a bare '{' starts a YAML mapping)"
    elif "\t" in text:
        hint = "YAML does not allow tabs for indentation; use spaces"
    return Diagnostic(
        file=source.file, line=line, column=column, rule="yaml-syntax", message=problem, hint=hint
    )


def _syntax(file: str, rule: str, message: str) -> RecipeSyntaxError:
    return RecipeSyntaxError([Diagnostic(file=file, line=1, column=1, rule=rule, message=message)])
