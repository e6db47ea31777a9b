"""Durable runs under `kill -9`: the crash battery, through the real `planloom` command.

the README's "Durable runs": a `kill -9` at any instant leaves a consistent store; no process
a run started outlives it; `planloom resume` keeps what ended well, serves the calls whose
results were journaled, and never repeats silently a side-effect call that was in flight
(only an idempotent step runs it again unasked; a person at a terminal may approve it;
`--yes` and no terminal deny it). A changed recipe is refused naming the changed steps; a
finished run or an unknown id is exit 2.

Every case runs the recipe of `tests/_crash.py` (read-only reads, a slow local web page,
shell steps that each append one line to `ledger.txt` between two sleeps, parallel
branches, an agent asking a fake model over 127.0.0.1, an idempotent step, a `finally`)
in its own folder, kills it with SIGKILL at its moment, then checks: nothing it started is
alive 1 s later (/proc), the store passes SQLite's integrity check with no hole in the
journal, `planloom runs --json` says `interrupted`, and `planloom resume ID --yes` ends it
with every line on the ledger at most once: exactly once for a step that was not in
doubt, unchanged for one that was (denied, saying the call may already have happened),
none for a step that never started (after a denied one; `on_failure: stop`). Journaled
results are served, not made again: side-effect calls, the web page, the model's answers.

The cases run three at a time (`battery`, one module fixture: each planloom start costs
about a second of CPU); each case's checks are its own test.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import traceback
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pexpect
import pytest
from _crash import LEDGER_STEPS, Crash, Killed, Moment, Seen
from _procs import PLANLOOM, env, planloom

pytestmark = pytest.mark.slow

WORKERS = 3  # cases at once: more would starve the kills' timing on a loaded 2-core machine
IN_DOUBT = "may already have happened"


# -- the cases ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Land:
    """Where a kill must have landed, checked on the journal and ledger just after it.

    Attributes:
        doubts: exactly these steps have a side-effect call in doubt (None: any).
        ledger: exactly these lines are on the ledger, by first word (None: any).
        on_disk, off_disk: journal entries (kind, scope) that must be, or must not be, there.
    """

    doubts: frozenset[str] | None = None
    ledger: tuple[str, ...] | None = None
    on_disk: tuple[tuple[str, str | None], ...] = ()
    off_disk: tuple[tuple[str, str | None], ...] = ()


@dataclass(frozen=True)
class Case:
    """A run killed at each of `kills` in turn (the first kills the run, the next ones the
    resumes after it), then resumed with `--yes` (unless `resume` is false: a later test
    drives it)."""

    name: str
    kills: tuple[tuple[Moment, Land], ...]
    resume: bool = True


def _lines_before(step: str) -> tuple[str, ...]:
    return LEDGER_STEPS[: LEDGER_STEPS.index(step)]


def _intent(step: str) -> tuple[Moment, Land]:
    """After the call's intent is on disk, before its line is appended."""
    moment = Moment(f"{step}:intent", lambda seen: seen.has("intent", step))
    return moment, Land(doubts=frozenset({step}), ledger=_lines_before(step))


def _effect(step: str) -> tuple[Moment, Land]:
    """After its line is on the ledger, before the call ends."""
    moment = Moment(f"{step}:effect", lambda seen: step in seen.ledger)
    return moment, Land(doubts=frozenset({step}), ledger=(*_lines_before(step), step))


def _result(step: str) -> tuple[Moment, Land]:
    """After the call's result is on disk."""
    moment = Moment(f"{step}:result", lambda seen: seen.has("tool", step))
    ledger = (*_lines_before(step), step)
    return moment, Land(ledger=ledger, on_disk=(("tool", step),))


def _step(step: str) -> tuple[Moment, Land]:
    """After the step's own entry (its result and timeline) is on disk."""
    moment = Moment(f"{step}:step", lambda seen: seen.has("step", step))
    return moment, Land(ledger=(*_lines_before(step), step), on_disk=(("step", step),))


