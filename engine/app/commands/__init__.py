"""One module per `planloom` command, each with `main(args, registry) -> int`.

A command's module is imported only when that command runs (`command_main`): its imports
(pydantic models, the executor, rich...) are paid by it alone. Its flags are declared in
`engine.app.parser`, so `--help` imports none of them.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.capability import Registry

__all__ = ["Main", "command_main"]

Main = Callable[[argparse.Namespace, "Registry"], int]
"""A command: its parsed command line and the registry in; its exit code out."""


def command_main(name: str) -> Main:
    """The `main` of the command `name` (one of `engine.app.parser.COMMANDS`), imported now."""
    module = importlib.import_module(f"{__name__}.{name}")
    main: Main = module.main
    return main
