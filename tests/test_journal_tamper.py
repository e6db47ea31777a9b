"""A journal edited by hand is refused at its boundary: through the real `planloom`
command, a store whose journal rows were deleted, swapped, inserted or edited with Python's
sqlite3 (as with the sqlite3 CLI) makes `resume` and `show` exit 2 naming the entry, and
nothing runs.

The run: step `a` appends to a ledger, step `b` fails until a file `fixed` exists, then
writes `marker`. Its journal: start, plan, then for each step approval, intent, tool
result, step; then end. Resumed untouched (with `fixed` made), `b` runs and writes
`marker`: the control that shows a refused resume would have run something.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from _durable_attacks import lab
from _procs import planloom

from engine.app.sqlite_store import FORMAT, open_store
from engine.errors import ConfigurationError
from engine.store import RunRecord

RECIPE = """\
version: 1
name: tamper
capabilities:
  shell: {allow: [sh, sleep], unsafe_args: [sh]}
steps:
  - id: a
    tool: shell.run
    params: {argv: [sh, -c, "echo a >> ledger.txt"]}
  - id: b
    tool: shell.run
    depends_on: [a]
    params: {argv: [sh, -c, "test -e fixed && echo b > marker"]}
"""

KINDS = ["start", "plan", "approval", "intent", "tool", "step", "approval", "intent", "tool"]
KINDS += ["step", "end"]
# The row of each kind an edit aims at: the plan, and step b's entries.
AT = {"plan": 1, "approval": 6, "intent": 7, "result": 8, "step": 9}
LAST = len(KINDS) - 1


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A folder holding the recipe and the store of one failed run (kept aside in
    `saved/`), and the run's id."""
    folder = tmp_path_factory.mktemp("stored")
    (folder / "r.yaml").write_text(RECIPE, encoding="utf-8")
    done = planloom("run", "r.yaml", "--yes", "--store", "s.db", cwd=folder)
    assert done.returncode == 1, done.stderr
    with contextlib.closing(sqlite3.connect(folder / "s.db")) as db:
        (run_id,) = db.execute("SELECT id FROM runs").fetchone()
        kinds = [k for (k,) in db.execute("SELECT kind FROM journal ORDER BY seq")]
    assert kinds == KINDS
    (folder / "saved").mkdir()
    for path in folder.glob("s.db*"):
        shutil.copy(path, folder / "saved" / path.name)
    return folder, str(run_id)


@pytest.fixture
def run(stored: tuple[Path, str]) -> Iterator[tuple[Path, str]]:
    """The stored run as it was after it ran (its folder is where it resumes: its
    `base_dir` is part of the chain), with `fixed` made so that `b` would succeed."""
    folder, run_id = stored
    for path in folder.glob("s.db*"):
        path.unlink()
    for path in (folder / "saved").iterdir():
        shutil.copy(path, folder / path.name)
    (folder / "ledger.txt").write_text("a\n")
    (folder / "fixed").touch()
    (folder / "marker").unlink(missing_ok=True)
    yield folder, run_id
    (folder / "fixed").unlink()


def _edit(store: Path, sql: str, *args: object) -> None:
    with contextlib.closing(sqlite3.connect(store)) as db, db:
        db.execute(sql, args)


def _swap(store: Path, run_id: str, seq: int, other: int) -> None:
    _edit(store, "UPDATE journal SET seq=-1 WHERE run_id=? AND seq=?", run_id, seq)
    _edit(store, "UPDATE journal SET seq=? WHERE run_id=? AND seq=?", seq, run_id, other)
    _edit(store, "UPDATE journal SET seq=? WHERE run_id=? AND seq=-1", other, run_id)


def _forge(store: Path, run_id: str, seq: int, kind: str, *, like: int) -> None:
    """A row of `kind` at `seq`, its data and hash copied from entry `like`."""
    _edit(
        store,
        "INSERT INTO journal SELECT run_id, ?, at, ?, scope, data, hash FROM journal "
        "WHERE run_id=? AND seq=?",
        seq,
        kind,
        run_id,
        like,
    )


