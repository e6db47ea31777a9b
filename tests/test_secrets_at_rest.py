"""No secret at rest in clear (the README's "Durable runs"): the run store, its
write-ahead log and a run's HTML report never hold a secret the run knew of, and a resume
takes a secret input again instead of reading it from the store.

Through the real `planloom` command in a subprocess: a run given a secret-named input
(`-i API_TOKEN=...`), a secret of the environment that reaches a step (as a plain input),
and a credential no one declared that a step's output carries is killed with SIGKILL
while its last step hangs, so the store's files are as the crash left them; then they are
read byte by byte, checkpointed and read again, reported, shown, and resumed.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import signal
import sqlite3
import subprocess
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _procs import PLANLOOM, TIMEOUT, env, gone, marker_seconds, pids_with, planloom
from mcp_servers.project import http_server

INPUT_SECRET = "sekrit-INPUT-4242"
ENV_SECRET = "sekrit-ENV-4242"
# A GitHub token's shape: redacted by what it looks like, though no one declared it.
OUTPUT_SECRET = "ghp_sekritOUTPUT4242abcdefghijklmnopqrst"
SECRETS = (INPUT_SECRET, ENV_SECRET, OUTPUT_SECRET)

RECIPE = """\
version: 1
name: at-rest
inputs:
  API_TOKEN: {type: string}
  word: {type: string}
capabilities:
  fs: {root: ., read: true}
  shell: {allow: [echo, sh], unsafe_args: [sh]}
steps:
  - id: say
    tool: shell.run
    params: {argv: [echo, "token ${{ inputs.API_TOKEN }}"]}
  - id: service
    tool: shell.run
    params: {argv: [echo, "service ${{ inputs.word }}"]}
  - id: found
    tool: fs.read
    params: {path: creds.txt}
  - id: hang
    tool: shell.run
    params: {argv: [sh, -c, "test -e go.flag || sleep MARKER"]}
    idempotent: true
    timeout: 300
    depends_on: [say, service, found]
"""


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique `sleep` duration for the last step to hang in; killed at the end."""
    value = marker_seconds(200)
    yield value
    for pid in pids_with(value):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def forms(secret: str) -> list[bytes]:
    """The secret as a file could hold it: raw, base64, hex."""
    raw = secret.encode()
    return [raw, base64.b64encode(raw).rstrip(b"="), raw.hex().encode()]


def held(files: list[Path]) -> dict[str, int]:
    """How many times each file holds any form of any secret (`grep -c`, byte-wise)."""
    return {
        f"{file.name}: {secret}": file.read_bytes().count(form)
        for file in files
        for secret in SECRETS
        for form in forms(secret)
        if file.read_bytes().count(form)
    }


def store_files(store: Path) -> list[Path]:
    return sorted(p for p in store.parent.iterdir() if p.name.startswith(store.name))


