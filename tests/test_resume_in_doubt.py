"""A call in doubt decided without a terminal (the README's "Durable runs"):
`planloom resume ID --redo STEP` makes STEP's call in doubt again (`by: --redo`), `--skip
STEP` ends the step failed without it (its fallback and `can_fail` apply); a name that is
not in doubt is exit 2 naming the steps that are; changing only `idempotent`, `confirm`,
`timeout` or `retry` of a step is not a change of the run, so marking the step in doubt
`idempotent: true` makes a resume run it again unasked.

Each test runs the real `planloom` with no terminal (stdin is not a tty): a step runs
`sh w.sh NAME`, which appends NAME to `ledger.txt` and, the first time, then sleeps; the
run is killed with SIGKILL once the line is on the ledger, so the step's call is in doubt.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _durable_attacks import FIRST_CALL_WAITS, Lab, lab

pytestmark = pytest.mark.slow

HEAD = """\
version: 1
name: doubt
capabilities:
  shell: {allow: [sh, sleep], unsafe_args: [sh]}
steps:
"""

AFTER = """\
  - id: after
    tool: shell.run
    confirm: never
    params: {argv: [sh, -c, "echo after >> ledger.txt"]}
    depends_on: [w1]
"""


def _killed_in_w1(it: Lab, w1: str) -> str:
    """Run the recipe (`w1`, the step in doubt, then `after`), kill -9 it once w1's line is
    on the ledger; the run's id."""
    it.write("w.sh", FIRST_CALL_WAITS)
    it.recipe(HEAD + w1 + AFTER)
    run = it.start("run", "r.yaml", "--yes")
    it.stop_when(run, lambda: it.ledger() == ["w1"], "w1's append")
    return it.run_id()


def _json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert "Traceback" not in proc.stderr, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


W1 = """\
  - id: w1
    tool: shell.run
    timeout: 600
    params: {argv: [sh, w.sh, w1]}
"""


def test_redo_makes_the_call_in_doubt_again_recorded_as_the_persons_decision(
    tmp_path: Path,
) -> None:
    """`--yes` is denied the call in doubt, and says how to go on: `--redo w1` / `--skip
    w1`. `--redo w1` (with `--yes` for the ordinary gates) makes it again: the line is on
    the ledger twice, the run succeeds, and the decision is `by: --redo`, in `--json` and
    in the journal."""
    with lab(tmp_path) as it:
        run_id = _killed_in_w1(it, W1)
        denied = _json(it.cli("resume", run_id, "--yes", "--json"))
        error = denied["steps"]["w1"]["error"]
        assert denied["steps"]["w1"]["status"] == "denied", denied
        assert "may already have happened" in error, error
        assert "--redo w1" in error, error
        assert "--skip w1" in error, error
        assert it.ledger() == ["w1"]

        redone = it.cli("resume", run_id, "--redo", "w1", "--yes", "--json")
        result = _json(redone)
        assert redone.returncode == 0, redone.stderr
        assert {k: v["status"] for k, v in result["steps"].items()} == {
            "w1": "succeeded",
            "after": "succeeded",
        }
        assert it.ledger() == ["w1", "w1", "after"]
        decided = [(d["step_id"], d["approved"], d["by"]) for d in result["approvals"]]
        assert decided == [("w1", True, "--redo")], decided
        journaled = [
            (a["step"], a["approved"], a["by"], a["in_doubt"]) for a in it.rows("approval")
        ]
        assert journaled[-1] == ("w1", True, "--redo", True), journaled


def test_skip_ends_the_step_failed_without_the_call(tmp_path: Path) -> None:
    """`--skip w1`: the call is not made again, the step ends `failed` saying why, and
    `after`, which needs it, does not run (`on_failure: stop`); the run fails (exit 1)."""
    with lab(tmp_path) as it:
        run_id = _killed_in_w1(it, W1)
        skipped = it.cli("resume", run_id, "--skip", "w1", "--json")
        result = _json(skipped)
        assert skipped.returncode == 1, skipped.stderr
        w1 = result["steps"]["w1"]
        assert w1["status"] == "failed", w1
        assert "skipped by --skip" in w1["error"], w1
        assert result["steps"]["after"]["status"] == "pending", result
        assert it.ledger() == ["w1"]
        decided = [(d["step_id"], d["approved"], d["by"]) for d in result["approvals"]]
        assert decided == [("w1", False, "--skip")], decided