NONE: frozenset[str] = frozenset()

# `one:result` with `/check` held: the step's own entry waits in the batch (nothing durable
# is written while a read-only call runs), so the kill loses it and a resume reruns the
# step, serving its journaled call instead of making it again.
ONE_SERVED = (
    Moment("one:result", lambda seen: seen.has("tool", "one"), pages=frozenset({"/check"})),
    Land(doubts=NONE, ledger=("one",), on_disk=(("tool", "one"),), off_disk=(("step", "one"),)),
)

CASES = [
    Case(
        "before-plan",  # the chat probe (--preflight chat) is held: the run is begun, no plan yet
        ((Moment("before-plan", lambda seen: seen.probes >= 1, probe=True),
          Land(ledger=(), off_disk=(("plan", None),))),),
    ),
    Case(
        "after-plan",  # the read-only fs steps run now
        ((Moment("after-plan", lambda seen: seen.has("plan")), Land(doubts=NONE, ledger=())),),
    ),
    Case(
        "during-fetch",  # a read-only call in flight
        ((Moment("during-fetch", lambda seen: seen.pages["/fetch"] >= 1,
                 pages=frozenset({"/fetch"})),
          Land(doubts=NONE, ledger=(), off_disk=(("tool", "fetch"),))),),
    ),
    Case("one:intent", (_intent("one"),)),
    Case("one:effect", (_effect("one"),)),
    Case("one:result", (ONE_SERVED,)),
    Case("one:step", (_step("one"),)),
    Case("two:intent", (_intent("two"),)),
    Case("two:effect", (_effect("two"),)),
    Case("two:result", (_result("two"),)),
    Case("two:step", (_step("two"),)),
    Case(
        "during-model",  # the model has the agent's first request and has not answered
        ((Moment("during-model", lambda seen: seen.requests >= 1 and seen.has("tool", "two"),
                 model=frozenset({1})),
          Land(doubts=NONE, ledger=("one", "two"), off_disk=(("llm", "think"),))),),
    ),
    Case(
        "after-model",  # the first answer is journaled, the second request is in flight
        ((Moment("after-model",
                 lambda seen: seen.has("llm", "think") and seen.requests >= 2
                 and seen.has("tool", "two"),
                 model=frozenset({2})),
          Land(doubts=NONE, ledger=("one", "two"), on_disk=(("llm", "think"),),
               off_disk=(("step", "think"), ("step", "two")))),),
    ),
    Case("three:intent", (_intent("three"),)),
    Case("three:effect", (_effect("three"),)),
    Case("three:result", (_result("three"),)),
    Case("three:step", (_step("three"),)),
    Case("tidy:intent", (_intent("tidy"),)),
    Case("tidy:effect", (_effect("tidy"),)),
    Case("tidy:result", (_result("tidy"),)),
    Case("close:intent", (_intent("close"),)),  # during `finally`
    Case("close:effect", (_effect("close"),)),
    Case(
        "after-end",  # the run ended: its result and status are on disk
        ((Moment("after-end", lambda seen: seen.has("end") and seen.status != "running"),
          Land(doubts=NONE, ledger=LEDGER_STEPS, on_disk=(("end", None),))),),
    ),
    Case(
        "double",  # the run is killed, then its resume too, at the idempotent step's call
        (ONE_SERVED, _intent("tidy")),
    ),
]  # fmt: skip

# Crashed runs for the tests below, which resume them themselves.
PTY = Case("pty", (_effect("two"),), resume=False)
EDIT = Case("edit", (ONE_SERVED,), resume=False)


# -- playing them ------------------------------------------------------------------------------


@dataclass
class Outcome:
    """A case played: its kills, and the final `planloom resume ID --yes --json`.

    `before` is the journal just before that resume, `after` just after; `ledger`, `pages`
    and `requests` are the ledger's lines, the web page's hits and the model's requests
    just before it (the counts after it are on `crash`)."""

    crash: Crash
    kills: list[Killed] = field(default_factory=list)
    before: Seen | None = None
    after: Seen | None = None
    ledger: list[str] = field(default_factory=list)
    pages: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    resumed: subprocess.CompletedProcess[str] | None = None
    error: str | None = None