EDITS = [
    *[(f"delete/{name}", "delete", seq) for name, seq in AT.items()],
    ("delete/end", "delete", LAST),
    *[(f"swap/{name}", "swap", seq) for name, seq in AT.items()],
    *[(f"edit/{name}", "edit", seq) for name, seq in AT.items()],
    *[(f"insert/{name}", "insert", seq) for name, seq in AT.items()],
    *[(f"insert-after-gap/{name}", "gap", seq) for name, seq in AT.items()],
]


@pytest.mark.slow
@pytest.mark.parametrize(("how", "seq"), [e[1:] for e in EDITS], ids=[e[0] for e in EDITS])
def test_an_edited_journal_is_refused_naming_the_entry_and_nothing_runs(
    run: tuple[Path, str], how: str, seq: int
) -> None:
    folder, run_id = run
    store = folder / "s.db"
    if how == "delete":
        _edit(store, "DELETE FROM journal WHERE run_id=? AND seq=?", run_id, seq)
        named = (
            f"entry {seq} is missing at its end"
            if seq == LAST
            else f"entry {seq} is missing before entry {seq + 1} ({KINDS[seq + 1]})"
        )
    elif how == "swap":
        _swap(store, run_id, seq, seq + 1)
        named = f"entry {seq} ({KINDS[seq + 1]}) is not the one planloom wrote there"
    elif how == "edit":
        _edit(
            store,
            "UPDATE journal SET data=json_set(data, '$.edited', 1) WHERE run_id=? AND seq=?",
            run_id,
            seq,
        )
        named = f"entry {seq} ({KINDS[seq]}) is not the one planloom wrote there"
    elif how == "insert":  # a copy of the entry, after the last one
        _forge(store, run_id, LAST + 1, KINDS[seq], like=seq)
        named = f"entry {LAST + 1} ({KINDS[seq]}) is not the one planloom wrote there"
    else:  # after a gap in the numbers, as if the run went on
        _forge(store, run_id, LAST + 50, KINDS[seq], like=seq)
        named = f"entries {LAST + 1} to {LAST + 49} are missing before entry {LAST + 50}"
    refused = f"the journal of run {run_id} was edited: {named}"
    for command in (("resume", run_id, "--yes"), ("show", run_id), ("report", run_id)):
        done = planloom(*command, "--store", "s.db", cwd=folder)
        assert (done.returncode, done.stdout) == (2, ""), (command, done.stderr)
        assert refused in done.stderr, (command, done.stderr)
        assert "Traceback" not in done.stderr
    assert not (folder / "marker").exists(), "step b ran from an edited journal"
    assert (folder / "ledger.txt").read_text() == "a\n", "step a ran again"


@pytest.mark.parametrize("field", ["recipe", "base_dir", "head", "entries"])
def test_an_edited_run_record_is_refused(run: tuple[Path, str], field: str) -> None:
    """The fields of a run a resume trusts (the recipe it reads again, the folder its
    relative paths start in) and the chain's end are part of the chain."""
    folder, run_id = run
    value: object = {"recipe": "/tmp/other.yaml", "base_dir": "/tmp", "head": "0" * 64}.get(
        field, LAST
    )
    _edit(folder / "s.db", f"UPDATE runs SET {field}=? WHERE id=?", value, run_id)
    done = planloom("resume", run_id, "--yes", "--store", "s.db", cwd=folder)
    assert done.returncode == 2, done.stderr
    assert f"the journal of run {run_id} was edited: " in done.stderr
    assert not (folder / "marker").exists()


