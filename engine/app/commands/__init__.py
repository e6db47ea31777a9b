"""One module per `planloom` command: each adds its parser (`add`) and runs it (`main`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from engine.app.commands import (
    graph,
    plan,
    replay,
    report,
    resume,
    run,
    runs,
    schema,
    show,
    tools,
    validate,
)
from engine.capability import Registry

__all__ = ["COMMANDS", "Command"]

Command = tuple[Callable[[Any], None], Callable[[argparse.Namespace, Registry], int]]

COMMANDS: dict[str, Command] = {
    module.NAME: (module.add, module.main)
    for module in (run, plan, resume, replay, runs, show, report, validate, graph, schema, tools)
}
"""By name, in the order `planloom --help` lists them."""