def _play(case: Case, folder: Path) -> Outcome:
    crash = Crash(folder)
    outcome = Outcome(crash)
    try:
        proc = crash.run()
        for n, (moment, _) in enumerate(case.kills):
            if n:  # kill the resume of the run killed before
                assert crash.run_id is not None
                proc = crash.start("resume", crash.run_id, name=f"resume-{n}")
            since = outcome.kills[-1].seen.last if outcome.kills else -1
            outcome.kills.append(crash.kill_at(proc, moment, since))
        if case.resume:
            outcome.before = crash.journal()
            outcome.ledger = crash.ledger()
            outcome.pages = dict(crash.pages.hits)
            outcome.requests = len(crash.server.requests)
            outcome.resumed = crash.resume("--yes", "--json")
            outcome.after = crash.journal()
    except Exception:
        outcome.error = traceback.format_exc()
    return outcome


# The cases each test needs, besides the parametrized ones (its own case).
NEEDS = {
    "test_a_call_in_doubt_is_asked_at_a_terminal": PTY.name,
    "test_resume_refuses_a_changed_recipe_naming_the_changed_steps": EDIT.name,
    "test_resume_of_an_unknown_id_says_how_to_find_one": "after-end",
}


def _wanted(request: pytest.FixtureRequest) -> set[str]:
    """The cases the tests selected in this session need (`-k` may pick a few)."""
    names = set()
    for item in request.session.items:
        if getattr(item, "module", None) is not request.module:
            continue
        callspec = getattr(item, "callspec", None)
        needs = NEEDS.get(getattr(item, "originalname", ""))
        if callspec is not None:
            names.add(callspec.params["case"].name)
        elif needs is not None:
            names.add(needs)
    return names


@pytest.fixture(scope="module")
def battery(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Outcome]]:
    """The cases the selected tests need, played three at a time (the latest moments first:
    they take longest)."""
    wanted = _wanted(request)
    cases = [case for case in (PTY, EDIT, *CASES[::-1]) if case.name in wanted]
    with ThreadPoolExecutor(WORKERS) as pool:
        futures = {
            case.name: pool.submit(
                _play, case, tmp_path_factory.mktemp(case.name.replace(":", "-"))
            )
            for case in cases
        }
        outcomes = {name: future.result() for name, future in futures.items()}
    try:
        yield outcomes
    finally:
        for outcome in outcomes.values():
            outcome.crash.close()


# -- the checks --------------------------------------------------------------------------------


def _check_kill(name: str, kill: Killed, land: Land) -> None:
    """Must-show 2 and a clean store after the kill, and the kill landed where meant."""
    seen = kill.seen
    where = f"{name}: journal {[(k, s) for _, k, s, _ in seen.rows]}, ledger {seen.ledger}"
    assert kill.left == [], f"{name}: alive 1 s after kill -9 of planloom: {_cmdlines(kill.left)}"
    assert kill.integrity == "ok", f"{name}: the store is damaged: {kill.integrity}"
    assert kill.gaps == [], f"{name}: the journal lost entries in its middle: {kill.gaps}"
    assert kill.runs[0] == 0, f"{name}: planloom runs failed: {kill.runs[1]}"
    ended = seen.has("end") and seen.status != "running"
    assert kill.listed == ("succeeded" if ended else "interrupted"), where
    assert all(seen.lines(step) <= 1 for step in LEDGER_STEPS), where
    if land.doubts is not None:
        assert seen.doubts() == land.doubts, where
    if land.ledger is not None:
        assert seen.ledger == land.ledger, where
    for kind, scope in land.on_disk:
        assert any(k == kind and s == scope for _, k, s, _ in seen.rows), f"no {kind}: {where}"
    for kind, scope in land.off_disk:
        assert not any(k == kind and s == scope for _, k, s, _ in seen.rows), where


