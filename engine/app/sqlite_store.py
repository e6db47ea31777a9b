"""The embedded run store: one SQLite file (stdlib `sqlite3`), in WAL mode.

A process killed at any instant leaves the file consistent: every write is a transaction,
and WAL recovery on the next open keeps the committed ones and drops the rest. Durable
entries (a side-effect call's intent and result, answers, model exchanges) are committed
one transaction each before `append` returns; other entries (step results, decisions) wait
in a batch that goes with the next commit, at most `BATCH` entries or `BATCH_SECONDS`
later. `synchronous=NORMAL`: a commit survives the process being killed;
a power cut may lose the last ones (see README).

A batch of `PACK` entries or more (a burst of steps that ended together) is written as one
row of kind `batch` (its entries in a JSON array, numbered from the row's `seq` on): a
row's own cost (its place in the table, its hash) is most of a small entry's, so a run of
many quick steps pays it once a batch, not once a step. Fewer entries (what a run of slow
steps writes at a time, every durable entry) have a row each, readable with the sqlite3
CLI as they are.

Each row carries a hash chained to the row before it (`entry_hash`), the first to one made
from the run's fixed fields, and the run's row keeps the last hash and the count of
entries: a journal read back with a row deleted, inserted, moved or edited (by hand, with
the sqlite3 CLI) is refused at that row, naming its entries, before anything reads it. The
chain has no key: it finds edits and damage, not a forger who computes it again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn, get_args

from engine.errors import ConfigurationError
from engine.store import Entry, EntryKind, JSONText, RunRecord

__all__ = ["SqliteStore", "entry_hash", "first_hash", "is_alive", "open_store", "process_start"]

FORMAT = 3
"""2: entries are hash-chained (`journal.hash`, `runs.head`, `runs.entries`); 3: a batch may
be one row (`BATCHED`). An older store is made this format when this planloom first opens
it: format 1 is chained as it stands; format 2 needs nothing more (it has no batch rows)."""
_KINDS = frozenset(get_args(EntryKind))
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


_encode = _encoder()


def _storable(text: str) -> str:
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

_SCHEMA = """
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

