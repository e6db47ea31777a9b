"""Capability families are found through the `planloom.capabilities` entry-point group:
the built-in ones and a separate package's alike (ARCHITECTURE.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from engine.app.registry import GROUP, build_registry
from engine.errors import ConfigurationError

PLANLOOM = str(Path(sys.executable).parent / "planloom")
BUILT_IN = {"fs", "http", "human", "llm", "shell"}

FAMILY = """
from pydantic import BaseModel, ConfigDict

from engine.capability import Action, CallContext, Family, Registry


class EchoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str


async def echo(params: EchoParams, ctx: CallContext) -> dict[str, str]:
    return {"echo": params.text.upper()}


def register(registry: Registry) -> None:
    registry.add_family(Family("demo", "a family from another package"))
    registry.add(
        Action("demo.echo", "Echo text, upper-cased.", EchoParams, echo, side_effects=False)
    )
"""


def _install(site: Path, entry: str = "demo = planloom_demo_family:register") -> None:
    """A package and its dist-info on a path entry: what pip would leave, minus pip."""
    package = site / "planloom_demo_family"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(FAMILY, encoding="utf-8")
    info = site / "planloom_demo_family-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: planloom-demo-family\nVersion: 1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{entry}\n", encoding="utf-8")


def _planloom(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(
        [PLANLOOM, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_built_in_families_are_entry_points() -> None:
    names = {point.name for point in entry_points(group=GROUP)}
    assert names >= BUILT_IN
    assert set(build_registry().families) >= BUILT_IN


@pytest.mark.slow
def test_a_family_from_another_package_is_listed_and_runs(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _install(site)
    listed = _planloom(site, "tools", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    names = {row["name"] for row in json.loads(listed.stdout)}
    assert "demo.echo" in names
    assert {"fs.read", "shell.run", "http.request"} <= names  # the built-ins, same path

    recipe = tmp_path / "echo.yaml"
    recipe.write_text(
        textwrap.dedent(
            """\
            version: 1
            name: echo
            capabilities: {demo: {}}
            steps:
              - id: say
                tool: demo.echo
                params: {text: hello}
            """
        ),
        encoding="utf-8",
    )
    ran = _planloom(site, "run", str(recipe), "--json", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["steps"]["say"]["output"] == {"echo": "HELLO"}

    # Without the package on the path the family is not there, and the recipe says so.
    bare = _planloom(tmp_path / "empty", "validate", str(recipe), cwd=tmp_path)
    assert bare.returncode == 2
    assert "demo" in bare.stderr


def test_a_broken_entry_point_is_a_configuration_error_naming_it(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _install(site, entry="demo = planloom_demo_family.missing:register")
    done = _planloom(site, "tools", cwd=tmp_path)
    assert done.returncode == 2
    assert "capability family 'demo' (planloom-demo-family 1.0" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_register_that_fails_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    _install(site, entry="demo = planloom_demo_family:EchoParams")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(ConfigurationError, match=r"capability family 'demo'.*register\(\) failed"):
        build_registry()
