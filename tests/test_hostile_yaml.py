"""Hostile documents through the real `planloom` command: alias bombs, deep nesting, and
names that collide with dict methods.

Issue 10, items 4, 5 and 10. Every YAML file a user hands planloom (recipe, `--policy`,
`--capabilities`, a cassette) goes through one reader that caps nesting depth, node count
and alias expansion while it composes; a model's JSON plan is capped before it is parsed.
Over a cap: a located `FILE:LINE:COL: error[rule]` and exit 2, in bounded memory and time,
never a traceback. Step ids and input names like `get`, `items`, `keys` are the step and
the input in templates, not the dict methods.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from _procs import PLANLOOM, Peaked, env, peaked, planloom

from engine.testing import ChatReply, FakeOpenAIServer, ScriptedModel

MAX_DEPTH = 100  # the caps the errors name (engine.limits)
MAX_ALIAS_NODES = 100_000
MEMORY_CAP = 1 << 30  # RLIMIT_AS of the child: an alias bomb used to take 17.6 GB
TIME_CAP = 60.0  # seconds; the bomb used to run for more than 120 s

# The 417-byte "billion laughs" of the audit, nine levels of nine: 9**9 nodes expanded.
BOMB = "version: 1\n" + "".join(
    f"{name}: &{name} [{', '.join([prev] * 9)}]\n"
    for name, prev in zip(
        "abcdefghi", ["x", "*a", "*b", "*c", "*d", "*e", "*f", "*g", "*h"], strict=True
    )
)


def bounded(*args: str | Path, cwd: Path, memory: int = MEMORY_CAP) -> Peaked:
    """`planloom ARGS` with its address space capped at `memory`, killed after TIME_CAP;
    with its own peak RSS (`peaked`: not the peak of this test process it was forked from)."""
    done = peaked(
        [PLANLOOM, *map(str, args)], cwd=cwd, environ=env(), address_space=memory, timeout=TIME_CAP
    )
    assert not done.timed_out, f"planloom {args} ran for more than {TIME_CAP:g} s"
    return done


def no_traceback(text: str) -> None:
    assert "Traceback" not in text, text
    assert "RecursionError" not in text, text
    assert "MemoryError" not in text, text


def located(stderr: str, file: str, rule: str) -> re.Match[str]:
    match = re.search(rf"{re.escape(file)}:(\d+):(\d+): error\[{rule}\]: (.+)", stderr)
    assert match, stderr
    return match


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A folder with a one-step read-only recipe to run policies against."""
    (tmp_path / "a.txt").write_text("apples", encoding="utf-8")
    (tmp_path / "ok.yaml").write_text(
        "version: 1\nname: ok\ncapabilities: {fs: {}}\n"
        "steps:\n  - {id: read, tool: fs.read, params: {path: a.txt}}\n",
        encoding="utf-8",
    )
    return tmp_path


def entry(kind: str, file: str) -> list[str]:
    """The command that reads `file` as a recipe, a policy, a capabilities file or a
    cassette (the model endpoint is never reached: the file is refused first)."""
    return {
        "recipe": ["validate", file],
        "policy": ["run", "ok.yaml", "--policy", file, "--yes"],
        "capabilities": [
            "plan",
            "read a.txt",
            "--capabilities",
            file,
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
        ],
        "cassette": ["replay", file],
    }[kind]


ENTRIES = ["recipe", "policy", "capabilities", "cassette"]


# -- item 4: alias bombs ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ENTRIES)
def test_an_alias_bomb_is_refused_in_bounded_memory_and_time(kind: str, workspace: Path) -> None:
    assert len(BOMB.encode()) < 420
    (workspace / "bomb.yaml").write_text(BOMB, encoding="utf-8")

    done = bounded(*entry(kind, "bomb.yaml"), cwd=workspace)

    no_traceback(done.stderr + done.stdout)
    assert done.returncode == 2, done.stderr
    line, _, message = located(done.stderr, "bomb.yaml", "yaml-too-large").groups()
    # refused at the alias that passes the cap, before the nine levels are all read
    assert 2 <= int(line) <= 10
    assert f"{MAX_ALIAS_NODES:,}" in message
    assert "use fewer aliases" in done.stderr  # the hint says how to fix it
    assert done.peak_mib < 300, done.peak_mib
    assert done.seconds < 20, done.seconds