def _cmdlines(pids: list[int]) -> list[str]:
    found = []
    for pid in pids:
        try:
            found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            found.append(f"{pid} (gone)")
    return found


def _check_resumed(name: str, outcome: Outcome) -> None:
    """The resume ended the run: each line at most once, exactly once unless its step was
    in doubt (denied, nothing repeated) or never started; journaled calls were served."""
    crash, before, after, resumed = outcome.crash, outcome.before, outcome.after, outcome.resumed
    assert before is not None
    assert after is not None
    assert resumed is not None
    assert "Traceback" not in resumed.stderr, resumed.stderr
    doubts = before.doubts()
    denied = doubts - {"tidy"}  # the idempotent step runs again unasked
    result = json.loads(resumed.stdout)
    steps = {step_id: (s["status"], s["error"] or "") for step_id, s in result["steps"].items()}
    lines = crash.ledger()
    words = [line.split(" ", 1)[0] for line in lines]
    told = f"{name}: in doubt {sorted(doubts)}, steps {steps}, ledger {lines}"
    assert f"{len(doubts)} call{'' if len(doubts) == 1 else 's'} in doubt" in resumed.stderr, told
    assert lines[: len(outcome.ledger)] == outcome.ledger, f"earlier lines changed: {told}"
    assert all(words.count(step) <= 1 for step in LEDGER_STEPS), f"a repeat: {told}"
    assert set(words) <= set(LEDGER_STEPS), told
    for step in LEDGER_STEPS:
        status, error = steps[step]
        if step in denied:
            assert status == "denied", told
            assert IN_DOUBT in error, told
            earlier = [line.split(" ", 1)[0] for line in outcome.ledger]
            assert words.count(step) == earlier.count(step), f"{step} repeated: {told}"
        elif status == "succeeded":
            assert words.count(step) == 1, told
        else:
            assert status == "pending", told
            assert error.startswith("not started"), told
            assert step not in words, told
            assert not before.has("intent", step), told
    if denied:
        assert resumed.returncode == 1, told
        assert result["status"] == "failed", told
    else:
        assert resumed.returncode == 0, told
        assert result["status"] == "succeeded", told
        assert words == list(LEDGER_STEPS), told
    if steps["three"][0] == "succeeded":  # rendered from the agent's kept or served answer
        assert f"three {result['steps']['think']['output']}" in lines, told
    _check_gates(told, doubts, before, after)
    _check_served(told, outcome, result)


def _check_gates(told: str, doubts: set[str], before: Seen, after: Seen) -> None:
    """The resume's gate decisions: each call in doubt went to the gate marked so, and
    `--yes` denied it; the idempotent step's call was not put to it as in doubt."""
    decided = after.entries("approval", since=before.last)
    for step in doubts - {"tidy"}:
        mine = [d for d in decided if d["step"] == step]
        assert mine, f"{step} never went to the gate: {told}"
        assert all(d["in_doubt"] and not d["approved"] and d["by"] == "--yes" for d in mine), told
    if "tidy" in doubts:
        mine = [d for d in decided if d["step"] == "tidy"]
        assert mine, told
        assert all(d["approved"] and not d["in_doubt"] for d in mine), told


