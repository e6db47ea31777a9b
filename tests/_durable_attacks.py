"""Helpers for the attack tests on durable runs (`tests/test_durable_attacks.py`): a folder
with a recipe and a run store, the real `planloom` run in it (to its end, or killed with a
signal at a moment the test watches for), the ledger its side effects append to, and stores
written by hand the way an attacker with the sqlite3 CLI would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from _forkserver import Forked
from _procs import TIMEOUT, background, env, marker_seconds, pids_with, planloom

from engine.app.sqlite_store import entry_hash, first_hash, open_store
from engine.store import RunRecord

__all__ = ["FIRST_CALL_WAITS", "TESTS", "Lab", "forged_store", "lab", "rechain"]

TESTS = Path(__file__).parent
WATCH = 60.0  # seconds to wait for a moment: generous on a loaded machine
POLL = 0.01

FIRST_CALL_WAITS = """\
test -e "$1.once" || { touch "$1.once"; first=1; }
echo "$1" >> ledger.txt
test -z "$first" || sleep MARK
"""
"""A script for `Lab.write`, run as `sh SCRIPT NAME`: NAME appended to the ledger (the side
effect), then, the first time only, a wait for the kill. The first time is marked before the
line is written: the kill comes once the line is on the ledger, and a kill between the line
and the mark would make the next call wait too."""


class Lab:
    """One folder: a recipe (`r.yaml`), a store (`s.db`), a ledger (`ledger.txt`) the
    recipe's side effects append to, and `marker`, a unique sleep duration whose processes
    are killed when the lab closes."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.marker = marker_seconds(300)
        self.store = folder / "s.db"
        self.environ: dict[str, str] = env()

    def write(self, name: str, text: str) -> Path:
        path = self.folder / name
        path.write_text(textwrap.dedent(text).replace("MARK", self.marker), encoding="utf-8")
        return path

    def recipe(self, text: str) -> Path:
        return self.write("r.yaml", text)

    def ledger(self) -> list[str]:
        path = self.folder / "ledger.txt"
        return path.read_text(encoding="utf-8").split() if path.exists() else []

    def cli(
        self, *args: str | Path, environ: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`planloom ARGS --store s.db`, to its end, with no stdin."""
        return planloom(
            *args, "--store", self.store, cwd=self.folder, environ=dict(environ or self.environ)
        )

    def start(
        self,
        *args: str | Path,
        environ: Mapping[str, str] | None = None,
        name: str = "run",
        fork: bool = True,
    ) -> subprocess.Popen[bytes] | Forked:
        """`planloom ARGS --store s.db` in the background, output to `NAME.out`/`.err`."""
        out = (self.folder / f"{name}.out").open("wb")
        err = (self.folder / f"{name}.err").open("wb")
        with out, err:
            return background(
                *args, "--store", self.store, cwd=self.folder,
                environ=dict(environ or self.environ), stdout=out, stderr=err, fork=fork,
            )  # fmt: skip

    def output(self, name: str) -> str:
        return (self.folder / f"{name}.err").read_text(errors="replace")

    def wait_for(
        self, proc: subprocess.Popen[bytes] | Forked, moment: Callable[[], bool], what: str
    ) -> None:
        """Return once `moment()` holds; fail if `proc` ends first or it never comes."""
        deadline = time.monotonic() + WATCH
        while not moment():
            if proc.poll() is not None:
                raise AssertionError(
                    f"planloom ended (exit {proc.returncode}) before {what}; ledger {self.ledger()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} never came in {WATCH} s")
            time.sleep(POLL)

    def stop_when(
        self,
        proc: subprocess.Popen[bytes] | Forked,
        moment: Callable[[], bool],
        what: str,
        sig: int = signal.SIGKILL,
    ) -> int:
        """Send `sig` to `proc` once `moment()` holds; its exit status."""
        try:
            self.wait_for(proc, moment, what)
            proc.send_signal(sig)
            return proc.wait(TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(TIMEOUT)

    def run_id(self) -> str:
        with contextlib.closing(sqlite3.connect(self.store)) as db:
            rows = db.execute("SELECT id FROM runs ORDER BY started").fetchall()
        assert rows, f"no run in {self.store}"
        return str(rows[-1][0])

    def rows(self, kind: str) -> list[dict[str, Any]]:
        """The data of every journal entry of `kind`, in order."""
        with contextlib.closing(sqlite3.connect(self.store)) as db:
            found = db.execute(
                "SELECT data FROM journal WHERE kind=? ORDER BY seq", (kind,)
            ).fetchall()
        return [json.loads(text) for (text,) in found]

    def close(self) -> None:
        for pid in pids_with(self.marker):  # a failed test must not leave a sleep behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def lab(folder: Path) -> Iterator[Lab]:
    opened = Lab(folder)
    try:
        yield opened
    finally:
        opened.close()


def forged_store(
    path: Path,
    run_id: str,
    *,
    recipe: Path | None,
    base_dir: Path,
    rows: list[tuple[str, str | None, str]],
    status: str = "failed",
) -> None:
    """A store holding one run that no planloom wrote: its summary, then `rows` (kind,
    scope, data as raw text) as its journal, as `sqlite3 runs.db "INSERT ..."` would."""
    store = open_store(path)
    try:
        now = time.time()
        store.begin(
            RunRecord(
                id=run_id,
                name="forged",
                recipe=str(recipe) if recipe is not None else None,
                base_dir=str(base_dir),
                status=status,
                started=now - 5,
                finished=now - 1 if status != "running" else None,
                steps=1,
            )
        )
    finally:
        store.close()
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.executemany(
            "INSERT INTO journal (run_id, seq, at, kind, scope, data) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (run_id, seq, now - 4 + seq * 0.01, kind, scope, data)
                for seq, (kind, scope, data) in enumerate(rows)
            ],
        )
    rechain(path, run_id)


def rechain(path: Path, run_id: str) -> None:
    """Hash run `run_id`'s journal again as it now stands, as a forger who knows how
    planloom chains its entries would after editing them (the chain has no key): what is
    behind the chain must hold on its own."""
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        recipe, base_dir = db.execute(
            "SELECT recipe, base_dir FROM runs WHERE id=?", (run_id,)
        ).fetchone()
        head = first_hash(run_id, recipe, base_dir)
        rows = db.execute(
            "SELECT seq, at, kind, scope, data FROM journal WHERE run_id=? ORDER BY seq",
            (run_id,),
        ).fetchall()
        for seq, at, kind, scope, data in rows:
            head = entry_hash(head, seq, at, kind, scope, data)
            db.execute("UPDATE journal SET hash=? WHERE run_id=? AND seq=?", (head, run_id, seq))
        db.execute("UPDATE runs SET head=?, entries=? WHERE id=?", (head, len(rows), run_id))
