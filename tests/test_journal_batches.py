"""A burst of entries is one row of the journal (a `batch`), and still reads, resumes and
refuses edits entry by entry: in-process against the store, and through the real
`planloom` command against a run of many quick steps.

The run: twelve read-only steps `r0`..`r11` (each reads `in.txt`), then step `b`, which
appends to a ledger and fails until a file `fixed` exists. The twelve step results end
together, so they are written as one batch (with `b`'s approval); `b`'s intent and result
have a row each.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from _procs import planloom

from engine.app.sqlite_store import BATCHED, FORMAT, PACK, open_store
from engine.errors import ConfigurationError
from engine.store import RunRecord

READS = 12
RECIPE = "\n".join(
    [
        "version: 1",
        "name: burst",
        "capabilities:",
        "  fs: {}",
        "  shell: {allow: [sh], unsafe_args: [sh]}",
        "steps:",
        *[f"  - {{id: r{n}, tool: fs.read, params: {{path: in.txt}}}}" for n in range(READS)],
        "  - id: b",
        "    tool: shell.run",
        f"    depends_on: [{', '.join(f'r{n}' for n in range(READS))}]",
        '    params: {argv: [sh, -c, "echo b >> ledger.txt; test -e fixed"]}',
    ]
)


def _rows(store: Path) -> list[tuple[int, str, int]]:
    """The journal's rows: seq, kind, and how many entries each holds."""
    with contextlib.closing(sqlite3.connect(store)) as db:
        rows = db.execute("SELECT seq, kind, data FROM journal ORDER BY seq").fetchall()
    return [
        (seq, kind, len(json.loads(data)) if kind == BATCHED else 1) for seq, kind, data in rows
    ]


def _edit(store: Path, sql: str, *args: object) -> None:
    with contextlib.closing(sqlite3.connect(store)) as db, db:
        db.execute(sql, args)


# -- the store -----------------------------------------------------------------------------


def test_a_batch_is_one_row_and_reads_back_as_its_entries(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = open_store(path)
    try:
        store.begin(RunRecord(id="r", name="n", recipe=None, base_dir="/x"))
        store.append("r", "start", None, {"segment": 1}, durable=True)
        for n in range(PACK + 2):
            store.append("r", "step", f"s{n}[{n}]", {"n": n, "text": "é\n\"'"}, durable=False)
        store.append("r", "intent", "t", {"i": 1}, durable=True)  # commits the batch first
        for n in range(PACK - 1):  # too few for a batch: a row each
            store.append("r", "step", f"u{n}", {"n": n}, durable=False)
        store.flush()
        entries = store.journal("r")
    finally:
        store.close()
    assert [(e.seq, e.kind, e.scope) for e in entries] == [
        (0, "start", None),
        *[(1 + n, "step", f"s{n}[{n}]") for n in range(PACK + 2)],
        (PACK + 3, "intent", "t"),
        *[(PACK + 4 + n, "step", f"u{n}") for n in range(PACK - 1)],
    ]
    assert entries[3].data == {"n": 2, "text": "é\n\"'"}
    assert all(a.at <= b.at for a, b in itertools.pairwise(entries))
    assert _rows(path) == [
        (0, "start", 1),
        (1, BATCHED, PACK + 2),
        (PACK + 3, "intent", 1),
        *[(PACK + 4 + n, "step", 1) for n in range(PACK - 1)],
    ]
    # A resume goes on numbering after the batch, and the chain holds across it.
    store = open_store(path)
    try:
        store.claim("r", 1, None, seen=len(entries) - 1)
        store.append("r", "start", None, {"segment": 2}, durable=True)
        assert [e.seq for e in store.journal("r")] == list(range(len(entries) + 1))
    finally:
        store.close()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ("[]", "its entries are not what planloom writes"),
        ('[[1.5, "step", "a"]]', "its entries are not what planloom writes"),
        ('{"n": 1}', "its entries are not what planloom writes"),
        ('[[1.5, "batch", null, {}]]', "its kind 'batch' is unknown"),
        ('[[1.5, "step", null, [1]]]', "its data is not a JSON object"),
        ('[[1.5, "step", 7, {}]]', "its time or scope is not what planloom writes"),
    ],
)
def test_a_batch_row_planloom_did_not_write_cannot_be_read(
    tmp_path: Path, data: str, problem: str
) -> None:
    path = tmp_path / "runs.db"
    store = open_store(path)
    try:
        store.begin(RunRecord(id="r", name="n", recipe=None, base_dir="/x"))
        for n in range(PACK):
            store.append("r", "step", f"s{n}", {"n": n}, durable=False)
        store.flush()
    finally:
        store.close()
    _edit(path, "UPDATE journal SET data=? WHERE seq=0", data)
    store = open_store(path)
    try:
        with pytest.raises(
            ConfigurationError, match=rf"entry 0 of run r cannot be read \({problem}"
        ):
            store.journal("r")
    finally:
        store.close()


def test_a_store_of_format_2_is_read_as_it_is_and_a_newer_one_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = open_store(path)
    try:
        store.begin(RunRecord(id="r", name="n", recipe=None, base_dir="/x"))
        store.append("r", "start", None, {"segment": 1}, durable=True)
    finally:
        store.close()
    _edit(path, "UPDATE meta SET value='2' WHERE key='format'")  # rows of one entry each
    store = open_store(path)
    try:
        assert [e.kind for e in store.journal("r")] == ["start"]
    finally:
        store.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT value FROM meta").fetchone() == (str(FORMAT),)
    _edit(path, "UPDATE meta SET value=? WHERE key='format'", str(FORMAT + 1))
    with pytest.raises(ConfigurationError, match=f"format {FORMAT + 1} is not supported"):
        open_store(path)


