"""Telling, from a confined server's stderr, that its own files are not readable to it.

A server installed outside the folders it may read (a Node package in `tools/node_modules`
while its `cwd` is `data`) fails with `EACCES: permission denied, open '.../dist/index.js'`,
or, for an ES module whose package files it cannot read, `Cannot find module '...'`. The
path named exists on this machine and lies outside what the sandbox lets it read: the
folder to add to its `read_paths` is then known, and said, instead of a generic "run it by
hand" (by hand, unconfined, it would start).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

__all__ = ["read_paths_advice", "unreadable_folder"]

# What programs print when a file cannot be opened: Node (EACCES, its module loader), and
# the C library's text (Python's PermissionError, shells, exec).
_MARKERS = ("EACCES", "ermission denied", "Cannot find module", "ERR_MODULE_NOT_FOUND")
_PATH = re.compile(r"(?:file://)?(/[^\s'\"`,;()<>]+)")
_LINES = 200  # stderr lines looked at, the last ones


def unreadable_folder(text: str, readable: Iterable[str]) -> str | None:
    """The folder to make readable, if `text` (a server's stderr, or the launcher's exec
    error with its path) says a file could not be opened that exists here but is outside
    every folder of `readable`; None otherwise.

    For a file beneath a `node_modules` folder, that (outermost) folder: a package's
    dependencies are its siblings. Otherwise the file's own folder.
    """
    folders = [os.path.normpath(folder) for folder in readable]
    for line in text.splitlines()[-_LINES:]:
        if not any(marker in line for marker in _MARKERS):
            continue
        for match in _PATH.finditer(line):
            path = os.path.normpath(match.group(1).rstrip(".:"))
            present = _present(path)
            if present is None or any(_beneath(present, folder) for folder in folders):
                continue
            parts = path.split(os.sep)
            if "node_modules" in parts:
                return os.sep.join(parts[: parts.index("node_modules") + 1])
            return os.path.dirname(path)
    return None


def read_paths_advice(folder: str, base_dir: Path) -> str:
    """How to open `folder` to the server, in the grant's own terms."""
    base = os.path.realpath(base_dir)
    shown = os.path.relpath(folder, base) if _beneath(folder, base) else folder
    return (
        f"its program's files are not readable in its sandbox: {folder} is outside the "
        f"folders it may read; add it to the server's read_paths "
        f"(`read_paths: [{shown}]`, relative to the recipe folder)"
    )


def _present(path: str) -> str | None:
    """`path` if it exists; for a path beneath `node_modules` that does not (a module as
    its importer spelled it, before the package's `exports` map it), its package's folder
    if that exists; else None: a missing file is not an unreadable one."""
    if os.path.exists(path):
        return path
    parts = path.split(os.sep)
    if "node_modules" not in parts:
        return None
    start = parts.index("node_modules") + 1
    end = start + (2 if start < len(parts) and parts[start].startswith("@") else 1)
    package = os.sep.join(parts[:end])
    return package if end <= len(parts) and os.path.isdir(package) else None


def _beneath(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)