def _check_served(told: str, outcome: Outcome, result: dict[str, Any]) -> None:
    """What was journaled is served, not asked again: a read-only call's result, a model
    answer; what was not is made again (once)."""
    before, crash = outcome.before, outcome.crash
    assert before is not None
    kept = before.kept()
    for step, path in (("fetch", "/fetch"), ("check", "/check")):
        hits = crash.pages.count(path) - outcome.pages.get(path, 0)
        ran = result["steps"][step]["status"] == "succeeded" and step not in kept
        expected = 1 if ran and not before.has("tool", step) else 0
        assert hits == expected, f"{path} asked {hits} times, not {expected}: {told}"
    asked = len(crash.server.requests) - outcome.requests
    answered = sum(1 for data in before.entries("llm") if data.get("response") is not None)
    think = result["steps"]["think"]["status"]
    expected = 2 - answered if think == "succeeded" and "think" not in kept else 0
    assert asked == expected, f"the model was asked {asked} times, not {expected}: {told}"
    assert crash.server.errors == [], crash.server.errors
    for step in LEDGER_STEPS:  # a journaled side-effect call: served, its gate not asked
        if before.has("tool", step) and step not in kept:
            gates = [g for g in result["approvals"] if g["step_id"] == step]
            assert gates, f"{step}: no gate decision: {told}"
            assert all(g["approved"] and g["by"] == "journal" for g in gates), told


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_kill_9_then_resume(battery: dict[str, Outcome], case: Case) -> None:
    outcome = battery[case.name]
    if outcome.error is not None:
        pytest.fail(f"{case.name}: {outcome.error}", pytrace=False)
    for kill, (moment, land) in zip(outcome.kills, case.kills, strict=True):
        _check_kill(moment.name, kill, land)
    resumed = outcome.resumed
    assert resumed is not None
    if case.name == "before-plan":  # nothing ran: there is nothing to resume
        assert resumed.returncode == 2, resumed.stderr
        assert "stopped before it had a plan" in resumed.stderr, resumed.stderr
        assert "run it again" in resumed.stderr, resumed.stderr
        assert outcome.crash.ledger() == []
    elif case.name == "after-end":  # must-show 3: a finished run says so
        assert resumed.returncode == 2, resumed.stderr
        assert "succeeded: there is nothing to resume" in resumed.stderr, resumed.stderr
        assert outcome.crash.ledger() == outcome.ledger
    else:
        _check_resumed(case.name, outcome)


# -- a person at the terminal --------------------------------------------------------------------

GATE = r"step '([^']+)' wants to run (\S+) \("
GATE_MENU = r"\[A\]pprove all remaining  \[q\]uit > "
REASON = r"reason \(optional\) > "
TIMEOUT = 60


@dataclass
class Terminal:
    """What a resume at a terminal did: its exit status, its `--json` result, the prompt
    of each gate it asked (step, text up to the menu), and everything it showed."""

    code: int
    result: dict[str, Any]
    gates: list[tuple[str, str]]
    shown: str


def _terminal(crash: Crash, name: str, answers: dict[str, str]) -> Terminal:
    """`planloom resume ID` in a pty, answering each gate by its step (`d`: deny with the
    reason `no twice`; no answer given: approve)."""
    assert crash.run_id is not None
    result = crash.folder / f"{name}.json"
    log = io.StringIO()
    environ = env(OPENAI_API_KEY="test", TERM="xterm")
    environ.pop("EDITOR", None)
    environ.pop("VISUAL", None)
    child = pexpect.spawn(
        "/bin/sh",
        ["-c", 'out=$1; shift; exec "$@" >"$out"', "sh", str(result), PLANLOOM, "resume",
         crash.run_id, "--json", *crash.model_flags()],
        cwd=str(crash.folder), env=environ, timeout=TIMEOUT, encoding="utf-8",
        dimensions=(40, 200),
    )  # fmt: skip
    child.logfile_read = log
    gates: list[tuple[str, str]] = []
    try:
        while child.expect([GATE, pexpect.EOF], timeout=TIMEOUT) == 0:
            step = child.match.group(1)
            child.expect(GATE_MENU, timeout=TIMEOUT)
            gates.append((step, child.before))
            if answers.get(step, "a") == "d":
                child.sendline("d")
                child.expect(REASON, timeout=TIMEOUT)
                child.sendline("no twice")
            else:
                child.sendline("a")
        child.close()
    except (pexpect.TIMEOUT, pexpect.EOF) as exc:
        raise AssertionError(f"{type(exc).__name__}; shown:\n{log.getvalue()}") from None
    finally:
        child.close(force=True)
    assert child.exitstatus is not None, f"killed by signal {child.signalstatus}"
    return Terminal(child.exitstatus, json.loads(result.read_text()), gates, log.getvalue())


