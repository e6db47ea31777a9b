"""Conventions of the command line a user expects: `--version`, the exit codes in
`--help`, and help text on every argument of every command."""

from __future__ import annotations

import argparse

from _procs import planloom

from engine.app.parser import build_parser


def test_version_prints_the_installed_version_on_stdout(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from importlib.metadata import version

    proc = planloom("--version", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"planloom {version('planloom')}\n"


def test_help_lists_the_exit_codes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    proc = planloom("--help", cwd=tmp_path)
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    for code in ("0 the run succeeded", "1 it failed", "2 invalid recipe", "3 plan rejected",
                 "130 interrupted"):  # fmt: skip
        assert code in text


def test_every_argument_of_every_command_says_what_it_is() -> None:
    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [
        f"{name} {action.dest}"
        for name, command in commands.choices.items()
        for action in command._actions
        if not isinstance(action, argparse._HelpAction) and not (action.help or "").strip()
    ]
    assert missing == []
