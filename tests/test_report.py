"""`planloom report RUN_ID`: the HTML report of a stored run, made from real runs of the
`planloom` command (one that ended, one killed with -9 mid-step) and opened in Chromium.

The Chromium tests need Debian's `chromium` (`apt-get install chromium`) and the
`playwright` package (the `test` extra); they never download a browser.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import html
import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from _procs import marker_seconds, pids_with, planloom, start
from hypothesis import given
from hypothesis import strategies as st

from engine.app.report import render_report
from engine.store import Entry, RunRecord
from engine.testing import ChatReply, ChatRequest, FakeOpenAIServer, ScriptedModel, ToolCall

if TYPE_CHECKING:  # imported where used: the tests without a browser need no playwright
    from playwright.sync_api import Browser, ConsoleMessage, Dialog, Page

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
HOSTILE = "<script>alert(1)</script>"
MODEL_REPLY = "<b>bold</b> & <img onerror=alert(2)>"

RECIPE = """\
version: 1
name: report-demo
capabilities:
  shell: {allow: ["printf", "false", "echo"]}
  fs: {write: [out.txt]}
  llm: {}
steps:
  - id: hostile
    tool: shell.run
    params: {argv: ["printf", "<script>alert(1)</script>"]}
  - id: flaky
    tool: shell.run
    params: {argv: ["false"]}
    can_fail: true
    retry: {attempts: 2, backoff: fixed, initial: 0.05}
  - id: save
    tool: fs.write
    confirm: always
    params:
      path: out.txt
      content: "${{ steps.hostile.output.stdout }}"
  - id: summary
    tool: llm.complete
    params: {prompt: "Summarise ${{ steps.hostile.output.stdout }}"}
  - id: last
    tool: shell.run
    params: {argv: ["echo", "done"]}
    depends_on: [flaky, save, summary]
outputs:
  greeting: "${{ steps.hostile.output.stdout }}"
"""
STEPS = ["hostile", "flaky", "save", "summary", "last"]

CRASH_RECIPE = """\
version: 1
name: crashy
capabilities:
  shell: {{allow: ["echo", "sleep"]}}
steps:
  - id: first
    tool: shell.run
    params: {{argv: ["echo", "hi"]}}
  - id: nap
    tool: shell.run
    params: {{argv: ["sleep", "{seconds}"]}}
    depends_on: [first]
    timeout: 120
  - id: later
    tool: shell.run
    params: {{argv: ["echo", "bye"]}}
    depends_on: [nap]
"""
CRASH_STEPS = ["first", "nap", "later"]


@dataclass(frozen=True)
class Reported:
    """A stored run and its report, written by `planloom report`."""

    folder: Path
    store: Path
    run_id: str
    page: str
    path: Path
    result: dict[str, Any]


def _report(folder: Path, store: Path, run_id: str) -> Reported:
    proc = planloom("report", run_id, "--store", store, cwd=folder)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    path = folder / f"report-{run_id}.html"  # the default: in the working folder
    assert str(path.name) in proc.stderr
    return Reported(folder, store, run_id, path.read_text(encoding="utf-8"), path, {})


@pytest.fixture(scope="module")
def ended(tmp_path_factory: pytest.TempPathFactory) -> Reported:
    """A run that ended: a hostile output, a retried `can_fail` failure, a gate, a model
    call, then its report."""
    folder = tmp_path_factory.mktemp("ended")
    (folder / "r.yaml").write_text(RECIPE, encoding="utf-8")
    store = folder / "tmp" / "runs.db"
    with FakeOpenAIServer(ScriptedModel.sequence(MODEL_REPLY)) as server:
        proc = planloom(
            "run", "r.yaml", "--yes", "--json", "--store", store,
            "--model", "m-report", "--base-url", server.base_url, cwd=folder,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    reported = _report(folder, store, result["run_id"])
    return dataclasses.replace(reported, result=result)


AGENT_RECIPE = """\
version: 1
name: agent-report
capabilities:
  fs: {root: ., read: true}
steps:
  - id: look
    agent:
      goal: "Count the notes in this folder"
      tools: [fs.list, fs.read]
  - id: listing
    tool: fs.list
    params: {path: .}