_FIELDS = (
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
    fixed = _encode(["planloom run", run_id, recipe, base_dir])
    return hashlib.sha256(fixed.encode("utf-8", "surrogatepass")).hexdigest()


def entry_hash(prev: str, seq: int, at: float, kind: str, scope: str | None, text: str) -> str:
    """The hash of one entry, chained to `prev` (the entry before it, or `first_hash`)."""
    where = "-" if scope is None else f"+{len(scope)}:{scope}"
    whole = f"{prev}\n{seq}\n{at!r}\n{len(kind)}:{kind}\n{where}\n{text}"
    return hashlib.sha256(whole.encode("utf-8", "surrogatepass")).hexdigest()


def open_store(path: str | Path, *, create: bool = True) -> SqliteStore:
    """Open (and with `create`, make) the store at `path`.

    Raises:
        ConfigurationError: it cannot be opened, or is not a planloom store.
    """
    return SqliteStore(Path(path), create=create)


class SqliteStore:
    """A `RunStore` in one SQLite file."""

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = str(path)
        if not create and not path.exists():
            raise ConfigurationError(
                f"no run store at {path}: runs are kept beside their recipe, in "
                ".planloom/runs.db (or $PLANLOOM_HOME/runs.db); pass --store PATH"
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, timeout=10.0, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            found = self._db.execute("SELECT value FROM meta WHERE key='format'").fetchone()
            if found is None:
                self._db.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (str(FORMAT),))
            elif found[0] == "1":
                self._chain_format_1()
            elif found[0] == "2":
                self._db.execute("UPDATE meta SET value=? WHERE key='format'", (str(FORMAT),))
            elif found[0] != str(FORMAT):
                raise ConfigurationError(
                    f"run store {path}: format {found[0]} is not supported (this planloom "
                    f"reads format {FORMAT}); use --store to start a new one"
                )
        except sqlite3.DatabaseError as exc:
            self._close_quietly()
            raise ConfigurationError(
                f"run store {path}: {exc}; move the file aside (runs in it are lost to "
                "planloom) or pass --store PATH for another store"
            ) from None
        except ConfigurationError:
            self._close_quietly()
            raise
        except OSError as exc:
            self._close_quietly()
            raise ConfigurationError(f"run store {path}: {exc.strerror or exc}") from None
        self._pending: list[_Entry] = []
        self._since = time.monotonic()
        self._seq: dict[str, int] = {}
        self._head: dict[str, str] = {}

    def _chain_format_1(self) -> None:
        """A store of format 1 (no hashes): every run chained as it stands, once."""
        with self._transaction():
            found = self._db.execute("SELECT value FROM meta WHERE key='format'").fetchone()
            if found is None or found[0] != "1":  # another process did it first
                return
            self._db.execute("ALTER TABLE journal ADD COLUMN hash TEXT")
            self._db.execute("ALTER TABLE runs ADD COLUMN head TEXT")
            self._db.execute("ALTER TABLE runs ADD COLUMN entries INTEGER")
            runs = self._db.execute("SELECT id, recipe, base_dir FROM runs").fetchall()
            for run_id, recipe, base_dir in runs:
                head, count = first_hash(str(run_id), recipe, str(base_dir)), 0
                rows = self._db.execute(
                    "SELECT seq, at, kind, scope, data FROM journal WHERE run_id=? ORDER BY seq",
                    (run_id,),
                ).fetchall()
                for seq, at, kind, scope, text in rows:
                    head = entry_hash(head, seq, at, str(kind), scope, str(text))
                    self._db.execute(
                        "UPDATE journal SET hash=? WHERE run_id=? AND seq=?", (head, run_id, seq)
                    )
                    count += 1
                self._db.execute(
                    "UPDATE runs SET head=?, entries=? WHERE id=?", (head, count, run_id)
                )
            self._db.execute("UPDATE meta SET value=? WHERE key='format'", (str(FORMAT),))

    def _close_quietly(self) -> None:
        db = getattr(self, "_db", None)
        if db is not None:
            db.close()

    # -- writing -------------------------------------------------------------------------

    def begin(self, record: RunRecord) -> None:
        head = first_hash(record.id, record.recipe, record.base_dir)
        with self._transaction():
            self._db.execute(
                f"INSERT INTO runs ({', '.join(_FIELDS)}, head, entries) "
                f"VALUES ({', '.join('?' * len(_FIELDS))}, ?, 0)",
                (*_row(record), head),
            )
        self._seq[record.id] = 0
        self._head[record.id] = head

    def claim(
        self, run_id: str, pid: int, pid_start: str | None, *, seen: int | None = None
    ) -> RunRecord:
        with self._transaction():
            record = self.get(run_id)
            if record is None:
                raise ConfigurationError(f"unknown run id {run_id!r}")
            if record.status == "running" and _alive(record.pid, record.pid_start):
                raise ConfigurationError(
                    f"run {run_id} is still running (process {record.pid}); stop it first"
                )
            head, count = self._db.execute(
                "SELECT head, entries FROM runs WHERE id=?", (run_id,)
            ).fetchone()
            last = (count if isinstance(count, int) else 0) - 1
            if seen is not None and last != seen:
                raise ConfigurationError(
                    f"run {run_id} changed while it was being read (another planloom resumed "
                    f"it); see where it is with: planloom show {run_id}"
                )
            self._db.execute(
                "UPDATE runs SET status='running', finished=NULL, pid=?, pid_start=?, "
                "segments=segments+1 WHERE id=?",
                (pid, pid_start, run_id),
            )
        self._seq[run_id] = last + 1
        self._head[run_id] = str(head)
        record.status, record.pid, record.pid_start = "running", pid, pid_start
        record.finished = None
        record.segments += 1
        return record

    def append(
        self, run_id: str, kind: EntryKind, scope: str | None, data: Any, *, durable: bool
    ) -> None:
        seq = self._seq[run_id]
        self._seq[run_id] = seq + 1
        text = str(data) if isinstance(data, JSONText) else _encode(data)
        if not text.isascii():
            text = _storable(text)
        self._pending.append((run_id, seq, time.time(), kind, scope, text))
        if durable:
            with self._transaction():
                self._write_pending(alone=1)  # a row of its own
        elif len(self._pending) >= BATCH or time.monotonic() - self._since >= BATCH_SECONDS:
            self.flush()

    def update(self, run_id: str, **fields: Any) -> None:
        unknown = set(fields) - set(_FIELDS)
        if unknown:
            raise ValueError(f"unknown run fields: {sorted(unknown)}")
        values = [json.dumps(v) if k == "usage" else v for k, v in fields.items()]
        with self._transaction():
            self._write_pending()
            self._db.execute(
                f"UPDATE runs SET {', '.join(f'{k}=?' for k in fields)} WHERE id=?",
                (*values, run_id),
            )

    def flush(self) -> None:
        if not self._pending:
            return
        with self._transaction():
            self._write_pending()

    def finish(
        self, run_id: str, status: str, usage: Mapping[str, Any], done: int, end: Any
    ) -> None:
        self.append(run_id, "end", None, end, durable=False)  # committed with the update
        self.update(
            run_id, status=status, finished=time.time(), usage=dict(usage), done=done, pid=None
        )

    def close(self) -> None:
        """Write what is batched (if the file still takes it) and close."""
        try:
            with contextlib.suppress(ConfigurationError):  # a full disk at the end of a run
                self.flush()
        finally:
            self._db.close()

    def _write_pending(self, *, alone: int = 0) -> None:
        """Write what is pending (in a transaction), the last `alone` entries a row each."""
        pending = self._pending
        if pending:
            heads: dict[str, str] = {}
            rows = [*_batched(pending[: len(pending) - alone]), *pending[len(pending) - alone :]]
            hashed = []
            for run_id, seq, at, kind, scope, text in rows:
                prev = heads.get(run_id) or self._head[run_id]
                head = heads[run_id] = entry_hash(prev, seq, at, kind, scope, text)
                hashed.append((run_id, seq, at, kind, scope, text, head))
            self._db.executemany(
                "INSERT INTO journal (run_id, seq, at, kind, scope, data, hash) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                hashed,
            )
            self._db.executemany(
                "UPDATE runs SET head=?, entries=? WHERE id=?",
                [(head, self._seq[run_id], run_id) for run_id, head in heads.items()],
            )
            self._head |= heads
            self._pending = []
        self._since = time.monotonic()

    @contextlib.contextmanager
    def _transaction(self) -> Any:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            raise ConfigurationError(f"run store {self.path}: {exc}") from None

    # -- reading -------------------------------------------------------------------------

    def get(self, run_id: str) -> RunRecord | None:
        row = self._db.execute(
            f"SELECT {', '.join(_FIELDS)} FROM runs WHERE id=?", (run_id,)
        ).fetchone()
        return _record(row) if row is not None else None

    def runs(self, limit: int = 50) -> list[RunRecord]:
        rows = self._db.execute(
            f"SELECT {', '.join(_FIELDS)} FROM runs ORDER BY started DESC LIMIT ?", (limit,)
        ).fetchall()
        return [_record(row) for row in rows]

    def journal(self, run_id: str) -> list[Entry]:
        """A run's journal, in order, checked whole against its chain.

        Raises:
            ConfigurationError: an entry cannot be read, or the journal is not the one
                planloom wrote (an entry deleted, inserted, moved or edited), naming it.
        """
        self._db.execute("BEGIN")  # one snapshot: the run's row and its entries agree
        try:
            fixed = self._db.execute(
                "SELECT recipe, base_dir, head, entries FROM runs WHERE id=?", (run_id,)
            ).fetchone()
            rows = self._db.execute(
                "SELECT seq, at, kind, scope, data, hash FROM journal WHERE run_id=? ORDER BY seq",
                (run_id,),
            ).fetchall()
        finally:
            self._db.execute("COMMIT")
        read = [self._entries(run_id, *row[:5]) for row in rows]
        if fixed is not None:
            self._check_chain(run_id, fixed, rows, [len(entries) for entries in read])
        return [entry for entries in read for entry in entries]

    def _check_chain(
        self, run_id: str, fixed: tuple[Any, ...], rows: list[tuple[Any, ...]], sizes: list[int]
    ) -> None:
        """`rows` (holding `sizes` entries each) are the ones planloom wrote, in order."""
        recipe, base_dir, last, count = fixed
        if not isinstance(last, str) or not isinstance(count, int):
            self._edited(run_id, "its record lost the hash of its journal")
        head = first_hash(run_id, recipe, str(base_dir))
        expected = 0
        for (seq, at, kind, scope, text, stored), size in zip(rows, sizes, strict=True):
            if seq != expected:
                where = _named(seq, kind, size)
                self._edited(run_id, f"{_missing(expected, seq)} missing before {where}")
            head = entry_hash(head, seq, at, str(kind), scope, str(text))
            if stored != head:
                self._edited(
                    run_id,
                    f"{_named(seq, kind, size)} {'is' if size == 1 else 'are'} not the one"
                    f"{'' if size == 1 else 's'} planloom wrote there (edited, moved or "
                    "inserted, or the run's recipe or folder was changed)",
                )
            expected += size
        if expected < count:
            self._edited(run_id, f"{_missing(expected, count)} missing at its end")
        if expected > count or head != last:
            seq, _, kind, _, _, _ = rows[-1] if rows else (-1, 0, "-", 0, 0, 0)
            self._edited(
                run_id,
                f"{_named(seq, kind, sizes[-1] if sizes else 1)} is not the last one "
                f"planloom wrote (it wrote {count} entries)",
            )

    def _edited(self, run_id: str, what: str) -> NoReturn:
        raise ConfigurationError(
            f"run store {self.path}: the journal of run {run_id} was edited: {what}; the run "
            "cannot be shown or resumed"
        )

    def _entries(
        self, run_id: str, seq: Any, at: Any, kind: Any, scope: Any, text: Any
    ) -> list[Entry]:
        """A row as its `Entry`s (a batch's, numbered on from its own), checked: a store
        edited by hand or damaged is refused, saying where, rather than half read (a lost
        intent would hide a call in doubt)."""
        try:
            data = json.loads(text) if isinstance(text, str | bytes) else None
        except ValueError:
            data = None
        if kind != BATCHED or not isinstance(seq, int):
            return [self._entry(run_id, seq, at, kind, scope, data)]
        if (
            not isinstance(data, list)
            or not data
            or not all(isinstance(item, list) and len(item) == 4 for item in data)
        ):
            self._unreadable(run_id, seq, "its entries are not what planloom writes")
        return [self._entry(run_id, seq + n, *item) for n, item in enumerate(data)]

    def _entry(self, run_id: str, seq: Any, at: Any, kind: Any, scope: Any, data: Any) -> Entry:
        problem = (
            "its data is not a JSON object"
            if not isinstance(data, dict)
            else f"its kind {kind!r} is unknown"
            if kind not in _KINDS
            else "its time or scope is not what planloom writes"
            if not isinstance(at, int | float) or not (scope is None or isinstance(scope, str))
            else None
        )
        if problem is not None or not isinstance(seq, int) or not isinstance(data, dict):
            self._unreadable(run_id, seq, problem or "its number is not an integer")
        return Entry(seq, float(at), kind, scope, data)

    def _unreadable(self, run_id: str, seq: Any, problem: str) -> NoReturn:
        raise ConfigurationError(
            f"run store {self.path}: entry {seq!r} of run {run_id} cannot be read "
            f"({problem}): the store was edited or damaged; the run cannot be shown or resumed"
        )

    def integrity(self) -> str:
        """SQLite's own check of the file: `ok`, or what is wrong."""
        return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])


