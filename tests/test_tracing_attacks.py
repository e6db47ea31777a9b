"""Attacks on tracing and per-step usage (README "Traces (OpenTelemetry)", `--json` usage):
what a demanding user, or an attacker who controls an input, a tool's or model's output, an
error message or an environment variable, can make `planloom --otel` do.

The promises attacked: no secret in any span, event or resource attribute; `--json` prints
one JSON object whatever the collector does; tracing never changes the exit code and a
collector that hangs costs at most the export timeout; spans that could not be sent are
counted on stderr with the reason; every span ends, in one tree per command; a step's usage
counts its own calls and the steps add up to the run; wrong `OTEL_*` settings are refused
before the run (exit 2), right ones honoured.

Commands run in a subprocess against an OTLP/HTTP collector stand-in; the finer points of
the tree are read from runs made in this process into the SDK's in-memory exporter. A test
whose assertion message starts with `FINDING` shows a promise broken today.
"""

from __future__ import annotations

import json
import re
import signal
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _tracing_attacks import (
    Collector,
    attributes,
    collector,
    forms,
    one_json,
    planloom,
    run_in_process,
    start,
    tree_problems,
)
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from engine.results import RunResult
from engine.testing import (
    ChatReply,
    ChatRequest,
    Fail,
    FakeOpenAIServer,
    Fault,
    Hang,
    ScriptedModel,
    ToolCall,
)

SECRET = "tok9f8e7d6c5b4a3210"  # lowercase: it can stand in a plan's name
TYPED = "typedkey-5e4d3c2b1a09"  # given only as `-i api_token=...`
LOST = re.compile(r"planloom: (\d+) spans? could not be exported to (\S+): (.*)")
USAGE = ("llm_calls", "prompt_tokens", "completion_tokens", "tool_calls")


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _small(folder: Path) -> Path:
    """Two steps, one failing acceptably: a run that succeeds with 7 spans."""
    return _write(
        folder,
        "small.yaml",
        """\
        version: 1
        name: small
        capabilities:
          fs: {root: ., read: true}
        steps:
          - id: listing
            tool: fs.list
            params: {path: .}
          - id: missing
            tool: fs.read
            can_fail: true
            params: {path: missing.txt}
        """,
    )


SMALL_SPANS = 7  # the run, and per step a step, an attempt and a tool call


def _lost(stderr: str) -> tuple[int, str, str] | None:
    """The count, endpoint and reason of the 'could not be exported' line, if any."""
    found = LOST.search(stderr)
    return (int(found[1]), found[2], found[3]) if found else None


def _steps_sum(summary: dict[str, Any]) -> dict[str, int]:
    return {
        key: sum((step.get("usage") or {}).get(key, 0) for step in summary["steps"].values())
        for key in USAGE
    }


def _agent_model(request: ChatRequest) -> ChatReply | str:
    """An agent's first turn asks for a call that fails and one that works; then done."""
    if request.tool_names() and not request.tool_results():
        return ChatReply(
            tool_calls=[
                ToolCall("fs__read", {"path": "nope.txt"}),
                ToolCall("fs__list", {"path": "."}),
            ]
        )
    return "done"


# -- secrets in spans ------------------------------------------------------------------------


@dataclass
class Leaky:
    """A recipe run and a goal session, each traced to its own collector, with a secret in
    the environment (`MY_API_TOKEN`, also the model key) reaching every text a span quotes."""

    run: Any
    run_spans: Collector
    plan: Any
    plan_spans: Collector


@pytest.fixture(scope="module")
def leaky(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Leaky]:
    folder = tmp_path_factory.mktemp("leaky")
    _write(
        folder,
        "leak.yaml",
        f"""\
        version: 1
        name: leak-{SECRET}
        inputs:
          t: {{type: string}}
          api_token: {{type: string}}
        capabilities:
          fs: {{root: ., read: true}}
          shell: {{allow: [sh], unsafe_args: [sh]}}
          http: {{allow: [127.0.0.1], allow_http: true, private_networks: [127.0.0.0/8],
                  ports: [9]}}
        on_failure: continue
        steps:
          - id: read
            tool: fs.read
            params: {{path: "missing-${{{{ inputs.t }}}}.txt"}}
          - id: shout
            tool: shell.run
            params: {{argv: [sh, -c, 'echo "token $0" >&2; exit 3', "${{{{ inputs.t }}}}"]}}
          - id: fetch
            tool: http.request
            params: {{url: "http://127.0.0.1:9/hook/${{{{ inputs.t }}}}?token=${{{{ inputs.t }}}}"}}
          - id: each
            for_each: "${{{{ [inputs.t, 'plain'] }}}}"
            tool: fs.read
            params: {{path: "${{{{ item }}}}"}}
          - id: think
            agent: {{goal: "use ${{{{ inputs.t }}}}", tools: [fs.list]}}
          - id: typed
            tool: fs.read
            params: {{path: "missing-${{{{ inputs.api_token }}}}.txt"}}
        """,
    )
    _write(folder, "caps.yaml", "capabilities: {fs: {root: ., read: true}}\n")
    secrets = {"MY_API_TOKEN": SECRET, "OPENAI_API_KEY": SECRET}
    # The process detector puts the command line's neighbours in the resource.
    resource = {"OTEL_EXPERIMENTAL_RESOURCE_DETECTORS": "otel,process"}
    plan = {
        "goal": "read it",
        "steps": [{"id": "peek", "tool": "fs.read", "params": {"path": f"gone-{SECRET}.txt"}}],
    }
    with (
        collector() as run_spans,
        collector() as plan_spans,
        FakeOpenAIServer(_agent_model) as model,
        FakeOpenAIServer(ScriptedModel(lambda request: plan)) as planner,
    ):
        # The endpoint echoes the key in its error, as some proxies do.
        model.inject(Fault.status(400, body=f"invalid api key {SECRET}"))
        run = planloom(
            "run", "leak.yaml", "--yes", "--json", "--otel",
            "-i", f"t={SECRET}", "-i", f"api_token={TYPED}",
            "--base-url", model.base_url, "--model", "m",
            cwd=folder, OTEL_EXPORTER_OTLP_ENDPOINT=run_spans.url, **secrets, **resource,
        )  # fmt: skip
        session = planloom(
            "plan", f"read the notes with {SECRET}", "--capabilities", "caps.yaml",
            "--yes", "--json", "--otel", "--base-url", planner.base_url, "--model", "m",
            cwd=folder, OTEL_EXPORTER_OTLP_ENDPOINT=plan_spans.url, **secrets,
        )  # fmt: skip
        yield Leaky(run, run_spans, session, plan_spans)


