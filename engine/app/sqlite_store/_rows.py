"""The store's rows: its schema and format, how entries are encoded, chained and packed in
batches, and how a run's row reads back (and whether its process still lives)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from engine.store import EntryKind, RunRecord

FORMAT = 3
"""2: entries are hash-chained (`journal.hash`, `runs.head`, `runs.entries`); 3: a batch may
be one row (`BATCHED`). An older store is made this format when this planloom first opens
it: format 1 is chained as it stands; format 2 needs nothing more (it has no batch rows)."""


KINDS = frozenset(get_args(EntryKind))


BATCHED = "batch"
"""The kind of a row holding a batch of entries: `[[at, kind, scope, data], ...]`."""


def _encoder() -> Callable[[Any], str]:
    """Compact JSON text of a value (`repr` of what JSON has no form for), by the C encoder
    made once: `JSONEncoder.encode` makes one per call, a fifth of a journal entry's cost."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # a Python built without the C accelerator
        return json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=repr).encode
    markers: dict[int, Any] = {}  # what is being encoded: a cycle is an error, not a hang
    chunks = make(markers, repr, json.encoder.encode_basestring, None, ":", ",", False, False, True)

    def encode(value: Any) -> str:
        try:
            return "".join(chunks(value, 0))
        except BaseException:
            markers.clear()  # left half-filled by the error
            raise

    return encode


encode = _encoder()
encode_text: Callable[[str], str] = json.encoder.encode_basestring  # a str as `encode` writes it


def storable(text: str) -> str:
    """JSON text SQLite can store: a lone surrogate (from a server's message or a tool's
    output) written as its JSON escape, which reads back as the same string."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


BATCH = 256


BATCH_SECONDS = 0.25


PACK = 8


SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    recipe TEXT,
    base_dir TEXT NOT NULL,
    status TEXT NOT NULL,
    started REAL NOT NULL,
    finished REAL,
    steps INTEGER NOT NULL DEFAULT 0,
    done INTEGER NOT NULL DEFAULT 0,
    usage TEXT NOT NULL DEFAULT '{}',
    pid INTEGER,
    pid_start TEXT,
    segments INTEGER NOT NULL DEFAULT 1,
    head TEXT,
    entries INTEGER
);
CREATE TABLE IF NOT EXISTS journal (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    scope TEXT,
    data TEXT NOT NULL,
    hash TEXT,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS runs_started ON runs (started);
"""


FIELDS = (
    "id",
    "name",
    "recipe",
    "base_dir",
    "status",
    "started",
    "finished",
    "steps",
    "done",
    "usage",
    "pid",
    "pid_start",
    "segments",
)


def process_start(pid: int) -> str | None:
    """The start time of process `pid` (clock ticks since boot), or None if it is gone: a
    zombie (killed, not yet reaped by its parent) is gone too."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) <= 19 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def first_hash(run_id: str, recipe: str | None, base_dir: str) -> str:
    """What a run's first entry is chained to: its id and the fields a resume trusts (the
    recipe read again, the folder its paths start in)."""
    fixed = encode(["planloom run", run_id, recipe, base_dir])
    return hashlib.sha256(fixed.encode("utf-8", "surrogatepass")).hexdigest()


def entry_hash(prev: str, seq: int, at: float, kind: str, scope: str | None, text: str) -> str:
    """The hash of one entry, chained to `prev` (the entry before it, or `first_hash`)."""
    where = "-" if scope is None else f"+{len(scope)}:{scope}"
    whole = f"{prev}\n{seq}\n{at!r}\n{len(kind)}:{kind}\n{where}\n{text}"
    return hashlib.sha256(whole.encode("utf-8", "surrogatepass")).hexdigest()


Pending = tuple[str, int, float, str, str | None, str]
"""An entry to write: run id, seq, time, kind, scope, data (JSON text)."""


def batched(pending: list[Pending]) -> list[Pending]:
    """`pending` as rows: each run of `PACK` or more entries of one run as one row (of kind
    `BATCHED`, numbered as its first entry, at its time), the others as they are."""
    rows: list[Pending] = []
    start = 0
    while start < len(pending):
        run_id = pending[start][0]
        end = start + 1
        while end < len(pending) and pending[end][0] == run_id:
            end += 1
        if end - start < PACK:
            rows += pending[start:end]
        else:
            _, seq, at, _, _, _ = pending[start]
            packed = ",".join(
                f'[{at!r},"{kind}",{"null" if scope is None else encode_text(scope)},{text}]'
                for _, _, at, kind, scope, text in pending[start:end]
            )
            rows.append((run_id, seq, at, BATCHED, None, f"[{packed}]"))
        start = end
    return rows


def process_alive(pid: int | None, start: str | None) -> bool:
    if pid is None:
        return False
    if pid == os.getpid():
        return True
    now = process_start(pid)
    return now is not None and (start is None or now == start)


def is_alive(record: RunRecord) -> bool:
    """Whether the process running `record` is still there."""
    return record.status == "running" and process_alive(record.pid, record.pid_start)


def row_of(record: RunRecord) -> tuple[Any, ...]:
    values = {name: getattr(record, name) for name in FIELDS}
    values["usage"] = json.dumps(values["usage"])
    return tuple(values[name] for name in FIELDS)


def record_of(row: tuple[Any, ...]) -> RunRecord:
    """A row as a `RunRecord`; a field edited into another type reads as its default."""
    values = dict(zip(FIELDS, row, strict=True))
    try:
        usage = json.loads(values["usage"] or "{}")
    except (TypeError, ValueError):
        usage = {}
    values["usage"] = usage if isinstance(usage, dict) else {}
    for name, kind, default in _TYPED:
        if not isinstance(values[name], kind) or isinstance(values[name], bool):
            values[name] = default
    for name in ("id", "name", "base_dir", "status"):
        values[name] = str(values[name])
    return RunRecord(**values)


_TYPED: tuple[tuple[str, type | tuple[type, ...], Any], ...] = (
    ("started", (int, float), 0.0),
    ("finished", (int, float, type(None)), None),
    ("steps", int, 0),
    ("done", int, 0),
    ("pid", (int, type(None)), None),
    ("pid_start", (str, type(None)), None),
    ("segments", int, 1),
    ("recipe", (str, type(None)), None),
)


def entries_named(seq: int, kind: str, size: int) -> str:
    """`entry 7 (intent)`, or a batch row's `entries 7 to 30 (a batch)`."""
    if size == 1 and kind != BATCHED:
        return f"entry {seq} ({kind})"
    return f"entries {seq} to {seq + size - 1} (a batch)"


def missing_entries(first: int, end: int) -> str:
    """`entry 15 is` or `entries 16 to 97 are`: the numbers from `first` to before `end`."""
    return f"entry {first} is" if end == first + 1 else f"entries {first} to {end - 1} are"