def cli(*args: str | Path, cwd: Path, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = planloom(*args, cwd=cwd, environ=environ)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return proc


def runs(store: Path, cwd: Path, environ: dict[str, str]) -> list[dict[str, Any]]:
    """`planloom runs --json`."""
    proc = cli("runs", "--json", "--store", store, cwd=cwd, environ=environ)
    assert proc.returncode == 0, proc.stderr
    rows: list[dict[str, Any]] = json.loads(proc.stdout)
    return rows


@pytest.mark.slow
def test_no_secret_is_at_rest_and_a_resume_takes_the_secret_input_again(
    tmp_path: Path, marker: str
) -> None:
    (tmp_path / "r.yaml").write_text(RECIPE.replace("MARKER", marker), encoding="utf-8")
    (tmp_path / "creds.txt").write_text(f"deploy key: {OUTPUT_SECRET}\n", encoding="utf-8")
    store = tmp_path / "store" / "runs.db"
    environ = env(SERVICE_TOKEN=ENV_SECRET)
    run = (
        "run", "r.yaml", "--yes", "--store", store,
        "-i", f"API_TOKEN={INPUT_SECRET}", "-i", f"word={ENV_SECRET}",
    )  # fmt: skip
    proc = subprocess.Popen(
        [PLANLOOM, *map(str, run)],
        cwd=tmp_path,
        env=environ,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:  # killed while `hang` runs: the write-ahead log is left as the crash left it
        assert gone(lambda: not pids_with(marker), within=TIMEOUT), "hang never started"
    finally:
        proc.kill()
        proc.wait(timeout=TIMEOUT)
    assert gone(lambda: pids_with(marker), within=10)

    files = store_files(store)
    assert store.with_name("runs.db-wal") in files
    assert store.with_name("runs.db-wal").stat().st_size > 0
    assert held(files) == {}
    # The WAL's pages written into the store file: still nothing in clear.
    with contextlib.closing(sqlite3.connect(store)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        entries = [json.loads(d) for (d,) in db.execute("select data from journal")]
    assert held(store_files(store)) == {}
    # The run did handle each secret: the journal holds its steps, redacted where it was.
    steps = {e["result"]["output"]["stdout"] for e in entries if "stdout" in str(e.get("result"))}
    assert steps == {"token [REDACTED]\n", "service [REDACTED]\n"}

    [row] = runs(store, tmp_path, environ)
    report = tmp_path / "report.html"
    made = cli("report", row["id"], "--store", store, "-o", report, cwd=tmp_path, environ=environ)
    assert made.returncode == 0, made.stderr
    shown = cli("show", row["id"], "--json", "--store", store, cwd=tmp_path, environ=environ)
    assert shown.returncode == 0, shown.stderr
    assert held([report]) == {}
    assert not any(form.decode() in shown.stdout for s in SECRETS for form in forms(s))

    # Without the secret input, the resume says how to give it, and nothing runs.
    resume = ("resume", row["id"], "--yes", "--json", "--store", store)
    refused = cli(*resume, cwd=tmp_path, environ=environ)
    assert refused.returncode == 2
    # (`word` held the environment's secret: the store kept it redacted, so it is asked too)
    assert "give it again with -i API_TOKEN=..., -i word=..." in refused.stderr
    assert [row["status"] for row in runs(store, tmp_path, environ)] == ["interrupted"]

    (tmp_path / "go.flag").touch()
    given = ("-i", f"API_TOKEN={INPUT_SECRET}", "-i", f"word={ENV_SECRET}")
    again = cli(*resume, *given, cwd=tmp_path, environ=environ)
    assert again.returncode == 0, again.stderr
    result: dict[str, Any] = json.loads(again.stdout)
    assert result["status"] == "succeeded"
    # The kept step's output is served as the journal holds it: redacted.
    assert result["steps"]["say"]["output"]["stdout"] == "token [REDACTED]\n"
    assert result["steps"]["hang"]["status"] == "succeeded"
    assert held(store_files(store)) == {}
    made = cli("report", row["id"], "--store", store, "-o", report, cwd=tmp_path, environ=environ)
    assert made.returncode == 0, made.stderr
    assert held([report]) == {}


@pytest.mark.slow
def test_a_resumed_step_given_the_secret_again_is_made_with_it(tmp_path: Path) -> None:
    """A step that runs on resume sees the secret input given again, in clear (data passed
    to steps is not altered), while the store keeps it redacted."""
    (tmp_path / "r.yaml").write_text(
        textwrap.dedent(
            """\
            version: 1
            name: again
            inputs:
              API_TOKEN: {type: string}
            capabilities:
              fs: {root: ., read: true, write: ["out/**"]}
            steps:
              - id: gate
                tool: fs.read
                params: {path: go.flag}
              - id: save
                tool: fs.write
                params: {path: out/token.txt, content: "${{ inputs.API_TOKEN }}",
                         create_dirs: true}
                depends_on: [gate]
            """
        ),
        encoding="utf-8",
    )
    store = tmp_path / "runs.db"
    environ = env()
    given = ("-i", f"API_TOKEN={INPUT_SECRET}")
    failed = cli("run", "r.yaml", "--yes", "--store", store, *given, cwd=tmp_path, environ=environ)
    assert failed.returncode == 1, failed.stderr
    [row] = runs(store, tmp_path, environ)
    (tmp_path / "go.flag").touch()
    resumed = cli(
        "resume", row["id"], "--yes", "--store", store, *given, cwd=tmp_path, environ=environ
    )
    assert resumed.returncode == 0, resumed.stderr
    assert (tmp_path / "out" / "token.txt").read_text(encoding="utf-8") == INPUT_SECRET
    assert held(store_files(store)) == {}


@pytest.mark.slow
def test_show_and_report_redact_a_secret_a_store_holds_in_clear(tmp_path: Path) -> None:
    """A store may hold a secret in clear (written by an older planloom, or a value that
    was no secret to the run): `show` and `report` redact what this environment knows."""
    (tmp_path / "r.yaml").write_text(
        textwrap.dedent(
            """\
            version: 1
            name: older
            inputs:
              word: {type: string}
            capabilities:
              shell: {allow: [echo]}
            steps:
              - id: say
                tool: shell.run
                params: {argv: [echo, "service ${{ inputs.word }}"]}
            """
        ),
        encoding="utf-8",
    )
    store = tmp_path / "runs.db"
    ran = cli(
        "run", "r.yaml", "--yes", "--store", store, "-i", f"word={ENV_SECRET}",
        cwd=tmp_path, environ=env(),
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ENV_SECRET.encode() in store.read_bytes()  # no secret to that run
    environ = env(SERVICE_TOKEN=ENV_SECRET)
    [row] = runs(store, tmp_path, environ)
    shown = cli("show", row["id"], "--json", "--store", store, cwd=tmp_path, environ=environ)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["steps"]["say"]["output"]["stdout"] == "service [REDACTED]\n"
    report = tmp_path / "report.html"
    made = cli("report", row["id"], "--store", store, "-o", report, cwd=tmp_path, environ=environ)
    assert made.returncode == 0, made.stderr
    assert held([report]) == {}
    assert "service [REDACTED]" in report.read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_variable_a_grant_reads_from_the_environment_is_not_at_rest(tmp_path: Path) -> None:
    """A variable with no secret-looking name is a secret once a grant sends it as a header
    (`headers_from_env`): where it reaches a step (here, given as a plain input too), the
    store and the report hold it redacted."""
    with http_server(tmp_path / "remote") as server:
        (tmp_path / "r.yaml").write_text(
            textwrap.dedent(
                f"""\
                version: 1
                name: granted
                inputs:
                  word: {{type: string}}
                capabilities:
                  mcp:
                    servers:
                      remote:
                        url: {server.url}
                        headers_from_env: {{Authorization: NOTES_HEADER}}
                        tools: ["*"]
                steps:
                  - id: find
                    tool: mcp.remote.search
                    params: {{query: "${{{{ inputs.word }}}}"}}
                  - id: save
                    tool: mcp.remote.add_note
                    params: {{text: "saved ${{{{ inputs.word }}}}"}}
                """
            ),
            encoding="utf-8",
        )
        store = tmp_path / "runs.db"
        environ = env(NOTES_HEADER=ENV_SECRET)
        ran = cli(
            "run", "r.yaml", "--yes", "--json", "--store", store, "-i", f"word={ENV_SECRET}",
            cwd=tmp_path, environ=environ,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert server.notes().endswith(f"saved {ENV_SECRET}\n")  # the run did send it
    result = json.loads(ran.stdout)
    assert result["steps"]["find"]["output"]["structured"]["query"] == "[REDACTED]"
    assert held(store_files(store)) == {}
    [row] = runs(store, tmp_path, environ)
    report = tmp_path / "report.html"
    made = cli("report", row["id"], "--store", store, "-o", report, cwd=tmp_path, environ=env())
    assert made.returncode == 0, made.stderr
    assert held([report]) == {}


@pytest.mark.slow
def test_a_call_in_flight_with_a_secret_in_its_params_is_in_doubt_as_itself_on_resume(
    tmp_path: Path, marker: str
) -> None:
    """The journal keys a call by the hash of its redacted params, at the run and at its
    resume alike: the call in flight is found as itself (not as a call "with other params")
    once the secret is given again, and it is not made again without a person."""
    (tmp_path / "r.yaml").write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: doubt
            inputs:
              API_TOKEN: {{type: string}}
            capabilities:
              shell: {{allow: [sh], unsafe_args: [sh]}}
            steps:
              - id: note
                tool: shell.run
                params:
                  argv: [sh, -c, "echo $0 >> ledger.txt; sleep {marker}",
                         "${{{{ inputs.API_TOKEN }}}}"]
                timeout: 300
            """
        ),
        encoding="utf-8",
    )
    store = tmp_path / "runs.db"
    environ = env()
    given = ("-i", f"API_TOKEN={INPUT_SECRET}")
    proc = subprocess.Popen(
        [PLANLOOM, "run", "r.yaml", "--yes", "--store", str(store), *given],
        cwd=tmp_path,
        env=environ,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert gone(lambda: not pids_with(marker), within=TIMEOUT), "note never started"
    finally:
        proc.kill()
        proc.wait(timeout=TIMEOUT)
    assert gone(lambda: pids_with(marker), within=10)
    ledger = tmp_path / "ledger.txt"
    assert ledger.read_text(encoding="utf-8") == f"{INPUT_SECRET}\n"
    assert held(store_files(store)) == {}

    [row] = runs(store, tmp_path, environ)
    resumed = cli(
        "resume", row["id"], "--yes", "--json", "--store", store, *given,
        cwd=tmp_path, environ=environ,
    )  # fmt: skip
    assert resumed.returncode == 1, resumed.stderr
    note = json.loads(resumed.stdout)["steps"]["note"]
    assert note["status"] == "denied"
    assert "may already have happened" in note["error"]
    with contextlib.closing(sqlite3.connect(store)) as db:
        rows = db.execute("select kind, data from journal order by seq").fetchall()
    entries = [(kind, json.loads(data)) for kind, data in rows]
    [intent] = [data for kind, data in entries if kind == "intent"]
    run_gate, resume_gate = [data for kind, data in entries if kind == "approval"]
    assert (run_gate["in_doubt"], resume_gate["in_doubt"]) == (False, True)
    # The resume asked about the very call the run had in flight: the same params hash.
    assert resume_gate["params_hash"] == run_gate["params_hash"] == intent["params_hash"]
    assert ledger.read_text(encoding="utf-8") == f"{INPUT_SECRET}\n"  # not made again
    assert held(store_files(store)) == {}


LEARNT = "sekrit4242SESSIONvalue"


@contextlib.contextmanager
def login_server() -> Iterator[int]:
    """An HTTP server on 127.0.0.1 whose answer carries a session token in a header and
    quotes it in its body: a credential no one declared. Yields its port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"your session is {LEARNT}".encode()
            self.send_response(200)
            self.send_header("X-Session-Token", LEARNT)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=TIMEOUT)


@pytest.mark.slow
def test_a_credential_a_step_read_is_redacted_wherever_it_goes_next(tmp_path: Path) -> None:
    """A token a step's output shows under a credential's name (a response's
    `x-session-token` header) is redacted where it stands, and also where it goes next: the
    body quoting it, and a later step's params and output."""
    with login_server() as port:
        (tmp_path / "r.yaml").write_text(
            textwrap.dedent(
                f"""\
                version: 1
                name: learnt
                capabilities:
                  http: {{allow: [127.0.0.1], ports: [{port}], allow_http: true,
                          private_networks: [127.0.0.1/32]}}
                  shell: {{allow: [echo]}}
                steps:
                  - id: login
                    tool: http.request
                    params: {{url: "http://127.0.0.1:{port}/login"}}
                  - id: use
                    tool: shell.run
                    params:
                      argv: [echo, "using ${{{{ steps.login.output.headers['x-session-token'] }}}}"]
                """
            ),
            encoding="utf-8",
        )
        store = tmp_path / "runs.db"
        ran = cli("run", "r.yaml", "--yes", "--json", "--store", store, cwd=tmp_path, environ=env())
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert result["steps"]["use"]["output"]["stdout"] == "using [REDACTED]\n"
    assert result["steps"]["login"]["output"]["body"] == "your session is [REDACTED]"
    data = store.read_bytes()
    assert LEARNT.encode() not in data
    assert b"using [REDACTED]" in data  # the step ran, with the token (data is not altered)
