"""The planloom pytest plugin, registered through the `pytest11` entry point.

It gives each test a cassette: the `planloom_cassette` fixture, configured by the
`planloom` marker and the `--planloom-record-mode` option (default `none`, so a test run
never reaches a model or makes a side effect unless asked to record).

Example:
    ```python
    from engine.testing import replay

    @pytest.mark.planloom  # cassette: cassettes/<test module>/<test name>.yaml
    def test_release_notes(planloom_cassette):
        result = replay(planloom_cassette, "recipes/release-notes.yaml")
        assert result.steps["draft"].status == "succeeded"
    ```

    Record (or re-record) with `pytest --planloom-record-mode=once` (missing cassettes),
    `new_episodes` (what they lack) or `all` (everything again).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from engine.testing import CassetteRef

# As engine.recording.RECORD_MODES; not imported, so loading the plugin stays cheap for
# test runs that never use planloom.
RECORD_MODES = ("none", "once", "new_episodes", "all")

__all__ = ["planloom_cassette"]

_MARKER = (
    "planloom(cassette=None, record_mode=None, live_tools=False): the test's planloom "
    "cassette: a path relative to the test file (default cassettes/<module>/<test>.yaml), "
    "a record mode that wins over --planloom-record-mode, and whether read-only tools run "
    "live in a replay"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("planloom")
    group.addoption(
        "--planloom-record-mode",
        choices=RECORD_MODES,
        default="none",
        help="planloom cassettes: none (replay only, the default), once (record missing "
        "cassettes), new_episodes (record what cassettes lack), all (record everything again)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER)


@pytest.fixture
def planloom_cassette(request: pytest.FixtureRequest) -> CassetteRef:
    """This test's cassette: where it is, and whether to replay or record it."""
    marker = request.node.get_closest_marker("planloom")
    options = dict(marker.kwargs) if marker is not None else {}
    unknown = set(options) - {"cassette", "record_mode", "live_tools"}
    if unknown:
        raise pytest.UsageError(
            f"@pytest.mark.planloom: unknown argument(s) {', '.join(sorted(unknown))}; "
            "use cassette=, record_mode=, live_tools="
        )
    folder = Path(str(request.node.path)).parent
    name = options.get("cassette")
    if name is None:
        module = Path(str(request.node.path)).stem
        test = re.sub(r"[^\w.-]+", "_", request.node.name).strip("_")
        path = folder / "cassettes" / module / f"{test}.yaml"
    else:
        path = Path(os.path.normpath(folder / str(name)))
    from engine.testing import CassetteRef

    mode = options.get("record_mode") or request.config.getoption("planloom_record_mode")
    if mode not in RECORD_MODES:
        raise pytest.UsageError(
            f"@pytest.mark.planloom: record_mode {mode!r} is not one of {', '.join(RECORD_MODES)}"
        )
    return CassetteRef(path=path, mode=mode, live_tools=bool(options.get("live_tools", False)))
