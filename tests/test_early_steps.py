"""Which steps of a streaming plan may start before the whole plan is approved
(`engine.session._early.may_start_early`): only those that can change nothing and ask
nobody — a read-only tool, an agent whose every tool is read-only — never a side effect, a
gated step, an agent that may call a side-effect tool, or a fallback in words (any tool).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from capabilities import default_registry
from engine.model import Step
from engine.session._early import may_start_early

GRANTS = {"fs": {"root": ".", "read": True, "write": ["out/**"]}}
READ = {"tool": "fs.read", "params": {"path": "a.txt"}}


@pytest.mark.parametrize(
    ("step", "early"),
    [
        (READ, True),
        ({"tool": "fs.list", "params": {"path": "."}, "when": "${{ true }}"}, True),
        ({**READ, "confirm": "always"}, False),
        ({"tool": "fs.write", "params": {"path": "out/x", "content": "x"}}, False),
        ({"agent": {"goal": "look", "tools": ["fs.read", "fs.list"]}}, True),
        ({"agent": {"goal": "look", "tools": ["fs.read", "fs.write"]}}, False),
        ({**READ, "fallback": "read the cached copy instead"}, False),
        (
            {**READ, "fallback": {"tool": "fs.write", "params": {"path": "out/x", "content": ""}}},
            False,
        ),
        ({**READ, "fallback": {"tool": "fs.list", "params": {"path": "."}}}, True),
        ({"tool": "nope.read", "params": {}}, False),  # unknown: never assumed harmless
    ],
)
def test_only_what_can_change_nothing_starts_early(
    tmp_path: Path, step: dict[str, Any], early: bool
) -> None:
    registry = default_registry().bind(GRANTS, tmp_path)
    assert may_start_early(Step.model_validate({"id": "s", **step}), registry) is early
