"""The run store and the journal (the README's "Durable runs"): what
a store is and refuses, what a run leaves in it, and what a resume serves from it instead
of doing again.

The store itself is tested in-process (`engine.app.sqlite_store`); everything a user sees goes
through the real `planloom` command in a subprocess (`tests/_procs.py`), with real recipes
in a temporary folder and the store named by `--store`. A crash is a real SIGKILL of a
process. Model calls go over HTTP to `FakeOpenAIServer` in this process.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _procs import PLANLOOM, TIMEOUT, env, gone, marker_seconds, pids_with, planloom

from engine._support.scope import enter_scope
from engine.app.sqlite_store import FORMAT, open_store
from engine.errors import ConfigurationError, StepFailed
from engine.journal import Journal
from engine.journal.resume import resumed_from
from engine.recording.cassette import digest
from engine.sandbox import LiveResults
from engine.sandbox import ToolCall as SandboxCall
from engine.store import Entry, EntryKind, RunRecord
from engine.testing import ChatReply, ChatRequest, FakeOpenAIServer, ToolCall

RUNS_KEYS = {"id", "name", "recipe", "status", "started", "duration", "steps", "done", "usage"}


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def cli(*args: str | Path, cwd: Path, environ: dict[str, str] | None = None) -> Any:
    """`planloom ARGS`: the process, checked to have printed no traceback."""
    proc = planloom(*args, cwd=cwd, environ=environ)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout, proc.stdout
    return proc


def run_json(*args: str | Path, cwd: Path, code: int = 0) -> dict[str, Any]:
    """`planloom ARGS --json` exiting with `code`: the JSON it printed."""
    proc = cli(*args, "--json", cwd=cwd)
    assert proc.returncode == code, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def stored_runs(store: Path, cwd: Path) -> list[dict[str, Any]]:
    proc = cli("runs", "--json", "--store", store, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    rows: list[dict[str, Any]] = json.loads(proc.stdout)
    return rows


def journal_of(store: Path, run_id: str) -> list[Entry]:
    opened = open_store(store, create=False)
    try:
        return opened.journal(run_id)
    finally:
        opened.close()


def record_of(store: Path, run_id: str) -> RunRecord:
    opened = open_store(store, create=False)
    try:
        record = opened.get(run_id)
    finally:
        opened.close()
    assert record is not None
    return record


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split()


def killed_while(marker: str, *args: str, cwd: Path, environ: dict[str, str] | None = None) -> None:
    """`planloom ARGS`, killed with SIGKILL once a process carrying `marker` runs; then
    nothing carrying it is left."""
    proc = subprocess.Popen(
        [PLANLOOM, *args],
        cwd=cwd,
        env=environ if environ is not None else env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert gone(lambda: not pids_with(marker), within=TIMEOUT), f"{marker} never started"
    finally:
        proc.kill()
        proc.wait(timeout=TIMEOUT)
    assert gone(lambda: pids_with(marker), within=10)


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique `sleep` duration for a step to hang in; whatever still carries it at the end
    is killed (a failed test must not leave it running)."""
    value = marker_seconds(200)
    yield value
    for pid in pids_with(value):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# -- the store -----------------------------------------------------------------------------


def test_a_new_store_is_in_wal_mode(tmp_path: Path) -> None:
    open_store(tmp_path / "runs.db").close()
    other = sqlite3.connect(tmp_path / "runs.db")
    try:
        [(mode,)] = other.execute("PRAGMA journal_mode").fetchall()
        [(found,)] = other.execute("SELECT value FROM meta WHERE key='format'").fetchall()
    finally:
        other.close()
    assert mode == "wal"
    assert found == str(FORMAT)


def test_entries_come_back_in_order_and_durable_ones_are_on_disk_at_once(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "runs.db")
    store.begin(RunRecord(id="r1", name="n", recipe=None, base_dir=str(tmp_path)))
    written: list[tuple[EntryKind, str | None, dict[str, Any], bool]] = [
        ("start", None, {"segment": 1}, True),
        ("step", "a", {"n": 1}, False),
        ("tool", "b[0]", {"n": 2}, False),
        ("intent", "b[1]", {"n": 3}, True),
        ("step", "c", {"n": 4, "nested": {"list": [1, "two", None]}}, False),
    ]
    try:
        for kind, scope, data, durable in written:
            store.append("r1", kind, scope, data, durable=durable)
        # Another connection (as another process would) sees everything up to the last
        # durable entry already, before any flush.
        seen = sqlite3.connect(tmp_path / "runs.db")
        try:
            kinds = [k for (k,) in seen.execute("SELECT kind FROM journal ORDER BY seq")]
        finally:
            seen.close()
        assert kinds == ["start", "step", "tool", "intent"]
        store.flush()
        entries = store.journal("r1")
    finally:
        store.close()
    assert [e.seq for e in entries] == list(range(len(written)))
    assert [(e.kind, e.scope, e.data) for e in entries] == [
        (kind, scope, data) for kind, scope, data, _ in written
    ]
    assert all(a.at <= b.at for a, b in itertools.pairwise(entries))


