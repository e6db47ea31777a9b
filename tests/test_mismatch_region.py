"""A replay mismatch shows where two long values differ, not only their lengths.

A long one-line prompt was cut at the same 300 characters on both sides, so a change after
that showed as `…(373 chars)` against `…(381 chars)`. Through the real `planloom run
--record` (a `ScriptedModel` behind a `FakeOpenAIServer`) and `planloom run --replay`, and
on `field_diff` itself for the shapes of a difference (at the start, in the middle, one
text a prefix of the other, a long line in a multi-line text).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _procs import env, planloom

from engine.recording import field_diff
from engine.testing import FakeOpenAIServer, ScriptedModel

LEAD = (
    "Please summarise the following quarterly stock report for the warehouse team in plain "
    "words, keeping every number exactly as written and naming each supplier that was late "
    "more than twice this quarter, together with the items they were late on, the number of "
    "days late, and whether the late delivery caused a stockout at any site. "
)
RECORDED_END = "End with the supplier named Acme Widgets."
CHANGED_END = "End with the supplier named Borealis Gadgets."

RECIPE = """\
version: 1
name: long-prompt
capabilities:
  llm: {{}}
steps:
  - id: summary
    tool: llm.complete
    params:
      prompt: {prompt}
"""


def record_then_replay(tmp_path: Path, recorded: str, changed: str) -> tuple[str, str]:
    """Record the recipe with prompt `recorded`, replay it with prompt `changed`: the
    replay's stderr and the failed step's error from `--json`."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.format(prompt=json.dumps(recorded)), encoding="utf-8")
    with FakeOpenAIServer(ScriptedModel.sequence("fine")) as server:
        done = planloom(
            "run", recipe, "--record", "c.yaml", "--base-url", server.base_url, "--model", "m",
            "--yes", cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    recipe.write_text(RECIPE.format(prompt=json.dumps(changed)), encoding="utf-8")
    replayed = planloom("run", recipe, "--replay", "c.yaml", "--json", cwd=tmp_path, environ=env())
    assert replayed.returncode == 1, replayed.stderr
    assert "Traceback" not in replayed.stderr, replayed.stderr
    step = json.loads(replayed.stdout)["steps"]["summary"]
    assert step["status"] == "failed"
    return replayed.stderr, step["error"]


@pytest.mark.slow
def test_a_long_one_line_prompt_changed_after_300_chars_shows_both_changed_words(
    tmp_path: Path,
) -> None:
    recorded, changed = LEAD + RECORDED_END, LEAD + CHANGED_END
    assert len(LEAD) > 300
    stderr, error = record_then_replay(tmp_path, recorded, changed)
    for text in (stderr, error):
        assert "no recording of" in text
        assert "Acme Widgets" in text, text  # the recorded side's words
        assert "Borealis Gadgets" in text, text  # and the new side's
        # where they differ, counted from 1
        assert f"from character {len(LEAD) + len('End with the supplier named ') + 1}" in text


@pytest.mark.slow
def test_a_long_line_in_a_multi_line_prompt_is_shown_around_its_change(tmp_path: Path) -> None:
    """The line diff showed a changed line whole: 3000 characters for one changed word."""
    filler = "".join(f"row {n} holds nothing of note; " for n in range(120))
    recorded = f"Report:\n{filler}Acme Widgets was late.\nThanks."
    changed = f"Report:\n{filler}Borealis Gadgets was late.\nThanks."
    stderr, error = record_then_replay(tmp_path, recorded, changed)
    for text in (stderr, error):
        assert "Acme Widgets" in text, text
        assert "Borealis Gadgets" in text, text
        assert "row 0 holds" not in text  # the line's start, far from the change, is cut
    assert len(error) < 1500, error


# -- field_diff --------------------------------------------------------------------------------


def shown(diff: list[str]) -> tuple[str, str]:
    """The recorded and now lines of a one-field diff of two long one-line texts."""
    assert len(diff) == 3, diff
    recorded = re.fullmatch(r" +recorded: (.*)", diff[1])
    now = re.fullmatch(r" +now: +(.*)", diff[2])
    assert recorded is not None, diff
    assert now is not None, diff
    return recorded.group(1), now.group(1)


@pytest.mark.parametrize("at", [0, 150, 400, 799])
def test_the_region_of_a_change_is_shown_wherever_it_is(at: int) -> None:
    base = "".join(chr(ord("a") + n % 26) for n in range(800))
    recorded = base[:at] + "OLD" + base[at + 1 :]
    now = base[:at] + "NEW" + base[at + 1 :]
    diff = field_diff({"p": recorded}, {"p": now})
    assert diff[0] == f"p: differs from character {at + 1} (recorded 802 chars, now 802):"
    old_side, new_side = shown(diff)
    assert "OLD" in old_side
    assert "NEW" in new_side
    assert ("[…" in old_side) == (at > 60)  # cut before, saying how much
    assert ("…]" in old_side) == (at < 700)  # and after
    assert len(old_side) < 300
    assert len(new_side) < 300


def test_one_text_ending_where_the_other_goes_on_shows_the_added_tail() -> None:
    recorded = "x" * 400
    diff = field_diff(recorded, recorded + " and more")
    assert diff[0] == "value: differs from character 401 (recorded 400 chars, now 409):"
    old_side, new_side = shown(diff)
    assert old_side.endswith('x"')  # nothing cut after
    assert new_side.endswith(' and more"')


def test_escapes_stay_visible_and_short_values_keep_the_one_line_form() -> None:
    diff = field_diff("a" * 350 + "\x1b[2J", "a" * 350 + "\x1b[0m")
    old_side, new_side = shown(diff)
    assert "\\u001b[2J" in old_side
    assert "\\u001b[0m" in new_side
    assert "\x1b" not in "".join(diff)
    assert field_diff({"p": "short"}, {"p": "other"}) == ['p: recorded "short", now "other"']