def _texts(span: Span) -> str:
    """Every text of an exported span: name, attributes, status, events."""
    parts: list[Any] = [span.name, attributes(span.attributes), span.status.message]
    for event in span.events:
        parts += [event.name, attributes(event.attributes)]
    return json.dumps(parts, default=str)


@pytest.mark.slow
def test_no_secret_from_the_environment_reaches_a_span_event_or_resource(leaky: Leaky) -> None:
    run = leaky.run
    assert "Traceback" not in run.stderr, run.stderr
    summary = one_json(run.stdout)
    assert run.returncode == 1, run.stderr  # the run failed, and tracing did not change that
    assert summary["status"] == "failed"
    spans = leaky.run_spans.spans
    assert _lost(run.stderr) is None, run.stderr
    assert not tree_problems(spans), tree_problems(spans)
    # The secret reached the texts spans quote (errors of a read, a shell's stderr, a
    # for_each item, the model's error, the plan's name), and each is redacted there.
    redacted = {span.name for span in spans if "[REDACTED]" in _texts(span)}
    assert {"step read", "step shout", "step each", "chat m"} <= redacted, redacted
    assert any(name.startswith("run leak-[REDACTED]") for name in redacted), redacted
    resources = leaky.run_spans.resources
    assert resources
    assert "process.pid" in resources[0]  # the process detector did run
    raw = leaky.run_spans.raw()
    sent = [form for form in forms(SECRET) if form in raw]
    assert not sent, f"{sent} in the exported spans"


def test_a_secret_named_input_is_redacted_in_spans_as_the_journal_redacts_it(
    leaky: Leaky,
) -> None:
    """`-i api_token=...`: the journal stores this input as `[REDACTED]` (its name says it
    is a credential), but the value is not registered as a secret of the run, so an error
    quoting it (here a missing file named after it) goes out in the spans as it is."""
    raw = leaky.run_spans.raw()
    leaked = [span.name for span in leaky.run_spans.spans if TYPED in _texts(span)]
    sent = TYPED.encode() in raw
    assert not sent, (
        f"FINDING: the value of the input `api_token` is in the status of {leaked}: inputs "
        "whose names mark them as credentials are redacted in the journal's copy of the "
        "inputs only, not registered with the run's Secrets, so spans (and step errors in "
        "--json and the journal) quote them"
    )


def test_a_secret_in_a_goal_and_in_a_model_written_plan_stays_out_of_the_session_trace(
    leaky: Leaky,
) -> None:
    session = leaky.plan
    assert "Traceback" not in session.stderr, session.stderr
    assert one_json(session.stdout)["status"] == "failed"  # `peek` reads a missing file
    spans = leaky.plan_spans.spans
    assert not tree_problems(spans), tree_problems(spans)
    [root] = [span for span in spans if not span.parent_span_id]
    assert root.name == "session"
    assert attributes(root.attributes)["planloom.goal"] == "read the notes with [REDACTED]"
    [peek] = [span for span in spans if span.name == "step peek"]
    assert "gone-[REDACTED].txt" in peek.status.message
    raw = leaky.plan_spans.raw()
    sent = [form for form in forms(SECRET) if form in raw]
    assert not sent, f"{sent} in the exported spans"


