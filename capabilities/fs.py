"""The `fs` capability: read, write, list and search files beneath a granted root.

A recipe grants it with, for example:

```yaml
capabilities:
  fs: {root: ., write: ["notes/**"]}
```

Every path is resolved by the kernel beneath the root (see `capabilities._jail`): absolute
paths, `..` that leaves the root, symlinks, hard links and non-regular files are refused.
Inside the root, `.git` folders and `.env*` files are protected: writing them needs an extra
`protected:` grant. Writes go to a temporary file that replaces the target atomically.
"""

from __future__ import annotations

import functools

from capabilities._fs_access import admission
from capabilities._fs_models import (
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
from capabilities._fs_models import PathParam as PathParam
from capabilities._fs_read import list_folder, read_file
from capabilities._fs_search import search_files
from capabilities._fs_write import append_file, delete_file, write_file
from capabilities._jail import openat2_available
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


def register(registry: Registry) -> None:
    """Add the `fs` family and its six actions to `registry`."""
    registry.add_family(
        Family("fs", "read and write files beneath a granted root", FsGrant, _confinement_report)
    )
    registry.add(
        Action(
            "fs.read",
            "Read a text file.",
            ReadParams,
            read_file,
            ReadResult,
            side_effects=False,
            admit=admission("fs.read", writes=False),
            param_docs=PARAM_DOCS,
        )
    )
    registry.add(
        Action(
            "fs.write",
            "Write a file, replacing it.",
            WriteParams,
            write_file,
            WriteResult,
            side_effects=True,
            idempotent=True,  # the same content twice leaves the same file
            admit=admission("fs.write", writes=True),
            param_docs=PARAM_DOCS,
        )
    )
    registry.add(
        Action(
            "fs.append",
            "Append text to a file.",
            AppendParams,
            append_file,
            WriteResult,
            side_effects=True,
            admit=admission("fs.append", writes=True),
            param_docs=PARAM_DOCS,
        )
    )
    registry.add(
        Action(
            "fs.list",
            "List a folder.",
            ListParams,
            list_folder,
            ListResult,
            side_effects=False,
            admit=admission("fs.list", writes=False),
            param_docs=PARAM_DOCS,
        )
    )
    registry.add(
        Action(
            "fs.search",
            "Search files for lines matching a regular expression.",
            SearchParams,
            search_files,
            SearchResult,
            side_effects=False,
            admit=admission("fs.search", writes=False),
            param_docs=PARAM_DOCS,
        )
    )
    registry.add(
        Action(
            "fs.delete",
            "Delete a file.",
            DeleteParams,
            delete_file,
            DeleteResult,
            side_effects=True,
            admit=admission("fs.delete", writes=True),
            param_docs=PARAM_DOCS,
        )
    )
