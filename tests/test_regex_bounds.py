"""Issue 10 item 1: a user regex can no longer hang a run, and Ctrl-C always works.

`^(a|a)+$` against 37 `a` and a `!` backtracks 2^37 times, with Python's `re` and with the
`regex` module alike. Before, `fs.search` with it ignored the step timeout, `max_duration`
and SIGINT (`re` holds the GIL), and so did the `match`/`search` template tests, which a
read-only plan runs without approval. Every user regex now runs through `engine.regex`,
bounded in time; worker threads can no longer hold up an interrupted run.

Each CLI run here has a 20 s subprocess timeout: on a build without the fix it hangs, and
the timeout is the test failing.
"""

from __future__ import annotations

import json
import signal
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from _procs import PLANLOOM, cpu_seconds, env, planloom

HANG = 20  # seconds: a run still going by then is the hang this file is about
EVIL = "^(a|a)+$"
VICTIM = "a" * 37 + "!"


def _recipe(tmp_path: Path, text: str) -> Path:
    (tmp_path / "evil.txt").write_text(VICTIM + "\n")
    path = tmp_path / "recipe.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    try:
        proc = planloom(*args, cwd=tmp_path, timeout=HANG)
    except subprocess.TimeoutExpired:
        pytest.fail(f"planloom {' '.join(args)} still running after {HANG} s: it hangs")
    return proc, time.monotonic() - start


def _step(proc: subprocess.CompletedProcess[str], step_id: str) -> dict[str, Any]:
    result = json.loads(proc.stdout)
    step: dict[str, Any] = result["steps"][step_id]
    return step


# -- the engine's regex helpers ---------------------------------------------------------


def test_catastrophic_pattern_raises_regex_timeout_within_its_deadline() -> None:
    from engine import regex  # here, not at the top: the other tests run on old builds too

    start = time.monotonic()

    with pytest.raises(regex.RegexTimeout, match=r"\(a\|a\)\+"):
        regex.search(EVIL, VICTIM, deadline=time.monotonic() + 0.2)

    # the regex module's timeout counts CPU time: allow for a busy machine
    assert time.monotonic() - start < 5


def test_patterns_keep_re_semantics() -> None:
    from engine import regex

    # VERSION1 of the regex module reads `[[a]--[b]]` as set difference; `re` does not.
    assert regex.search(r"(?P<w>\w+)@(\d+)", "id: bob@42") is not None
    assert regex.sub(r"(\w+)-(\w+)", r"\2-\1", "ab-cd") == "cd-ab"
    assert regex.match("[a-]", "-") is not None
    with pytest.raises(ValueError, match="invalid regular expression"):
        regex.compile_pattern("(unclosed")


@pytest.mark.parametrize("pattern", ["x{4294967294}", "((a{1000}){1000}){1000}"])
def test_patterns_that_would_compile_to_gigabytes_are_refused_up_front(pattern: str) -> None:
    # `re` keeps a repeat counter; the regex module unrolls `{n}` (~270 bytes a copy)
    from engine import regex

    with pytest.raises(ValueError, match="fixed repeat counts"):
        regex.compile_pattern(pattern)
    assert regex.compile_pattern(r"[0-9a-f]{8}-[0-9a-f]{4}-\d{4}-\w{12}") is not None


# -- through the CLI --------------------------------------------------------------------


@pytest.mark.slow
def test_catastrophic_fs_search_fails_its_step_naming_pattern_and_file(tmp_path: Path) -> None:
    _recipe(
        tmp_path,
        """\
        version: 1
        name: evil-search
        capabilities:
          fs: {root: .}
        limits: {max_duration: 10}
        steps:
          - id: find
            tool: fs.search
            timeout: 3
            params: {pattern: "^(a|a)+$", glob: "*.txt"}
        """,
    )

    proc, elapsed = _run(tmp_path, "run", "recipe.yaml", "--json")

    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    step = _step(proc, "find")
    assert step["status"] == "failed"
    assert "'^(a|a)+$'" in step["error"]
    assert "evil.txt" in step["error"]
    assert elapsed < HANG


@pytest.mark.slow
@pytest.mark.parametrize(
    ("field", "template"),
    [
        ("when", f"${{{{ '{VICTIM}' is match('{EVIL}') }}}}"),
        ("when", f"${{{{ '{VICTIM}' is search('{EVIL}') }}}}"),
        ("params", f"${{{{ '{VICTIM}' | regex_replace('{EVIL}', 'x') }}}}"),
    ],
)
def test_catastrophic_regex_in_a_template_fails_its_step(
    tmp_path: Path, field: str, template: str
) -> None:
    where = f'when: "{template}"' if field == "when" else ""
    path = f'"{template}"' if field == "params" else "evil.txt"
    _recipe(
        tmp_path,
        f"""\
        version: 1
        name: evil-template
        capabilities:
          fs: {{root: .}}
        limits: {{max_duration: 10}}
        steps:
          - id: read
            tool: fs.read
            timeout: 3
            {where}
            params: {{path: {path}}}
        """,
    )

    proc, elapsed = _run(tmp_path, "run", "recipe.yaml", "--json")

    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    step = _step(proc, "read")
    assert step["status"] == "failed"
    assert "regular expression '^(a|a)+$' took longer than" in step["error"]
    assert elapsed < HANG