@pytest.mark.slow
@pytest.mark.parametrize(
    "endpoint",
    [
        "http://collector:pw-{secret}@127.0.0.1:9",  # basic auth in the URL
        "http://127.0.0.1:9/otlp?api_key={secret}",  # a key as a query parameter
    ],
    ids=["userinfo", "query"],
)
def test_a_credential_in_the_otlp_endpoint_is_not_printed_on_stderr(
    tmp_path: Path, endpoint: str
) -> None:
    """Some backends take a key in the endpoint URL. When export fails, planloom names the
    endpoint on stderr (and the SDK's complaint, which quotes the URL)."""
    key = "ck7a6b5c4d3e2f1"
    recipe = _small(tmp_path)
    proc = planloom(
        "run", recipe, "--yes", "--json",
        cwd=tmp_path,
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint.format(secret=key),
        OTEL_EXPORTER_OTLP_TIMEOUT="300",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert _lost(proc.stderr) is not None, proc.stderr  # nothing listens on port 9
    shown = [line for line in proc.stderr.splitlines() if key in line]
    assert not shown, (
        f"FINDING: the endpoint's credential is printed on stderr: {shown}: "
        "Telemetry.close writes self.endpoint (and the SDK's complaint) unredacted; "
        "README: credentials in URLs are redacted everywhere"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variable", "value", "sdk_text"),
    [
        # `:` for `=`: a common slip. The SDK warns, quoting the whole header (its token
        # too), and drops it.
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "authorization:Bearer hk2b3c4d5e6f7a8b9",
            "Header format invalid",
        ),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd", "Unsupported compression type"),
    ],
    ids=["malformed-header", "unknown-compression"],
)
def test_the_sdk_s_own_log_lines_do_not_reach_the_terminal(
    tmp_path: Path, variable: str, value: str, sdk_text: str
) -> None:
    """The exporter's log lines are kept off the terminal (telemetry.py), but only from the
    moment `Watched` is made: what the SDK logs while the exporter is built (reading the
    headers and compression variables) goes to Python's last-resort handler, on stderr."""
    recipe = _small(tmp_path)
    with collector() as received:
        proc = planloom(
            "run", recipe, "--yes", "--json",
            cwd=tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=received.url, **{variable: value},
        )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    raw_lines = [
        line
        for line in proc.stderr.splitlines()
        if sdk_text in line and not line.startswith("planloom")
    ]
    token = "hk2b3c4d5e6f7a8b9" in proc.stderr
    assert not raw_lines, (
        f"FINDING: {variable}={value!r} makes the OpenTelemetry SDK print {raw_lines} on "
        f"stderr{' (the header, its token included)' if token else ''}: it logs while "
        "OTLPSpanExporter is built, before Watched installs its handler"
    )
    assert not token, proc.stderr


def test_an_error_text_that_is_not_valid_utf8_does_not_lose_its_batch_of_spans(
    tmp_path: Path,
) -> None:
    """A model endpoint (or an MCP server) answers an error whose JSON holds `\\udcff`: the
    message is a str with a lone surrogate, quoted in the span's status. OTLP encodes
    strings as UTF-8, so the exporter cannot encode the batch holding that span, and drops
    the whole batch (up to 512 spans) with 'Failed to encode span batch'."""
    recipe = {
        "version": 1,
        "name": "surrogate",
        "capabilities": {"test": {}},
        "on_failure": "continue",
        "steps": [
            {"id": "before", "tool": "test.run", "params": {"key": "a", "value": 1}},
            {"id": "think", "agent": {"goal": "answer", "tools": []}},
        ],
    }
    result, spans = run_in_process(
        recipe, tmp_path, faults=(Fault.status(400, body="bad request \udcff here"),)
    )
    assert result.steps["think"].status == "failed"
    assert len(spans) == 7
    error: UnicodeEncodeError | None = None
    try:
        encode_spans(spans).SerializePartialToString()  # what the OTLP exporter sends
    except UnicodeEncodeError as exc:
        error = exc
    assert error is None, (
        f"FINDING: the OTLP exporter cannot encode this run's 7 spans ({error}): one error "
        "text with a lone surrogate loses every span of its batch; RunSpans should make "
        "each text it puts in a span encodable (e.g. replace what UTF-8 cannot encode)"
    )


# -- stdout, exit codes, waiting -------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "command"),
    [("down", "run"), ("500", "run"), ("404", "run"), ("hang", "run"), ("500", "plan")],
)
def test_json_stays_one_object_and_the_exit_code_the_run_s_whatever_the_collector_does(
    tmp_path: Path, mode: str, command: str
) -> None:
    """A collector that refuses, errs or accepts and never answers: stdout is one JSON
    object, the exit code is the run's, the loss is counted on stderr, and the wait is
    bounded by the export timeout (1 s here; the stand-in would hang for a minute)."""
    recipe = _small(tmp_path)
    _write(tmp_path, "caps.yaml", "capabilities: {fs: {root: ., read: true}}\n")
    plan = {"goal": "g", "steps": [{"id": "look", "tool": "fs.list", "params": {"path": "."}}]}
    with (
        collector("ok" if mode == "down" else mode) as received,
        FakeOpenAIServer(ScriptedModel(lambda request: plan)) as planner,
    ):
        url = "http://127.0.0.1:9" if mode == "down" else received.url  # nothing on 9
        if command == "run":
            args: tuple[str | Path, ...] = ("run", recipe)
        else:
            args = ("plan", "look around", "--capabilities", "caps.yaml")
            args += ("--base-url", planner.base_url, "--model", "m")
        proc = planloom(
            *args, "--yes", "--json", "--otel",
            cwd=tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=url, OTEL_EXPORTER_OTLP_TIMEOUT="1000",
        )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    assert one_json(proc.stdout)["status"] == "succeeded"
    assert proc.returncode == 0, proc.stderr
    lost = _lost(proc.stderr)
    assert lost is not None, proc.stderr
    assert lost[0] == SMALL_SPANS, proc.stderr  # a goal session makes 7 too
    assert received.spans == []
    took: float = proc.took  # type: ignore[attr-defined]
    assert took < 20, f"{took:.1f} s with a 1 s export timeout"


