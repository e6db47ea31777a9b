"""Capabilities: what steps may do, each call checked against the recipe's grants.

`Gate` and `Sandbox` are imported on first use: the sandbox is what runs calls, and
`planloom validate` builds a registry without running any.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.capability import Action, CallContext, EmptyGrant, Family, Registry

if TYPE_CHECKING:
    from engine.sandbox import Gate, Sandbox

__all__ = [
    "Action",
    "CallContext",
    "EmptyGrant",
    "Family",
    "Gate",
    "Registry",
    "Sandbox",
    "default_registry",
]


def __getattr__(name: str) -> Any:
    if name in ("Gate", "Sandbox"):
        import engine.sandbox

        return getattr(engine.sandbox, name)
    raise AttributeError(f"module 'capabilities' has no attribute {name!r}")


def default_registry() -> Registry:
    """A registry holding every built-in capability."""
    from capabilities import fs, http, human, llm, shell

    registry = Registry()
    fs.register(registry)
    shell.register(registry)
    http.register(registry)
    human.register(registry)
    llm.register(registry)
    return registry
