"""Rewriting a parsed template so its loops, `~` and literals run through guards.

Jinja compiles a template to Python; the calls added here are imported by the compiled
code, so they are named by module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jinja2 import nodes
from jinja2.visitor import NodeTransformer

from engine.templating._budget import guarded_iter
from engine.templating._size import check_size, checked, size_of

__all__ = ["Bounder", "guarded_concat", "guarded_value"]


def guarded_concat(*parts: Any) -> str:
    """`a ~ b`: refuses to print anything whose text would be over the limit."""
    check_size(sum(size_of(part) for part in parts), "'~'")
    return "".join(map(str, parts))


def guarded_value(value: Any) -> Any:
    """A list, tuple or dict literal, measured."""
    return checked(value, "a literal")


def _imported(function: Callable[..., Any]) -> nodes.ImportedName:
    return nodes.ImportedName(f"{function.__module__}.{function.__name__}")


class Bounder(NodeTransformer):
    """Route loops, `~` and literals with variable parts through their guards."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Call(
            _imported(guarded_iter), [node.iter], [], None, None, lineno=node.lineno
        )
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Call(
            _imported(guarded_concat), list(node.nodes), [], None, None, lineno=node.lineno
        )

    def _literal(self, node: nodes.Expr) -> nodes.Node:
        self.generic_visit(node)
        if all(isinstance(child, nodes.Const) for child in node.find_all(nodes.Expr)):
            return node  # constant: bounded by the source's own size
        return nodes.Call(_imported(guarded_value), [node], [], None, None, lineno=node.lineno)

    def visit_List(self, node: nodes.List) -> nodes.Node:
        return self._literal(node)

    def visit_Dict(self, node: nodes.Dict) -> nodes.Node:
        return self._literal(node)

    def visit_Tuple(self, node: nodes.Tuple) -> nodes.Node:
        if node.ctx != "load":  # an assignment target (`for a, b in ...`), not a value
            return node
        return self._literal(node)