def test_a_collector_that_answers_500_then_200_loses_only_the_first_batch_and_says_so(
    tmp_path: Path,
) -> None:
    recipe = _small(tmp_path)
    with collector("500-then-ok") as received:
        proc = planloom(
            "run", recipe, "--yes", "--json", "--otel",
            cwd=tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=received.url,
            OTEL_BSP_MAX_EXPORT_BATCH_SIZE="2",
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert one_json(proc.stdout)["status"] == "succeeded"
    lost = _lost(proc.stderr)
    assert lost is not None, proc.stderr
    assert "500" in lost[2], lost
    assert received.requests >= 4
    assert lost[0] == 2  # the first batch
    assert lost[0] + len(received.spans) == SMALL_SPANS


@pytest.mark.slow
def test_a_large_run_with_a_slow_collector_counts_every_span_it_could_not_send(
    tmp_path: Path,
) -> None:
    """3,000 fast steps make 9,001 spans faster than a collector taking 1 s per batch takes
    them, into a queue of 1,000: spans are dropped, and each one is counted."""
    steps = "\n".join(f"  - {{id: s{i}, tool: fs.list, params: {{path: .}}}}" for i in range(3000))
    recipe = tmp_path / "big.yaml"
    recipe.write_text(
        "version: 1\nname: big\nlimits: {max_tool_calls: 10000}\n"
        f"capabilities:\n  fs: {{root: ., read: true}}\nsteps:\n{steps}\n",
        encoding="utf-8",
    )
    with collector(delay=1.0) as received:
        proc = planloom(
            "run", recipe, "--yes", "--json", "--otel",
            cwd=tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=received.url,
            OTEL_EXPORTER_OTLP_TIMEOUT="2000",
            OTEL_BSP_MAX_QUEUE_SIZE="1000",
        )  # fmt: skip
        arrived = len(received.spans)
    assert proc.returncode == 0, proc.stderr
    summary = one_json(proc.stdout)
    assert summary["usage"]["tool_calls"] == 3000
    lost = _lost(proc.stderr)
    counted = lost[0] if lost is not None else 0
    # Nothing silently lost: what arrived and what was counted make the whole. (A batch the
    # stand-in took while planloom gave up on its answer is in both.)
    assert counted + arrived >= 9001, (counted, arrived, proc.stderr[-500:])
    assert counted <= 9001


@pytest.mark.slow
def test_ctrl_c_while_traces_are_sent_keeps_the_finished_run_s_result_and_exit_code(
    tmp_path: Path,
) -> None:
    """The run ended (stored as succeeded); planloom waits for a collector that does not
    answer and says so ('sending traces to ...'). Ctrl-C there, to stop waiting, must not
    turn the run into an interrupted one."""
    recipe = _small(tmp_path)
    with collector("hang") as received:
        running = start(
            "run", recipe, "--yes", "--json",
            cwd=tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=received.url,
            OTEL_EXPORTER_OTLP_TIMEOUT="30000",
        )  # fmt: skip
        running.wait_for("planloom: sending traces to")
        running.proc.send_signal(signal.SIGINT)
        code, out, err = running.finish()
    assert "Traceback" not in err, err
    summary = one_json(out)
    stored = planloom("runs", cwd=tmp_path)
    assert (code, summary["status"]) == (0, "succeeded"), (
        f"FINDING: Ctrl-C while traces are being sent made exit {code} and --json "
        f"{summary['status']!r} ({summary['errors']}) for a run that had succeeded (the "
        f"store says: {stored.stdout.splitlines()[1:2]}): Telemetry.close's wait raises "
        "KeyboardInterrupt out of the session's `finally`, which launch() reports as a "
        "second Ctrl-C; the journal's store is not closed either"
    )


def test_a_run_stopped_at_once_by_a_second_ctrl_c_still_ends_its_spans(tmp_path: Path) -> None:
    """The first Ctrl-C cancels `long`; a second one, while the `finally` step runs, stops
    everything. The spans still open then (the run, `tidy`, its attempt and tool call) must
    end as cancelled and be sent; otherwise the trace arrives without its root, and nothing
    on stderr says spans are missing."""
    _write(
        tmp_path,
        "stop.yaml",
        """\
        version: 1
        name: stopped
        capabilities:
          shell: {allow: [sleep]}
        steps:
          - id: long
            tool: shell.run
            params: {argv: [sleep, "30"]}
        finally:
          - id: tidy
            tool: shell.run
            params: {argv: [sleep, "30"]}
        """,
    )
    with collector() as received:
        running = start(
            "run", "stop.yaml", "--yes", "--json", "-v",
            cwd=tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=received.url,
        )  # fmt: skip
        running.wait_for("tool.called", "step_id=long")
        running.proc.send_signal(signal.SIGINT)
        running.wait_for("tool.called", "step_id=tidy")
        running.proc.send_signal(signal.SIGINT)
        code, out, err = running.finish()
        spans = list(received.spans)
    assert code == 130, err
    assert one_json(out)["status"] == "cancelled"
    names = sorted(span.name for span in spans)
    assert "step long" in names, names  # what ended was sent
    problems = tree_problems(spans)
    assert not problems or _lost(err) is not None, (
        f"FINDING: after a second Ctrl-C the trace is {names}: {problems}, and stderr "
        "does not say spans are missing: the run's, `tidy`'s and its attempt's and tool "
        "call's spans are never ended (no run.finished), so never sent nor counted; "
        "Telemetry.close should end what RunSpans holds open, as cancelled"
    )


@pytest.mark.slow
def test_the_reason_given_for_lost_spans_is_the_collector_s_not_planloom_s_own_shutdown(
    tmp_path: Path,
) -> None:
    """A collector that answers, but slowly (0.5 s a batch of one span, so 3.5 s for the
    run's 7 spans with a 1 s export timeout): planloom stops waiting and says why."""
    recipe = _small(tmp_path)
    with collector(delay=0.5) as received:
        proc = planloom(
            "run", recipe, "--yes", "--json", "--otel",
            cwd=tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=received.url,
            OTEL_EXPORTER_OTLP_TIMEOUT="1000",
            OTEL_BSP_MAX_EXPORT_BATCH_SIZE="1",
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lost = _lost(proc.stderr)
    assert lost is not None, proc.stderr
    assert "already shutdown" not in lost[2], (
        f"FINDING: the reason given is {lost[2]!r}: the first complaint the SDK logged, "
        "which is its reply to planloom's own exporter.shutdown() when the wait ran out; "
        "the reason is that the collector did not take them within the export timeout"
    )


# -- the tree --------------------------------------------------------------------------------


def _children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    return sorted(
        (s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id),
        key=lambda s: (s.start_time or 0, s.name),
    )


def _one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, f"{len(found)} spans named {name!r}: {sorted(s.name for s in spans)}"
    return found[0]


def _tree_model(request: ChatRequest) -> ChatReply | str:
    if request.tool_names() and not request.tool_results():
        return ChatReply(
            tool_calls=[
                ToolCall("test__run", {"key": "broken"}),
                ToolCall("test__run", {"key": "x", "value": 1}),
            ]
        )
    return "done"


def test_the_tree_of_items_fallbacks_timeouts_skips_and_finally_steps(tmp_path: Path) -> None:
    recipe = {
        "version": 1,
        "name": "tree",
        "capabilities": {"test": {}, "llm": {}},
        "on_failure": "continue",
        "steps": [
            {
                "id": "each",
                "for_each": ["a", "b"],
                "agent": {"goal": "look at ${{ item }}", "tools": ["test.run"]},
            },
            {
                "id": "saved",
                "tool": "test.run",
                "params": {"key": "broken"},
                "fallback": "recover what you can",
            },
            {
                "id": "slow",
                "tool": "test.run",
                "params": {"key": "slow"},
                "timeout": 0.2,
                "retry": {"attempts": 2, "backoff": "fixed", "initial": 0, "on": ["timeout"]},
            },
            {"id": "ask", "tool": "llm.complete", "params": {"prompt": "hi"}},
            {"id": "never", "tool": "test.run", "params": {"key": "n"}, "when": False},
            {"id": "orphan", "tool": "test.run", "params": {"key": "o"}, "depends_on": ["slow"]},
        ],
        "finally": [{"id": "tidy", "tool": "test.run", "params": {"key": "t", "value": 0}}],
    }
    result, spans = run_in_process(
        recipe,
        tmp_path,
        model=_tree_model,
        scripts={"broken": (Fail("broken"),), "slow": (Hang(),)},
    )
    statuses = {step_id: step.status for step_id, step in result.steps.items()}
    assert statuses == {
        "each": "succeeded",
        "saved": "fallback",
        "slow": "failed",
        "ask": "succeeded",
        "never": "skipped",
        "orphan": "skipped",
        "tidy": "succeeded",
    }
    assert tree_problems(spans) == []
    run = _one(spans, "run tree")
    assert {s.name for s in _children(spans, run)} == {f"step {k}" for k in statuses}

    # for_each of agent steps: an attempt per item, each holding its own turns and calls.
    items = _children(spans, _one(spans, "step each"))
    assert [(s.attributes or {}).get("planloom.item") for s in items] == [0, 1]
    for item in items:
        assert (item.attributes or {}).get("gen_ai.operation.name") == "invoke_agent"
        inside = [s.name for s in _children(spans, item)]
        assert inside.count("chat m") == 2, inside
        assert inside.count("execute_tool test.run") == 2, inside

    # A natural-language fallback after a failed tool: attempt 2 is the agent's.
    first, fallback = _children(spans, _one(spans, "step saved"))
    assert first.status.status_code is StatusCode.ERROR
    assert [s.name for s in _children(spans, first)] == ["execute_tool test.run"]
    assert (fallback.attributes or {}).get("gen_ai.operation.name") == "invoke_agent"
    assert "chat m" in [s.name for s in _children(spans, fallback)]

    # Retries of a step whose attempts time out: each attempt and its call end in error.
    slow = _one(spans, "step slow")
    attempts = _children(spans, slow)
    assert [(s.attributes or {}).get("planloom.outcome") for s in attempts] == [
        "StepTimeout",
        "StepTimeout",
    ]
    for attempt in attempts:
        [call] = _children(spans, attempt)
        assert call.status.status_code is StatusCode.ERROR
    assert [e.name for e in slow.events].count("planloom.retry") == 1

    # llm.complete's model call is a child of that tool call.
    [ask] = _children(spans, _one(spans, "step ask"))
    [tool] = _children(spans, ask)
    assert tool.name == "execute_tool llm.complete"
    assert [s.name for s in _children(spans, tool)] == ["chat m"]

    # Skipped by `when: false` (it started) vs by a failed dependency (no length); neither
    # is an error.
    never, orphan = _one(spans, "step never"), _one(spans, "step orphan")
    for skipped in (never, orphan):
        assert skipped.status.status_code is StatusCode.UNSET
        assert (skipped.attributes or {}).get("planloom.step.status") == "skipped"
    assert "when" in str((never.attributes or {}).get("planloom.step.error"))
    assert "upstream step 'slow'" in str((orphan.attributes or {}).get("planloom.step.error"))
    assert orphan.start_time == orphan.end_time
    assert _children(spans, never) == []

    # The `finally` step is a step of the run, and the run ends after it.
    tidy = _one(spans, "step tidy")
    assert tidy.end_time is not None
    assert run.end_time is not None
    assert tidy.end_time <= run.end_time

    # Per-step usage adds up to the run's (no planner here).
    assert _usage_sum(result) == result.usage.model_dump()


def _usage_sum(result: RunResult) -> dict[str, int]:
    return {key: sum(getattr(s.usage, key) for s in result.steps.values()) for key in USAGE}


CUT_OFF = {
    # An agent step whose model never answers within the step's timeout, retried once.
    "step-timeout": {
        "id": "think",
        "agent": {"goal": "answer", "tools": []},
        "timeout": 0.3,
        "retry": {"attempts": 2, "backoff": "fixed", "initial": 0, "on": ["timeout"]},
    },
    # An agent step cut off by the run's deadline while its model call is in flight.
    "max-duration": {"id": "think", "agent": {"goal": "answer", "tools": []}},
}


@pytest.fixture(scope="module", params=sorted(CUT_OFF))
def cut_off(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[RunResult, list[ReadableSpan]]:
    recipe: dict[str, Any] = {
        "version": 1,
        "name": "cut",
        "capabilities": {"test": {}},
        "on_failure": "continue",
        "steps": [
            {"id": "quick", "tool": "test.run", "params": {"key": "q", "value": 1}},
            CUT_OFF[request.param],
        ],
    }
    if request.param == "max-duration":
        recipe["limits"] = {"max_duration": 0.5}
    return run_in_process(
        recipe,
        tmp_path_factory.mktemp("cut"),
        faults=(Fault.delay(30), Fault.delay(30)),  # the endpoint never answers in time
    )


def test_a_model_call_cut_off_mid_flight_counts_in_its_step_s_usage(
    cut_off: tuple[RunResult, list[ReadableSpan]],
) -> None:
    result, _ = cut_off
    assert result.steps["think"].status in ("failed", "cancelled")
    run, steps = result.usage.model_dump(), _usage_sum(result)
    assert run["llm_calls"] >= 1
    assert steps == run, (
        f"FINDING: the steps add up to {steps}, the run used {run}: a model call cut off "
        "by a timeout or the run's deadline is counted in the run (Budget.calls, when "
        "sent) but never reported (no on_call/on_fail for CancelledError), so no step "
        "counts it"
    )


def test_a_model_call_cut_off_mid_flight_has_a_span_ended_as_cancelled(
    cut_off: tuple[RunResult, list[ReadableSpan]],
) -> None:
    result, spans = cut_off
    assert tree_problems(spans) == []
    chats = [s for s in spans if s.name.startswith("chat")]
    think = _one(spans, "step think")
    assert think.status.status_code is StatusCode.ERROR
    assert len(chats) == result.usage.llm_calls, (
        f"FINDING: {len(chats)} chat spans for the run's {result.usage.llm_calls} model "
        "calls: a model call's span is made when it ends (llm.called), and one cut off "
        "never ends, so its attempt shows the wait with nothing in it (README: spans cut "
        "off by an interruption end as `cancelled`)"
    )


# -- per-step usage through the command ------------------------------------------------------


@pytest.mark.slow
def test_steps_add_up_to_the_run_live_recorded_replayed_and_in_a_dry_run(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "usage.yaml",
        """\
        version: 1
        name: usage
        capabilities:
          fs: {root: ., read: true}
          llm: {}
        on_failure: continue
        steps:
          - id: plain
            tool: fs.list
            params: {path: .}
          - id: flaky
            tool: fs.read
            can_fail: true
            params: {path: missing.txt}
            retry: {attempts: 3, backoff: fixed, initial: 0}
          - id: each
            for_each: [a, b]
            agent: {goal: "look at ${{ item }}", tools: [fs.read, fs.list]}
          - id: saved
            tool: fs.read
            params: {path: missing2.txt}
            fallback: "read what you can"
          - id: ask
            tool: llm.complete
            params: {prompt: "say hi"}
          - id: never
            tool: fs.list
            params: {path: .}
            when: false
        """,
    )
    with FakeOpenAIServer(_agent_model) as model, collector() as replayed_spans:
        live = ("--base-url", model.base_url, "--model", "m")
        recorded = planloom(
            "run", "usage.yaml", "--yes", "--json", "--record", "c.yaml", *live, cwd=tmp_path
        )
        replayed = planloom(
            "replay", "c.yaml", "--json", "--otel",
            cwd=tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=replayed_spans.url,
        )  # fmt: skip
        dry = planloom("run", "usage.yaml", "--json", "--dry-run", *live, cwd=tmp_path)
    for proc in (recorded, replayed, dry):
        summary = one_json(proc.stdout)
        assert summary["status"] == "succeeded", proc.stderr
        assert summary["usage"]["llm_calls"] > 0
        assert summary["usage"]["tool_calls"] > 0
        assert _steps_sum(summary) == summary["usage"], (proc.args, summary["steps"])
    recorded_steps = one_json(recorded.stdout)["steps"]
    assert recorded_steps["flaky"]["usage"]["tool_calls"] == 3
    assert recorded_steps["saved"]["usage"]["llm_calls"] == 2  # the fallback agent's turns
    assert one_json(replayed.stdout)["usage"] == one_json(recorded.stdout)["usage"]
    assert not tree_problems(replayed_spans.spans), tree_problems(replayed_spans.spans)


@dataclass
class Resumed:
    first: dict[str, Any]
    resumed: dict[str, Any]
    shown: dict[str, Any]
    spans: list[Span]


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Resumed]:
    """A run whose `gate` fails (its file is missing) after `first` and the agent `think`
    succeeded; the file is made; the run is resumed with traces on."""
    folder = tmp_path_factory.mktemp("resumed")
    _write(
        folder,
        "r.yaml",
        """\
        version: 1
        name: resumable
        capabilities:
          fs: {root: ., read: true}
          llm: {}
        steps:
          - id: first
            tool: fs.list
            params: {path: .}
          - id: think
            agent: {goal: "look", tools: [fs.list]}
          - id: gate
            depends_on: [first, think]
            tool: fs.read
            params: {path: ready.txt}
          - id: after
            depends_on: [gate]
            tool: llm.complete
            params: {prompt: "after"}
        """,
    )
    with FakeOpenAIServer(_agent_model) as model, collector() as received:
        live = ("--base-url", model.base_url, "--model", "m")
        first = one_json(planloom("run", "r.yaml", "--yes", "--json", *live, cwd=folder).stdout)
        assert first["status"] == "failed"
        (folder / "ready.txt").write_text("go\n", encoding="utf-8")
        proc = planloom(
            "resume", first["run_id"], "--yes", "--json", "--otel", *live,
            cwd=folder, OTEL_EXPORTER_OTLP_ENDPOINT=received.url,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        shown = one_json(planloom("show", first["run_id"], "--json", cwd=folder).stdout)
        yield Resumed(first, one_json(proc.stdout), shown, list(received.spans))


@pytest.mark.slow
def test_a_resume_traces_only_the_steps_it_runs_in_one_tree(resumed: Resumed) -> None:
    spans = resumed.spans
    assert tree_problems(spans) == []
    steps = sorted(span.name for span in spans if span.name.startswith("step "))
    assert steps == ["step after", "step gate"]  # `first` and `think` were kept
    [root] = [span for span in spans if not span.parent_span_id]
    assert root.name == "run resumable"
    assert attributes(root.attributes)["planloom.run.id"] == resumed.first["run_id"]


def test_after_a_resume_the_steps_add_up_to_the_run(resumed: Resumed) -> None:
    kept = resumed.shown["steps"]["think"]["usage"]
    assert kept["llm_calls"] == 2  # kept steps keep what they spent
    assert resumed.first["steps"]["think"]["usage"] == kept
    for where, summary in (("resume --json", resumed.resumed), ("show --json", resumed.shown)):
        steps, run = _steps_sum(summary), summary["usage"]
        assert steps == run, (
            f"FINDING: in `{where}` the steps add up to {steps} and the run's usage is "
            f"{run}: a resumed run's usage counts only what the resume spent, while the "
            "steps it kept keep their usage (Executor._usage ignores preloaded results)"
        )


# -- OTEL_* settings -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    [
        "empty-endpoint",
        "blank-endpoint",
        "trailing-slash",
        "traces-endpoint-wins",
        "sdk-disabled-upper-case",
        "sampler-always-off",
        "service-name",
    ],
)
def test_otel_settings_that_are_honoured(tmp_path: Path, case: str) -> None:
    recipe = _small(tmp_path)
    with collector() as received:
        environ, flag, arrive = {
            "empty-endpoint": ({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, False, False),
            "blank-endpoint": ({"OTEL_EXPORTER_OTLP_ENDPOINT": " \t"}, False, False),
            "trailing-slash": ({"OTEL_EXPORTER_OTLP_ENDPOINT": received.url + "/"}, False, True),
            "traces-endpoint-wins": (
                {
                    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": received.url + "/custom/path",
                },
                False,
                True,
            ),
            "sdk-disabled-upper-case": (
                {"OTEL_EXPORTER_OTLP_ENDPOINT": received.url, "OTEL_SDK_DISABLED": "TRUE"},
                True,
                False,
            ),
            "sampler-always-off": (
                {"OTEL_EXPORTER_OTLP_ENDPOINT": received.url, "OTEL_TRACES_SAMPLER": "always_off"},
                True,
                False,
            ),
            "service-name": (
                {"OTEL_EXPORTER_OTLP_ENDPOINT": received.url, "OTEL_SERVICE_NAME": "nightly-etl"},
                False,
                True,
            ),
        }[case]
        proc = planloom(
            "run", recipe, "--yes", "--json", *(["--otel"] if flag else []),
            cwd=tmp_path, **environ,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert one_json(proc.stdout)["status"] == "succeeded"
    assert "Traceback" not in proc.stderr
    assert _lost(proc.stderr) is None, proc.stderr  # nothing lost, nothing waited for
    assert "sending traces" not in proc.stderr
    assert len(received.spans) == (SMALL_SPANS if arrive else 0)
    if arrive:
        expected = "/custom/path" if case == "traces-endpoint-wins" else "/v1/traces"
        assert set(received.paths) == {expected}
        service = "nightly-etl" if case == "service-name" else "planloom"
        assert {r.get("service.name") for r in received.resources} == {service}


@pytest.mark.slow
def test_otlp_over_http_json_is_refused_before_anything_is_begun(tmp_path: Path) -> None:
    recipe = _small(tmp_path)
    store = tmp_path / "runs.db"
    proc = planloom(
        "run", recipe, "--yes", "--json", "--otel", "--store", store,
        cwd=tmp_path, OTEL_EXPORTER_OTLP_PROTOCOL="http/json",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "OTEL_EXPORTER_OTLP_PROTOCOL=http/json" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert one_json(proc.stdout)["status"] != "succeeded"
    listed = planloom("runs", "--store", store, cwd=tmp_path)
    assert "small" not in listed.stdout


def _refused(proc: Any, variable: str) -> str | None:
    """Why a wrong setting was not refused as a configuration error, or None."""
    if "Traceback" in proc.stderr:
        tail = proc.stderr.strip().splitlines()[-1]
        return f"a traceback ({tail}), exit {proc.returncode}"
    if proc.returncode != 2:
        return f"exit {proc.returncode}, stderr: {proc.stderr.strip().splitlines()[:3]}"
    if variable not in proc.stderr:
        return f"exit 2, but the message does not name {variable}: {proc.stderr.strip()}"
    return None


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),  # under the default batch of 512
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "50000"),  # over planloom's queue of 32,768
        ("OTEL_BSP_SCHEDULE_DELAY", "0"),
    ],
)
def test_a_batch_setting_the_sdk_rejects_is_a_configuration_error_not_a_traceback(
    tmp_path: Path, variable: str, value: str
) -> None:
    recipe = _small(tmp_path)
    proc = planloom(
        "run", recipe, "--yes", "--json",
        cwd=tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", **{variable: value},
    )  # fmt: skip
    why = _refused(proc, variable)
    assert why is None, (
        f"FINDING: {variable}={value} gives {why}, and no JSON on stdout: "
        "BatchSpanProcessor's ValueError escapes Telemetry.start (exit 1 reads as "
        "'run failed'); it should be exit 2 naming the variable, as a bad timeout is"
    )


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_a_timeout_that_is_not_a_finite_number_is_refused(tmp_path: Path, value: str) -> None:
    recipe = _small(tmp_path)
    proc = planloom(
        "run", recipe, "--yes", "--json",
        cwd=tmp_path,
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
        OTEL_EXPORTER_OTLP_TIMEOUT=value,
    )  # fmt: skip
    why = _refused(proc, "OTEL_EXPORTER_OTLP_TIMEOUT")
    assert why is None, (
        f"FINDING: OTEL_EXPORTER_OTLP_TIMEOUT={value} gives {why}: float() takes it, "
        "`seconds <= 0` does not catch it, and every span is then lost (requests cannot "
        "use the timeout); 'soon' and '0' are refused"
    )


