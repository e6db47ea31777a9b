"""`--dry-run` and `--policy` through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _procs import planloom

PLANLOOM = str(Path(sys.executable).parent / "planloom")

RECIPE = """\
version: 1
name: writes
on_failure: continue
capabilities:
  fs: {root: ., write: ["out/**", in.txt]}
steps:
  - {id: read, tool: fs.read, params: {path: in.txt}}
  - id: write
    tool: fs.write
    params: {path: out/copy.txt, content: "${{ steps.read.output.content }}"}
  - id: after
    tool: fs.read
    params: {path: "${{ steps.write.output.path }}"}
  - {id: listing, tool: fs.list, params: {path: .}}
  - {id: remove, tool: fs.delete, params: {path: in.txt}}
"""


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "PLANLOOM"))}
    return planloom("run", "r.yaml", "--json", *args, cwd=tmp_path, environ=env)


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_dry_run_leaves_the_file_system_untouched_and_prints_the_would_be_calls(
    tmp_path: Path,
) -> None:
    (tmp_path / "r.yaml").write_text(RECIPE)
    (tmp_path / "in.txt").write_text("hello\n")
    before = tree(tmp_path)
    done = run(tmp_path, "--dry-run", "--yes")
    assert tree(tmp_path) == before  # nothing written, nothing deleted
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    statuses = {k: v["status"] for k, v in result["steps"].items()}
    assert statuses == {
        "read": "succeeded",  # read-only actions really run
        "write": "skipped",
        "after": "skipped",  # needs an output that does not exist in a dry run
        "listing": "succeeded",
        "remove": "skipped",
    }
    assert "unknown in a dry run" in result["steps"]["after"]["error"]
    calls = sorted(result["dry_run"], key=lambda call: call["step_id"])
    assert calls == [
        {"step_id": "remove", "action": "fs.delete", "params": {"path": "in.txt"}},
        {
            "step_id": "write",
            "action": "fs.write",
            "params": {"path": "out/copy.txt", "content": "hello\n"},
        },
    ]
    assert 'would run: write: fs.write {"path": "out/copy.txt"' in done.stderr
    assert "would run: remove: fs.delete" in done.stderr


POLICY = """\
version: 1
default: deny
rules:
  - {tool: fs.write, params: {path: "out/ok*"}, decision: allow}
  - {tool: fs.write, params: {path: "out/ask*"}, decision: ask}
  - {tool: fs.delete, decision: deny, reason: never delete}
"""

POLICY_RECIPE = """\
version: 1
name: policy
on_failure: continue
capabilities:
  fs: {root: ., write: true}
steps:
  - {id: allowed, tool: fs.write, params: {path: out/ok.txt, content: x}}
  - {id: asked, tool: fs.write, params: {path: out/ask.txt, content: x}}
  - {id: denied, tool: fs.delete, params: {path: keep.txt}}
  - {id: unlisted, tool: fs.append, params: {path: out/log.txt, content: x}}
"""


def test_policy_file_allows_asks_denies_and_denies_by_default(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(POLICY_RECIPE)
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "keep.txt").write_text("keep\n")
    done = run(tmp_path, "--policy", "policy.yaml")
    assert done.returncode == 1, done.stderr[-2000:]
    steps = json.loads(done.stdout)["steps"]
    assert steps["allowed"]["status"] == "succeeded"
    assert (tmp_path / "out" / "ok.txt").read_text() == "x"
    # ask, and no terminal to ask: denied, saying so
    assert steps["asked"]["status"] == "denied"
    assert "no terminal" in steps["asked"]["error"]
    assert not (tmp_path / "out" / "ask.txt").exists()
    assert steps["denied"]["status"] == "denied"
    assert "never delete" in steps["denied"]["error"]
    assert (tmp_path / "keep.txt").exists()
    assert steps["unlisted"]["status"] == "denied"  # the default
    assert not (tmp_path / "out" / "log.txt").exists()


def test_policy_ask_rules_go_to_yes(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(POLICY_RECIPE)
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "keep.txt").write_text("keep\n")
    done = run(tmp_path, "--policy", "policy.yaml", "--yes")
    steps = json.loads(done.stdout)["steps"]
    assert steps["asked"]["status"] == "succeeded"  # --yes answers what the policy asks
    assert steps["denied"]["status"] == "denied"  # but never overrides a deny rule
    assert steps["unlisted"]["status"] == "denied"


def test_a_broken_policy_file_is_a_located_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(POLICY_RECIPE)
    (tmp_path / "policy.yaml").write_text(
        "version: 1\nrules:\n  - {tool: fs.write, decison: allow}\n"
    )
    done = run(tmp_path, "--policy", "policy.yaml")
    assert done.returncode == 2
    assert "policy.yaml:3:" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