def test_a_call_in_doubt_is_asked_at_a_terminal(battery: dict[str, Outcome]) -> None:
    """Killed after step `two` appended its line: at a terminal, its gate says the call may
    already have happened (no other gate does); denied, nothing is repeated; approved (by
    the next resume, where it is still in doubt), the call is made again."""
    outcome = battery[PTY.name]
    assert outcome.error is None, outcome.error
    crash = outcome.crash
    _check_kill("pty", outcome.kills[0], PTY.kills[0][1])

    denied = _terminal(crash, "deny", {"two": "d"})
    assert denied.code == 1, denied.shown
    assert [step for step, _ in denied.gates] == ["two", "close"], denied.shown
    assert IN_DOUBT in denied.gates[0][1], denied.shown
    assert IN_DOUBT not in denied.gates[1][1], denied.shown
    two = denied.result["steps"]["two"]
    assert two["status"] == "denied", two
    assert "no twice" in two["error"], two
    assert crash.ledger() == ["one", "two", "close"]

    approved = _terminal(crash, "approve", {})
    assert approved.code == 0, approved.shown
    assert [step for step, _ in approved.gates] == ["two", "three", "tidy"], approved.shown
    assert IN_DOUBT in approved.gates[0][1], approved.shown
    assert all(IN_DOUBT not in prompt for _, prompt in approved.gates[1:]), approved.shown
    steps = approved.result["steps"]
    assert {step: s["status"] for step, s in steps.items()} == dict.fromkeys(
        ("seed", "look", "fetch", "one", "check", "two", "think", "three", "tidy", "close"),
        "succeeded",
    )
    three = f"three {steps['think']['output']}"
    # The person chose to make it again: now it happened twice, and nothing else did.
    assert crash.ledger() == ["one", "two", "close", "two", three, "tidy"], approved.shown


# -- must-show 3: what resume refuses ------------------------------------------------------------


def test_resume_refuses_a_changed_recipe_naming_the_changed_steps(
    battery: dict[str, Outcome],
) -> None:
    outcome = battery[EDIT.name]
    assert outcome.error is None, outcome.error
    crash = outcome.crash
    _check_kill("edit", outcome.kills[0], EDIT.kills[0][1])

    crash.write_recipe(two="twice")
    refused = crash.resume("--yes", "--json")
    assert refused.returncode == 2, refused.stderr
    named = re.findall(r"step '(\w+)' (changed|was added|was removed)", refused.stderr)
    assert named == [("two", "changed")], refused.stderr
    assert f"planloom run {crash.recipe}" in refused.stderr, refused.stderr

    crash.write_recipe(two="twice", extra=True, drop="tidy")
    refused = crash.resume("--yes", "--json")
    assert refused.returncode == 2, refused.stderr
    named = re.findall(r"step '(\w+)' (changed|was added|was removed)", refused.stderr)
    assert sorted(named) == [
        ("extra", "was added"),
        ("tidy", "was removed"),
        ("two", "changed"),
    ], refused.stderr
    assert crash.ledger() == ["one"]  # nothing ran

    crash.write_recipe()  # the recipe the run started from: it resumes
    resumed = crash.resume("--yes", "--json")
    assert resumed.returncode == 0, resumed.stderr
    words = [line.split(" ", 1)[0] for line in crash.ledger()]
    assert words == list(LEDGER_STEPS)


def test_resume_of_an_unknown_id_says_how_to_find_one(battery: dict[str, Outcome]) -> None:
    folder = battery["after-end"].crash.folder  # a store with a run in it
    done = planloom("resume", "0123456789ab", "--yes", cwd=folder)
    assert done.returncode == 2, done.stderr
    assert "'0123456789ab'" in done.stderr, done.stderr
    assert "planloom runs" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
