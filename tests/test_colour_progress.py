"""Colour and progress through the real CLI: `NO_COLOR` and `FORCE_COLOR` are honoured
(piped output has no escape codes), the live view's timers tick while a step runs, and the
summary and `--json` give each step's time."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tests._procs import env, planloom
from tests._pty import drawn

PLANLOOM = str(Path(sys.executable).parent / "planloom")
ESCAPE = "\x1b["
SGR = re.compile(r"\x1b\[([0-9;]*)m")

NAP = """\
version: 1
capabilities:
  shell: {allow: [sleep], cwd: .}
steps:
  - {id: nap, tool: shell.run, params: {argv: [sleep, "SECONDS"]}, confirm: never}
  - {id: late, tool: shell.run, params: {argv: [sleep, "0"]}, confirm: never, depends_on: [nap]}
"""


def colours(text: str) -> set[int]:
    """The colour parameters (foreground and background, 16, 256 or true colour) of the
    SGR sequences in `text`; bold, dim, italic and resets are not colours."""
    found: set[int] = set()
    for match in SGR.finditer(text):
        params = [int(p) for p in match.group(1).split(";") if p]
        index = 0
        while index < len(params):
            code = params[index]
            if code in (38, 48):  # extended colour: 5;N or 2;R;G;B follow
                found.add(code)
                index += 3 if params[index + 1 : index + 2] == [5] else 5
                continue
            if 30 <= code <= 37 or 40 <= code <= 47 or 90 <= code <= 97 or 100 <= code <= 107:
                found.add(code)
            index += 1
    return found


def recipe(folder: Path, seconds: float) -> None:
    (folder / "r.yaml").write_text(NAP.replace("SECONDS", str(seconds)))


def in_terminal(folder: Path, *args: str, **extra: str) -> str:
    """`planloom run r.yaml ARGS` in a pseudo-terminal; everything it drew, unaltered."""
    status, text = drawn(folder, "run", "r.yaml", *args, **extra)
    assert status == 0, text
    return text


# -- colour -----------------------------------------------------------------------------


@pytest.mark.slow
def test_piped_output_has_no_escape_codes(tmp_path: Path) -> None:
    recipe(tmp_path, 0)

    plain = planloom("run", "r.yaml", cwd=tmp_path)
    verbose = planloom("run", "r.yaml", "-v", cwd=tmp_path)
    as_json = planloom("run", "r.yaml", "--json", cwd=tmp_path)

    for proc in (plain, verbose, as_json):
        assert proc.returncode == 0, proc.stderr
        assert ESCAPE not in proc.stdout + proc.stderr
    assert "nap" in plain.stderr  # the summary is there, plainly


@pytest.mark.slow
def test_force_color_colours_piped_output(tmp_path: Path) -> None:
    recipe(tmp_path, 0)

    summary = planloom("run", "r.yaml", cwd=tmp_path, environ=env(FORCE_COLOR="1"))
    verbose = planloom("run", "r.yaml", "-v", cwd=tmp_path, environ=env(FORCE_COLOR="1"))
    as_json = planloom("run", "r.yaml", "--json", cwd=tmp_path, environ=env(FORCE_COLOR="1"))

    assert summary.returncode == 0, summary.stderr
    assert colours(summary.stderr), "FORCE_COLOR gave a summary without colour"
    assert colours(verbose.stderr), "FORCE_COLOR gave -v logs without colour"
    json.loads(as_json.stdout)  # the JSON on stdout stays JSON


@pytest.mark.slow
def test_a_terminal_gets_colour_unless_no_color(tmp_path: Path) -> None:
    recipe(tmp_path, 0)

    coloured = in_terminal(tmp_path)
    plain = in_terminal(tmp_path, NO_COLOR="1")
    plain_verbose = in_terminal(tmp_path, "-v", NO_COLOR="1")

    assert colours(coloured), "a terminal got no colour"
    assert "succeeded" in plain
    assert colours(plain) == set(), "NO_COLOR was not honoured"
    assert colours(plain_verbose) == set(), "NO_COLOR was not honoured by -v"


# -- live progress and step times ---------------------------------------------------------


@pytest.mark.slow
def test_a_running_steps_timer_ticks_between_events(tmp_path: Path) -> None:
    recipe(tmp_path, 2.5)

    drawn = in_terminal(tmp_path, NO_COLOR="1")

    # Between `nap` starting and ending no event comes: only a clock can redraw its time.
    shown = {float(t) for t in re.findall(r"⠿ nap\s+(\d+\.\d)s", drawn)}
    assert len(shown) >= 2, f"the timer of a running step did not move: {sorted(shown)}"
    assert max(shown) >= 1.0


@pytest.mark.slow
def test_the_summary_and_json_give_each_steps_time(tmp_path: Path) -> None:
    recipe(tmp_path, 0.3)

    summary = planloom("run", "r.yaml", cwd=tmp_path)
    result = planloom("run", "r.yaml", "--json", cwd=tmp_path)

    header = next(line for line in summary.stderr.splitlines() if "status" in line)
    assert re.search(r"\btries\b.*\btime\b", header), header
    row = next(line for line in summary.stderr.splitlines() if " nap " in line)
    assert re.search(r"\b0\.\d\ds\b|\b\d+\.\ds\b", row), row
    steps = json.loads(result.stdout)["steps"]
    assert steps["nap"]["duration"] >= 0.3
    assert 0 <= steps["late"]["duration"] < steps["nap"]["duration"]


@pytest.mark.parametrize(
    ("seconds", "shown"), [(0.04, "0.04s"), (2.54, "2.5s"), (65.0, "1m05s"), (None, "")]
)
def test_step_times_read_well(seconds: float | None, shown: str) -> None:
    from engine.app.console import _seconds

    assert _seconds(seconds) == shown
