"""The models of the `fs` actions: the grant (`capabilities: fs:`), params and results."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine import regex
from engine.globs import compile_glob

__all__ = [
    "PARAM_DOCS",
    "AppendParams",
    "DeleteParams",
    "DeleteResult",
    "FsGrant",
    "ListEntry",
    "ListParams",
    "ListResult",
    "PathParam",
    "ReadParams",
    "ReadResult",
    "SearchMatch",
    "SearchParams",
    "SearchResult",
    "WriteParams",
    "WriteResult",
]


class FsGrant(BaseModel):
    """What a recipe's `capabilities: fs:` block grants.

    Attributes:
        root: the folder everything happens beneath; relative to the recipe's folder.
        read: whether files may be read, listed and searched.
        write: `True` for anything under root, or glob patterns relative to root
            (`**` spans folders, e.g. `notes/**`).
        protected: globs that may be written even though they are protected
            (`.git` folders, `.env*` files).
        max_read_bytes: the most bytes one read (or one searched file) returns.
        max_write_bytes: the largest content one write or append accepts.
    """

    model_config = ConfigDict(extra="forbid")

    root: str = "."
    read: bool = True
    write: bool | list[str] = False
    protected: list[str] = []
    max_read_bytes: int = Field(default=1_000_000, ge=0)
    max_write_bytes: int = Field(default=10_000_000, ge=0)

    @field_validator("protected")
    @classmethod
    def _relative_globs(cls, value: list[str]) -> list[str]:
        for pattern in value:
            if pattern.startswith("/"):
                raise ValueError(f"glob {pattern!r} must be relative to the fs root")
            compile_glob(pattern)  # a bad glob is a grant error, not a silent literal
        return value

    @field_validator("write")
    @classmethod
    def _relative_write_globs(cls, value: bool | list[str]) -> bool | list[str]:
        if isinstance(value, list):
            cls._relative_globs(value)
        return value


# PATH_MAX: a longer path cannot name a file, and would be echoed back in messages.
PathParam = Annotated[str, Field(max_length=4096)]


PARAM_DOCS = {
    "path": "A file or folder, relative to the grant's root (`..` may not leave it).",
    "content": "The text written (UTF-8).",
    "create_dirs": "Make the missing folders above the file.",
    "missing_ok": "Succeed (with `deleted: false`) when the file is not there.",
    "recursive": "List the folders below too, down to `max_depth`.",
    "max_depth": "How many folders deep to go.",
    "max_entries": "The most entries looked at; past it the result says `truncated`.",
    "pattern": "A regular expression matched against each line (time-limited).",
    "glob": "Which files to search, as a glob relative to `path` (`**/*.py`). Folders of "
    "tools (`.git`, `.venv` and any virtual environment, `node_modules`, `__pycache__`, "
    "caches) are skipped unless the glob names them (`.venv/**`).",
    "max_matches": "The most matching lines returned.",
}
"""What each `fs` param means, for editors (`Action.param_docs`)."""


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReadParams(_Params):
    """Params of `fs.read`."""

    path: PathParam


class ReadResult(BaseModel):
    """Result of `fs.read`: UTF-8 text (bad bytes replaced), the file's full size."""

    content: str
    size: int
    truncated: bool


class WriteParams(_Params):
    """Params of `fs.write`."""

    path: PathParam
    content: str
    create_dirs: bool = True


class AppendParams(WriteParams):
    """Params of `fs.append`."""


class WriteResult(BaseModel):
    """Result of `fs.write` and `fs.append`."""

    path: str
    bytes_written: int


class DeleteParams(_Params):
    """Params of `fs.delete` (regular files only)."""

    path: PathParam
    missing_ok: bool = False


class DeleteResult(BaseModel):
    """Result of `fs.delete`; `deleted` is false when the file was missing."""

    path: str
    deleted: bool


class ListParams(_Params):
    """Params of `fs.list`."""

    path: PathParam = "."
    recursive: bool = False
    max_depth: int = Field(default=8, ge=1, le=64)
    max_entries: int = Field(default=10_000, ge=1, le=1_000_000)


class ListEntry(BaseModel):
    """One listed entry; `size` is set for files only. Symlinks are reported, not followed."""

    path: str
    type: Literal["file", "dir", "symlink", "other"]
    size: int | None = None


class ListResult(BaseModel):
    """Result of `fs.list`, sorted by path; `paths` lists just the files."""

    entries: list[ListEntry]
    paths: list[str]
    truncated: bool


class SearchParams(_Params):
    """Params of `fs.search`; `glob` is matched against paths relative to `path`."""

    pattern: str
    path: PathParam = "."
    glob: str = "**/*"
    max_matches: int = Field(default=1000, ge=1, le=100_000)
    max_depth: int = Field(default=8, ge=1, le=64)
    max_entries: int = Field(default=10_000, ge=1, le=1_000_000)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        regex.compile_pattern(value)  # ValueError says what is wrong
        return value

    @field_validator("glob")
    @classmethod
    def _glob_compiles(cls, value: str) -> str:
        compile_glob(value)  # ValueError names what is wrong
        return value


class SearchMatch(BaseModel):
    """One matching line (1-based), its text cut at 1000 characters."""

    path: str
    line: int
    text: str


class SearchResult(BaseModel):
    """Result of `fs.search`.

    Attributes:
        matches: the matching lines, file by file in path order.
        truncated: a limit cut the search short (`max_matches`, `max_entries` or
            `max_depth`): there may be more matches.
        visited: the files and folders the walk looked at (it goes only where the glob
            can match, and not into tool folders such as `.venv` the glob does not name).
    """

    matches: list[SearchMatch]
    truncated: bool
    visited: int = 0