"""
AGENT_ANSWER = "There is <one> note: plan.txt"


def _agent_model(request: ChatRequest) -> ChatReply | str:
    """First turn: list the folder and read a note at once; then answer."""
    if not request.tool_results():
        return ChatReply(
            tool_calls=[
                ToolCall("fs__list", {"path": "."}),
                ToolCall("fs__read", {"path": "plan.txt"}),
            ]
        )
    return AGENT_ANSWER


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Reported:
    """A run with an agent step (two model calls, two tool calls) and a tool step."""
    folder = tmp_path_factory.mktemp("agent")
    (folder / "a.yaml").write_text(AGENT_RECIPE, encoding="utf-8")
    (folder / "plan.txt").write_text("ship the report on friday\n", encoding="utf-8")
    store = folder / "runs.db"
    with FakeOpenAIServer(_agent_model) as server:
        proc = planloom(
            "run", "a.yaml", "--yes", "--json", "--store", store,
            "--model", "m-agent", "--base-url", server.base_url, cwd=folder,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    return dataclasses.replace(_report(folder, store, result["run_id"]), result=result)


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reported]:
    """A run killed with -9 while its `nap` step sleeps, then its report."""
    folder = tmp_path_factory.mktemp("crashed")
    seconds = marker_seconds(30)
    (folder / "c.yaml").write_text(CRASH_RECIPE.format(seconds=seconds), encoding="utf-8")
    store = folder / "runs.db"
    proc = start("run", "c.yaml", "--yes", "--store", store, cwd=folder)
    try:
        run_id = _wait_for_intent(store, "nap", proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        yield _report(folder, store, run_id)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
        # The run's own sandbox should have ended the sleep; never leave one behind.
        for pid in pids_with(seconds, whole_argument=True):
            os.kill(pid, signal.SIGKILL)


def _wait_for_intent(store: Path, step: str, proc: subprocess.Popen[str]) -> str:
    """The run id, once the journal holds the intent of `step`'s call (it is in flight)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if store.exists():
            try:
                with contextlib.closing(sqlite3.connect(store, timeout=5)) as db:
                    row = db.execute(
                        "SELECT run_id FROM journal WHERE kind='intent' AND scope=?", (step,)
                    ).fetchone()
            except sqlite3.OperationalError:  # the tables are being made
                row = None
            if row is not None:
                return str(row[0])
        time.sleep(0.05)
    raise AssertionError(f"step {step!r} never started")


def _rows(page: str, section: str) -> list[str]:
    """The text of each table row of a section, tags removed."""
    found = re.search(rf'<section id="{section}">(.*?)</section>', page, re.S)
    assert found is not None, f"no {section} section"
    return [re.sub(r"<[^>]+>", " ", row) for row in re.findall(r"<tr>(.*?)</tr>", found[1], re.S)]


def _row(page: str, section: str, first: str) -> list[str]:
    for row in _rows(page, section):
        cells = row.split()
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in {section}")


# -- the page, as text ----------------------------------------------------------------------


@pytest.mark.slow
def test_every_step_is_reported_with_its_status(ended: Reported) -> None:
    for step_id in STEPS:
        assert _row(ended.page, "steps", step_id)[1] == ended.result["steps"][step_id]["status"]
    assert _row(ended.page, "steps", "flaky")[1:4] == ["failed_acceptable", "shell.run", "2"]
    assert ended.run_id in ended.page
    assert 'class="badge st-succeeded">succeeded<' in ended.page  # the run's own status


def test_the_graph_draws_template_references_and_depends_on(ended: Reported) -> None:
    graph = re.search(r'<svg class="graph".*?</svg>', ended.page, re.S)
    assert graph is not None
    nodes = re.findall(r'<g class="node" data-step="(step-\d+)"', graph[0])
    assert len(nodes) == len(STEPS)
    # hostile → save and hostile → summary come from templates, the rest from depends_on.
    assert len(re.findall(r'<path class="edge"', graph[0])) == 5
    xs = {
        name: float(x)
        for x, name in re.findall(r'<text x="([\d.]+)" y="[\d.]+" class="id">(\w+)<', graph[0])
    }
    assert xs["hostile"] < xs["save"] < xs["last"]
    assert xs["flaky"] < xs["last"]


def test_the_timeline_has_every_attempt_and_gate(ended: Reported) -> None:
    timeline = re.search(r'<svg id="timeline-svg".*?</svg>', ended.page, re.S)
    assert timeline is not None
    attempts = re.findall(r"<title>attempt (\d+): (\w+)", timeline[0])
    assert attempts.count(("2", "StepFailed")) == 1  # flaky's retry
    assert len(attempts) == 6  # one each, two for flaky
    assert len(re.findall(r"<title>gate \S+ approved by --yes", timeline[0])) >= 4


