"""A gate never asks about a call the sandbox will refuse: a grant's own rules (the
program in `allow`, the path in `write`, the host in `allow`) are checked before the
confirmation gate, and `planloom validate` reports a call the recipe writes out in full
that they refuse, at the param that is wrong."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pexpect
import pytest

from tests._procs import env, planloom

PLANLOOM = str(Path(sys.executable).parent / "planloom")
GATE = r"wants to run (\S+) \("
ENDED = r"run (succeeded|failed)"

TEMPLATED = """\
version: 1
capabilities:
  shell: {allow: [wc], cwd: .}
  fs: {root: ., write: ["out/*"]}
inputs:
  prog: {type: string, default: grep}
  target: {type: string, default: elsewhere.txt}
steps:
  - id: count
    tool: shell.run
    params: {argv: ["${{ inputs.prog }}", -c, x, r.yaml]}
  - id: save
    tool: fs.write
    params: {path: "${{ inputs.target }}", content: hi}
"""


def spawn_run(folder: Path) -> pexpect.spawn:
    """`planloom run r.yaml` in `folder`, in a pseudo-terminal: a person can be asked."""
    return pexpect.spawn(
        PLANLOOM,
        ["run", "r.yaml"],
        cwd=str(folder),
        env=env(TERM="xterm", NO_COLOR="1"),
        encoding="utf-8",
        timeout=60,
        dimensions=(40, 200),
    )


def test_a_person_is_not_asked_about_a_call_the_grant_refuses(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(TEMPLATED)
    child = spawn_run(tmp_path)
    asked: list[str] = []
    while child.expect([GATE, ENDED, pexpect.EOF]) == 0:
        asked.append(child.match.group(1))
        child.sendline("d")  # (on a sandbox that asks first: deny, so the run ends)
    child.expect(pexpect.EOF)
    child.close()

    assert asked == [], f"the gate asked about refused calls: {asked}"
    assert child.exitstatus == 1


def test_approving_everything_approves_no_refused_call(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(TEMPLATED)

    proc = planloom("run", "r.yaml", "--yes", "--json", cwd=tmp_path)

    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert result["approvals"] == [], "a decision was made about a call that could not run"
    count, save = result["steps"]["count"], result["steps"]["save"]
    assert count["status"] == save["status"] == "failed"
    assert count["error"].startswith("denied by rule shell.not-allowed: program 'grep'")
    assert "allow: [grep]" in count["error"]
    assert save["error"].startswith("denied by rule fs.write-not-granted:")
    assert not (tmp_path / "elsewhere.txt").exists()


@pytest.mark.slow
def test_an_edit_at_the_gate_is_held_to_the_grant(tmp_path: Path) -> None:
    recipe = TEMPLATED.replace('"${{ inputs.prog }}", -c, x', "wc, -l").replace(
        '"${{ inputs.target }}"', "out/a.txt"
    )
    (tmp_path / "r.yaml").write_text(recipe)
    (tmp_path / "out").mkdir()
    child = spawn_run(tmp_path)
    child.expect(r"wants to run shell\.run \(")
    child.expect(r"\[q\]uit > ")
    child.sendline("e")
    child.expect(r"new params as one line of JSON > ")
    child.sendline(json.dumps({"argv": ["grep", "-c", "x", "r.yaml"]}))
    # The edit is refused there and then, with the grant's reason; the menu comes back.
    child.expect(r"program 'grep' .* is not in the shell allow-list")
    child.expect(r"\[q\]uit > ")
    child.sendline("a")
    child.expect(r"wants to run fs\.write \(")
    child.expect(r"\[q\]uit > ")
    child.sendline("a")
    child.expect(pexpect.EOF)
    child.close()

    assert child.exitstatus == 0
    assert (tmp_path / "out" / "a.txt").read_text() == "hi"


@pytest.mark.parametrize(
    ("step", "token", "message"),
    [
        (
            "{tool: shell.run, params: {argv: [grep, -c, x, r.yaml]}}",
            "grep",
            "error[shell.not-allowed]: program 'grep' (",
        ),
        (
            "{tool: shell.run, params: {argv: [./build/tool]}}",
            "./build/tool",
            "error[shell.not-allowed]: program './build/tool' (",
        ),
        (
            "{tool: fs.write, params: {path: notes.txt, content: hi}}",
            "notes.txt",
            "error[fs.write-not-granted]: fs.write: writing 'notes.txt' is not granted",
        ),
        (
            "{tool: fs.delete, params: {path: ../up.txt}}",
            "../up.txt",
            "error[fs.outside-root]:",
        ),
        (
            "{tool: http.request, params: {url: 'https://example.org/x'}}",
            "'https://example.org/x'",
            "error[http.host-not-allowed]: http.request: host 'example.org' is not granted",
        ),
    ],
    ids=["program", "program-path", "write", "outside-root", "host"],
)
def test_validate_reports_a_written_call_the_grant_refuses(
    tmp_path: Path, step: str, token: str, message: str
) -> None:
    recipe = """\
version: 1
capabilities:
  shell: {allow: [wc], cwd: .}
  fs: {root: ., write: ["out/*"]}
  http: {allow: [example.com]}
inputs:
  prog: {type: string, default: wc}
steps:
  - id: ok
    tool: shell.run
    params: {argv: [wc, -l, r.yaml]}
"""
    recipe = recipe.replace("  - id: ok\n", "  - {id: bad, " + step[1:] + "\n  - id: ok\n", 1)
    (tmp_path / "r.yaml").write_text(recipe)

    proc = planloom("validate", "r.yaml", cwd=tmp_path)

    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = recipe.splitlines()[8]  # the bad step: the problem is at the param's value
    assert f"r.yaml:9:{line.index(token) + 1}: {message}" in proc.stderr, proc.stderr
    assert "1 problem" in proc.stderr


def test_validate_leaves_alone_what_only_the_run_can_tell(tmp_path: Path) -> None:
    recipe = """\
version: 1
capabilities:
  shell: {allow: [wc, ./build/tool], cwd: .}
  fs: {root: ., write: ["out/*"]}
inputs:
  prog: {type: string, default: wc}
  target: {type: string, default: out/a.txt}
steps:
  - {id: templated, tool: shell.run, params: {argv: ["${{ inputs.prog }}", r.yaml]}}
  - {id: built_later, tool: shell.run, params: {argv: [./build/tool]}}
  - {id: path, tool: fs.write, params: {path: "${{ inputs.target }}", content: x}}
  - {id: granted, tool: fs.write, params: {path: out/b.txt, content: x}}
"""
    (tmp_path / "r.yaml").write_text(recipe)

    proc = planloom("validate", "r.yaml", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
