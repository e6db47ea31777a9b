"""YAML with locations: recipes, policies, `--capabilities` files and cassettes as plain data
plus a `SourceMap`.

ruamel.yaml parses (with the C parser when it is installed, ~6x faster on large recipes);
this module composes the node tree itself, under the caps of `engine.limits` (nesting
depth, node count, alias expansion), and turns nodes into data itself so that duplicate
keys and an unquoted `{{` are reported with their positions instead of stopping at the
first problem. Policies, `--capabilities` files and cassettes are read here too.

A file that does not load is one located error like any other: a byte that is not UTF-8
at its own line and column, a YAML syntax error where the parser stopped. Its diagnostic
keeps the text of its line, so it is shown with a caret even where no `SourceMap` of the
file reaches the renderer.

A file named `*.json` is read by the JSON parser instead (`parse_json_text`, with the same
guarantees), and a recipe a program holds as data is read as JSON data and shown as YAML
(`read_recipe_data`: a planner's plan, a journaled or recorded one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.reader import ReaderError

from engine._support.gc import collector_paused
from engine.diagnostics import Diagnostic, NodePath, Positions, SourceMap, split_lines
from engine.errors import RecipeSyntaxError
from engine.yaml._data import read_recipe_data
from engine.yaml._json import parse_json_text
from engine.yaml._loader import Loader
from engine.yaml._nodes import LimitExceeded
from engine.yaml._text import MAX_RECIPE_BYTES, decode_text, syntax_error

__all__ = [
    "MAX_RECIPE_BYTES",
    "decode_text",
    "parse_json_text",
    "parse_recipe_text",
    "read_recipe",
    "read_recipe_data",
]


def read_recipe(path: str | Path) -> tuple[Any, SourceMap]:
    """Read a recipe file into plain data and a `SourceMap`: YAML, or JSON for a file
    named `*.json` (`parse_json_text`)."""
    name = str(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_RECIPE_BYTES + 1)
    except OSError as exc:
        raise syntax_error(
            name, "unreadable", f"cannot read recipe: {exc.strerror or exc}"
        ) from exc
    if len(raw) > MAX_RECIPE_BYTES:
        raise syntax_error(
            name,
            "too-large",
            f"recipe is larger than {MAX_RECIPE_BYTES} bytes",
            "split it into smaller recipes (100,000 short steps take about 13 MB)",
        )
    if name.lower().endswith(".json"):  # the same schema, read by the JSON parser
        return parse_json_text(decode_text(raw, name), name)
    return parse_recipe_text(decode_text(raw, name), name)


def parse_recipe_text(text: str, file: str = "<recipe>") -> tuple[Any, SourceMap]:
    """Parse YAML text into plain data and a `SourceMap`.

    Duplicate keys (the first one is kept) and an unquoted `{{` do not stop parsing: they
    are left in `source.problems`, which `validate_plan` reports with every other problem.

    Raises:
        RecipeSyntaxError: the text is not YAML, or is empty, or passes a cap of
            `engine.limits` (nesting depth, nodes, alias expansion).
    """
    source = SourceMap(file=file, text=text, locator=_locate)
    try:
        with collector_paused():
            data, empty = Loader(text, source).load()
    except LimitExceeded as exc:
        raise _failed(exc.diagnostic(file), source) from None
    except MarkedYAMLError as exc:
        raise _failed(_yaml_error(exc, source), source) from exc
    except ReaderError as exc:
        raise _failed(_unacceptable(exc, source), source) from exc
    except YAMLError as exc:
        raise _failed(source.at((), "yaml-syntax", str(exc)), source) from exc
    if empty:
        raise RecipeSyntaxError(
            [source.at((), "empty", "the recipe is empty", "start with 'version: 1'")]
        )
    return data, source  # duplicate keys and the like are in source.problems, for validation


def _locate(source: SourceMap, wanted: frozenset[NodePath] | None) -> Positions | None:
    from engine.yaml._tree import locate  # only a document with a problem needs positions

    return locate(source, wanted)


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
    elif "\t" in text[: len(text) - len(text.lstrip())] or "\t" in text[column - 1 : column]:
        # a tab elsewhere (inside a quoted value) is allowed, and not what went wrong
        hint = "YAML does not allow tabs for indentation; use spaces"
    return Diagnostic(
        file=source.file, line=line, column=column, rule="yaml-syntax", message=problem, hint=hint
    )


def _unacceptable(exc: ReaderError, source: SourceMap) -> Diagnostic:
    """A character YAML does not allow (a control character), where it is."""
    text = source.text or ""
    position = exc.position if isinstance(exc.position, int) else 0
    before = split_lines(text[:position] + "^")
    code = exc.character if isinstance(exc.character, int) else 0
    escape = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return Diagnostic(
        file=source.file,
        line=len(before),
        column=len(before[-1]),
        rule="yaml-syntax",
        message=f"character U+{code:04X} is not allowed in YAML",
        hint=f'remove it, or write it as the escape "{escape}" inside a double-quoted string',
    )


def _failed(diagnostic: Diagnostic, source: SourceMap) -> RecipeSyntaxError:
    """The error for a document that did not load, its diagnostic keeping its line: the
    renderer gets no `SourceMap` of a document that did not load."""
    lines = source.lines
    if 1 <= diagnostic.line <= len(lines):
        diagnostic = diagnostic.with_source_line(lines[diagnostic.line - 1])
    return RecipeSyntaxError([diagnostic])
