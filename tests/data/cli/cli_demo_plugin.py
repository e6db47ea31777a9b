"""A tiny planloom plugin for the `--plugin` CLI test: one read-only function capability."""

from __future__ import annotations

from typing import Any


def register(registry: Any) -> None:
    """Called by `planloom --plugin cli_demo_plugin`: adds `demo.greet`."""

    @registry.function("demo.greet", side_effects=False)
    def greet(name: str, punctuation: str = "!") -> str:
        """Greet someone by name."""
        return f"Hello, {name}{punctuation}"