def test_an_endpoint_without_a_scheme_is_refused_before_the_run(tmp_path: Path) -> None:
    """`localhost:4318` for `http://localhost:4318`: a slip the SDK cannot send to."""
    recipe = _small(tmp_path)
    proc = planloom(
        "run", recipe, "--yes", "--json",
        cwd=tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT="127.0.0.1:4318",
    )  # fmt: skip
    why = _refused(proc, "OTEL_EXPORTER_OTLP_ENDPOINT")
    assert why is None, (
        f"FINDING: OTEL_EXPORTER_OTLP_ENDPOINT=127.0.0.1:4318 gives {why}: the run goes "
        "ahead and every span is lost, said only at the end with the SDK's 'No connection "
        "adapters were found', which does not say to add http://"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("app.service.name=checkout", "planloom"),  # another attribute: the default stays
        ("service.name = checkout", "checkout"),  # spaces the SDK accepts: the user's name
    ],
    ids=["other-attribute", "spaces"],
)
def test_service_name_follows_otel_resource_attributes_as_the_sdk_parses_them(
    tmp_path: Path, given: str, expected: str
) -> None:
    recipe = _small(tmp_path)
    with collector() as received:
        proc = planloom(
            "run", recipe, "--yes", "--json",
            cwd=tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=received.url,
            OTEL_RESOURCE_ATTRIBUTES=given,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    names = {resource.get("service.name") for resource in received.resources}
    assert names == {expected}, (
        f"FINDING: OTEL_RESOURCE_ATTRIBUTES={given!r} gives service.name {names}: "
        "telemetry.py looks for the substring 'service.name=' in the variable's text "
        "instead of reading the resource the SDK builds from it"
    )