def test_a_store_of_another_format_is_refused_saying_so(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    open_store(path).close()
    other = sqlite3.connect(path)
    with other:
        other.execute("UPDATE meta SET value='99' WHERE key='format'")
    other.close()
    with pytest.raises(ConfigurationError, match=r"format 99 is not supported") as caught:
        open_store(path)
    assert str(path) in str(caught.value)
    assert "--store" in str(caught.value)
    proc = cli("runs", "--store", path, cwd=tmp_path)
    assert proc.returncode == 2
    assert "format 99 is not supported" in proc.stderr


@pytest.mark.slow
def test_a_store_file_that_is_not_sqlite_exits_2_with_a_message(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    path.write_bytes(b"this is not a database\n" * 200)
    for args in (("runs",), ("show", "abc123"), ("resume", "abc123", "--yes")):
        proc = cli(*args, "--store", path, cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stderr)
        assert f"run store {path}" in proc.stderr
        assert "not a database" in proc.stderr
    assert path.read_bytes() == b"this is not a database\n" * 200  # left as it was


@pytest.mark.slow
def test_runs_without_a_store_is_an_empty_list_naming_the_path(tmp_path: Path) -> None:
    proc = cli("runs", cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == f"no runs in {tmp_path / '.planloom' / 'runs.db'}\n"
    listed = cli("runs", "--json", cwd=tmp_path)
    assert (listed.returncode, json.loads(listed.stdout)) == (0, [])
    assert not (tmp_path / ".planloom").exists()  # reading never creates a store


def handshake_recipe(me: str, other: str) -> str:
    """A run whose first step waits (bounded) until the other run has started too, then
    appends to a shared file twice: the two runs write to the store at the same time."""
    wait = (
        f"touch {me}.ready; i=0; while [ ! -f {other}.ready ]; do sleep 0.05; i=$((i+1)); "
        "if [ $i -gt 1000 ]; then exit 1; fi; done"
    )
    return f"""\
        version: 1
        name: run-{me.lower()}
        capabilities:
          shell: {{allow: [sh], unsafe_args: [sh]}}
        steps:
          - id: meet
            tool: shell.run
            params: {{argv: [sh, -c, "{wait}"]}}
          - id: one
            tool: shell.run
            params: {{argv: [sh, -c, "echo {me} >> order.txt"]}}
            depends_on: [meet]
          - id: two
            tool: shell.run
            params: {{argv: [sh, -c, "echo {me} >> order.txt"]}}
            depends_on: [one]
        """


@pytest.mark.slow
def test_two_runs_at_once_in_one_store_are_both_journaled_whole(tmp_path: Path) -> None:
    store = tmp_path / "shared.db"
    for me, other in (("A", "B"), ("B", "A")):
        write(tmp_path, f"{me}.yaml", handshake_recipe(me, other))
    procs = [
        subprocess.Popen(
            [PLANLOOM, "run", f"{me}.yaml", "--yes", "--json", "--store", str(store)],
            cwd=tmp_path,
            env=env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me in ("A", "B")
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    assert sorted(lines(tmp_path / "order.txt")) == ["A", "A", "B", "B"]
    rows = {row["id"]: row for row in stored_runs(store, tmp_path)}
    assert set(rows) == {r["run_id"] for r in results}
    for result in results:
        row = rows[result["run_id"]]
        assert (row["status"], row["steps"], row["done"]) == ("succeeded", 3, 3)
        entries = journal_of(store, result["run_id"])
        assert [e.seq for e in entries] == list(range(len(entries)))
        kinds = Counter(e.kind for e in entries)
        assert kinds == {
            "start": 1,
            "plan": 1,
            "approval": 3,
            "intent": 3,
            "tool": 3,
            "step": 3,
            "end": 1,
        }
        assert entries[0].kind == "start"
        assert entries[-1].kind == "end"
        assert entries[-1].data["steps"] == {}  # every step started: each has its entry
        stepped = {e.scope: e.data["result"] for e in entries if e.kind == "step"}
        assert {k: v["status"] for k, v in stepped.items()} == {
            k: v["status"] for k, v in result["steps"].items()
        }
        assert {k: v.get("output") for k, v in stepped.items()} == {
            k: v["output"] for k, v in result["steps"].items()
        }
    a, b = (record_of(store, r["run_id"]) for r in results)
    assert a.finished is not None
    assert b.finished is not None
    assert a.started < b.finished  # they did overlap
    assert b.started < a.finished


# -- secrets -------------------------------------------------------------------------------

SECRET = "sekrit-value-123"


def forms(secret: str) -> list[bytes]:
    raw = secret.encode()
    return [
        raw,
        base64.b64encode(raw).rstrip(b"="),
        raw.hex().encode(),
        raw.hex().upper().encode(),
    ]


@pytest.mark.slow
def test_a_secret_in_params_and_outputs_never_reaches_the_store_files(
    tmp_path: Path, marker: str
) -> None:
    (tmp_path / "creds.txt").write_text(f"token={SECRET}\n", encoding="utf-8")
    write(
        tmp_path,
        "r.yaml",
        f"""\
        version: 1
        name: leaky
        capabilities:
          fs: {{root: ., read: true, write: ["out/**"]}}
          shell: {{allow: [echo, sleep]}}
        steps:
          - id: read
            tool: fs.read
            params: {{path: creds.txt}}
          - id: copy
            tool: fs.write
            params: {{path: out/copy.txt, content: "${{{{ steps.read.output.content }}}}",
                     create_dirs: true}}
          - id: say
            tool: shell.run
            params: {{argv: [echo, "the token is {SECRET}"]}}
            depends_on: [copy]
          - id: hang
            tool: shell.run
            params: {{argv: [sleep, "{marker}"]}}
            timeout: 300
            depends_on: [say]
        """,
    )
    store = tmp_path / "store" / "runs.db"
    proc = subprocess.Popen(
        [PLANLOOM, "run", "r.yaml", "--yes", "--store", str(store)],
        cwd=tmp_path,
        env=env(MY_API_TOKEN=SECRET),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Killed while `hang` runs: the write-ahead log is left as the crash left it.
        assert gone(lambda: not pids_with(marker), within=TIMEOUT), "hang never started"
        proc.kill()
        proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=TIMEOUT)
        assert proc.stderr is not None
        proc.stderr.close()
    assert gone(lambda: pids_with(marker), within=10)
    assert SECRET in (tmp_path / "out" / "copy.txt").read_text()  # the run did handle it
    files = sorted(store.parent.iterdir())
    assert store.with_name("runs.db-wal") in files
    for file in files:
        data = file.read_bytes()
        for form in forms(SECRET):
            assert form not in data, f"{form!r} is in {file.name}"
    # The journal holds the steps, with the secret redacted where it was.
    [row] = stored_runs(store, tmp_path)
    assert row["status"] == "interrupted"
    steps = {e.scope: e.data for e in journal_of(store, row["id"]) if e.kind == "step"}
    assert set(steps) == {"read", "copy", "say"}
    assert "token=" in steps["read"]["result"]["output"]["content"]
    assert "the token is" in steps["say"]["result"]["output"]["stdout"]


# -- resume --------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_resumed_for_each_serves_the_items_that_ran_and_reruns_the_failed_one(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        "r.yaml",
        """\
        version: 1
        name: items
        capabilities:
          shell: {allow: [sh], unsafe_args: [sh]}
        steps:
          - id: each
            for_each: [1, 2, 3, 4]
            max_parallel: 1
            tool: shell.run
            params:
              argv: [sh, -c, "echo ${{ item }} >> lines.txt;
                              if [ ${{ item }} = 2 ] && [ ! -f fixed ]; then exit 1; fi"]
        """,
    )
    first = run_json("run", "r.yaml", "--yes", "--store", "s.db", cwd=tmp_path, code=1)
    assert first["steps"]["each"]["status"] == "failed"
    assert lines(tmp_path / "lines.txt") == ["1", "2", "3", "4"]  # every item ran

    (tmp_path / "fixed").touch()
    resumed = run_json("resume", first["run_id"], "--yes", "--store", "s.db", cwd=tmp_path)
    assert resumed["run_id"] == first["run_id"]
    assert resumed["status"] == "succeeded"
    step = resumed["steps"]["each"]
    assert step["status"] == "succeeded"
    assert [item["exit_code"] for item in step["output"]] == [0, 0, 0, 0]
    # Only the failed item ran again; the others' results came from the journal.
    assert lines(tmp_path / "lines.txt") == ["1", "2", "3", "4", "2"]
    approvals = Counter(a["by"] for a in resumed["approvals"])
    assert approvals == {"journal": 3, "--yes": 1}


@pytest.mark.slow
def test_a_resume_reruns_a_retried_step_that_failed_and_keeps_a_can_fail_one(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        "r.yaml",
        """\
        version: 1
        name: retried
        capabilities:
          shell: {allow: [sh], unsafe_args: [sh]}
        steps:
          - id: tolerated
            tool: shell.run
            params: {argv: [sh, -c, "echo t >> tolerated.txt; exit 1"]}
            retry: {attempts: 2, initial: 0.01, max: 0.01}
            can_fail: true
          - id: must
            tool: shell.run
            params: {argv: [sh, -c, "echo m >> must.txt; test -f fixed"]}
            retry: {attempts: 2, initial: 0.01, max: 0.01}
        """,
    )
    first = run_json("run", "r.yaml", "--yes", "--store", "s.db", cwd=tmp_path, code=1)
    statuses = {k: (s["status"], s["attempts"]) for k, s in first["steps"].items()}
    assert statuses == {"tolerated": ("failed_acceptable", 2), "must": ("failed", 2)}
    run_id = first["run_id"]

    # Still broken: `must` gets a new try, all its attempts; `tolerated` is kept as it was.
    again = run_json("resume", run_id, "--yes", "--store", "s.db", cwd=tmp_path, code=1)
    statuses = {k: (s["status"], s["attempts"]) for k, s in again["steps"].items()}
    assert statuses == {"tolerated": ("failed_acceptable", 2), "must": ("failed", 2)}
    assert again["status"] == "failed"
    assert len(lines(tmp_path / "must.txt")) == 4
    assert len(lines(tmp_path / "tolerated.txt")) == 2

    (tmp_path / "fixed").touch()
    fixed = run_json("resume", run_id, "--yes", "--store", "s.db", cwd=tmp_path)
    statuses = {k: (s["status"], s["attempts"]) for k, s in fixed["steps"].items()}
    assert statuses == {"tolerated": ("failed_acceptable", 2), "must": ("succeeded", 1)}
    assert fixed["status"] == "succeeded"
    assert len(lines(tmp_path / "must.txt")) == 5
    assert len(lines(tmp_path / "tolerated.txt")) == 2
    [row] = stored_runs(tmp_path / "s.db", tmp_path)
    assert (row["status"], row["done"], row["resumes"]) == ("succeeded", 2, 2)


AGENT = """\
version: 1
name: agentic
llm: {model: m}
capabilities:
  fs: {root: work, read: true, write: true}
steps:
  - id: scribe
    agent: {goal: "Append two lines", tools: [fs.append], max_iterations: 5}
outputs:
  answer: ${{ steps.scribe.output }}
"""


@pytest.mark.slow
def test_a_resumed_agent_sends_no_journaled_turn_again_nor_repeats_its_tool_call(
    tmp_path: Path,
) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "r.yaml").write_text(AGENT, encoding="utf-8")
    running: list[subprocess.Popen[str]] = []
    started = threading.Event()
    killed = threading.Event()

    def model(request: ChatRequest) -> ChatReply | str:
        done = len(request.tool_results())
        if done == 0:
            return ChatReply(
                tool_calls=[ToolCall("fs__append", {"path": "log.txt", "content": "one\n"})]
            )
        if done == 1:
            if not killed.is_set():
                # The first tool call was made and journaled (the request carries its
                # result): the run dies now, as under kill -9, mid-conversation.
                assert started.wait(TIMEOUT)
                killed.set()
                running[0].kill()
            return ChatReply(
                tool_calls=[ToolCall("fs__append", {"path": "log.txt", "content": "two\n"})]
            )
        return "appended both"

    with FakeOpenAIServer(model) as server:
        flags = ["--base-url", server.base_url, "--yes", "--store", "s.db"]
        running.append(
            subprocess.Popen(
                [PLANLOOM, "run", "r.yaml", *flags],
                cwd=tmp_path,
                env=env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        started.set()
        _, err = running[0].communicate(timeout=TIMEOUT)
        assert running[0].returncode == -signal.SIGKILL, err
        assert killed.is_set()
        before = len(server.requests)
        assert before == 2
        assert (tmp_path / "work" / "log.txt").read_text() == "one\n"
        [row] = stored_runs(tmp_path / "s.db", tmp_path)
        assert row["status"] == "interrupted"

        resumed = run_json("resume", row["id"], *flags, cwd=tmp_path)
        sent = server.requests[before:]
        assert server.errors == []
    assert resumed["status"] == "succeeded"
    assert resumed["outputs"] == {"answer": "appended both"}
    # The first turn was served from the journal: the resume's first request already
    # carries the first tool call's result, and no request went out without it.
    assert [len(r.tool_results()) for r in sent] == [1, 2]
    # The tool call made before the crash was not made again.
    assert (tmp_path / "work" / "log.txt").read_text() == "one\ntwo\n"
    transcript = resumed["steps"]["scribe"]["transcript"]
    assert [(t["tool"], t["arguments"]["content"]) for t in transcript] == [
        ("fs.append", "one\n"),
        ("fs.append", "two\n"),
    ]


QUESTIONS = """\
version: 1
name: questions
capabilities: {human: {}}
steps:
  - id: q
    for_each: ["First colour?", "Second colour?"]
    max_parallel: 1
    tool: human.ask
    params: {question: "${{ item }}", default: red}
outputs:
  answers: ${{ steps.q.output }}
"""

# The run of `QUESTIONS` as `planloom run` would make it (engine/app/launch.py
# `open_journal`, engine/session/_run.py `_execute`), with a person who answers the first
# question "blue" and dies (SIGKILL) when asked the second.
CRASHING_RUN = """\
import asyncio, os, signal, sys, time, uuid
from pathlib import Path

from capabilities import default_registry
from engine.app.sqlite_store import open_store, process_start
from engine.executor import Executor
from engine.journal import Journal
from engine.sandbox import LiveResults
from engine.store import RunRecord
from engine.testing import ScriptedApprover
from planners.recipe import load_recipe


class DiesAtTheSecondQuestion(ScriptedApprover):
    async def answer(self, step_id, question):
        if self.questions:  # the first answer is journaled by now
            os.kill(os.getpid(), signal.SIGKILL)
        return await super().answer(step_id, question)


recipe, store_path = Path(sys.argv[1]).resolve(), sys.argv[2]
registry = default_registry()
plan, _ = load_recipe(recipe, registry)
store = open_store(store_path)
pid = os.getpid()
run_id = uuid.uuid4().hex[:12]
store.begin(
    RunRecord(
        id=run_id, name=plan.name, recipe=str(recipe), base_dir=str(recipe.parent),
        started=time.time(), pid=pid, pid_start=process_start(pid),
    )
)
store.append(run_id, "start", None, {"segment": 1, "pid": pid}, durable=True)
print(run_id, flush=True)
journal = Journal(store, run_id)
person = DiesAtTheSecondQuestion(answers={"q": ["blue", "green"]})
journal.plan(plan.to_data(), inputs={}, model=None)
executor = Executor(
    plan, registry=registry, base_dir=recipe.parent, run_id=run_id,
    approver=journal.approver(person), tool_results=journal.results(LiveResults()),
)
journal.watch(executor)
journal.finish(asyncio.run(executor.run()))
"""


@pytest.mark.slow
def test_a_question_answered_before_a_crash_is_not_asked_again_on_resume(
    tmp_path: Path,
) -> None:
    (tmp_path / "r.yaml").write_text(QUESTIONS, encoding="utf-8")
    (tmp_path / "crashing_run.py").write_text(CRASHING_RUN, encoding="utf-8")
    crashed = subprocess.run(
        [sys.executable, "crashing_run.py", "r.yaml", "s.db"],
        cwd=tmp_path,
        env=env(PYTHONDONTWRITEBYTECODE="1"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    run_id = crashed.stdout.strip()
    entries = journal_of(tmp_path / "s.db", run_id)
    assert [(e.scope, e.data["answer"]) for e in entries if e.kind == "answer"] == [
        ("q[0]", "blue")
    ]

    # `--yes` answers with the default ("red"): "blue" can only come from the journal.
    resumed = run_json("resume", run_id, "--yes", "--store", "s.db", cwd=tmp_path)
    assert resumed["status"] == "succeeded"
    assert resumed["outputs"]["answers"] == [{"answer": "blue"}, {"answer": "red"}]
    entries = journal_of(tmp_path / "s.db", run_id)
    asked = [(e.scope, e.data["answer"]) for e in entries if e.kind == "answer"]
    assert asked == [("q[0]", "blue"), ("q[1]", "red")]  # the first was not asked again


# -- `idempotent` --------------------------------------------------------------------------


@pytest.mark.slow
def test_idempotent_is_in_the_schema_and_a_non_bool_is_a_located_error(tmp_path: Path) -> None:
    proc = cli("schema", cwd=tmp_path)
    assert proc.returncode == 0
    prop = json.loads(proc.stdout)["$defs"]["Step"]["properties"]["idempotent"]
    assert (prop["type"], prop["default"]) == ("boolean", False)
    assert prop["description"]

    recipe = """\
        version: 1
        name: idem
        capabilities:
          fs: {{root: ., write: ["out/**"]}}
        steps:
          - id: save
            tool: fs.write
            params: {{path: out/a.txt, content: hello, create_dirs: true}}
            idempotent: {value}
        """
    write(tmp_path, "ok.yaml", recipe.format(value="true"))
    assert cli("validate", "ok.yaml", cwd=tmp_path).returncode == 0
    write(tmp_path, "bad.yaml", recipe.format(value="maybe"))
    proc = cli("validate", "bad.yaml", "--json", cwd=tmp_path)
    assert proc.returncode == 2
    [problem] = json.loads(proc.stdout)
    assert (problem["file"], problem["line"], problem["column"]) == ("bad.yaml", 9, 17)
    assert "idempotent" in problem["message"]


# -- runs, show ----------------------------------------------------------------------------

WRITER = """\
version: 1
name: writer
capabilities:
  fs: {root: ., read: true, write: ["out/**"]}
steps:
  - id: save
    tool: fs.write
    params: {path: out/a.txt, content: hello, create_dirs: true}
  - id: back
    tool: fs.read
    params: {path: out/a.txt}
    depends_on: [save]
outputs:
  text: ${{ steps.back.output }}
"""


@pytest.mark.slow
def test_show_json_of_a_finished_run_is_what_run_json_printed(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(WRITER, encoding="utf-8")
    printed = run_json("run", "r.yaml", "--yes", "--store", "s.db", cwd=tmp_path)
    assert printed["status"] == "succeeded"
    assert printed["steps"]["save"]["usage"]["tool_calls"] == 1
    shown = run_json("show", printed["run_id"], "--store", "s.db", cwd=tmp_path)
    assert shown == printed  # each step's usage too
    # Found through the default store too, from the recipe's folder.
    again = run_json("run", "r.yaml", "--yes", cwd=tmp_path)
    assert run_json("show", again["run_id"], cwd=tmp_path) == again


@pytest.mark.slow
def test_show_json_of_an_interrupted_run_says_interrupted(tmp_path: Path, marker: str) -> None:
    write(
        tmp_path,
        "r.yaml",
        f"""\
        version: 1
        name: slow
        capabilities:
          fs: {{root: ., write: ["out/**"]}}
          shell: {{allow: [sleep]}}
        steps:
          - id: save
            tool: fs.write
            params: {{path: out/a.txt, content: hello, create_dirs: true}}
          - id: wait
            tool: shell.run
            params: {{argv: [sleep, "{marker}"]}}
            timeout: 300
            depends_on: [save]
        """,
    )
    killed_while(marker, "run", "r.yaml", "--yes", "--store", "s.db", cwd=tmp_path)
    [row] = stored_runs(tmp_path / "s.db", tmp_path)
    assert row["status"] == "interrupted"
    assert row["duration"] is None
    shown = run_json("show", row["id"], "--store", "s.db", cwd=tmp_path)
    assert shown["run_id"] == row["id"]
    assert shown["status"] == "interrupted"
    assert shown["steps"]["save"]["status"] == "succeeded"
    assert shown["steps"]["wait"]["status"] == "pending"
    assert "in flight" in shown["steps"]["wait"]["error"]
    text = cli("show", row["id"], "--store", "s.db", cwd=tmp_path)
    assert f"planloom resume {row['id']}" in text.stdout


@pytest.mark.slow
def test_runs_json_lists_each_run_with_its_fields(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(WRITER, encoding="utf-8")
    before = time.time()
    printed = run_json("run", "r.yaml", "--yes", "--store", "s.db", cwd=tmp_path)
    after = time.time()
    failed = run_json("run", "r.yaml", "--no", "--store", "s.db", cwd=tmp_path, code=1)
    rows = stored_runs(tmp_path / "s.db", tmp_path)
    assert [row["id"] for row in rows] == [failed["run_id"], printed["run_id"]]  # newest first
    for row in rows:
        assert row.keys() >= RUNS_KEYS
    done = rows[1]
    assert done["name"] == "writer"
    assert done["recipe"] == str(path.resolve())
    assert done["status"] == "succeeded"
    assert before <= done["started"] <= after
    assert 0 <= done["duration"] <= after - before
    assert (done["steps"], done["done"]) == (2, 2)
    assert done["usage"] == printed["usage"]
    assert (rows[0]["status"], rows[0]["steps"], rows[0]["done"]) == ("failed", 2, 0)


@pytest.mark.slow
def test_a_dry_run_and_a_pure_replay_write_no_run(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(WRITER, encoding="utf-8")
    store = tmp_path / "s.db"
    recorded = run_json(
        "run", "r.yaml", "--yes", "--record", "c.yaml", "--store", store, cwd=tmp_path
    )
    assert [row["id"] for row in stored_runs(store, tmp_path)] == [recorded["run_id"]]

    dry = run_json("run", "r.yaml", "--dry-run", "--store", store, cwd=tmp_path)
    assert dry["steps"]["save"]["status"] == "skipped"
    replayed = run_json("run", "r.yaml", "--replay", "c.yaml", "--store", store, cwd=tmp_path)
    assert replayed["outputs"] == recorded["outputs"]
    assert cli("replay", "c.yaml", cwd=tmp_path).returncode == 0
    assert [row["id"] for row in stored_runs(store, tmp_path)] == [recorded["run_id"]]
    proc = cli("show", dry["run_id"], "--store", store, cwd=tmp_path)
    assert proc.returncode == 2
    assert f"no run {dry['run_id']!r}" in proc.stderr
    # Nor is a store made where there was none (given, or the default beside the recipe).
    run_json("run", "r.yaml", "--dry-run", "--store", "new.db", cwd=tmp_path)
    run_json("run", "r.yaml", "--replay", "c.yaml", cwd=tmp_path)
    assert not (tmp_path / "new.db").exists()
    assert not (tmp_path / ".planloom").exists()


@pytest.mark.slow
def test_a_call_in_flight_stays_in_doubt_when_its_params_changed_on_resume(
    tmp_path: Path, marker: str
) -> None:
    """The call in flight appended its line with `-i word=one`; the resume is given
    `-i word=two`, so the same call now has other params: it is still the call that may
    have happened, and `--yes` cannot make it again."""
    write(
        tmp_path,
        "r.yaml",
        f"""\
        version: 1
        name: doubt
        inputs:
          word: {{type: string}}
        capabilities:
          shell: {{allow: [sh, sleep], unsafe_args: [sh]}}
        steps:
          - id: note
            tool: shell.run
            params:
              argv: [sh, -c, "echo ${{{{ inputs.word }}}} >> ledger.txt; sleep {marker}"]
            timeout: 300
        """,
    )
    args = ("run", "r.yaml", "--yes", "--store", "s.db", "-i", "word=one")
    killed_while(marker, *args, cwd=tmp_path)
    assert lines(tmp_path / "ledger.txt") == ["one"]
    [row] = stored_runs(tmp_path / "s.db", tmp_path)
    resumed = run_json(
        "resume", row["id"], "--yes", "--store", "s.db", "-i", "word=two", cwd=tmp_path, code=1
    )
    assert resumed["steps"]["note"]["status"] == "denied"
    assert "may already have happened" in resumed["steps"]["note"]["error"]
    [decision] = resumed["approvals"]
    assert (decision["approved"], decision["by"]) == (False, "--yes")
    assert lines(tmp_path / "ledger.txt") == ["one"]  # not made again, with either word


@pytest.mark.slow
def test_a_planned_goal_resumes_from_its_journaled_plan_without_planning_again(
    tmp_path: Path, marker: str
) -> None:
    """`planloom plan GOAL` journals the model's plan; a resume runs that plan (the model
    is not asked again), keeps the step that ended and puts the call in flight to the gate."""
    write(
        tmp_path,
        "caps.yaml",
        """\
        capabilities:
          shell: {allow: [sh, sleep], unsafe_args: [sh]}
        """,
    )
    plan = {
        "goal": "note twice",
        "steps": [
            {"id": "first", "tool": "shell.run", "params": {"argv": ["sh", "-c", "echo 1 >> l"]}},
            {
                "id": "second",
                "tool": "shell.run",
                "params": {"argv": ["sh", "-c", f"echo 2 >> l; sleep {marker}"]},
                "timeout": 300,
                "depends_on": ["first"],
            },
            {
                "id": "third",
                "tool": "shell.run",
                "params": {"argv": ["sh", "-c", "echo 3 >> l"]},
                "depends_on": ["second"],
                "idempotent": True,
            },
        ],
    }
    with FakeOpenAIServer(lambda request: json.dumps(plan)) as server:
        args = ["plan", "note twice", "--capabilities", "caps.yaml", "--yes"]
        model = ["--base-url", server.base_url, "--model", "m"]
        killed_while(marker, *args, *model, cwd=tmp_path, environ=env(OPENAI_API_KEY="test"))
        assert lines(tmp_path / "l") == ["1", "2"]
        [row] = stored_runs(tmp_path / ".planloom" / "runs.db", tmp_path)
        assert (row["recipe"], row["status"]) == (None, "interrupted")
        resumed = run_json("resume", row["id"], "--yes", *model, cwd=tmp_path, code=1)
        assert len(server.requests) == 1  # planned once, before the crash
    assert resumed["run_id"] == row["id"]
    statuses = {k: v["status"] for k, v in resumed["steps"].items()}
    assert statuses == {"first": "succeeded", "second": "denied", "third": "pending"}
    assert lines(tmp_path / "l") == ["1", "2"]


@pytest.mark.slow
def test_a_step_skipped_for_a_failed_dependency_runs_once_the_resume_fixes_it(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        "r.yaml",
        """\
        version: 1
        name: skipped
        on_failure: continue
        capabilities:
          fs: {root: ., read: true}
          shell: {allow: [sh], unsafe_args: [sh]}
        steps:
          - id: fetch
            tool: fs.read
            params: {path: input.txt}
          - id: use
            tool: shell.run
            params: {argv: [sh, -c, "echo ${{ steps.fetch.output.content }} >> ledger.txt"]}
          - id: other
            tool: shell.run
            params: {argv: [sh, -c, "echo other >> ledger.txt"]}
        """,
    )
    first = run_json("run", "r.yaml", "--yes", "--store", "s.db", cwd=tmp_path, code=1)
    assert first["steps"]["use"]["status"] == "skipped"
    assert lines(tmp_path / "ledger.txt") == ["other"]
    (tmp_path / "input.txt").write_text("fetched", encoding="utf-8")
    resumed = run_json("resume", first["run_id"], "--yes", "--store", "s.db", cwd=tmp_path)
    statuses = {k: v["status"] for k, v in resumed["steps"].items()}
    assert statuses == {"fetch": "succeeded", "use": "succeeded", "other": "succeeded"}
    assert lines(tmp_path / "ledger.txt") == ["other", "fetched"]  # `other` kept, not rerun


def test_a_call_approved_as_served_never_runs_live_when_the_journal_lacks_it(
    tmp_path: Path,
) -> None:
    """Two identical calls asked in one agent turn, one journaled: both are promised as
    served before either runs; the second finds nothing to serve and fails, unrun."""
    store = open_store(tmp_path / "s.db")
    store.begin(RunRecord(id="r", name="n", recipe=None, base_dir="."))
    params = {"argv": ["touch", "x"]}
    entry = {
        "step": "s",
        "attempt": 1,
        "action": "shell.run",
        "params_hash": digest(params),
        "ordinal": 0,
    }
    store.append("r", "intent", "s", {**entry, "params": params}, durable=True)
    store.append("r", "tool", "s", {**entry, "output": {"code": 0}}, durable=True)
    journal = Journal(store, "r", resumed=resumed_from(store.journal("r")))
    results = journal.results(LiveResults())
    call = SandboxCall("s", 1, "shell.run", params, read_only=False)
    ran: list[str] = []

    async def live() -> Any:
        ran.append("live")
        return {"code": 0}

    async def both() -> list[Any]:
        enter_scope("s")
        assert results.serves(call)  # asked for both calls before either gate
        assert results.serves(call)
        first = await results.result(call, live, replayed=True)
        with pytest.raises(StepFailed, match="holds no result"):
            await results.result(call, live, replayed=True)
        return [first]

    assert asyncio.run(both()) == [{"code": 0}]
    assert ran == []
    store.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--policy", "bad-policy.yaml"], "error[yaml-syntax]"),
        (["--log-file", "no/such/folder/run.log"], "--log-file no/such/folder/run.log"),
        (["--otel"], "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"),
    ],
)
def test_a_refused_run_flag_leaves_no_run_begun_in_the_store(
    tmp_path: Path, flags: list[str], said: str
) -> None:
    (tmp_path / "r.yaml").write_text(WRITER, encoding="utf-8")
    (tmp_path / "bad-policy.yaml").write_text("rules: [\n", encoding="utf-8")
    (tmp_path / "seed.yaml").write_text(WRITER.replace("writer", "seed"), encoding="utf-8")
    run_json("run", "seed.yaml", "--yes", "--store", "s.db", cwd=tmp_path)  # the store exists
    proc = cli(
        "run",
        "r.yaml",
        "--yes",
        "--store",
        "s.db",
        *flags,
        cwd=tmp_path,
        environ=env(OTEL_EXPORTER_OTLP_PROTOCOL="grpc"),
    )
    assert proc.returncode == 2, proc.stderr
    assert said in proc.stderr
    assert [row["name"] for row in stored_runs(tmp_path / "s.db", tmp_path)] == ["seed"]