def test_invalid_literal_regex_in_a_template_is_a_located_validation_error(
    tmp_path: Path,
) -> None:
    _recipe(
        tmp_path,
        """\
        version: 1
        name: bad-regex
        capabilities:
          fs: {root: .}
        steps:
          - id: read
            tool: fs.read
            when: "${{ 'x' is match('[z') }}"
            params: {path: evil.txt}
        """,
    )

    proc, _ = _run(tmp_path, "validate", "recipe.yaml")

    assert proc.returncode == 2, proc.stderr
    assert "recipe.yaml:8:" in proc.stderr
    assert "error[template-syntax]" in proc.stderr
    assert "invalid regular expression '[z'" in proc.stderr
    assert "Traceback" not in proc.stderr


# -- Ctrl-C -----------------------------------------------------------------------------


def _interrupt_when(
    tmp_path: Path,
    args: list[str],
    ready: Any,
    environ: dict[str, str] | None = None,
    *,
    busy: float = 0.0,
) -> tuple[int, float, str]:
    """Start planloom, wait for `ready()` and then for it to have used `busy` more seconds of
    CPU (inside the slow part), send SIGINT; the exit code and how long it took to stop."""
    proc = subprocess.Popen(
        [PLANLOOM, *args],
        cwd=tmp_path,
        env=environ or env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        end = time.monotonic() + HANG
        while not ready():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < end, "the step never started"
            time.sleep(0.05)
        began = cpu_seconds(proc.pid)
        while cpu_seconds(proc.pid) - began < busy:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < end, f"it never used {busy} s of CPU after it was ready"
            time.sleep(0.05)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            _, stderr = proc.communicate(timeout=HANG)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {HANG} s after SIGINT")
        return proc.returncode, time.monotonic() - sent, stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.slow
def test_sigint_stops_a_run_stuck_in_a_slow_user_function(tmp_path: Path) -> None:
    (tmp_path / "slow_plugin.py").write_text(
        textwrap.dedent(
            """\
            import time
            from pathlib import Path


            def register(registry):
                @registry.function("slow.nap", side_effects=False)
                def nap(seconds: float) -> str:
                    \"\"\"Busy for `seconds` in a worker thread.\"\"\"
                    Path("started").touch()
                    end = time.monotonic() + seconds
                    while time.monotonic() < end:
                        time.sleep(0.05)
                    return "done"
            """
        )
    )
    _recipe(
        tmp_path,
        """\
        version: 1
        name: slow
        capabilities:
          slow: {}
        steps:
          - id: nap
            tool: slow.nap
            timeout: 60
            params: {seconds: 20}
        """,
    )
    environ = env(PYTHONPATH=str(tmp_path), PYTHONDONTWRITEBYTECODE="1")

    code, elapsed, stderr = _interrupt_when(
        tmp_path,
        ["--plugin", "slow_plugin", "run", "recipe.yaml"],
        (tmp_path / "started").exists,
        environ,
    )

    assert code == 130, stderr
    assert elapsed < 5, f"took {elapsed:.1f} s to stop after SIGINT (the function runs 20 s)"
    assert "Traceback" not in stderr


@pytest.mark.slow
def test_sigint_stops_a_run_stuck_in_a_catastrophic_search(tmp_path: Path) -> None:
    _recipe(
        tmp_path,
        """\
        version: 1
        name: evil-search
        capabilities:
          fs: {root: .}
        limits: {max_duration: 600}
        steps:
          - id: find
            tool: fs.search
            timeout: 600
            params: {pattern: "^(a|a)+$", glob: "*.txt"}
        """,
    )
    (tmp_path / "evil.txt").write_text((VICTIM + "\n") * 100)  # ~100 s of matching at best
    log = tmp_path / "events.jsonl"

    def searching() -> bool:
        return log.exists() and "attempt.started" in log.read_text()

    code, elapsed, stderr = _interrupt_when(
        tmp_path, ["run", "recipe.yaml", "--log-file", str(log)], searching, busy=0.3
    )

    assert code == 130, stderr
    assert elapsed < 5, f"took {elapsed:.1f} s to stop after SIGINT"
    assert "Traceback" not in stderr


def test_fs_search_still_finds_matches(tmp_path: Path) -> None:
    _recipe(
        tmp_path,
        """\
        version: 1
        name: search
        capabilities:
          fs: {root: .}
        steps:
          - id: find
            tool: fs.search
            params: {pattern: "(?P<run>a{3,})!", glob: "*.txt"}
        """,
    )

    proc, _ = _run(tmp_path, "run", "recipe.yaml", "--json")

    assert proc.returncode == 0, proc.stderr
    matches = _step(proc, "find")["output"]["matches"]
    assert matches == [{"path": "evil.txt", "line": 1, "text": VICTIM}]


def test_backtracking_glob_in_fs_search_ends_promptly(tmp_path: Path) -> None:
    # A glob is translated to a regex: with `re`, ten `*a` over a 62-character name backtrack
    # for hours (each `*a` more multiplies the time by about eight).
    _recipe(
        tmp_path,
        """\
        version: 1
        name: glob-search
        capabilities:
          fs: {root: .}
        steps:
          - id: find
            tool: fs.search
            timeout: 3
            params: {pattern: "x", glob: "*a*a*a*a*a*a*a*a*a*ab"}
        """,
    )
    (tmp_path / ("a" * 60 + "ba")).write_text("x\n")

    proc, elapsed = _run(tmp_path, "run", "recipe.yaml", "--json")

    assert proc.returncode == 0, proc.stderr
    assert _step(proc, "find")["output"]["matches"] == []
    assert elapsed < HANG
