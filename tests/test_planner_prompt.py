"""The planner's system prompt (`planners._prompt`): compact, and saying what a model would
otherwise learn only from refusals: what the grants allow, what each tool gives, and an
example plan of granted tools."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from capabilities import default_registry
from engine.diagnostics import Diagnostic
from planners._prompt import problem_lines, system_prompt

GRANTS: dict[str, Any] = {
    "fs": {"root": ".", "write": ["out/**", "notes/*.md"]},
    "shell": {"allow": ["wc", "grep"]},
    "http": {"allow": ["api.example.com"]},
}


def _prompt(grants: dict[str, Any], tmp_path: Path) -> str:
    registry = default_registry().bind(grants, tmp_path)
    return system_prompt(registry, grants)


def test_the_prompt_states_the_grant_facts_and_each_tools_output(tmp_path: Path) -> None:
    text = _prompt(GRANTS, tmp_path)
    assert "may write only out/**, notes/*.md" in text
    assert "programs wc, grep only" in text
    assert "hosts api.example.com only; https only" in text
    lines = {line.split("(", 1)[0]: line for line in text.splitlines() if "(" in line}
    assert lines["fs.read"].startswith("fs.read(path) -> content, size, truncated: ")
    assert lines["fs.write"].startswith(
        "fs.write(path, content, create_dirs?: boolean) -> path, bytes_written [changes things]"
    )
    assert "shell.run(argv: array" in lines["shell.run"]
    assert "llm.complete" not in text  # not granted


def test_the_example_is_a_goal_and_its_plan_of_granted_tools_writing_where_it_may(
    tmp_path: Path,
) -> None:
    text = _prompt(GRANTS, tmp_path)
    goal = text.split("Example goal: ", 1)[1].split("\n", 1)[0]
    example = json.loads(text.split("Its plan: ", 1)[1].split("\n", 1)[0])
    tools = [step["tool"] for step in example["steps"]]
    assert tools == ["fs.read", "fs.write"]  # a write that replaces, not fs.append
    assert all(tool in text.split("Example", 1)[0] for tool in tools)
    written = [s["params"]["path"] for s in example["steps"] if s["tool"].startswith("fs.")]
    assert written == ["example/in.txt", "out/example-out.txt"]  # where the grant lets it
    assert all(path in goal for path in written)  # the goal names what its plan uses
    assert re.search(r"\$\{\{ steps\.first\.output\.content \}\}", json.dumps(example))


def test_nothing_granted_says_so(tmp_path: Path) -> None:
    text = _prompt({}, tmp_path)
    assert "(none granted)" in text
    assert "Granted:" not in text


def test_the_prompt_is_a_fraction_of_the_json_catalogue_it_replaces(tmp_path: Path) -> None:
    """The tools were sent as their whole params schemas in JSON (4,800 characters for the
    main job's grant): a line each now, with more said (outputs, grant facts)."""
    grants = {"fs": {"root": ".", "read": True, "write": ["out/**"]}, "shell": {"allow": ["wc"]}}
    registry = default_registry().bind(grants, tmp_path)
    catalogue = json.dumps(
        [
            {"name": e.name, "description": e.description, "params": e.params}
            for e in registry.catalogue(grants)
        ]
    )
    assert len(system_prompt(registry, grants)) < 0.7 * len(catalogue)


def test_problems_name_their_step_and_a_tool_not_granted_names_the_granted() -> None:
    text = (
        "version: 1\nname: plan\ngoal: g\nsteps:\n"
        "- id: a\n  tool: fs.read\n  params: {path: x}\n"
        "- id: b\n  tool: shell.run\n  params: {argv: [ls]}\n"
        "outputs:\n  r: ${{ steps.c.output }}\n"
    )
    diagnostics = [
        Diagnostic(
            file="p", line=9, column=9, rule="not-granted", message="'shell.run' no", hint="add it"
        ),
        Diagnostic(file="p", line=6, column=3, rule="bad-params", message="bad", hint=None),
        Diagnostic(file="p", line=12, column=6, rule="unknown-step", message="no c", hint="h"),
        Diagnostic(file="p", line=1, column=1, rule="x", message="whole", hint=None),
    ]
    assert problem_lines(diagnostics, text, ["fs.read", "fs.write"]).splitlines() == [
        "- step 2 (id \"b\"): 'shell.run' no (not-granted); "
        "the granted tools are fs.read, fs.write",
        '- step 1 (id "a"): bad (bad-params)',
        "- the plan: no c (unknown-step); h",
        "- the plan: whole (x)",
    ]
    assert problem_lines(diagnostics[3:], None) == "- the plan: whole (x)"
