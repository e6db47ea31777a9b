"""`.ci/run` fails when any part of the README's test command fails (lint, format, types,
tests), not only its last part, and when the floors fail; it passes when all pass. Run
against stand-ins for python3, the venv's tools and the floors script."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent

VENV_MAKER = """#!/bin/sh
# python3 -m venv .venv: a venv whose tools exit as FAILING says
mkdir -p .venv/bin
for tool in pip ruff mypy python; do
    code=0
    case " $FAILING " in *" $tool "*) code=1 ;; esac
    printf '#!/bin/sh\\necho "%s $*" >> ran.log\\nexit %s\\n' "$tool" "$code" > ".venv/bin/$tool"
    chmod +x ".venv/bin/$tool"
done
"""


def _ci(tmp_path: Path, failing: str = "", floors: int = 0) -> tuple[int, str]:
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    (tmp_path / ".ci" / "floors").write_text(
        f'#!/bin/sh\necho "floors $*" >> ran.log\nexit {floors}\n'
    )
    (tmp_path / ".ci" / "floors").chmod(0o755)
    bin_dir = tmp_path / "stand-ins"
    bin_dir.mkdir()
    for name, text in {
        "python3": VENV_MAKER,
        "chromium": "#!/bin/sh\n",
        "node": "#!/bin/sh\n",
    }.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    done = subprocess.run(
        ["bash", str(tmp_path / ".ci" / "run")],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "FAILING": failing},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    ran = tmp_path / "ran.log"
    return done.returncode, ran.read_text() if ran.exists() else ""


def test_ci_passes_when_every_part_passes(tmp_path: Path) -> None:
    code, ran = _ci(tmp_path)
    assert code == 0
    for part in ("pip install", "ruff check", "ruff format --check", "mypy", "python -m pytest"):
        assert part in ran
    assert ran.splitlines()[-1] == "floors "  # the tests at the floors, after the rest


@pytest.mark.parametrize("tool", ["pip", "ruff", "mypy", "python"])
def test_ci_fails_when_any_part_of_the_readme_command_fails(tmp_path: Path, tool: str) -> None:
    code, ran = _ci(tmp_path, failing=tool)
    assert code != 0, ran
    assert "floors \n" not in ran  # it stopped there


def test_ci_fails_when_the_floors_fail(tmp_path: Path) -> None:
    code, _ = _ci(tmp_path, floors=1)
    assert code != 0
