"""Issue 10 items 6 and 5 (templates): templates are bounded in size, time and depth.

`${{ ('a' * 6000000000)[:5] }}` took 5.9 GB and 14 s, ignoring a 3 s timeout; seventy
nested parentheses gave a RecursionError traceback at exit 1. Now a size bomb is refused
before it allocates, a render runs under a deadline, and too deep a template is a located
validation error (exit 2).

Every run here is in a subprocess with a 20 s timeout and a 1.5 GiB address-space limit
(`RLIMIT_AS`): a bomb that got through dies or hangs, and the test fails.
"""

from __future__ import annotations

import json
import resource
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from _procs import planloom

HANG = 20  # seconds
ADDRESS_SPACE = 1536 << 20

BOMBS = {
    "repeat": "('a' * 6000000000)[:5]",
    "power": "2 ** 100000000",
    "percent": "'%0999999999d' % 1",
    "format": "'{:>999999999}'.format(1)",
    "center": "'x'.center(6000000000)[:5]",
    "replace": "('a' * 1000000).replace('a', 'a' * 100000)[:5]",
}
LOOPS = (
    "${% for a in range(100000) %}${% for b in range(100000) %}${% for c in range(100000) %}"
    "${{ c }}${% endfor %}${% endfor %}${% endfor %}"
)
LIMIT_WORDS = ("a template may build at most", "a template may compute at most", "time limit")


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _planloom(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    try:
        proc = planloom(*args, cwd=tmp_path, timeout=HANG, preexec_fn=_limited)
    except subprocess.TimeoutExpired:
        pytest.fail(f"planloom {' '.join(args)} still running after {HANG} s")
    return proc, time.monotonic() - start


def _write(tmp_path: Path, text: str) -> None:
    (tmp_path / "data.txt").write_text("data\n")
    (tmp_path / "recipe.yaml").write_text(textwrap.dedent(text))


def _yaml_string(template: str) -> str:
    return json.dumps(template)  # a JSON string is a YAML double-quoted string


def _recipe_text(template: str, *, field: str) -> str:
    """A one-step recipe with `template` in the step's `params.path` or its `when`."""
    quoted = _yaml_string(template)
    when = f"\n            when: {quoted}" if field == "when" else ""
    path = quoted if field == "params" else "data.txt"
    return f"""\
        version: 1
        name: bomb
        capabilities:
          fs: {{root: .}}
        limits: {{max_duration: 10}}
        steps:
          - id: read
            tool: fs.read
            timeout: 3{when}
            params: {{path: {path}}}
        """


def _params(template: str) -> str:
    return _recipe_text(template, field="params")


def _when(template: str) -> str:
    return _recipe_text(template, field="when")


def _outputs(template: str) -> str:
    return f"""\
        version: 1
        name: bomb
        capabilities:
          fs: {{root: .}}
        limits: {{max_duration: 10}}
        steps:
          - id: read
            tool: fs.read
            timeout: 3
            params: {{path: data.txt}}
        outputs:
          bomb: {_yaml_string(template)}
        """


def _assert_limit_error(
    proc: subprocess.CompletedProcess[str], elapsed: float, error: str | None
) -> None:
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert error is not None
    assert error.startswith(("template ", "output 'bomb': template ")), error
    assert any(words in error for words in LIMIT_WORDS), error
    assert "MemoryError" not in error
    assert elapsed < HANG


CASES = [
    *[pytest.param(_params, f"${{{{ {b} }}}}", id=f"params-{n}") for n, b in BOMBS.items()],
    pytest.param(_params, LOOPS, id="params-nested-loops"),
    *[pytest.param(_when, f"${{{{ {b} }}}}", id=f"when-{n}") for n, b in BOMBS.items()],
    pytest.param(_when, "${{ range(100000)|map('string')|join|length > 0 }}", id="when-ok"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("shape", "template"), CASES)
def test_template_bomb_in_a_step_fails_the_step_quickly(
    tmp_path: Path, shape: Any, template: str
) -> None:
    _write(tmp_path, shape(template))

    proc, elapsed = _planloom(tmp_path, "run", "recipe.yaml", "--json")

    if template.endswith("> 0 }}"):  # a big but bounded template still works
        assert proc.returncode == 0, proc.stderr[-2000:]
        return
    step = json.loads(proc.stdout)["steps"]["read"]
    assert step["status"] == "failed"
    _assert_limit_error(proc, elapsed, step["error"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "template",
    [pytest.param(f"${{{{ {b} }}}}", id=n) for n, b in BOMBS.items()]
    + [pytest.param(LOOPS, id="nested-loops")],
)
def test_template_bomb_in_outputs_fails_the_run_quickly(tmp_path: Path, template: str) -> None:
    _write(tmp_path, _outputs(template))

    proc, elapsed = _planloom(tmp_path, "run", "recipe.yaml", "--json")

    result = json.loads(proc.stdout)
    assert result["steps"]["read"]["status"] == "succeeded"
    assert result["outputs"]["bomb"] is None
    errors = [e for e in result["errors"] if e.startswith("output 'bomb'")]
    _assert_limit_error(proc, elapsed, errors[0] if errors else None)


# -- depth (item 5, templates) ----------------------------------------------------------

DEEP = {
    "parentheses": "${{ " + "(" * 70 + "1" + ")" * 70 + " }}",
    "lists": "${{ " + "[" * 70 + "1" + "]" * 70 + " }}",
    "not-chain": "${{ " + "not " * 600 + "true }}",
    "plus-chain": "${{ " + " + ".join(["1"] * 600) + " }}",
    "filter-chain": "${{ 'a'" + " | upper" * 600 + " }}",
}


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("template", [pytest.param(t, id=n) for n, t in DEEP.items()])
def test_too_deep_template_is_a_located_validation_error(
    tmp_path: Path, command: str, template: str
) -> None:
    _write(tmp_path, _params(template))

    proc, _ = _planloom(tmp_path, command, "recipe.yaml")

    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "RecursionError" not in proc.stderr
    assert "recipe.yaml:10:" in proc.stderr
    assert "error[template-syntax]" in proc.stderr
    assert "deep" in proc.stderr


def test_nesting_within_the_limit_still_works(tmp_path: Path) -> None:
    _write(tmp_path, _params("${{ " + "(" * 20 + "'data.txt'" + ")" * 20 + " }}"))

    proc, _ = _planloom(tmp_path, "run", "recipe.yaml", "--json")

    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["steps"]["read"]["output"]["content"] == "data\n"