def test_anchors_and_aliases_for_shared_values_still_work(workspace: Path) -> None:
    (workspace / "b.txt").write_text("bananas", encoding="utf-8")
    (workspace / "shared.yaml").write_text(
        "version: 1\nname: shared\ncapabilities: {fs: {write: [out.txt]}}\nsteps:\n"
        "  - id: read_a\n    tool: fs.read\n    params: {path: a.txt}\n"
        "    retry: &retry {attempts: 2, backoff: fixed, initial: 0.1}\n"
        "  - {id: read_b, tool: fs.read, params: {path: b.txt}, retry: *retry}\n"
        "  - id: save\n    tool: fs.write\n    retry: *retry\n    params:\n"
        "      path: out.txt\n"
        '      content: "${{ steps.read_a.output.content }}+${{ steps.read_b.output.content }}"\n',
        encoding="utf-8",
    )
    done = planloom("run", "shared.yaml", "--yes", "--json", cwd=workspace)

    no_traceback(done.stderr)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["steps"]["save"]["status"] == "succeeded"
    assert (workspace / "out.txt").read_text(encoding="utf-8") == "apples+bananas"


def test_an_alias_inside_its_own_anchor_is_a_syntax_error(workspace: Path) -> None:
    (workspace / "loop.yaml").write_text(
        "version: 1\nname: loop\nsteps: &s [{id: a, tool: fs.read, params: {path: *s}}]\n",
        encoding="utf-8",
    )
    done = bounded("validate", "loop.yaml", cwd=workspace)
    no_traceback(done.stderr)
    assert done.returncode == 2, done.stderr
    assert "loop.yaml:3:50: error[yaml-syntax]: alias '*s' is inside its own anchor" in (
        done.stderr
    )


# -- item 5: deep nesting ----------------------------------------------------------------------

DEPTH = 500  # the audit's figure; every file kind used to end in a RecursionError


def deep_flow_lists(depth: int) -> str:
    return "version: 1\nname: deep\nsteps: " + "[" * depth + "]" * depth + "\n"


def deep_flow_maps(depth: int) -> str:
    return "version: 1\nname: deep\nsteps: " + "{a: " * depth + "1" + "}" * depth + "\n"


def deep_block(depth: int) -> str:
    lines = ["version: 1", "name: deep", "steps:"]
    lines += [" " * (2 * level) + "- a:" for level in range(1, depth)]
    return "\n".join(lines) + "\n"


