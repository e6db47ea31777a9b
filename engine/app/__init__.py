"""The composition root: the `planloom` command, built from the core, the capability
families and the planners (the only code that knows all three)."""

from engine.app.main import main

__all__ = ["main"]