def test_skip_runs_the_fallback_of_the_step_in_doubt(tmp_path: Path) -> None:
    """`--skip w1` on a step with a fallback (another `shell.run` call): the fallback runs,
    gated as usual (`--yes`), and is not taken for the call in doubt; the step ends
    `fallback` and `after` runs."""
    with lab(tmp_path) as it:
        plan_b = '{tool: shell.run, params: {argv: [sh, -c, "echo plan-b >> ledger.txt"]}}'
        fallback = f"    fallback: {plan_b}\n"
        run_id = _killed_in_w1(it, W1 + fallback)
        skipped = it.cli("resume", run_id, "--skip", "w1", "--yes", "--json")
        result = _json(skipped)
        assert skipped.returncode == 0, skipped.stderr
        assert result["steps"]["w1"]["status"] == "fallback", result["steps"]["w1"]
        assert "skipped by --skip" in result["steps"]["w1"]["error"]
        assert it.ledger() == ["w1", "plan-b", "after"]
        decided = [(d["step_id"], d["approved"], d["by"]) for d in result["approvals"]]
        assert decided == [("w1", False, "--skip"), ("w1", True, "--yes")], decided


def test_skip_does_not_let_a_fallback_make_the_very_call_in_doubt(tmp_path: Path) -> None:
    """A fallback that is the call in doubt itself (same action, same params): `--skip w1
    --yes` makes it neither as the primary nor as the fallback; the step ends `failed`."""
    with lab(tmp_path) as it:
        run_id = _killed_in_w1(
            it, W1 + "    fallback: {tool: shell.run, params: {argv: [sh, w.sh, w1]}}\n"
        )
        skipped = it.cli("resume", run_id, "--skip", "w1", "--yes", "--json")
        result = _json(skipped)
        assert skipped.returncode == 1, skipped.stderr
        w1 = result["steps"]["w1"]
        assert w1["status"] == "failed", w1
        assert "fallback failed" in w1["error"], w1
        assert it.ledger() == ["w1"]


def test_a_name_not_in_doubt_is_exit_2_naming_the_steps_in_doubt_and_nothing_runs(
    tmp_path: Path,
) -> None:
    """`--redo after` (a step with no call in doubt), `--skip nope` (no such step) and
    `--redo w1 --skip w1` (both) are refused with exit 2 before anything runs; the first two
    name `w1`, the step in doubt."""
    with lab(tmp_path) as it:
        run_id = _killed_in_w1(it, W1)
        starts = len(it.rows("start"))
        for flags, said in [
            (("--redo", "after"), "step 'after' has no call in doubt"),
            (("--skip", "nope"), "step 'nope' has no call in doubt"),
            (("--redo", "w1", "--skip", "w1"), "both name step 'w1'"),
        ]:
            refused = it.cli("resume", run_id, *flags, "--yes")
            assert refused.returncode == 2, (flags, refused.stderr)
            assert said in refused.stderr, (flags, refused.stderr)
            if "both" not in said:
                assert "the steps with a call in doubt are: w1" in refused.stderr, refused.stderr
        assert it.ledger() == ["w1"]
        assert len(it.rows("start")) == starts  # not claimed: nothing ran


def test_redo_of_a_run_with_nothing_in_doubt_says_none_is(tmp_path: Path) -> None:
    """A run that failed with no call in flight: `--redo w1` is exit 2, saying no call of
    the run is in doubt."""
    with lab(tmp_path) as it:
        it.recipe(
            HEAD + "  - id: w1\n    tool: shell.run\n    params: {argv: [sh, -c, 'exit 3']}\n"
        )
        assert it.cli("run", "r.yaml", "--yes").returncode == 1
        refused = it.cli("resume", it.run_id(), "--redo", "w1", "--yes")
        assert refused.returncode == 2, refused.stderr
        assert "no call of this run is in doubt" in refused.stderr, refused.stderr


def test_marking_the_step_in_doubt_idempotent_runs_it_again_unasked(tmp_path: Path) -> None:
    """After the kill, the recipe's `w1` is changed in its params: refused, naming it. Then
    only in `idempotent`, `confirm`, `timeout` and `retry`: that is the same run, and the
    resume (no `--yes`, no terminal) makes w1's call again unasked: no gate, the line twice.
    """
    with lab(tmp_path) as it:
        w1 = W1.replace("    timeout: 600\n", "    timeout: 600\n    confirm: always\n")
        run_id = _killed_in_w1(it, w1)
        how = (
            "    idempotent: true\n"
            "    confirm: never\n"
            "    timeout: 30\n"
            "    retry: {attempts: 2, backoff: fixed, initial: 0}\n"
        )
        it.recipe(HEAD + W1.replace("[sh, w.sh, w1]", "[sh, w.sh, w1, x]") + AFTER)
        refused = it.cli("resume", run_id, "--json")
        assert refused.returncode == 2, refused.stderr
        assert "step 'w1' changed" in refused.stderr, refused.stderr

        it.recipe(HEAD + W1.replace("    timeout: 600\n", how) + AFTER)
        resumed = it.cli("resume", run_id, "--json")
        result = _json(resumed)
        assert resumed.returncode == 0, resumed.stderr
        assert result["steps"]["w1"]["status"] == "succeeded", result["steps"]["w1"]
        assert it.ledger() == ["w1", "w1", "after"]
        assert result["approvals"] == [], result["approvals"]
