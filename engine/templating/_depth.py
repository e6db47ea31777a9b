"""Refusing templates nested too deeply for Jinja's recursive parser and compiler.

Seventy nested parentheses overflow Jinja's parser's stack: `check_depth` refuses brackets
nested deeper than `MAX_BRACKETS` before the parser sees them, and `check_tree` parsed
trees deeper than `MAX_TREE_DEPTH` before the compiler does.
"""

from __future__ import annotations

from collections.abc import Iterator

import jinja2
from jinja2 import nodes

__all__ = ["MAX_BRACKETS", "MAX_TREE_DEPTH", "check_depth", "check_tree", "checked_nodes"]

MAX_BRACKETS = 32
"""The deepest nesting of `(`, `[` and `{` in a template."""

MAX_TREE_DEPTH = 120
"""The deepest parsed expression (`1+1+...`, filter chains) Jinja's compiler is given."""


def check_depth(environment: jinja2.Environment, source: str) -> None:
    """Refuse templates nested too deeply for Jinja's recursive parser and compiler.

    Raises:
        jinja2.TemplateSyntaxError: brackets nested deeper than `MAX_BRACKETS`.
    """
    if sum(map(source.count, "([{")) <= MAX_BRACKETS:  # the usual case: no need to lex
        return
    depth = 0
    for lineno, kind, value in environment.lex(source):
        if kind == "operator" and value in "([{":
            depth += 1
            if depth > MAX_BRACKETS:
                raise jinja2.TemplateSyntaxError(
                    f"brackets nested more than {MAX_BRACKETS} deep; "
                    "split the expression into steps",
                    lineno,
                )
        elif kind == "operator" and value in ")]}":
            depth -= 1


def check_tree(tree: nodes.Node) -> None:
    """Refuse a parsed template deeper than `MAX_TREE_DEPTH`.

    Raises:
        jinja2.TemplateSyntaxError: the tree is too deep.
    """
    for _ in checked_nodes(tree):
        pass


def checked_nodes(tree: nodes.Node) -> Iterator[nodes.Node]:
    """Every node of `tree`, refusing it (as `check_tree` does) once too deep a one shows.

    Raises:
        jinja2.TemplateSyntaxError: the tree is too deep.
    """
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        yield node
        if depth > MAX_TREE_DEPTH:
            raise jinja2.TemplateSyntaxError(
                f"expression nested more than {MAX_TREE_DEPTH} levels deep (long operator or "
                "filter chains count); split it into steps",
                node.lineno,
            )
        stack.extend((child, depth + 1) for child in node.iter_child_nodes())
