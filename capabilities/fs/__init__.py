"""The `fs` capability: read, write, list and search files beneath a granted root.

A recipe grants it with, for example:

```yaml
capabilities:
  fs: {root: ., write: ["notes/**"]}
```

Every path is resolved by the kernel beneath the root (see `capabilities.fs._jail`): absolute
paths, `..` that leaves the root, symlinks, hard links and non-regular files are refused.
Inside the root, `.git` folders and `.env*` files are protected: writing them needs an extra
`protected:` grant. Writes go to a temporary file that replaces the target atomically.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel

from capabilities.fs._access import admission
from capabilities.fs._jail import openat2_available
from capabilities.fs._models import (
    PARAM_DOCS,
    AppendParams,
    DeleteParams,
    DeleteResult,
    FsGrant,
    ListEntry,
    ListParams,
    ListResult,
    ReadParams,
    ReadResult,
    SearchMatch,
    SearchParams,
    SearchResult,
    WriteParams,
    WriteResult,
)
from capabilities.fs._models import PathParam as PathParam
from capabilities.fs._read import list_folder, read_file
from capabilities.fs._search import search_files
from capabilities.fs._write import append_file, delete_file, write_file
from engine.capability import Action, Family, Registry

__all__ = [
    "AppendParams",
    "DeleteParams",
    "DeleteResult",
    "FsGrant",
    "ListEntry",
    "ListParams",
    "ListResult",
    "ReadParams",
    "ReadResult",
    "SearchMatch",
    "SearchParams",
    "SearchResult",
    "WriteParams",
    "WriteResult",
    "register",
]


@functools.cache
def _confinement_report() -> dict[str, str]:
    beneath = (
        "active"
        if openat2_available()
        else "unavailable: the kernel refused openat2; using a component-wise O_NOFOLLOW walk"
    )
    return {
        "openat2 RESOLVE_BENEATH|NO_SYMLINKS": beneath,
        "O_NOFOLLOW component walk": "active (fallback)" if beneath == "active" else "active",
        "regular files only, no hard links": "active",
        "atomic writes (temp file + rename)": "active",
    }


def _facts(grant: FsGrant) -> str:
    """`paths are relative to the granted folder; may read; may write out/** only`."""
    writes = (
        "anywhere in it"
        if grant.write is True
        else f"only {', '.join(grant.write)}"
        if grant.write
        else "nothing"
    )
    reads = "may read, list and search" if grant.read else "may not read"
    return f"paths relative to the granted folder (no leading /); {reads}; may write {writes}"


def register(registry: Registry) -> None:
    """Add the `fs` family and its six actions to `registry`."""
    registry.add_family(
        Family(
            "fs",
            "read and write files beneath a granted root",
            FsGrant,
            _confinement_report,
            facts=_facts,
        )
    )
    for name, description, params, run, result, writes in _ACTIONS:
        registry.add(
            Action(
                name,
                description,
                params,
                run,
                result,
                side_effects=writes,
                idempotent=name == "fs.write",  # the same content twice: the same file
                admit=admission(name, writes=writes),
                param_docs=PARAM_DOCS,
                truncated_note=_TRUNCATED.get(name),
            )
        )


_ACTIONS: list[tuple[str, str, type[BaseModel], Any, type[BaseModel], bool]] = [
    ("fs.read", "Read a text file.", ReadParams, read_file, ReadResult, False),
    ("fs.write", "Write a file, replacing it.", WriteParams, write_file, WriteResult, True),
    ("fs.append", "Append text to a file.", AppendParams, append_file, WriteResult, True),
    ("fs.list", "List a folder.", ListParams, list_folder, ListResult, False),
    (
        "fs.search",
        "Search files for lines matching a regular expression.",
        SearchParams,
        search_files,
        SearchResult,
        False,
    ),
    ("fs.delete", "Delete a file.", DeleteParams, delete_file, DeleteResult, True),
]
"""Each action: name, description, params, implementation, result, whether it writes."""

_TRUNCATED = {
    "fs.read": "the file is larger than the grant's max_read_bytes; only its start was read",
    "fs.list": "max_entries or max_depth was reached; list a narrower path or raise them",
    "fs.search": "max_entries, max_depth or max_matches was reached; narrow path or glob, "
    "or raise them",
}
"""Which limit cut an action's output that says `truncated: true` (the step's warning)."""
