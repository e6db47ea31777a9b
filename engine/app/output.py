"""What every command prints the same way: its exit code, and JSON on stdout.

Only the standard library is imported here: `main` uses it before a command (and its
imports) is loaded, so a usage error exits without importing the engine.
"""

from __future__ import annotations

import json
import sys
from typing import Any

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_INVALID",
    "EXIT_OK",
    "EXIT_REJECTED",
    "invalid",
    "print_json",
]

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_REJECTED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of the output went away (`| head -1`)


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=repr) + "\n")
    sys.stdout.flush()


def invalid(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """A run-shaped JSON object for a run that never started."""
    return {"run_id": None, "status": "invalid", "steps": {}, "outputs": {}, "errors": errors}
