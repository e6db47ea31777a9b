"""The crash battery's harness: one recipe run by the real `planloom` in a subprocess,
watched through its journal, its ledger file and the servers it talks to, and killed with
SIGKILL at a chosen moment.

The recipe (`recipe_text`) has read-only steps (`fs.read`, `fs.list`, two `http.request`
GETs of a local `Pages` server), side-effect shell steps that each append one line to
`ledger.txt` between two sleeps (so a kill can land before, during or after the append),
parallel branches, an agent step asking a `FakeOpenAIServer` (a `Model` that can hold a
call unanswered), an `idempotent: true` step whose command appends its line only if it
is missing, and a `finally` step.

A `Crash` is one such run in its own folder; `Moment` says when to kill it (a predicate over
what the test `Seen`), and which calls the servers hold unanswered so that the kill lands
inside them. `Crash.kill_at` returns a `Killed`: what was on disk at the kill, what was
still alive 1 s later, SQLite's own check of the store, and what `planloom runs --json`
says of the run.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import sqlite3
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _forkserver import Forked
from _procs import alive, background, env, pids_with, planloom

from engine.testing import ChatReply, ChatRequest, FakeOpenAIServer, ToolCall

__all__ = [
    "LEDGER_STEPS",
    "Crash",
    "Killed",
    "Model",
    "Moment",
    "Pages",
    "Seen",
    "recipe_text",
]

LEDGER_STEPS = ("one", "two", "three", "tidy", "close")
"""The side-effect steps, in the order they run; each appends the line named after it
(`three` appends `three <the agent's answer>`)."""

HOLD = 60.0  # seconds a held call waits at most: a test that forgets to release still ends
WATCH = 60.0  # seconds to wait for a moment: generous on a loaded machine
POLL = 0.005  # seconds between looks at the journal and the ledger
GONE_WITHIN = 1.0  # the README's "Durable runs": nothing a killed run started is alive 1 s later
KEPT = frozenset({"succeeded", "fallback", "failed_acceptable", "skipped"})
"""The statuses a resume keeps (the README's "Durable runs")."""

_HEAD = """\
version: 1
name: battery
capabilities:
  fs: {root: ., read: true}
  shell: {allow: [sh, sleep, grep], unsafe_args: [sh]}
  http: {allow: [127.0.0.1], ports: [PORT], allow_http: true, private_networks: [127.0.0.1/32]}
limits: {max_parallel: 4, timeout: 60, max_duration: 300}
steps:
"""


def _append(line: str, when: str = "") -> str:
    """A shell command appending `line` to the ledger (if `when` holds), between sleeps."""
    return f'"sleep MARK; {when}echo {line} >> ledger.txt; sleep MARK"'


_STEPS = {
    "seed": "{id: seed, tool: fs.read, params: {path: seed.txt}}\n",
    "look": "{id: look, tool: fs.list, params: {path: .}}\n",
    "fetch": """\
id: fetch
    tool: http.request
    params: {url: "http://127.0.0.1:PORT/fetch"}
    depends_on: [seed, look]
""",
    "one": f"""\
id: one
    tool: shell.run
    params: {{argv: [sh, -c, {_append("one")}]}}
    depends_on: [fetch]
""",
    "check": """\
id: check
    tool: http.request
    params: {url: "http://127.0.0.1:PORT/check"}
    depends_on: [one]
""",
    "two": f"""\
id: two
    tool: shell.run
    params: {{argv: [sh, -c, {_append("TWO")}]}}
    depends_on: [check]
""",
    "think": """\
id: think
    agent: {goal: "Read seed.txt, then answer in one word", tools: [fs.read], max_iterations: 3}
    depends_on: [check]
""",
    "three": f"""\
id: three
    tool: shell.run
    params: {{argv: [sh, -c, {_append("'three ${{ steps.think.output }}'")}]}}
    depends_on: [two, think]
""",
    "tidy": f"""\
id: tidy
    tool: shell.run
    idempotent: true
    params: {{argv: [sh, -c, {_append("tidy", "grep -qx tidy ledger.txt || ")}]}}
    depends_on: [three]
""",
    "extra": """\
id: extra
    tool: fs.read
    params: {path: seed.txt}
    depends_on: [three]
""",
}

_FINALLY = f"""\
finally:
  - id: close
    tool: shell.run
    params: {{argv: [sh, -c, {_append("close")}]}}
"""


def recipe_text(
    port: int, marker: str, *, two: str = "two", extra: bool = False, drop: str | None = None
) -> str:
    """The battery's recipe for the `Pages` server on `port`; every sleep is `marker`.

    The keywords make changed recipes: `two` is the line step `two` appends, `extra` adds a
    step, `drop` removes one (nothing may depend on it).
    """
    steps = [s for s in _STEPS if s != drop and (extra or s != "extra")]
    text = _HEAD + "".join(f"  - {_STEPS[s]}" for s in steps) + _FINALLY
    return text.replace("PORT", str(port)).replace("MARK", marker).replace("TWO", two)


def sleep_marker() -> str:
    """A sleep of about 0.4 s whose digits are unique: the kill windows of the ledger steps
    (before and after each append), and a marker for their processes in /proc."""
    return f"0.4{uuid.uuid4().int % 10**7:07d}"


# -- the servers ---------------------------------------------------------------------------


class Pages:
    """The web pages the recipe's read-only `http.request` steps GET, on 127.0.0.1,
    answered after `delay` seconds (a kill just after the plan lands before any side
    effect).

    Attributes:
        hits: requests received, by path (`/fetch`, `/check`).
        hold: paths whose requests wait (unanswered) until `release` is set.
    """

    def __init__(self, delay: float = 0.25) -> None:
        self.delay = delay
        self.hits: Counter[str] = Counter()
        self.hold: set[str] = set()
        self.release = threading.Event()
        self._lock = threading.Lock()
        pages = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with pages._lock:
                    pages.hits[self.path] += 1
                    held = self.path in pages.hold
                if held:
                    pages.release.wait(HOLD)
                else:
                    time.sleep(pages.delay)
                body = f"page {self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the test counts hits; logs would only be noise

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a held request's client was killed: writing to it fails, as expected

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def count(self, path: str) -> int:
        with self._lock:
            return self.hits[path]

    def __enter__(self) -> Pages:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


class Model:
    """The agent's model: its first call (no tool results yet) reads `seed.txt`, its second
    answers `m<n>` (n: how many calls this model has had). A call whose number (1 or 2) is
    in `hold` waits, unanswered, until `release` is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.hold: set[int] = set()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, request: ChatRequest) -> ChatReply | str:
        first = not request.tool_results()
        with self._lock:
            self.calls += 1
            number = self.calls
            held = (1 if first else 2) in self.hold
        if held:
            self.release.wait(HOLD)
        if first:
            return ChatReply(tool_calls=[ToolCall("fs__read", {"path": "seed.txt"})])
        return f"m{number}"


class HeldProbes(list[ChatRequest]):
    """`FakeOpenAIServer.probes`, holding the preflight probe unanswered until `release`
    is set: planloom has begun its run in the store, and has not journaled its plan."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__()
        self.release = release

    def append(self, request: ChatRequest) -> None:
        super().append(request)
        self.release.wait(HOLD)


# -- watching a run ------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """What a look at a run showed: its journal on disk (seq, kind, scope, data text), the
    first word of each ledger line, and what the servers received."""

    rows: tuple[tuple[int, str, str | None, str], ...] = ()
    ledger: tuple[str, ...] = ()
    status: str | None = None
    run_id: str | None = None
    pages: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    probes: int = 0
    since: int = -1

    def has(self, kind: str, scope: str | None = None) -> bool:
        """An entry of `kind` (for `scope`) is on disk, after `since`."""
        return any(
            seq > self.since and k == kind and (scope is None or s == scope)
            for seq, k, s, _ in self.rows
        )

    def lines(self, step: str) -> int:
        return self.ledger.count(step)

    def doubts(self) -> set[str]:
        """The steps with a side-effect call whose intent is on disk and its result not."""
        started: dict[tuple[Any, ...], str] = {}
        ended: set[tuple[Any, ...]] = set()
        for _, kind, _, text in self.rows:
            if kind in ("intent", "tool"):
                data = json.loads(text)
                key = tuple(
                    data[k] for k in ("step", "attempt", "action", "params_hash", "ordinal")
                )
                if kind == "intent":
                    started[key] = data["step"].split("[", 1)[0]
                else:
                    ended.add(key)
        return {step for key, step in started.items() if key not in ended}

    def entries(self, kind: str, *, since: int = -1) -> list[dict[str, Any]]:
        """The data of every entry of `kind` after `since`, in order."""
        return [json.loads(text) for seq, k, _, text in self.rows if k == kind and seq > since]

    def kept(self) -> set[str]:
        """The steps whose last `step` entry says they ended as a resume keeps them."""
        last: dict[str, str] = {}
        for _, kind, scope, text in self.rows:
            if kind == "step" and scope is not None:
                last[scope] = json.loads(text)["result"]["status"]
        return {step for step, status in last.items() if status in KEPT}

    @property
    def last(self) -> int:
        """The last sequence number on disk (-1: none)."""
        return self.rows[-1][0] if self.rows else -1


@dataclass(frozen=True)
class Moment:
    """When to kill: `when(seen)` is true. `probe`, `pages` and `model` say which calls
    the servers hold unanswered meanwhile (the preflight probe; `/fetch`, `/check`; the
    agent's model call 1 or 2), so that the kill lands while they are in flight."""

    name: str
    when: Callable[[Seen], bool]
    probe: bool = False
    pages: frozenset[str] = frozenset()
    model: frozenset[int] = frozenset()


@dataclass
class Killed:
    """One kill -9 and what followed it.

    Attributes:
        seen: what was on disk just after the kill.
        tree: the processes planloom had started when it was killed (pid: start time).
        left: the processes still alive `GONE_WITHIN` seconds after the kill (its children
            and any process carrying the run's marker); they are killed after the look.
        integrity: `PRAGMA integrity_check` of the store, opened anew.
        gaps: journal sequence numbers missing before the last one on disk.
        listed: the run's status in `planloom runs --json` (None: not listed).
        runs: that command's exit status and stderr.
    """

    seen: Seen
    tree: dict[int, str]
    left: list[int]
    integrity: str
    gaps: list[int]
    listed: str | None
    runs: tuple[int, str]


class Crash:
    """One battery run in `folder`, with its own servers (open until `close`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.marker = sleep_marker()
        self.model = Model()
        self.pages = Pages()
        self.server = FakeOpenAIServer(self.model)
        self.release = threading.Event()
        self.server.probes = HeldProbes(self.release)
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(self.pages)
        self._stack.enter_context(self.server)
        self._stack.callback(self._unhold)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "seed.txt").write_text("seed\n")
        self.recipe = folder / "battery.yaml"
        self.write_recipe()
        self.db = folder / ".planloom" / "runs.db"
        self.run_id: str | None = None

    def write_recipe(self, **changes: Any) -> None:
        self.recipe.write_text(recipe_text(self.pages.port, self.marker, **changes))

    def close(self) -> None:
        self._stack.close()
        for pid in pids_with(self.marker):  # never leave a sleep of this run behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    # -- commands ------------------------------------------------------------------------

    def environ(self) -> dict[str, str]:
        return env(OPENAI_API_KEY="test")

    def model_flags(self) -> list[str]:
        return ["--base-url", self.server.base_url, "--model", "m"]

    def start(self, *args: str, name: str) -> subprocess.Popen[bytes] | Forked:
        """`planloom ARGS --yes --json` with the model flags, in the background."""
        out = (self.folder / f"{name}.out").open("wb")
        err = (self.folder / f"{name}.err").open("wb")
        with out, err:
            return background(
                *args, "--yes", "--json", *self.model_flags(),
                cwd=self.folder, environ=self.environ(), stdout=out, stderr=err,
            )  # fmt: skip

    def run(self) -> subprocess.Popen[bytes] | Forked:
        # With the chat probe, which the "before-plan" moment holds (begun, no plan yet).
        return self.start("run", self.recipe.name, "--preflight", "chat", name="run")

    def resume(self, *flags: str) -> subprocess.CompletedProcess[str]:
        """`planloom resume RUN_ID FLAGS` with the model flags, to its end."""
        assert self.run_id is not None
        return planloom(
            "resume", self.run_id, *flags, *self.model_flags(), cwd=self.folder,
            environ=self.environ(),
        )  # fmt: skip

    # -- watching ------------------------------------------------------------------------

    def look(self, db: sqlite3.Connection | None, since: int = -1, *, data: bool = True) -> Seen:
        """What is on disk and what the servers received, now (`data`: with each entry's
        data; the watch loop goes without it, to look often and cheaply)."""
        rows: list[tuple[int, str, str | None, str]] = []
        status = run_id = None
        if db is not None:
            with contextlib.suppress(sqlite3.Error):  # not made yet, or busy: look again
                found = db.execute("SELECT id, status FROM runs").fetchone()
                if found is not None:
                    run_id, status = found
                    what = "data" if data else "''"
                    rows = db.execute(
                        f"SELECT seq, kind, scope, {what} FROM journal ORDER BY seq"
                    ).fetchall()
        try:
            text = (self.folder / "ledger.txt").read_text()
        except FileNotFoundError:
            text = ""
        return Seen(
            rows=tuple(rows),
            ledger=tuple(line.split(" ", 1)[0] for line in text.splitlines()),
            status=status,
            run_id=run_id,
            pages={path: self.pages.count(path) for path in ("/fetch", "/check")},
            requests=len(self.server.requests),
            probes=len(self.server.probes),
            since=since,
        )

    def ledger(self) -> list[str]:
        """The ledger's lines, whole."""
        path = self.folder / "ledger.txt"
        return path.read_text().splitlines() if path.exists() else []

    def kill_at(
        self, proc: subprocess.Popen[bytes] | Forked, moment: Moment, since: int = -1
    ) -> Killed:
        """Hold what `moment` says, wait for it, kill -9 `proc`, release, look."""
        self.release.clear()
        self.pages.release.clear()
        self.model.release.clear()
        hold_probe = moment.probe
        if not hold_probe:
            self.release.set()
        self.pages.hold = set(moment.pages)
        self.model.hold = set(moment.model)
        db: sqlite3.Connection | None = None
        deadline = time.monotonic() + WATCH
        try:
            while True:
                if db is None and self.db.exists():
                    with contextlib.suppress(sqlite3.Error):
                        db = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=0.5)
                seen = self.look(db, since, data=False)
                if moment.when(seen):
                    break
                if proc.poll() is not None and not moment.when(self.look(db, since, data=False)):
                    raise AssertionError(
                        f"{moment.name}: planloom ended (exit {proc.returncode}) before the "
                        f"moment came; journal: {[(k, s) for _, k, s, _ in seen.rows]}, "
                        f"ledger: {seen.ledger}"
                    )
                if time.monotonic() > deadline:
                    raise AssertionError(f"{moment.name}: the moment never came in {WATCH} s")
                time.sleep(POLL)
            tree = descendants(proc.pid)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            if db is not None:
                db.close()
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        left = survivors(tree, self.marker)
        self._unhold()
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        integrity, gaps = check_store(self.db)
        with contextlib.closing(sqlite3.connect(self.db)) as again:
            seen = self.look(again, since)
        self.run_id = seen.run_id
        runs = planloom("runs", "--json", cwd=self.folder, environ=self.environ())
        listed = None
        if runs.returncode == 0:
            listed = next(
                (row["status"] for row in json.loads(runs.stdout) if row["id"] == seen.run_id),
                None,
            )
        return Killed(seen, tree, left, integrity, gaps, listed, (runs.returncode, runs.stderr))

    def journal(self) -> Seen:
        with contextlib.closing(sqlite3.connect(self.db)) as db:
            return self.look(db)

    def _unhold(self) -> None:
        self.release.set()
        self.pages.release.set()
        self.model.release.set()
        self.pages.hold = set()
        self.model.hold = set()


# -- processes and the store -----------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def descendants(pid: int) -> dict[int, str]:
    """Every process below `pid`, with its start time (so a recycled pid is not taken for
    it)."""
    children: dict[int, list[int]] = {}
    starts: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields is None:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        starts[int(entry.name)] = fields[19]
    found: dict[int, str] = {}
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found[child] = starts[child]
            stack.append(child)
    return found


def survivors(tree: dict[int, str], marker: str) -> list[int]:
    """The processes of `tree` (and any carrying `marker`) alive `GONE_WITHIN` s from now."""

    def left() -> list[int]:
        same = {
            pid
            for pid, start in tree.items()
            if alive(pid) and (fields := _stat(pid)) is not None and fields[19] == start
        }
        return sorted(same | set(pids_with(marker)))

    end = time.monotonic() + GONE_WITHIN
    while True:
        found = left()
        if not found or time.monotonic() > end:
            return found
        time.sleep(0.02)


def check_store(db: Path) -> tuple[str, list[int]]:
    """SQLite's integrity check of the store, opened anew (WAL recovery runs here), and the
    journal sequence numbers missing below the last (a crash may lose a tail, never a
    middle)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        integrity = str(conn.execute("PRAGMA integrity_check").fetchone()[0])
        seqs = [row[0] for row in conn.execute("SELECT seq FROM journal ORDER BY seq")]
    return integrity, sorted(set(range(len(seqs) and seqs[-1] + 1)) - set(seqs))
