"""Capabilities: what steps may do, each call checked against the recipe's grants."""

from engine.capability import Action, CallContext, EmptyGrant, Family, Registry
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
