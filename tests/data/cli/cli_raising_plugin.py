"""A plugin whose `register` fails: the CLI must report it as a configuration error."""

from __future__ import annotations

from typing import Any


def register(registry: Any) -> None:
    """Fails the way a buggy plugin would."""
    raise RuntimeError("cli_raising_plugin cannot start: DEMO_TOKEN is not set")