def test_errors_approvals_and_model_usage(ended: Reported) -> None:
    errors = " ".join(_rows(ended.page, "errors"))
    assert "flaky" in errors
    assert "exited with code 1" in errors
    approvals = [row.split() for row in _rows(ended.page, "approvals")[1:]]
    assert approvals[[r[0] for r in approvals].index("save")][:4] == [
        "save",
        "fs.write",
        "approved",
        "--yes",
    ]
    usage = ended.result["usage"]
    assert _row(ended.page, "model", "summary") == [
        "summary", "1", str(usage["prompt_tokens"]), str(usage["completion_tokens"]), "0"
    ]  # fmt: skip
    assert "m-report" in ended.page


def _details(page: str, step: str) -> str:
    """The text of a step's details, tags removed, spaces squeezed."""
    anchor = re.search(rf'<a href="#(step-\d+)" data-step="step-\d+">{step}</a>', page)
    assert anchor is not None, f"no step {step!r}"
    found = re.search(rf'<details class="step" id="{anchor[1]}">(.*?)</details>', page, re.S)
    assert found is not None
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", found[1])).split())


def _table(page: str, step: str, title: str) -> list[str]:
    """The rows of a table in a step's details (`attempts`, `model calls`), tags removed."""
    anchor = re.search(rf'<a href="#(step-\d+)" data-step="step-\d+">{step}</a>', page)
    assert anchor is not None
    found = re.search(
        rf'id="{anchor[1]}">.*?<h4>{title}</h4>(?:<div class="calls">)?<table>(.*?)</table>',
        page,
        re.S,
    )
    assert found is not None, f"no {title} for {step}"
    rows = re.findall(r"<tr>(.*?)</tr>", found[1], re.S)[1:]
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", row)).split()) for row in rows]


def test_an_agent_steps_model_calls_are_reported(agent: Reported) -> None:
    first, second = _table(agent.page, "look", "model calls")
    usage = agent.result["steps"]["look"]["usage"]
    # The first call: the agent's instructions and task, the tools offered, the two tool
    # calls it asked for, with their arguments, and its tokens.
    assert first.startswith("1 system You carry out one task")
    assert "user Count the notes in this folder" in first
    assert "tools offered: fs__list, fs__read" in first
    assert re.search(r'tool call fs__list \(call_\w+\) \{ "path": "\." \}', first), first
    assert re.search(r'tool call fs__read \(call_\w+\) \{ "path": "plan.txt" \}', first)
    assert first.endswith("tool_calls")
    # The second: what is new (the instructions' turn count changed, the model's turn and
    # both results); the task, sent before, is counted, not shown again; then the answer.
    assert second.startswith("2 1 message as in call 1, not shown again system")
    assert "budget: 9 turns left" in second
    assert "Count the notes" not in second
    assert re.search(r"assistant tool call fs__list .* tool \(call_\w+\) \{", second)
    assert "ship the report on friday" in second  # fs.read's result, sent back
    assert AGENT_ANSWER in second
    assert second.endswith("stop")
    tokens = [
        [int(n.replace(",", "")) for n in re.findall(r"([\d,]+) (?:in|out)", row)]
        for row in (first, second)
    ]
    assert [sum(t[0] for t in tokens), sum(t[1] for t in tokens)] == [
        usage["prompt_tokens"],
        usage["completion_tokens"],
    ]
    # The tool step made no model call: no such table in its details.
    assert "model calls" not in _details(agent.page, "listing")


def test_each_attempt_names_the_action_it_made(agent: Reported) -> None:
    # A lone attempt that went well is not journaled on its own: it made its step's action.
    assert _table(agent.page, "look", "attempts")[0].split()[:3] == ["1", "agent", "ok"]
    assert _table(agent.page, "listing", "attempts")[0].split()[:3] == ["1", "fs.list", "ok"]
    assert "null" not in " ".join(_table(agent.page, "look", "attempts"))


def test_a_goals_planning_calls_and_a_failed_call_are_listed() -> None:
    """From a journal as a goal session writes it: the planner's call (not a step's) and an
    agent's call that failed for good."""
    record = RunRecord(id="r1", name="goal", recipe=None, base_dir="/", status="failed")
    asked = {"model": "m", "messages": [{"role": "user", "content": "plan <this>"}]}
    plan = {"plan": {"name": "goal", "steps": [{"id": "a", "agent": {}}]}}
    answer = {"content": '{"steps": []}', "prompt_tokens": 7, "completion_tokens": 3}
    failure = {"type": "LLMError", "message": "the endpoint answered 500"}
    entries = [
        Entry(0, 1.0, "plan", None, plan),
        Entry(1, 2.0, "llm", "(planner)", {"request": asked, "response": answer}),
        Entry(2, 3.0, "llm", "a", {"step": "a", "request": asked, "error": failure}),
    ]
    page = render_report(record, entries)
    planning = re.search(r'<details class="step" id="planning">(.*?)</details>', page, re.S)
    assert planning is not None
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", planning[1])).split())
    assert text == (
        'planning model calls # sent answer tokens 1 user plan <this> {"steps": []} 7 in 3 out'
    )
    [failed] = _table(page, "a", "model calls")
    assert failed == "1 user plan <this> LLMError: the endpoint answered 500 —"
    assert "plan &lt;this&gt;" in page


