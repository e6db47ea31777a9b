"""The rule behind templated arguments: which templated arguments get `--`, which are refused.

`protect_data_arguments` on argv lists, and `shell.run` given `CallContext.data_paths` (the
params paths whose recipe text began with a template). The CLI cases are in
`test_argrules_data.py`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from capabilities import Registry, Sandbox, shell
from capabilities.shell import ShellGrant, ShellParams, ShellResult
from capabilities.shell.argrules import ArgContext, protect_data_arguments
from engine.capability import CallContext
from engine.errors import CapabilityDenied


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "a.txt").write_text("from a\n")
    (tmp_path / "--output=pwned").write_text("from --output=pwned\n")
    return tmp_path


# --- the rule itself -------------------------------------------------------------------------


def _ctx(program: str) -> ArgContext:
    return ArgContext(program=f"/usr/bin/{program}", root="/j", workdir="/j")


@pytest.mark.parametrize(
    ("argv", "data", "expected"),
    [
        # `--` before the first templated operand
        (["sort", "-r", "X"], {2}, ["sort", "-r", "--", "X"]),
        (["sort", "X", "Y"], {1, 2}, ["sort", "--", "X", "Y"]),
        # a templated option value stays where it is (getopt takes it whatever it is)
        (["sort", "-k", "-2", "X"], {2, 3}, ["sort", "-k", "-2", "--", "X"]),
        (["grep", "-e", "-x", "f"], {2}, ["grep", "-e", "-x", "f"]),
        (["head", "--lines", "-3", "X"], {2, 3}, ["head", "--lines", "-3", "--", "X"]),
        # a `--` of the recipe's own already protects what follows it
        (["sort", "--", "-X"], {2}, ["sort", "--", "-X"]),
        # ... unless it is an option's value: `-e --` makes `--` the pattern
        (["grep", "-e", "--", "-f/x"], {3}, ["grep", "-e", "--", "--", "-f/x"]),
        # a literal option after the data: no `--`, and data that cannot be an option passes
        (["sort", "X", "-r"], {1}, ["sort", "X", "-r"]),
        # no templates: nothing changes
        (["sort", "--output=x"], set(), ["sort", "--output=x"]),
        # programs that do not accept `--`: data that cannot be an option passes as is
        (["echo", "hello"], {1}, ["echo", "hello"]),
        (["echo", "-"], {1}, ["echo", "-"]),
    ],
)
def test_double_dash_is_inserted_where_it_protects(
    argv: list[str], data: set[int], expected: list[str]
) -> None:
    assert protect_data_arguments(argv, data, _ctx(argv[0])) == expected


@pytest.mark.parametrize(
    ("argv", "data", "why"),
    [
        (["sort", "-X", "-r"], {1}, "the recipe's own option '-r' (argv[2])"),
        (["echo", "-n"], {1}, "echo is not known to accept `--`"),
        (["printf", "--help"], {1}, "printf is not known to accept `--`"),
        (["git", "log", "--output=x"], {2}, "git is not known to accept `--`"),
        # `du --time[=WORD]`: an optional value is never the next argument, and no `--`
        # could be placed without knowing that, so data that looks like an option is refused
        (["du", "--time", "-X"], {2}, "whether that option takes a value is not known"),
        # whether `--li` takes a value is not known (getopt abbreviations): refused
        (["tail", "--li", "-X"], {2}, "whether that option takes a value is not known"),
        # a program missing from the table: nothing is known about its options
        (["nosuchprog", "-v", "-X"], {2}, "nosuchprog is not known to accept `--`"),
    ],
)
def test_unprotected_dash_data_is_refused(argv: list[str], data: set[int], why: str) -> None:
    with pytest.raises(CapabilityDenied) as info:
        protect_data_arguments(argv, data, _ctx(argv[0]))
    assert info.value.rule == "shell.option-from-data"
    index = min(data)
    assert f"argv[{index}] {argv[index]!r} comes from a template" in info.value.message
    assert why in info.value.message


def test_message_escapes_the_value() -> None:
    name = "-\x1b[31mred\u202e"
    with pytest.raises(CapabilityDenied) as info:
        protect_data_arguments(["echo", name], {1}, _ctx("echo"))
    assert "\x1b" not in info.value.message
    assert "\u202e" not in info.value.message
    assert "\\x1b[31mred\\u202e" in info.value.message


# --- through shell.run -------------------------------------------------------------------------


def _run(folder: Path, argv: list[str], data: frozenset[Any], **grant: Any) -> ShellResult:
    ctx = CallContext(
        grant=ShellGrant(cwd=".", allow=[argv[0]], **grant),
        base_dir=folder,
        timeout=10.0,
        data_paths=data,
    )
    return asyncio.run(shell.run(ShellParams(argv=argv), ctx))


def test_whole_argv_template_makes_every_argument_data(folder: Path) -> None:
    result = _run(folder, ["cat", "--output=pwned"], frozenset({("argv",)}))
    assert result.stdout == "from --output=pwned\n"


def test_literal_arguments_are_the_recipes_own(folder: Path) -> None:
    # With no templates (a recipe's own text, a model-written call), `-n` is an option.
    result = _run(folder, ["cat", "-n", "a.txt"], frozenset())
    assert result.stdout == "     1\tfrom a\n"
    templated = _run(folder, ["cat", "-n", "a.txt"], frozenset({("argv", 2)}))
    assert templated.stdout == "     1\tfrom a\n"


def test_end_of_options_grant_still_forces_double_dash_first(folder: Path) -> None:
    (folder / "-n").write_text("from -n\n")
    result = _run(folder, ["cat", "-n"], frozenset(), end_of_options=True)
    assert result.stdout == "from -n\n"


def test_unsafe_args_keeps_the_data_rule(folder: Path) -> None:
    with pytest.raises(CapabilityDenied) as info:
        _run(folder, ["echo", "-e"], frozenset({("argv", 1)}), unsafe_args=["echo"])
    assert info.value.rule == "shell.option-from-data"


# --- a person's edit at the gate ---------------------------------------------------------------


def _gated(folder: Path, asked: list[Any], edited: list[str]) -> Sandbox:
    """A sandbox whose gate notes each call it is asked about and answers with `edited`."""
    registry = Registry()
    shell.register(registry)

    async def gate(*args: Any, **kwargs: Any) -> Any:
        asked.append(args[2])
        return {"argv": edited, "check": False}  # grep finding nothing exits 1

    grant = {"allow": ["echo", "grep"], "cwd": "."}
    return Sandbox(registry, {"shell": grant}, folder, gate=gate)


def test_a_call_the_data_rule_refuses_never_reaches_the_gate(folder: Path) -> None:
    asked: list[Any] = []
    sandbox = _gated(folder, asked, ["echo", "-e"])

    with pytest.raises(CapabilityDenied) as info:
        asyncio.run(
            sandbox.call(
                "shell.run",
                {"argv": ["echo", "-n"]},
                step_id="s",
                data_paths=frozenset({("argv", 1)}),
                confirm="always",
            )
        )

    assert info.value.rule == "shell.option-from-data"
    assert asked == [], "the person was asked about a call the sandbox refuses"


@pytest.mark.parametrize(
    ("edited", "stdout"),
    [
        # argv[2] left as rendered: still data, so grep is told it is the pattern
        (["grep", "-c", "-x", "f.txt"], "0\n"),
        # argv[2] rewritten by the person: their own text, an option
        (["grep", "-c", "-v", "zzz", "f.txt"], "1\n"),
    ],
)
def test_gate_edit_keeps_provenance_only_where_unchanged(
    folder: Path, edited: list[str], stdout: str
) -> None:
    (folder / "f.txt").write_text("a\n")
    asked: list[Any] = []
    sandbox = _gated(folder, asked, edited)
    rendered = {"argv": ["grep", "-e", "-x", "f.txt"]}  # a pattern from data: -e's value

    result = asyncio.run(
        sandbox.call("shell.run", rendered, step_id="s", data_paths=frozenset({("argv", 2)}))
    )

    assert result["stdout"] == stdout
    assert asked == [rendered]