_Entry = tuple[str, int, float, str, str | None, str]
"""An entry to write: run id, seq, time, kind, scope, data (JSON text)."""


def _batched(pending: list[_Entry]) -> list[_Entry]:
    """`pending` as rows: each run of `PACK` or more entries of one run as one row (of kind
    `BATCHED`, numbered as its first entry, at its time), the others as they are."""
    rows: list[_Entry] = []
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
                f'[{at!r},"{kind}",{"null" if scope is None else _encode(scope)},{text}]'
                for _, _, at, kind, scope, text in pending[start:end]
            )
            rows.append((run_id, seq, at, BATCHED, None, f"[{packed}]"))
        start = end
    return rows


def _alive(pid: int | None, start: str | None) -> bool:
    if pid is None:
        return False
    if pid == os.getpid():
        return True
    now = process_start(pid)
    return now is not None and (start is None or now == start)


def is_alive(record: RunRecord) -> bool:
    """Whether the process running `record` is still there."""
    return record.status == "running" and _alive(record.pid, record.pid_start)


def _row(record: RunRecord) -> tuple[Any, ...]:
    values = {name: getattr(record, name) for name in _FIELDS}
    values["usage"] = json.dumps(values["usage"])
    return tuple(values[name] for name in _FIELDS)


def _record(row: tuple[Any, ...]) -> RunRecord:
    """A row as a `RunRecord`; a field edited into another type reads as its default."""
    values = dict(zip(_FIELDS, row, strict=True))
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


def _named(seq: int, kind: str, size: int) -> str:
    """`entry 7 (intent)`, or a batch row's `entries 7 to 30 (a batch)`."""
    if size == 1 and kind != BATCHED:
        return f"entry {seq} ({kind})"
    return f"entries {seq} to {seq + size - 1} (a batch)"


def _missing(first: int, end: int) -> str:
    """`entry 15 is` or `entries 16 to 97 are`: the numbers from `first` to before `end`."""
    return f"entry {first} is" if end == first + 1 else f"entries {first} to {end - 1} are"