def test_hostile_journal_text_is_escaped(ended: Reported) -> None:
    assert HOSTILE not in ended.page
    assert html_escaped(HOSTILE) in ended.page
    assert "<b>bold</b>" not in ended.page
    assert "<img" not in ended.page
    assert html_escaped(MODEL_REPLY) in ended.page
    assert ended.page.count("<script") == 1  # the page's own, at the end


@pytest.mark.slow
def test_the_page_references_nothing_outside_itself(ended: Reported, crashed: Reported) -> None:
    for page in (ended.page, crashed.page):
        assert "http://" not in page
        assert "https://" not in page
        assert re.search(r"<[^>]*\bsrc\s*=", page) is None  # no image, script or frame
        # Links only move within the page.
        assert all(link.startswith("#") for link in re.findall(r'\bhref="([^"]*)"', page))
    # The policy lets only the page's own style and script run, and they match it.
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', ended.page)
    assert policy is not None
    assert "default-src 'none'" in policy[1]
    for tag in ("style", "script"):
        body = re.search(rf"<{tag}>(.*?)</{tag}>", ended.page, re.S)
        assert body is not None
        digest = base64.b64encode(hashlib.sha256(body[1].encode()).digest()).decode()
        assert f"{tag}-src 'sha256-{digest}'" in policy[1]


def test_a_crashed_run_is_reported_interrupted_with_what_was_in_flight(
    crashed: Reported,
) -> None:
    page = crashed.page
    assert 'id="interrupted"' in page
    assert re.search(r"In flight: <code>nap</code>", page)
    assert _row(page, "steps", "first")[1] == "succeeded"
    assert _row(page, "steps", "nap")[1:3] == ["in", "flight"]
    assert _row(page, "steps", "later")[1] == "pending"
    flying = _rows(page, "in-flight")[1].split()
    assert flying[:3] == ["nap", "1", "shell.run"]
    assert "sleep" in " ".join(flying)
    assert f"planloom resume {crashed.run_id}" in page


@pytest.mark.slow
def test_unknown_run_and_missing_store_exit_2(ended: Reported, tmp_path: Path) -> None:
    unknown = planloom("report", "nosuchrun", "--store", ended.store, cwd=tmp_path)
    assert unknown.returncode == 2
    assert "nosuchrun" in unknown.stderr
    assert "planloom runs" in unknown.stderr
    missing = planloom("report", ended.run_id, cwd=tmp_path)
    assert missing.returncode == 2
    assert "no run store" in missing.stderr
    assert "--store" in missing.stderr
    assert "Traceback" not in unknown.stderr + missing.stderr
    assert list(tmp_path.iterdir()) == []