SHAPES = {"flow lists": deep_flow_lists, "flow maps": deep_flow_maps, "block": deep_block}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_deep_nesting_in_a_recipe_is_a_located_error(shape: str, workspace: Path) -> None:
    (workspace / "deep.yaml").write_text(SHAPES[shape](DEPTH), encoding="utf-8")
    done = bounded("validate", "deep.yaml", cwd=workspace)
    no_traceback(done.stderr)
    assert done.returncode == 2, done.stderr
    line, _, message = located(done.stderr, "deep.yaml", "too-deep").groups()
    assert f"more than {MAX_DEPTH} levels" in message
    assert int(line) == (3 if shape != "block" else 3 + MAX_DEPTH // 2)


@pytest.mark.parametrize("kind", ENTRIES[1:])
def test_deep_nesting_in_policies_capabilities_and_cassettes(kind: str, workspace: Path) -> None:
    (workspace / "deep.yaml").write_text(deep_flow_maps(DEPTH), encoding="utf-8")
    done = bounded(*entry(kind, "deep.yaml"), cwd=workspace)
    no_traceback(done.stderr + done.stdout)
    assert done.returncode == 2, done.stderr
    located(done.stderr, "deep.yaml", "too-deep")


@pytest.mark.parametrize("kind", ["recipe", "cassette"])
def test_a_hundred_thousand_brackets_do_not_crash_the_parser(kind: str, workspace: Path) -> None:
    # ruamel's C composer recursed once per level and overflowed the C stack (SIGSEGV)
    (workspace / "deep.yaml").write_text(deep_flow_lists(100_000), encoding="utf-8")
    done = bounded(*entry(kind, "deep.yaml"), cwd=workspace)
    no_traceback(done.stderr)
    assert done.returncode == 2, (done.returncode, done.stderr)
    located(done.stderr, "deep.yaml", "too-deep")
    assert done.seconds < 20


def test_a_deep_json_input_value_is_an_input_error(workspace: Path) -> None:
    (workspace / "in.yaml").write_text(
        "version: 1\nname: in\ninputs: {xs: {type: array}}\ncapabilities: {fs: {}}\n"
        "steps:\n  - {id: read, tool: fs.read, params: {path: a.txt}}\n",
        encoding="utf-8",
    )
    value = "[" * 20_000 + "]" * 20_000  # one argument may hold 128 KiB
    done = bounded("run", "in.yaml", "-i", f"xs={value}", cwd=workspace)
    no_traceback(done.stderr)
    assert done.returncode == 2, done.stderr
    assert f"input 'xs': JSON nests deeper than {MAX_DEPTH} levels" in done.stderr


CAPABILITIES = "capabilities:\n  fs: {root: work}\n"
READ_PLAN: dict[str, Any] = {
    "goal": "Read a.txt",
    "steps": [{"id": "read_a", "tool": "fs.read", "params": {"path": "a.txt"}}],
}


def deep_plan(depth: int) -> str:
    """A plan whose params nest `depth` levels: as text, since the fake server would have
    to serialise it otherwise."""
    return (
        '{"goal": "Read a.txt", "steps": [{"id": "read_a", "tool": "fs.read", '
        '"params": {"path": "a.txt", "extra": ' + "[" * depth + "]" * depth + "}}]}"
    )


@pytest.fixture
def plan_space(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "a.txt").write_text("apples", encoding="utf-8")
    (tmp_path / "caps.yaml").write_text(CAPABILITIES, encoding="utf-8")
    return tmp_path


def plan_cmd(server: FakeOpenAIServer) -> list[str]:
    return [
        "plan",
        "Read a.txt",
        "--capabilities",
        "caps.yaml",
        "--base-url",
        server.base_url,
        "--model",
        "m",
        "--json",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("depth", [DEPTH, 100_000])
def test_a_too_deep_model_plan_is_sent_back_for_repair(depth: int, plan_space: Path) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(deep_plan(depth), READ_PLAN)) as server:
        done = planloom(*plan_cmd(server), cwd=plan_space)
        assert len(server.requests) == 2
        repair = server.requests[1].last_user_text()
    no_traceback(done.stderr)
    assert done.returncode == 0, done.stderr
    assert "repaired 1 time" in done.stderr
    problems = [line for line in repair.splitlines() if line.startswith("- ")]
    assert len(problems) == 1
    assert "(too-deep)" in problems[0]
    assert f"nests deeper than {MAX_DEPTH} levels" in problems[0]
    assert json.loads(done.stdout)["steps"]["read_a"]["output"]["content"] == "apples"


@pytest.mark.slow
def test_a_model_that_keeps_nesting_too_deep_gets_the_fallback(plan_space: Path) -> None:
    model = ScriptedModel.sequence(
        deep_plan(DEPTH),
        deep_plan(DEPTH),
        deep_plan(DEPTH),
        ChatReply(content="I cannot do better."),  # the fallback agent's answer, told once
        ChatReply(content="I cannot do better."),  # that it must use a tool
    )
    with FakeOpenAIServer(model) as server:
        done = planloom(*plan_cmd(server), "--yes", cwd=plan_space)
    no_traceback(done.stderr)
    assert "still invalid after 2 repairs: falling back to one agent step" in done.stderr
    assert done.returncode == 1, done.stderr  # an agent that only talked did not do the goal
    goal = json.loads(done.stdout)["steps"]["goal"]
    assert goal["status"] == "failed"
    assert "agent.no-tool-calls" in goal["error"]


# -- item 10: ids and input names that are dict methods --------------------------------------

DICT_NAMES = ["get", "items", "keys", "values", "update", "pop", "copy", "setdefault"]


def test_step_ids_and_inputs_named_like_dict_methods_can_be_referenced(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("A", encoding="utf-8")
    reads = "".join(
        f"  - {{id: {name}, tool: fs.read, params: {{path: a.txt}}}}\n" for name in DICT_NAMES
    )
    joined = "|".join(f"${{{{ steps.{name}.output.content }}}}" for name in DICT_NAMES)
    (tmp_path / "names.yaml").write_text(
        "version: 1\nname: names\n"
        'inputs:\n  keys: {type: string, default: "K"}\n  items: {type: string, default: "I"}\n'
        "capabilities: {fs: {write: [out.txt]}}\n"
        f"steps:\n{reads}"
        "  - id: report\n    tool: fs.write\n    params:\n      path: out.txt\n"
        f'      content: "{joined}|${{{{ inputs.keys }}}}|${{{{ inputs.items }}}}"\n'
        'outputs:\n  status: "${{ steps.pop.status }}"\n',
        encoding="utf-8",
    )
    done = planloom("run", "names.yaml", "--yes", "--json", cwd=tmp_path)
    no_traceback(done.stderr)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["outputs"] == {"status": "succeeded"}
    expected = "|".join(["A"] * len(DICT_NAMES)) + "|K|I"
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == expected


@pytest.mark.slow
def test_a_reference_to_a_dict_named_step_is_a_dependency(tmp_path: Path) -> None:
    # validation and run time agree: `steps.items.output` waits for the step `items`
    (tmp_path / "names.yaml").write_text(
        "version: 1\nname: names\ncapabilities: {fs: {}}\nsteps:\n"
        '  - {id: user, tool: fs.read, params: {path: "${{ steps.items.output.content }}"}}\n'
        "  - {id: items, tool: fs.read, params: {path: a.txt}}\n",
        encoding="utf-8",
    )
    (tmp_path / "a.txt").write_text("b.txt", encoding="utf-8")
    (tmp_path / "b.txt").write_text("B", encoding="utf-8")
    graph = planloom("graph", "names.yaml", cwd=tmp_path)
    assert graph.returncode == 0, graph.stderr
    done = planloom("run", "names.yaml", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["steps"]["user"]["output"]["content"] == "B"
