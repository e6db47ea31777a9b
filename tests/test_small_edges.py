"""Small edges a new user meets first, through the real `planloom` command: output piped
into a reader that leaves early (`| head -1`), the live view of a resumed run, the `tries`
column of a `for_each` step, and what a replan says failed.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _procs import PLANLOOM, TIMEOUT, env, planloom
from _pty import drawn

from engine.testing import ChatRequest, FakeOpenAIServer, ScriptedModel

# -- a reader that leaves early -------------------------------------------------------------

MANY_TOOLS = """\
def register(registry):
    for number in range(80):
        def tool(text: str) -> str:
            return text
        registry.function(f"many.tool{number:02d}", side_effects=False,
                          description=f"tool number {number} of a plugin with many")(tool)
"""


def first_line_then_close(*args: str, cwd: Path) -> tuple[bytes, subprocess.Popen[bytes], str]:
    """Run `planloom ARGS` with stdout into a pipe of one page, read its first line, close
    the pipe (as `| head -1` does), and wait: the line, the process and its stderr.

    The pipe holds one page, so a command writing more is still writing when its reader
    has gone, whatever the timing. Standard output is buffered, as it is for a user:
    unbuffered (`PYTHONUNBUFFERED`), a write the pipe cuts short is dropped without an error.
    """
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    environ = env()
    environ.pop("PYTHONUNBUFFERED", None)
    process = subprocess.Popen(
        [PLANLOOM, *args],
        cwd=cwd,
        env=environ,
        stdin=subprocess.DEVNULL,
        stdout=write_end,
        stderr=subprocess.PIPE,
    )
    os.close(write_end)
    line = b""
    try:
        while not line.endswith(b"\n"):
            chunk = os.read(read_end, 1)
            if not chunk:
                break
            line += chunk
    finally:
        os.close(read_end)
    _, stderr = process.communicate(timeout=TIMEOUT)
    return line, process, stderr.decode(errors="replace")


@pytest.mark.parametrize(
    "args",
    [("tools",), ("tools", "--json"), ("schema",)],
    ids=["tools", "tools-json", "schema"],
)
def test_a_reader_that_leaves_early_ends_the_command_quietly(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    (tmp_path / "many.py").write_text(MANY_TOOLS)  # `tools` as text: more than a page

    line, process, stderr = first_line_then_close("--plugin", "many.py", *args, cwd=tmp_path)

    assert line.strip(), "nothing was written"
    assert "Traceback" not in stderr, stderr
    assert "BrokenPipeError" not in stderr, stderr
    assert stderr == ""
    assert process.returncode == 141  # 128 + SIGPIPE: what a shell shows for `| head`


def test_a_reader_that_reads_everything_sees_exit_0(tmp_path: Path) -> None:
    proc = planloom("schema", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)


# -- the live view of a resumed run ----------------------------------------------------------

STAGED = """\
version: 1
capabilities:
  shell: {allow: [sleep, test], cwd: .}
steps:
  - {id: first, tool: shell.run, params: {argv: [sleep, "0"]}, confirm: never}
  - id: second
    tool: shell.run
    params: {argv: [test, -e, ready]}
    confirm: never
    depends_on: [first]
  - id: third
    tool: shell.run
    params: {argv: [sleep, "0.8"]}
    confirm: never
    depends_on: [second]
"""


@pytest.mark.slow
def test_the_live_view_of_a_resumed_run_counts_the_kept_steps_as_done(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(STAGED)
    failed = planloom("run", "r.yaml", "--json", cwd=tmp_path)
    assert failed.returncode == 1, failed.stderr
    run_id = json.loads(failed.stdout)["run_id"]
    (tmp_path / "ready").write_text("")

    status, text = drawn(tmp_path, "resume", run_id, NO_COLOR="1")
    assert status == 0, text
    counts = [int(done) for done in re.findall(r"(\d+)/3 steps done", text)]
    assert counts, f"the live view never drew:\n{text}"
    # `first` was kept: the view's last frame has all three done, not two.
    assert counts[-1] == 3, counts
    assert max(counts) == 3, counts


# -- tries of a for_each step ----------------------------------------------------------------

FAN = """\
version: 1
capabilities:
  shell: {allow: [sh], cwd: .}
