"""A command killed at the output cap is not a success.

`yes` killed at `max_output` ended `succeeded` with exit -9. With `check` (the default) the
step now fails saying the output passed `max_output` and the program was killed; with
`check: false` the result comes back with `truncated: true` and the exit code, as for any
non-zero exit. Through the `planloom` command.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path
from typing import Any

from _procs import run_json

RECIPE = """\
    version: 1
    name: endless-output
    capabilities:
      shell: {allow: [yes], cwd: ., max_output: 1000}
    steps:
      - id: endless
        tool: shell.run
        params: {argv: ["yes"], check: CHECK}
    """


def _run(tmp_path: Path, check: bool) -> tuple[int, dict[str, Any]]:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(textwrap.dedent(RECIPE).replace("CHECK", str(check).lower()))
    start = time.monotonic()
    proc, result = run_json(recipe, tmp_path)
    assert time.monotonic() - start < 30
    return proc.returncode, result


def test_output_past_the_cap_fails_the_step(tmp_path: Path) -> None:
    code, result = _run(tmp_path, check=True)
    step = result["steps"]["endless"]
    assert (result["status"], step["status"]) == ("failed", "failed"), step
    assert code != 0
    assert "'yes' passed max_output (1000 bytes)" in step["error"]
    assert "program killed" in step["error"]
    assert "raise `max_output`" in step["error"]
    assert "check: false" in step["error"]


def test_check_false_returns_the_truncated_result(tmp_path: Path) -> None:
    code, result = _run(tmp_path, check=False)
    step = result["steps"]["endless"]
    assert (code, result["status"], step["status"]) == (0, "succeeded", "succeeded"), step
    output = step["output"]
    assert output["truncated"] is True
    assert output["exit_code"] != 0
    assert len(output["stdout"]) == 1000
    assert output["stdout"].startswith("y\ny\n")