def test_output_goes_where_o_says(ended: Reported, tmp_path: Path) -> None:
    target = tmp_path / "r.html"
    proc = planloom("report", ended.run_id, "--store", ended.store, "-o", target, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert list(tmp_path.iterdir()) == [target]
    assert ended.run_id in target.read_text(encoding="utf-8")


_TEXT = st.text(alphabet=st.sampled_from(list("<>&\"' \n\x00\x1b\u202e\ud800ab/=")), max_size=20)
_KEYS = st.sampled_from(
    ["plan", "steps", "finally", "id", "depends_on", "tool", "params", "result", "status",
     "output", "error", "started", "finished", "attempts", "n", "outcome", "gates", "at",
     "approved", "by", "llm", "response", "step", "attempt", "action", "params_hash",
     "ordinal", "errors", "outputs", "usage", "prompt_tokens"]
)  # fmt: skip
_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _TEXT | st.sampled_from(["a", "b"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS | _TEXT, inner, max_size=5),
    max_leaves=25,
)
_ENTRY = st.tuples(
    st.sampled_from(
        ["start", "plan", "step", "intent", "tool", "llm", "approval", "answer", "end"]
    ),
    st.none() | st.sampled_from(["a", "b", "a[2]", "(planner)"]) | _TEXT,
    st.dictionaries(_KEYS, _VALUE, max_size=6),
    st.floats() | st.integers(min_value=-5, max_value=4_000_000_000),
)


@pytest.mark.slow
@given(
    entries=st.lists(_ENTRY, max_size=12),
    status=st.sampled_from(["running", "succeeded", "failed", "cancelled", "odd"]),
    started=st.floats() | st.integers() | _TEXT,
    usage=_VALUE,
)
def test_any_journal_renders_and_stays_inert(
    entries: list[tuple[Any, ...]], status: str, started: Any, usage: Any
) -> None:
    """A torn, hand-edited or foreign journal (and record) still renders, with nothing
    from it able to act as markup."""
    record = RunRecord(
        id="<run>", name="<b>n</b>", recipe=None, base_dir="/", status=status,
        started=started, usage=usage, pid=2**22 + 1,
    )  # fmt: skip
    journal = [
        Entry(seq, at, kind, scope, data) for seq, (kind, scope, data, at) in enumerate(entries)
    ]
    page = render_report(record, journal)
    page.encode("utf-8")  # lone surrogates from JSON were replaced
    assert page.count("<script") == 1
    assert re.search(r"<[^>]*\bsrc\s*=", page) is None
    assert "<b>" not in page
    assert "\x00" not in page
    assert "\x1b" not in page


def html_escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# -- the page, in Chromium ------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class Opened:
    """A report open in a page, and what the page did: console errors and uncaught
    exceptions, every URL it requested, every dialog (an `alert` would be one)."""

    page: Page
    problems: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.problems.append(f"console error: {message.text}")

    def dialog(self, dialog: Dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()


def _open(browser: Browser, path: Path) -> Opened:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    opened = Opened(page)
    page.on("console", opened.console)
    page.on("pageerror", lambda error: opened.problems.append(f"page error: {error}"))
    page.on("request", lambda request: opened.requests.append(request.url))
    page.on("dialog", opened.dialog)
    page.goto(path.as_uri(), wait_until="load")
    return opened


def _looks_right(opened: Opened, steps: list[str], shot: Path, path: Path) -> None:
    page = opened.page
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000
    text = page.inner_text("body")
    for step_id in steps:
        assert step_id in text
    box = page.locator("#timeline-svg").bounding_box()
    assert box is not None
    assert box["width"] > 100
    assert box["height"] > 50
    assert page.locator("#timeline-svg").is_visible()
    assert opened.problems == []
    assert opened.dialogs == []  # no journal text ran as script
    assert opened.requests == [path.as_uri()]  # nothing but the page itself was loaded


@pytest.mark.slow
def test_the_report_renders_in_chromium(browser: Browser, ended: Reported, tmp_path: Path) -> None:
    opened = _open(browser, ended.path)
    try:
        _looks_right(opened, STEPS, tmp_path / "ended.png", ended.path)
        # The page's script works: a node of the graph opens that step's details.
        page = opened.page
        anchor = page.locator(".node", has_text="flaky").get_attribute("data-step")
        assert page.locator(f"details#{anchor}").get_attribute("open") is None
        page.locator(".node", has_text="flaky").click()
        assert page.locator(f"details#{anchor}").get_attribute("open") is not None
        assert opened.problems == []
    finally:
        opened.page.close()


def test_an_agent_steps_model_calls_show_in_chromium(
    browser: Browser, agent: Reported, tmp_path: Path
) -> None:
    opened = _open(browser, agent.path)
    try:
        _looks_right(opened, ["look", "listing"], tmp_path / "agent.png", agent.path)
        page = opened.page
        row = page.locator("#steps table a", has_text="look")
        anchor = row.get_attribute("data-step")
        calls = page.locator(f"details#{anchor} table").nth(1)
        assert not calls.is_visible()  # the step's details are closed
        row.click()
        assert calls.is_visible()
        text = calls.inner_text()
        assert "Count the notes in this folder" in text
        assert "tool call fs__read" in text
        assert AGENT_ANSWER in text  # as text: the page did not take it for markup
        assert page.locator(f"details#{anchor} .msg.call").count() == 4  # asked, then sent back
        assert opened.problems == []
    finally:
        opened.page.close()


def test_a_crashed_runs_report_renders_in_chromium(
    browser: Browser, crashed: Reported, tmp_path: Path
) -> None:
    opened = _open(browser, crashed.path)
    try:
        _looks_right(opened, CRASH_STEPS, tmp_path / "crashed.png", crashed.path)
        banner = opened.page.locator("#interrupted")
        assert banner.is_visible()
        assert "nap" in banner.inner_text()
    finally:
        opened.page.close()
