"""Paths completed where a file is expected: its folder's entries that start as typed.

Read with `os.scandir` in this process (argcomplete's own files completer starts bash
once or more per TAB): folders (with `/`, to go on into) and files with one of the
expected suffixes, hidden ones only when a `.` is typed.
"""

from __future__ import annotations

import itertools
import os

__all__ = ["MAX_ENTRIES", "paths"]

MAX_ENTRIES = 10_000
"""Entries of one folder looked at, at most: a TAB answers at once in a huge folder too."""


def paths(prefix: str, suffixes: tuple[str, ...] = ()) -> list[str]:
    """The paths that complete `prefix`: folders, and files ending in one of `suffixes`
    (any file, if none), sorted.

    Raises:
        OSError: the folder cannot be read.
    """
    head = prefix[: prefix.rfind("/") + 1]  # the folder as typed ("" for this one)
    start = prefix[len(head) :]
    found: list[str] = []
    with os.scandir(os.path.expanduser(head) or ".") as entries:
        for entry in itertools.islice(entries, MAX_ENTRIES):
            name = entry.name
            if not name.startswith(start) or (name.startswith(".") and not start.startswith(".")):
                continue
            try:
                folder = entry.is_dir()  # follows a link, as a shell's completion does
            except OSError:
                continue
            if folder:
                found.append(f"{head}{name}/")
            elif not suffixes or name.endswith(suffixes):
                found.append(f"{head}{name}")
    return sorted(found)
