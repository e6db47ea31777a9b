"""Warnings for calls whose output was cut at a limit.

An action whose output is an object with `truncated: true` (`fs.read`, `fs.list`,
`fs.search`, `shell.run` with `check: false`, `http.request`, an MCP tool or a user
function that says so) returned less than there is. The step still succeeds, so the
sandbox turns each such output into a warning: a `step.warning` event, and a line in the
step's `warnings` (the summary table, `--json`, the journal).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from engine.capability import Action

__all__ = ["MAX_WARNINGS", "truncation_warning"]

MAX_WARNINGS = 20
"""The most warnings one step keeps (a `for_each` of 10,000 cut reads says so 20 times,
then once that there were more)."""


def truncation_warning(
    action: Action[Any], params: BaseModel, output: Any, item: int | None
) -> str | None:
    """What to tell a person about `output`, or None if it was not cut short.

    `item` is the `for_each` item that made the call, if one did.
    """
    if not (isinstance(output, dict) and output.get("truncated") is True):
        return None
    # The limits in the call's own params (fs.search's max_matches, max_entries, max_depth)
    # say which one to raise; numbers only, so no param text reaches a log unredacted.
    limits = ", ".join(
        f"{key}={value}"
        for key, value in params
        if key.startswith("max_") and isinstance(value, int | float) and not isinstance(value, bool)
    )
    where = f"item {item}: " if item is not None else ""
    said = f" ({limits})" if limits else ""
    note = action.truncated_note or "a limit cut it short, so it is incomplete"
    return f"{where}{action.name} output truncated{said}: {note}"
