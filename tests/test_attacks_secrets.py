"""Secrets (ATTACKS.md D): a planted canary never reaches an artifact.

The canary sits in the engine's environment and in a file inside the jail. The run reads
it, fails on it, logs it; stdout (`--json`), stderr (`-v`, the summary) and the JSON-lines
log file must hold it in no form (plain, base64, hex), while the run itself still works.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _procs import planloom

from capabilities import Sandbox, default_registry

PLANLOOM = str(Path(sys.executable).parent / "planloom")
CANARY = "sk-canary-7f3a9c1e2b4d5e6f"


def forms(secret: str) -> list[str]:
    raw = secret.encode()
    return [
        secret,
        base64.b64encode(raw).decode().rstrip("="),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
        raw.hex(),
        raw.hex().upper(),
    ]


def assert_no_canary(*artifacts: str) -> None:
    for artifact in artifacts:
        for form in forms(CANARY):
            assert form not in artifact, f"{form!r} leaked"


@pytest.fixture
def env() -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CI", "PLANLOOM"))}
    environ["MY_SERVICE_TOKEN"] = CANARY
    return environ


def run(tmp_path: Path, recipe: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "r.yaml"
    path.write_text(recipe)
    return planloom(
        "run", path, "--yes", "--json", "-v", "--log-file", "run.jsonl",
        cwd=tmp_path, environ=env, timeout=120,
    )  # fmt: skip


def test_d1_canary_in_a_file_and_the_environment_reaches_no_artifact(
    tmp_path: Path, env: dict[str, str]
) -> None:
    jail = tmp_path / "J"
    jail.mkdir()
    (jail / "creds.txt").write_text(
        f"token={CANARY}\nb64={base64.b64encode(CANARY.encode()).decode()}\n"
    )
    recipe = """
version: 1
name: d1
on_failure: continue
capabilities: {fs: {root: J, read: true, write: ["out/**"]}}
steps:
  - {id: read, tool: fs.read, params: {path: creds.txt}}
  - id: fail_on_it                 # retried: its attempts and their errors are journaled
    tool: fs.read
    params: {path: "missing-${{ steps.read.output.content | trim }}"}
    retry: {attempts: 2, initial: 0.1}
  - id: copy                       # the data itself still flows between steps
    tool: fs.write
    params: {path: out/copy.txt, content: "${{ steps.read.output.content }}"}
outputs:
  content: ${{ steps.read.output.content }}
"""
    done = run(tmp_path, recipe, env)
    log = (tmp_path / "run.jsonl").read_text()
    assert done.returncode == 1, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["steps"]["read"]["status"] == "succeeded"
    assert result["steps"]["fail_on_it"]["status"] == "failed"
    assert "[REDACTED]" in result["outputs"]["content"]
    assert result["steps"]["fail_on_it"]["attempts"] == 2
    # the run journal beside the recipe (the database and its write-ahead log)
    journal = [p.read_bytes().decode("latin-1") for p in (tmp_path / ".planloom").iterdir()]
    assert any("fail_on_it" in text for text in journal)
    assert_no_canary(done.stdout, done.stderr, log, *journal)
    # the run's own data was not altered: the copy holds the real content
    assert CANARY in (jail / "out" / "copy.txt").read_text()


def test_d2_d3_credentials_in_urls_are_redacted_from_errors_and_logs(
    tmp_path: Path, env: dict[str, str]
) -> None:
    # The URLs come from templates, as data does: written out, validation refuses them.
    recipe = f"""
version: 1
name: d2
on_failure: continue
capabilities: {{http: {{allow: [api.example]}}}}
steps:
  - id: userinfo
    tool: http.request
    params: {{url: "${{{{ 'https://user:{CANARY}@api.example/' }}}}"}}
  - id: query
    tool: http.request
    params: {{url: "${{{{ 'http://api.example/x?api_key={CANARY}' }}}}"}}
  - id: header
    tool: http.request
    params:
      url: "${{{{ 'https://127.0.0.1/' }}}}"
      headers: {{Authorization: "Bearer {CANARY}"}}
"""
    done = run(tmp_path, recipe, env)
    log = (tmp_path / "run.jsonl").read_text()
    result = json.loads(done.stdout)
    assert {k: v["status"] for k, v in result["steps"].items()} == {
        "userinfo": "failed",
        "query": "failed",
        "header": "failed",
    }
    assert "http.userinfo" in result["steps"]["userinfo"]["error"]
    assert "http.scheme" in result["steps"]["query"]["error"]
    assert_no_canary(done.stdout, done.stderr, log)


def test_d4_posting_to_an_allowed_host_still_needs_approval(tmp_path: Path) -> None:
    registry = default_registry()
    asked: list[str] = []

    async def gate(
        step_id: str, action: str, params: object, reason: str, validate: object, **_: object
    ) -> None:
        asked.append(reason)
        from engine.errors import ApprovalDenied

        raise ApprovalDenied("no", step_id=step_id)

    box = Sandbox(registry, {"http": {"allow": ["api.example"]}}, tmp_path, gate=gate)
    from engine.errors import ApprovalDenied

    with pytest.raises(ApprovalDenied):
        asyncio.run(
            box.call(
                "http.request",
                {"url": "https://api.example/upload", "method": "POST", "body": CANARY},
                step_id="exfil",
            )
        )
    assert asked == ["has side effects"]  # the allow-list did not waive the gate


def test_d5_canary_in_the_engine_environment_is_absent_from_child_environments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", CANARY)
    registry = default_registry()
    box = Sandbox(registry, {"shell": {"allow": ["printenv"]}}, tmp_path)
    result = asyncio.run(box.call("shell.run", {"argv": ["printenv"]}, step_id="env"))
    assert "PATH=" in result["stdout"]  # the child did print its environment
    assert_no_canary(result["stdout"], result["stderr"])
    assert "MY_SERVICE_TOKEN" not in result["stdout"]