# -- through the command -------------------------------------------------------------------


@pytest.fixture(scope="module")
def stored(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, str, list[tuple[int, str, int]]]:
    """A folder with the recipe and the store of one failed run (kept in `saved/`), the
    run's id and its journal's rows."""
    folder = tmp_path_factory.mktemp("burst")
    (folder / "r.yaml").write_text(RECIPE, encoding="utf-8")
    (folder / "in.txt").write_text("x\n", encoding="utf-8")
    done = planloom("run", "r.yaml", "--yes", "--store", "s.db", cwd=folder)
    assert done.returncode == 1, done.stderr
    with contextlib.closing(sqlite3.connect(folder / "s.db")) as db:
        (run_id,) = db.execute("SELECT id FROM runs").fetchone()
    rows = _rows(folder / "s.db")
    (folder / "saved").mkdir()
    for path in folder.glob("s.db*"):
        shutil.copy(path, folder / "saved" / path.name)
    return folder, str(run_id), rows


@pytest.fixture
def run(
    stored: tuple[Path, str, list[tuple[int, str, int]]],
) -> Iterator[tuple[Path, str, list[tuple[int, str, int]]]]:
    folder, run_id, rows = stored
    for path in folder.glob("s.db*"):
        path.unlink()
    for path in (folder / "saved").iterdir():
        shutil.copy(path, folder / path.name)
    (folder / "ledger.txt").write_text("b\n")
    (folder / "fixed").touch()
    yield folder, run_id, rows
    (folder / "fixed").unlink()


def _batch(rows: list[tuple[int, str, int]]) -> tuple[int, int, int]:
    """The first batch row: its seq, its size, and the row after it's seq."""
    for index, (seq, kind, size) in enumerate(rows):
        if kind == BATCHED:
            return seq, size, rows[index + 1][0]
    raise AssertionError(f"no batch row in {rows}")


@pytest.mark.slow
def test_the_run_of_quick_steps_has_a_batch_row_and_resumes(
    run: tuple[Path, str, list[tuple[int, str, int]]],
) -> None:
    folder, run_id, rows = run
    _seq, size, _ = _batch(rows)
    assert size >= PACK
    kinds = [kind for _, kind, _ in rows]
    assert kinds[:2] == ["start", "plan"]
    assert kinds[-1] in ("end", BATCHED)
    assert sum(size for _, _, size in rows) == rows[-1][0] + rows[-1][2]  # no gap
    shown = planloom("show", run_id, "--json", "--store", "s.db", cwd=folder)
    assert shown.returncode == 0, shown.stderr
    steps = json.loads(shown.stdout)["steps"]
    assert {k: v["status"] for k, v in steps.items()} == {
        **{f"r{n}": "succeeded" for n in range(READS)},
        "b": "failed",
    }
    done = planloom("resume", run_id, "--yes", "--json", "--store", "s.db", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["steps"]["b"]["status"] == "succeeded"
    assert (folder / "ledger.txt").read_text() == "b\nb\n"
    again = planloom("show", run_id, "--store", "s.db", cwd=folder)
    assert again.returncode == 0, again.stderr  # the resume's entries chain on


@pytest.mark.slow
@pytest.mark.parametrize("how", ["edit", "delete", "swap", "copy"])
def test_an_edited_batch_is_refused_naming_its_entries_and_nothing_runs(
    run: tuple[Path, str, list[tuple[int, str, int]]], how: str
) -> None:
    folder, run_id, rows = run
    store = folder / "s.db"
    seq, size, after = _batch(rows)
    entries = f"entries {seq} to {seq + size - 1}"
    if how == "edit":  # one step's output, inside the batch
        _edit(
            store,
            "UPDATE journal SET data=json_set(data, '$[2][3].result.output', 'forged') "
            "WHERE run_id=? AND seq=?",
            run_id,
            seq,
        )
        named = f"{entries} (a batch) are not the ones planloom wrote there"
    elif how == "delete":
        _edit(store, "DELETE FROM journal WHERE run_id=? AND seq=?", run_id, seq)
        after_kind = next(kind for s, kind, _ in rows if s == after)
        named = f"{entries} are missing before entry {after} ({after_kind})"
    elif how == "swap":  # the batch and the row after it trade places
        _edit(store, "UPDATE journal SET seq=-1 WHERE run_id=? AND seq=?", run_id, seq)
        _edit(store, "UPDATE journal SET seq=? WHERE run_id=? AND seq=?", seq, run_id, after)
        _edit(store, "UPDATE journal SET seq=? WHERE run_id=? AND seq=-1", after, run_id)
        named = f"entry {seq} ("  # the row now first is not the one written there
    else:  # a copy of the batch after the last row
        end = rows[-1][0] + rows[-1][2]
        _edit(
            store,
            "INSERT INTO journal SELECT run_id, ?, at, kind, scope, data, hash FROM journal "
            "WHERE run_id=? AND seq=?",
            end,
            run_id,
            seq,
        )
        named = f"entries {end} to {end + size - 1} (a batch) are not the ones planloom wrote"
    for command in (("resume", run_id, "--yes"), ("show", run_id), ("report", run_id)):
        done = planloom(*command, "--store", "s.db", cwd=folder)
        assert (done.returncode, done.stdout) == (2, ""), (command, done.stderr)
        assert f"the journal of run {run_id} was edited: {named}" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert (folder / "ledger.txt").read_text() == "b\n", "step b ran from an edited journal"