steps:
  - id: fan
    for_each: ["a", "b", "c"]
    tool: shell.run
    params: {argv: [sh, flaky.sh, "${{ item }}"]}
    retry: {attempts: 2, initial: 0}
    confirm: never
  - id: once
    tool: shell.run
    params: {argv: [sh, flaky.sh, "z"]}
    confirm: never
"""

# `b` fails its first attempt: three items took four attempts.
FLAKY = """\
if [ "$1" = b ] && [ ! -e b.tried ]; then : > b.tried; exit 1; fi
echo "$1"
"""


@pytest.mark.slow
def test_the_tries_of_a_for_each_step_are_its_attempts_over_its_items(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(FAN)
    (tmp_path / "flaky.sh").write_text(FLAKY)

    proc = planloom("run", "r.yaml", cwd=tmp_path)
    (tmp_path / "b.tried").unlink()
    as_json = planloom("run", "r.yaml", "--json", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[1]: line for line in proc.stderr.splitlines() if line.startswith("│")}
    assert "4 over 3 items" in rows["fan"], rows["fan"]
    assert re.search(r"succeeded\s*│\s*1\s*│", rows["once"]), rows["once"]
    steps = json.loads(as_json.stdout)["steps"]
    assert (steps["fan"]["attempts"], steps["fan"]["items"]) == (4, 3)  # summed over items
    assert (steps["once"]["attempts"], steps["once"]["items"]) == (1, None)


# -- what a replan says failed ---------------------------------------------------------------

SECRET = "s3cr3t-deploy-value-7f1c9a"
LONG = "x" * 150


def failing_plan() -> dict[str, Any]:
    missing = f"missing/{LONG}/{LONG}/{SECRET}/{LONG}.txt"
    return {
        "goal": "report on the notes",
        "steps": [
            {"id": "notes", "tool": "fs.read", "params": {"path": "notes.txt"}},
            {"id": "extra", "tool": "fs.read", "params": {"path": missing}},
            {"id": "report", "tool": "fs.list", "params": {"path": "."}, "depends_on": ["extra"]},
        ],
    }


FIXED_PLAN = {
    "goal": "report on the notes",
    "steps": [
        {"id": "listing", "tool": "fs.list", "params": {"path": "."}},
    ],
}


@pytest.mark.slow
def test_a_replan_names_what_failed_to_the_person_and_the_model(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("notes\n")
    (tmp_path / "caps.yaml").write_text(
        "capabilities: {fs: {root: ., read: true}}\nreplan: {max: 1}\n"
    )

    def model(request: ChatRequest) -> dict[str, Any]:
        replanning = "failed" in request.last_user_text()
        return FIXED_PLAN if replanning else failing_plan()

    scripted = ScriptedModel(model)
    with FakeOpenAIServer(scripted) as server:
        done = subprocess.run(
            [
                *(PLANLOOM, "plan", "report on the notes", "--capabilities", "caps.yaml"),
                *("--base-url", server.base_url, "--model", "m", "--json"),
            ],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
            env=env(DEPLOY_TOKEN=SECRET),
        )

    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("replanning after"))
    said = lines[start : start + 2]
    assert said[0] == "replanning after the failure (1 step kept):", said
    assert said[1].startswith("  step 'extra' failed: fs.read: "), said
    assert SECRET not in said[1]
    assert "[REDACTED" in said[1] or SECRET[:8] not in said[1]
    assert len(said[1]) < 400, len(said[1])  # bounded, though the error is longer

    told = scripted.calls[1].last_user_text()
    failed_part = told.split("The previous plan failed:", 1)[1]
    assert failed_part.lstrip("\n").startswith("- step 'extra' failed: fs.read: "), told
    assert SECRET not in told
    assert "- notes: succeeded" in told
    assert max(len(line) for line in told.splitlines()) < 400
    result = json.loads(done.stdout)
    assert result["status"] == "succeeded"
