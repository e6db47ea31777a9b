"""Attacks on durable runs (the README's "Durable runs"): what a
demanding user or an attacker who controls an input, a tool's or model's output, or the
store file can make `planloom run` / `resume` / `runs` / `show` / `report` do.

The promises attacked: a side effect is never repeated silently (a call in flight at a
crash runs again only if idempotent, or if a person at a terminal approves it; a call
whose result is journaled is served, never made again); `--yes`, `--no`, policies and
"approve all" cannot approve a call in doubt; nothing a journal holds leaks a secret; a
hand-edited journal cannot make a live call skip its gate nor crash a command with a
traceback; the report runs no script from run data.

Every test drives the real `planloom` command in a subprocess, with real files, real
signals (SIGKILL, SIGINT) and a real terminal (pexpect) where a person answers. A test
whose assertion message starts with `FINDING` shows a promise broken today.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import signal
import socket
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from _durable_attacks import FIRST_CALL_WAITS, TESTS, Lab, forged_store, lab, rechain
from _procs import PLANLOOM, TIMEOUT, env

from engine.testing import ChatReply, ChatRequest, FakeOpenAIServer, ToolCall

IN_DOUBT = "may already have happened"


def _json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert "Traceback" not in proc.stderr, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


# -- a side effect repeated silently -------------------------------------------------------


@pytest.mark.slow
def test_resuming_a_failed_for_each_serves_an_item_that_had_succeeded(tmp_path: Path) -> None:
    """Item `x` failed both its tries, item `y` then succeeded (appending `y`); the step
    failed. Resumed once `x` can succeed, `x` succeeds at its first try, and `y`'s call,
    whose result is journaled, must be served. It is made again: `for_each` items number
    their attempts from one counter shared by all items, so `y`'s call is keyed by how many
    tries `x` took before it, and its journaled result is not found."""
    with lab(tmp_path) as it:
        it.recipe(
            """\
            version: 1
            name: each
            capabilities:
              shell: {allow: [sh], unsafe_args: [sh]}
            steps:
              - id: send
                tool: shell.run
                for_each: [x, y]
                max_parallel: 1
                retry: {attempts: 2, backoff: fixed, initial: 0}
                params:
                  argv:
                    - sh
                    - -c
                    - 'test "$0" = y || test -e fixed || exit 3; echo "$0" >> ledger.txt'
                    - "${{ item }}"
            """
        )
        ran = it.cli("run", "r.yaml", "--yes", "--json")
        assert ran.returncode == 1, ran.stderr
        assert it.ledger() == ["y"]
        (tmp_path / "fixed").touch()
        resumed = it.cli("resume", it.run_id(), "--yes", "--json")
        assert _json(resumed)["status"] == "succeeded", resumed.stderr
        assert it.ledger() == ["y", "x"], (
            "FINDING: resuming a failed for_each step made item y's call again although its "
            f"result is journaled (ledger {it.ledger()}): items share one attempt counter, so "
            "the journal key of an item's call depends on how many tries other items took"
        )


@pytest.mark.slow
def test_a_for_each_item_in_flight_at_a_kill_is_not_made_again_by_yes(tmp_path: Path) -> None:
    """Three items, two at a time. In the run, `A` fails once and retries after 1.5 s
    (attempt 3) while `B` sleeps, so `C` starts fourth (attempt 4): it appends `C` and is
    killed in flight. On resume the journal serves `A`'s first try and decides `B` at once,
    so `C` starts third (attempt 3), before `A`'s retry (attempt 4): neither key is in the
    journal, so `C`, in doubt, and `A`, done, are both made again under `--yes`."""
    with lab(tmp_path) as it:
        it.write(
            "item.sh",
            """\
            case $1 in
              A) if [ ! -e a.once ]; then touch a.once; exit 3; fi; echo A >> ledger.txt ;;
              B) sleep 4; echo B >> ledger.txt ;;
              C) [ -e c.once ] || { touch c.once; first=1; }
                 echo C >> ledger.txt; [ -z "$first" ] || sleep MARK ;;
            esac
            """,
        )
        it.recipe(
            """\
            version: 1
            name: parallel
            capabilities:
              shell: {allow: [sh, sleep], unsafe_args: [sh]}
            steps:
              - id: send
                tool: shell.run
                for_each: [A, B, C]
                max_parallel: 2
                retry: {attempts: 2, backoff: fixed, initial: 1.5}
                timeout: 600
                params: {argv: [sh, item.sh, "${{ item }}"]}
            """
        )
        run = it.start("run", "r.yaml", "--yes")
        it.stop_when(run, lambda: "C" in it.ledger(), "item C's append")
        before = it.ledger()
        assert before == ["A", "C"] or before == ["A", "C", "B"], before
        resumed = it.cli("resume", it.run_id(), "--yes", "--json")
        assert "Traceback" not in resumed.stderr, resumed.stderr
        again = it.ledger()[len(before) :]
        assert again == [], (
            f"FINDING: after kill -9, `resume --yes` made item C's call (in flight at the kill) "
            f"and item A's (finished) again: the ledger went from {before} to {it.ledger()}. "
            "The journal keys a for_each item's call by an attempt number shared by all items, "
            "which depends on timing (served calls end at once), so the in-doubt intent and "
            "the journaled result are not matched"
        )


@pytest.mark.slow
def test_a_call_in_doubt_that_is_denied_does_not_start_the_fallback(tmp_path: Path) -> None:
    """`deploy` was in flight at the kill (its line is in the ledger). Its fallback makes
    the same call. On resume `--yes` denies the call in doubt, as it must, and the step's
    fallback then makes it anyway: the side effect happens twice and the run succeeds."""
    with lab(tmp_path) as it:
        it.write("deploy.sh", FIRST_CALL_WAITS)
        it.recipe(
            """\
            version: 1
            name: fallback
            capabilities:
              shell: {allow: [sh, sleep], unsafe_args: [sh]}
            steps:
              - id: deploy
                tool: shell.run
                timeout: 600
                params: {argv: [sh, deploy.sh, deploy]}
                fallback: {tool: shell.run, params: {argv: [sh, deploy.sh, deploy]}}
            """
        )
        run = it.start("run", "r.yaml", "--yes")
        it.stop_when(run, lambda: it.ledger() == ["deploy"], "deploy's append")
        resumed = it.cli("resume", it.run_id(), "--yes", "--json")
        result = _json(resumed)
        deploy = result["steps"]["deploy"]
        assert it.ledger() == ["deploy"], (
            "FINDING: the call in doubt was denied by --yes, and the step's fallback then ran "
            f"(status {deploy['status']!r}, exit {resumed.returncode}, ledger {it.ledger()}): "
            "a denial of a call that may already have happened is taken as the primary having "
            "failed; the fallback (here the same call) repeats the side effect unasked"
        )


@pytest.mark.slow
def test_a_fallback_call_in_flight_stays_in_doubt_when_the_read_only_primary_fails_sooner(
    tmp_path: Path,
) -> None:
    """The primary is a read-only GET (not journaled: a resume makes it again), retried on
    timeout. In the run the server accepts and never answers: two timeouts, then the
    fallback (attempt 3) appends `deploy` and is killed in flight. On resume the server is
    gone: the GET fails at once with an error that is not retried, the fallback is attempt
    2, and its call in doubt (journaled as attempt 3) is not recognised: `--yes` makes it
    again."""
    silent = socket.socket()  # listens, never accepts: a GET to it times out
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    port = silent.getsockname()[1]
    with lab(tmp_path) as it:
        it.write("deploy.sh", FIRST_CALL_WAITS)
        it.recipe(
            f"""\
            version: 1
            name: readfirst
            capabilities:
              http: {{allow: [127.0.0.1], ports: [{port}], allow_http: true,
                      private_networks: [127.0.0.1/32]}}
              shell: {{allow: [sh, sleep], unsafe_args: [sh]}}
            steps:
              - id: deploy
                tool: http.request
                params: {{url: "http://127.0.0.1:{port}/ready"}}
                timeout: 0.5
                retry: {{attempts: 2, on: [timeout], backoff: fixed, initial: 0}}
                fallback:
                  {{tool: shell.run, params: {{argv: [sh, deploy.sh, deploy]}}, timeout: 600}}
            """
        )
        try:
            run = it.start("run", "r.yaml", "--yes")
            it.stop_when(run, lambda: it.ledger() == ["deploy"], "the fallback's append")
        finally:
            silent.close()  # the server is gone: the resume's GET is refused at once
        [intent] = it.rows("intent")
        assert (intent["action"], intent["attempt"]) == ("shell.run", 3), intent
        resumed = it.cli("resume", it.run_id(), "--yes", "--json")
        result = _json(resumed)
        assert it.ledger() == ["deploy"], (
            f"FINDING: the fallback's call in flight at the kill was made again by --yes "
            f"(step {result['steps']['deploy']['status']!r}, ledger {it.ledger()}): a call "
            "in doubt is matched by its attempt number, which a read-only call made again "
            "(and failing sooner) shifts"
        )


@pytest.mark.slow
def test_two_resumes_at_once_do_not_both_make_the_same_call(tmp_path: Path) -> None:
    """Two `planloom resume` of one failed run, started together. The second reads the
    journal, then spends a while validating the recipe (listing a family's tools: an MCP
    server can take seconds; held here by the `hold` plugin) while the first claims the run
    and finishes it. The second then claims the run, which has ended since it read it, and
    runs `send` again from its stale reading of the journal."""
    with lab(tmp_path) as it:
        it.environ = env(PYTHONPATH=str(TESTS))
        it.recipe(
            """\
            version: 1
            name: twice
            capabilities:
              shell: {allow: [sh], unsafe_args: [sh]}
              hold: {}
            steps:
              - id: check
                tool: shell.run
                params: {argv: [sh, -c, "test -e ready"]}
              - id: send
                tool: shell.run
                params: {argv: [sh, -c, "echo sent >> ledger.txt"]}
                depends_on: [check]
            """
        )
        plugin = ("-p", "_durable_attacks_plugin")
        assert it.cli(*plugin, "run", "r.yaml", "--yes").returncode == 1
        run_id = it.run_id()
        (tmp_path / "ready").touch()
        hold = tmp_path / "hold"
        hold.touch()
        held = {**it.environ, "HOLD_FILE": str(hold)}
        slow = it.start(*plugin, "resume", run_id, "--yes", name="slow", environ=held)
        try:
            waiting = tmp_path / "hold.waiting"
            it.wait_for(slow, waiting.exists, "the slow resume's validation")
            fast = it.cli(*plugin, "resume", run_id, "--yes")
            assert "Traceback" not in fast.stderr, fast.stderr
        finally:
            hold.unlink()
            slow.wait(TIMEOUT)
        codes = sorted([fast.returncode, slow.returncode])
        assert it.ledger() == ["sent"], (
            f"FINDING: two resumes of run {run_id} both ran step send (ledger {it.ledger()}; "
            f"exit statuses {codes}): a resume reads the journal before it claims the run, "
            "and the claim accepts a run that ended (or grew) since it was read"
        )
        assert codes == [0, 2], f"one resume ran the run, the other was refused: {codes}"


# -- a call that skips its gate ------------------------------------------------------------


def test_a_forged_goal_plan_cannot_waive_a_gate(tmp_path: Path) -> None:
    """A goal run's plan is read back from the journal on resume (there is no recipe to
    compare it with). A plan entry written with the sqlite3 CLI, whose step says
    `confirm: never`, is run as it stands: its side effect is made with no gate, no flag
    and no terminal. A model may not write `confirm: never` (`planners.llm` turns it into
    `auto`); a journal should not be able to either."""
    plan = {
        "version": 1,
        "name": "tidy",
        "goal": "tidy up",
        "capabilities": {"shell": {"allow": ["sh"], "unsafe_args": ["sh"]}},
        "steps": [
            {
                "id": "tidy",
                "tool": "shell.run",
                "confirm": "never",
                "params": {"argv": ["sh", "-c", "echo forged >> ledger.txt"]},
            }
        ],
    }
    with lab(tmp_path) as it:
        forged_store(
            it.store,
            "f0f0f0f0f0f0",
            recipe=None,
            base_dir=tmp_path,
            rows=[
                ("start", None, json.dumps({"segment": 1, "pid": 1})),
                ("plan", None, json.dumps({"plan": plan, "inputs": {}, "model": "m"})),
            ],
            status="cancelled",
        )
        resumed = it.cli("resume", "f0f0f0f0f0f0", "--json")  # no --yes, no terminal
        assert "Traceback" not in resumed.stderr, resumed.stderr
        assert it.ledger() == [], (
            f"FINDING: a plan written into the journal by hand ran a side effect with no gate "
            f"(exit {resumed.returncode}, ledger {it.ledger()}): a goal run's resume trusts the "
            "journal's plan, grants and `confirm: never` included"
        )


@pytest.mark.slow
def test_ctrl_c_then_resume_never_makes_the_call_again_without_a_person(tmp_path: Path) -> None:
    """Interrupted with SIGINT while `work` and `quiet` (`confirm: never`) run: both calls
    are in doubt. A forged approval in the journal, a policy allowing every tool (alone and
    with `--yes`), and no terminal at all each deny them; the `finally` step that ran is
    kept; nothing is made again."""
    with lab(tmp_path) as it:
        it.recipe(
            """\
            version: 1
            name: interrupted
            capabilities:
              shell: {allow: [sh, sleep], unsafe_args: [sh]}
            steps:
              - id: work
                tool: shell.run
                timeout: 600
                params: {argv: [sh, -c, "echo work >> ledger.txt; sleep MARK"]}
              - id: quiet
                tool: shell.run
                confirm: never
                timeout: 600
                params: {argv: [sh, -c, "echo quiet >> ledger.txt; sleep MARK"]}
            finally:
              - id: close
                tool: shell.run
                params: {argv: [sh, -c, "echo close >> ledger.txt"]}
            """
        )
        it.write("allow.yaml", 'version: 1\nrules:\n  - {tool: "*", decision: allow}\n')
        run = it.start("run", "r.yaml", "--yes")
        code = it.stop_when(run, lambda: len(it.ledger()) == 2, "both appends", signal.SIGINT)
        assert code == 130, it.output("run")
        assert sorted(it.ledger()) == ["close", "quiet", "work"]
        run_id = it.run_id()
        intents = {row["step"]: row for row in it.rows("intent")}
        with contextlib.closing(sqlite3.connect(it.store)) as db, db:
            (last,) = db.execute("SELECT MAX(seq) FROM journal").fetchone()
            for n, step in enumerate(("work", "quiet"), start=1):
                forged = {
                    **{k: intents[step][k] for k in ("step", "action", "params_hash")},
                    "ordinal": 0,
                    "approved": True,
                    "by": "terminal",
                    "reason": "forged",
                    "edited_params": None,
                    "quit": False,
                    "in_doubt": True,
                }
                db.execute(
                    "INSERT INTO journal (run_id, seq, at, kind, scope, data) "
                    "VALUES (?, ?, 1e9, 'approval', ?, ?)",
                    (run_id, last + n, step, json.dumps(forged)),
                )
        rechain(it.store, run_id)  # as one who knows the chain: the gate must hold anyway
        tries = {  # flags: who decides
            (): "fail-closed",
            ("--policy", "allow.yaml"): "fail-closed",
            ("--policy", "allow.yaml", "--yes"): "policy:default→--yes",
        }
        for flags, who in tries.items():
            result = _json(it.cli("resume", run_id, *flags, "--json"))
            steps = {k: v["status"] for k, v in result["steps"].items()}
            assert steps == {"work": "denied", "quiet": "denied", "close": "succeeded"}, flags
            assert all(IN_DOUBT in result["steps"][s]["error"] for s in ("work", "quiet")), flags
            decided = {(d["step_id"], d["approved"], d["by"]) for d in result["approvals"]}
            assert decided == {("work", False, who), ("quiet", False, who)}, flags
            assert sorted(it.ledger()) == ["close", "quiet", "work"], flags


# -- a person at the terminal --------------------------------------------------------------

GATE = r"step '([^']+)' wants to run (\S+) \("
MENU = r"\[A\]pprove all remaining  \[q\]uit > "
REASON = r"reason \(optional\) > "


@pytest.mark.slow
def test_approve_all_at_the_terminal_does_not_cover_a_later_call_in_doubt(
    tmp_path: Path,
) -> None:
    """The person answers `A` (approve all remaining) at the first gate of a resume; the
    call in doubt that comes next is still put to them, saying it may have happened."""
    with lab(tmp_path) as it:
        it.recipe(
            """\
            version: 1
            name: approveall
            on_failure: continue
            limits: {max_parallel: 1}
            capabilities:
              shell: {allow: [sh, sleep], unsafe_args: [sh]}
            steps:
              - id: prep
                tool: shell.run
                params: {argv: [sh, -c, "test -e fixed"]}
              - id: push
                tool: shell.run
                timeout: 600
                params: {argv: [sh, -c, "echo push >> ledger.txt; test -e fixed || sleep MARK"]}
            """
        )
        run = it.start("run", "r.yaml", "--yes")
        it.stop_when(run, lambda: it.ledger() == ["push"], "push's append")
        (tmp_path / "fixed").touch()
        out = tmp_path / "resume.json"
        log = io.StringIO()
        environ = env(TERM="xterm")
        environ.pop("EDITOR", None)
        environ.pop("VISUAL", None)
        child = pexpect.spawn(
            "/bin/sh",
            ["-c", 'out=$1; shift; exec "$@" >"$out"', "sh", str(out), PLANLOOM, "resume",
             it.run_id(), "--json", "--store", str(it.store)],
            cwd=str(tmp_path), env=environ, timeout=TIMEOUT, encoding="utf-8",
            dimensions=(40, 200),
        )  # fmt: skip
        child.logfile_read = log
        gates: list[tuple[str, str]] = []
        try:
            while child.expect([GATE, pexpect.EOF]) == 0:
                step = child.match.group(1)
                child.expect(MENU)
                gates.append((step, child.before))
                if step == "prep":
                    child.sendline("A")
                else:
                    child.sendline("d")
                    child.expect(REASON)
                    child.sendline("not twice")
            child.close()
        except (pexpect.TIMEOUT, pexpect.EOF) as exc:
            raise AssertionError(f"{type(exc).__name__}; shown:\n{log.getvalue()}") from None
        finally:
            child.close(force=True)
        assert [step for step, _ in gates] == ["prep", "push"], log.getvalue()
        assert IN_DOUBT in gates[1][1], log.getvalue()
        result = json.loads(out.read_text())
        assert result["steps"]["push"]["status"] == "denied", result
        assert "not twice" in result["steps"]["push"]["error"]
        by = [(d["step_id"], d["by"]) for d in result["approvals"]]
        assert by == [("prep", "terminal (approve all)"), ("push", "terminal")], by
        assert it.ledger() == ["push"]


# -- refused outright -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [("--replay", "c.yaml"), ("--record", "c.yaml"), ("--dry-run",)],
    ids=["replay", "record", "dry-run"],
)
def test_resume_refuses_cassette_flags_and_dry_run(tmp_path: Path, flags: tuple[str, ...]) -> None:
    """A cassette's recorded decisions could answer a call's gate, and a dry run would
    claim the run for nothing: resume takes neither, before it reads anything."""
    with lab(tmp_path) as it:
        refused = it.cli("resume", "0123456789ab", *flags, "--yes")
        assert refused.returncode == 2, refused.stderr
        assert "Traceback" not in refused.stderr, refused.stderr
        assert re.search(r"cassette|dry run", refused.stderr), refused.stderr
        assert not it.store.exists()


@pytest.mark.slow
def test_resume_is_refused_while_the_run_or_another_resume_of_it_runs(tmp_path: Path) -> None:
    with lab(tmp_path) as it:
        it.recipe(
            """\
            version: 1
            name: busy
            capabilities:
              shell: {allow: [sh, sleep], unsafe_args: [sh]}
            steps:
              - id: long
                tool: shell.run
                idempotent: true
                timeout: 600
                params: {argv: [sh, -c, "echo long >> ledger.txt; sleep MARK"]}
            """
        )
        run = it.start("run", "r.yaml", "--yes")
        try:
            it.wait_for(run, lambda: it.ledger() == ["long"], "the run's append")
            busy = it.cli("resume", it.run_id(), "--yes")
            assert busy.returncode == 2, busy.stderr
            assert "still running" in busy.stderr, busy.stderr
        finally:
            run.kill()
            run.wait(TIMEOUT)
        first = it.start("resume", it.run_id(), "--yes", name="first")
        try:  # `long` is idempotent: the first resume makes it again, unasked
            it.wait_for(first, lambda: it.ledger() == ["long"] * 2, "the resume's append")
            busy = it.cli("resume", it.run_id(), "--yes")
            assert busy.returncode == 2, busy.stderr
            assert "still running" in busy.stderr, busy.stderr
        finally:
            first.kill()
            first.wait(TIMEOUT)
        assert it.ledger() == ["long"] * 2


# -- a hand-edited journal --------------------------------------------------------------------

_PLAN = {
    "version": 1,
    "name": "forged",
    "capabilities": {"shell": {"allow": ["sh"], "unsafe_args": ["sh"]}},
    "steps": [{"id": "a", "tool": "shell.run", "params": {"argv": ["sh", "-c", "true"]}}],
}
_START = ("start", None, json.dumps({"segment": 1, "pid": 1}))
_PLAN_ROW = ("plan", None, json.dumps({"plan": _PLAN, "inputs": {}, "model": None}))

FORGERIES: dict[str, tuple[list[tuple[str, str | None, str]], str, tuple[str, ...]]] = {
    # name: (journal rows, SQL run after them, the command)
    "data-not-json/show": ([_START, _PLAN_ROW, ("step", "a", "{torn")], "", ("show",)),
    "data-not-json/resume": ([_START, _PLAN_ROW, ("step", "a", "{torn")], "", ("resume", "--no")),
    "step-null/report": ([_START, _PLAN_ROW, ("step", "a", "null")], "", ("report",)),
    "plan-a-string/resume": ([_START, ("plan", None, '{"plan": "x"}')], "", ("resume", "--no")),
    "end-a-list/show": ([_START, _PLAN_ROW, ("end", None, "[1]")], "", ("show", "--json")),
    "time-a-string/report": (
        [_START, _PLAN_ROW, ("start", None, '{"segment": 2}')],
        "UPDATE journal SET at='later' WHERE seq=2",
        ("report",),
    ),
    "usage-not-json/runs": ([_START, _PLAN_ROW], "UPDATE runs SET usage='{torn'", ("runs",)),
}


@pytest.mark.parametrize("name", list(FORGERIES))
def test_a_hand_edited_journal_is_refused_with_a_message_not_a_traceback(
    tmp_path: Path, name: str
) -> None:
    """Rows written with the sqlite3 CLI (or torn, or from another version): `runs`,
    `show` and `report` exit 0 (a field read as missing) or 2 (with a message naming what
    is wrong), and `resume` exits 2, never 1 with a Python traceback."""
    rows, sql, command = FORGERIES[name]
    with lab(tmp_path) as it:
        it.recipe(json.dumps(_PLAN))
        forged_store(
            it.store, "abcabcabcabc", recipe=it.folder / "r.yaml", base_dir=tmp_path, rows=rows
        )
        if sql:
            with contextlib.closing(sqlite3.connect(it.store)) as db, db:
                db.execute(sql)
            rechain(it.store, "abcabcabcabc")  # what is read must be refused, not only its hash
        args = (command[0], "abcabcabcabc", *command[1:]) if command != ("runs",) else command
        if command[0] == "report":
            args = (*args, "-o", "page.html")
        done = it.cli(*args)
        last = done.stderr.strip().splitlines()[-1:] or [""]
        finding = (
            f"FINDING: `planloom {' '.join(args)}` on a hand-edited journal ({name}) exited "
            f"{done.returncode}: {last[0]}"
        )
        assert "Traceback" not in done.stderr, finding
        # A resume must refuse what it cannot read: an unreadable entry may be an intent.
        assert done.returncode in ((2,) if command[0] == "resume" else (0, 2)), finding


@pytest.mark.slow
def test_a_forged_run_cannot_write_terminal_escapes_through_runs_or_show(
    tmp_path: Path,
) -> None:
    """A run id and status holding escape sequences (set the window title, clear the
    screen) are printed by `runs` and `show` as visible text, never as raw ESC bytes."""
    evil_id = "e\x1b[2Jvil"
    with lab(tmp_path) as it:
        forged_store(it.store, evil_id, recipe=None, base_dir=tmp_path, rows=[_START])
        with contextlib.closing(sqlite3.connect(it.store)) as db, db:
            db.execute("UPDATE runs SET status=?", ("x\x1b]0;PWNED\x07\x1b[2J",))
        listed = it.cli("runs")
        shown = it.cli("show", evil_id)
    assert listed.returncode == 0, listed.stderr
    raw = {
        name: [line for line in proc.stdout.splitlines() if "\x1b" in line]
        for name, proc in (("runs", listed), ("show", shown))
    }
    assert raw == {"runs": [], "show": []}, (
        f"FINDING: the commands printed raw escape sequences from the store: {raw}"
    )


@pytest.mark.slow
def test_a_forged_journal_puts_no_markup_or_script_in_the_report(tmp_path: Path) -> None:
    """Markup in every field a journal can hold (ids, actions, statuses, who approved,
    outputs, errors, the run's name and recipe) is shown as text: the page has only its
    own script, and no element comes from the data."""
    payload = '"><script>alert(1)</script><img src=x onerror=alert(2)><svg onload=alert(3)>'
    x = payload
    call = {"step": x, "attempt": 1, "action": x, "params_hash": x, "ordinal": 0, "params": {x: x}}
    step = {
        "result": {"status": x, "error": x, "output": x},
        "gates": [{"at": 1, "action": x, "by": x, "approved": x}],
        "attempts": [{"n": 1, "started": 1, "action": x, "outcome": x}],
    }
    rows: list[tuple[str, str | None, str]] = [
        _START,
        ("plan", None, json.dumps({"plan": {**_PLAN, "name": x}, "inputs": {x: x}})),
        ("intent", x, json.dumps(call)),
        ("approval", x, json.dumps({"step": x, "action": x, "approved": x, "by": x, "reason": x})),
        ("answer", x, json.dumps({"step": x, "question": x, "answer": x})),
        ("step", x, json.dumps(step)),
        ("end", None, json.dumps({"status": x, "errors": [x], "outputs": {x: x}})),
    ]
    with lab(tmp_path) as it:
        forged_store(
            it.store, "abcabcabcabc", recipe=tmp_path / payload, base_dir=tmp_path, rows=rows
        )
        with contextlib.closing(sqlite3.connect(it.store)) as db, db:
            db.execute("UPDATE runs SET name=?, status=?", (payload, payload))
        done = it.cli("report", "abcabcabcabc", "-o", "page.html")
        assert done.returncode == 0, done.stderr
        page = (tmp_path / "page.html").read_text()
    assert page.count("<script") == 1, "only the page's own script"
    assert "<img" not in page, "no element from the data"
    assert "<svg onload" not in page, "no element from the data"
    assert "&lt;script&gt;alert(1)" in page  # shown, as text


# -- secrets -----------------------------------------------------------------------------------

SECRET = "s3cr3t-t0ken-value-123"
B64 = base64.b64encode(SECRET.encode()).decode()


def _leaks(folder: Path, *forms: str) -> dict[str, list[str]]:
    """Which of `forms` each store file (`s.db`, `-wal`, `-shm`) holds, byte for byte."""
    found: dict[str, list[str]] = {}
    for path in sorted(folder.glob("s.db*")):
        data = path.read_bytes()
        hits = [form for form in forms if form.encode() in data]
        if hits:
            found[path.name] = hits
    return found


@pytest.fixture(scope="module")
def leaky(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One run given the secret (`$MY_API_TOKEN`) as an input, which it puts in a question,
    a model's goal, the model's reply and tool call, a failing command's stderr, and a
    command's output cut at `max_output` mid-secret."""

    def model(request: ChatRequest) -> ChatReply | str:
        if not request.tool_results():
            write = {"path": "out/t.txt", "content": f"{SECRET} {B64}", "create_dirs": True}
            return ChatReply(content=f"saving {SECRET}", tool_calls=[ToolCall("fs__write", write)])
        return f"saved {SECRET} ({B64})"

    with lab(tmp_path_factory.mktemp("leaky")) as it:
        it.recipe(
            """\
            version: 1
            name: leaky
            inputs: {t: {type: string}}
            capabilities:
              fs: {root: ., read: true, write: ["out/**"]}
              shell: {allow: [sh], unsafe_args: [sh], max_output: 24}
              human: {}
            steps:
              - id: ask
                tool: human.ask
                params: {question: "Is ${{ inputs.t }} right?", default: "yes ${{ inputs.t }}"}
              - id: think
                agent:
                  goal: "Save ${{ inputs.t }} to out/t.txt"
                  tools: [fs.write]
                  max_iterations: 3
              - id: fail
                tool: shell.run
                can_fail: true
                params: {argv: [sh, -c, 'echo "bad $0" >&2; exit 3', "${{ inputs.t }}"]}
              - id: cut
                tool: shell.run
                params:
                  argv: [sh, -c, 'printf "xxxxxxxxxxxx%s" "$0"', "${{ inputs.t }}"]
                  check: false
            """
        )
        with FakeOpenAIServer(model) as server:
            it.environ = env(OPENAI_API_KEY="test", MY_API_TOKEN=SECRET)
            done = it.cli(
                "run", "r.yaml", "--yes", "--json", "-i", f"t={SECRET}",
                "--base-url", server.base_url, "--model", "m",
            )  # fmt: skip
        result = _json(done)
        assert result["status"] == "succeeded", done.stderr
        assert result["steps"]["cut"]["output"]["truncated"], result["steps"]["cut"]
        yield it


@pytest.mark.slow
def test_a_secret_in_questions_model_messages_and_errors_never_reaches_the_store(
    leaky: Lab,
) -> None:
    kinds = {kind: leaky.rows(kind) for kind in ("answer", "llm", "tool", "intent")}
    assert all(kinds.values()), "each kind of entry was journaled"
    assert "[REDACTED]" in json.dumps(kinds)
    forms = (SECRET, B64.rstrip("="), SECRET.encode().hex())
    assert _leaks(leaky.folder, *forms) == {}


def test_a_secret_cut_short_by_an_output_limit_never_reaches_the_store(leaky: Lab) -> None:
    """`cut` prints 12 characters then the secret, and its output is kept to 24 bytes: the
    first 12 characters of the secret are what it returned."""
    prefix = SECRET[:12]
    assert _leaks(leaky.folder, prefix) == {}, (
        f"FINDING: {len(prefix)} of the secret's {len(SECRET)} characters ({prefix!r}) are in "
        f"the store ({_leaks(leaky.folder, prefix)}): redaction matches whole secrets only, "
        "and an output cut at max_output ends inside one"
    )


@pytest.mark.slow
def test_a_resume_does_not_send_the_redaction_marker_in_place_of_a_secret_input(
    tmp_path: Path,
) -> None:
    """The run was given the secret as `-i token=...` and failed before using it; the
    journal holds the input redacted. The resume (with the secret still in the
    environment) gives `configure` the text `[REDACTED]` as the token, and says nothing."""
    with lab(tmp_path) as it:
        it.environ = env(MY_API_TOKEN=SECRET)
        it.recipe(
            """\
            version: 1
            name: secretinput
            inputs: {token: {type: string}}
            capabilities:
              shell: {allow: [sh], unsafe_args: [sh]}
            steps:
              - id: check
                tool: shell.run
                params: {argv: [sh, -c, "test -e ready"]}
              - id: configure
                tool: shell.run
                depends_on: [check]
                params: {argv: [sh, -c, 'echo "$0" >> ledger.txt', "${{ inputs.token }}"]}
            """
        )
        assert it.cli("run", "r.yaml", "--yes", "-i", f"token={SECRET}").returncode == 1
        (tmp_path / "ready").touch()
        resumed = it.cli("resume", it.run_id(), "--yes")
        assert "Traceback" not in resumed.stderr, resumed.stderr
        assert "[REDACTED]" not in it.ledger(), (
            f"FINDING: the resume ran `configure` with the token {it.ledger()} (exit "
            f"{resumed.returncode}): a secret input is journaled redacted and the resume "
            "uses the marker as its value instead of asking for it (-i token=...)"
        )