@pytest.mark.slow
def test_the_untouched_run_resumes_and_runs_step_b(run: tuple[Path, str]) -> None:
    """The control: the same store, not edited, resumes and `b` writes its marker."""
    folder, run_id = run
    done = planloom("resume", run_id, "--yes", "--store", "s.db", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert (folder / "marker").read_text() == "b\n"
    assert (folder / "ledger.txt").read_text() == "a\n"
    shown = planloom("show", run_id, "--store", "s.db", cwd=folder)
    assert shown.returncode == 0, shown.stderr  # the resume's entries chain on


@pytest.mark.slow
def test_deleting_the_trailing_intent_of_a_killed_call_is_refused(tmp_path: Path) -> None:
    """`kill -9` during a side-effect call leaves its intent last in the journal; with that
    intent deleted, a resume would make the call again unasked. It is refused instead."""
    with lab(tmp_path) as it:
        it.recipe(
            """\
            version: 1
            name: inflight
            capabilities:
              shell: {allow: [sh, sleep], unsafe_args: [sh]}
            steps:
              - id: send
                tool: shell.run
                timeout: 600
                params: {argv: [sh, -c, "echo sent >> ledger.txt; sleep MARK"]}
            """
        )
        run = it.start("run", "r.yaml", "--yes")
        code = it.stop_when(run, lambda: it.ledger() == ["sent"], "the append")
        assert code == -signal.SIGKILL
        run_id = it.run_id()
        with contextlib.closing(sqlite3.connect(it.store)) as db, db:
            (last, kind) = db.execute(
                "SELECT seq, kind FROM journal ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            assert kind == "intent"
            db.execute("DELETE FROM journal WHERE seq=?", (last,))
        done = it.cli("resume", run_id, "--yes")
        assert done.returncode == 2, done.stderr
        assert f"entry {last} is missing at its end" in done.stderr
        assert it.ledger() == ["sent"]


def test_a_store_of_format_1_is_chained_as_it_stands_then_checked(tmp_path: Path) -> None:
    """A store written before entries were hashed: opened by this planloom, its runs are
    chained as they are (they read and resume as before); an edit after that is refused."""
    path = tmp_path / "runs.db"
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.executescript(
            """
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            INSERT INTO meta VALUES ('format', '1');
            CREATE TABLE runs (id TEXT PRIMARY KEY, name TEXT NOT NULL, recipe TEXT,
                base_dir TEXT NOT NULL, status TEXT NOT NULL, started REAL NOT NULL,
                finished REAL, steps INTEGER NOT NULL DEFAULT 0, done INTEGER NOT NULL
                DEFAULT 0, usage TEXT NOT NULL DEFAULT '{}', pid INTEGER, pid_start TEXT,
                segments INTEGER NOT NULL DEFAULT 1);
            CREATE TABLE journal (run_id TEXT NOT NULL, seq INTEGER NOT NULL, at REAL NOT NULL,
                kind TEXT NOT NULL, scope TEXT, data TEXT NOT NULL, PRIMARY KEY (run_id, seq))
                WITHOUT ROWID;
            INSERT INTO runs (id, name, recipe, base_dir, status, started)
                VALUES ('old', 'n', NULL, '/x', 'failed', 1.5);
            INSERT INTO journal VALUES ('old', 0, 2.5, 'start', NULL, '{"segment": 1}');
            INSERT INTO journal VALUES ('old', 1, 3.5, 'step', 'a', '{"n": 1}');
            """
        )
    store = open_store(path)
    try:
        assert [(e.kind, e.data) for e in store.journal("old")] == [
            ("start", {"segment": 1}),
            ("step", {"n": 1}),
        ]
        store.begin(RunRecord(id="new", name="n", recipe=None, base_dir="/x"))
        store.append("new", "start", None, {"segment": 1}, durable=True)
        assert len(store.journal("new")) == 1
    finally:
        store.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT value FROM meta").fetchone() == (str(FORMAT),)
    _edit(path, "UPDATE journal SET data='{\"n\": 2}' WHERE run_id='old' AND seq=1")
    store = open_store(path)
    try:
        with pytest.raises(
            ConfigurationError, match=r"entry 1 \(step\) is not the one planloom wrote"
        ):
            store.journal("old")
    finally:
        store.close()
