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
import json
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from engine.app.sqlite_store._rows import (
    BATCH,
    BATCH_SECONDS,
    BATCHED,
    FIELDS,
    FORMAT,
    KINDS,
    PACK,
    SCHEMA,
    Pending,
    batched,
    encode,
    entries_named,
    entry_hash,
    first_hash,
    is_alive,
    missing_entries,
    process_alive,
    process_start,
    record_of,
    row_of,
    storable,
)
from engine.errors import ConfigurationError
from engine.store import Entry, EntryKind, JSONText, RunRecord

__all__ = [
    "BATCHED",
    "FORMAT",
    "PACK",
    "SqliteStore",
    "entry_hash",
    "first_hash",
    "is_alive",
    "open_store",
    "process_start",
]


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
            self._db.executescript(SCHEMA)
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
        self._pending: list[Pending] = []
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
                f"INSERT INTO runs ({', '.join(FIELDS)}, head, entries) "
                f"VALUES ({', '.join('?' * len(FIELDS))}, ?, 0)",
                (*row_of(record), head),
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
            if record.status == "running" and process_alive(record.pid, record.pid_start):
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
        text = str(data) if isinstance(data, JSONText) else encode(data)
        if not text.isascii():
            text = storable(text)
        self._pending.append((run_id, seq, time.time(), kind, scope, text))
        if durable:
            with self._transaction():
                self._write_pending(alone=1)  # a row of its own
        elif len(self._pending) >= BATCH or time.monotonic() - self._since >= BATCH_SECONDS:
            self.flush()

    def update(self, run_id: str, **fields: Any) -> None:
        unknown = set(fields) - set(FIELDS)
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
            rows = [*batched(pending[: len(pending) - alone]), *pending[len(pending) - alone :]]
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
            f"SELECT {', '.join(FIELDS)} FROM runs WHERE id=?", (run_id,)
        ).fetchone()
        return record_of(row) if row is not None else None

    def runs(self, limit: int = 50) -> list[RunRecord]:
        rows = self._db.execute(
            f"SELECT {', '.join(FIELDS)} FROM runs ORDER BY started DESC LIMIT ?", (limit,)
        ).fetchall()
        return [record_of(row) for row in rows]

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
                where = entries_named(seq, kind, size)
                self._edited(run_id, f"{missing_entries(expected, seq)} missing before {where}")
            head = entry_hash(head, seq, at, str(kind), scope, str(text))
            if stored != head:
                self._edited(
                    run_id,
                    f"{entries_named(seq, kind, size)} {'is' if size == 1 else 'are'} not the one"
                    f"{'' if size == 1 else 's'} planloom wrote there (edited, moved or "
                    "inserted, or the run's recipe or folder was changed)",
                )
            expected += size
        if expected < count:
            self._edited(run_id, f"{missing_entries(expected, count)} missing at its end")
        if expected > count or head != last:
            seq, _, kind, _, _, _ = rows[-1] if rows else (-1, 0, "-", 0, 0, 0)
            self._edited(
                run_id,
                f"{entries_named(seq, kind, sizes[-1] if sizes else 1)} is not the last one "
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
            if kind not in KINDS
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
