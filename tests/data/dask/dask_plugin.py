"""Slow calls for the Dask tests (`--plugin dask_plugin`, importable on the workers too):
each writes down the worker process it ran in, so a test can kill that worker."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def register(registry: Any) -> None:
    @registry.function("slow.look", side_effects=False)
    def look(folder: str, seconds: float = 2.0) -> str:
        """Read-only: note this process, wait, answer."""
        Path(folder, f"look-{os.getpid()}-{time.time_ns()}").write_text(str(os.getpid()))
        time.sleep(seconds)
        return "seen"

    @registry.function("slow.change")
    def change(folder: str, seconds: float = 2.0) -> str:
        """A side effect: a line in changes.log, then a wait."""
        with Path(folder, "changes.log").open("a", encoding="utf-8") as log:
            log.write(f"{os.getpid()}\n")
        time.sleep(seconds)
        return "changed"

    @registry.function("slow.pid", side_effects=False)
    def pid() -> int:
        """The process the call ran in."""
        return os.getpid()


def register_unknown(registry: Any) -> None:
    """`flaky.send`: a side effect whose first call ends with its outcome unknown, as when
    the worker making it is lost (`--plugin dask_unknown_plugin`)."""
    from engine.errors import OutcomeUnknown

    calls: list[str] = []

    @registry.function("flaky.send")
    def send(folder: str) -> str:
        with Path(folder, "sent.log").open("a", encoding="utf-8") as log:
            log.write("sent\n")
        calls.append(folder)
        if len(calls) == 1:
            raise OutcomeUnknown("flaky.send: the worker was lost; it may or may not have happened")
        return "sent"
