"""The `planloom` command starts fast: what `--help` and `validate` import, and that the
lazily imported commands still have all their flags.

Start-up time is what a person waits for on every command. `--help` (top level and every
command's) imports the command line's grammar and the standard library only; `validate`
imports what validation needs, not the model client, the logs, the run store, the report,
the MCP SDK or httpx. These tests name the modules, so an eager import added anywhere on
those paths fails here. The times themselves are measured by `bench/startup.py`.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from _procs import TIMEOUT, env, planloom

from engine.app.parser import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parent.parent
WORD_COUNT = ROOT / "recipes" / "word-count.yaml"
OURS = ("engine", "capabilities", "planners")

# Third-party packages no `--help` may import (all of them are heavy: 15 to 400 ms each).
HEAVY = (
    "pydantic",
    "pydantic_core",
    "openai",
    "networkx",
    "jinja2",
    "structlog",
    "rich",
    "ruamel",
    "httpx",
    "httpx2",
    "mcp",
    "jsonschema",
    "tenacity",
    "regex",
    "capabilities",
    "planners",
)
# What the grammar of the command line is made of: nothing else of ours is imported.
HELP_MODULES = {
    "engine",
    "engine._support",
    "engine._support.gc",
    "engine.errors",
    "engine.app",
    "engine.app.commands",
    "engine.app.flags",
    "engine.app.main",
    "engine.app.output",
    "engine.app.parser",
}
# The top-level help ends with the environment variables planloom reads: their list is
# imported for it alone.
TOP_HELP_MODULES = HELP_MODULES | {"engine.app.environment"}
# What validating a recipe does not need: the model client, logs and live view, the run
# store, journal and report, cassettes, the executor and session, the MCP SDK and its
# servers, httpx and the http family's wire code and page conversion (trafilatura, lxml),
# the shell family's argument rules, launchers and confinement probe; networkx (the cycle
# check needs no graph library, only naming a cycle does); asyncio (with ssl, which loads
# OpenSSL, and concurrent.futures: the families import it where their calls use it), the
# sandbox that makes calls, the run's results and events, redaction, the `regex` module
# (user patterns: compiled by the first one used), idna (a non-ASCII host name's).
NOT_FOR_VALIDATE = (
    "asyncio",
    "ssl",
    "concurrent.futures",
    "regex",
    "idna",
    "engine.sandbox",
    "engine.results",
    "engine.events",
    "engine.agent",
    "engine.redaction",
    "capabilities.shell._probe",
    "openai",
    "networkx",
    "structlog",
    "rich",
    "httpx",
    "httpx2",
    "mcp",
    "jsonschema",
    "tenacity",
    "sqlite3",
    "engine.llm",
    "engine.executor",
    "engine.session",
    "engine.executor._scheduler",
    "engine.store",
    "engine.app.sqlite_store",
    "engine.journal",
    "engine.app.report",
    "engine.recording",
    "engine.recording.cassette",
    "engine.render",
    "planners.llm",
    "planners.react",
    "engine.app.launch",
    "engine.app.console",
    "engine.app.terminal",
    "engine.app.logs",
    "engine.app.stored",
    "engine.app.outcome",
    "capabilities.mcp._http",
    "capabilities.mcp._schema",
    "capabilities.mcp._servers",
    "capabilities.mcp._connect",
    "capabilities.http._checks",
    "capabilities.http._exchange",
    "capabilities.http._request",
    "capabilities.http._fetch",
    "capabilities.http._page",
    "capabilities.http._wire",
    "trafilatura",
    "lxml",
    "capabilities.shell.argrules",
    "capabilities.shell._process",
    "capabilities.confine.zygote",
)


def _python(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """This interpreter run with `args`, as a user's shell runs planloom."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def _modules_after(code: str, *, cwd: Path = ROOT) -> tuple[list[str], str]:
    """Run `code` (which calls `main`) in a fresh interpreter; the modules loaded after it,
    and what it printed on stdout before the list."""
    script = (
        "import json, sys\n"
        "from engine.app.main import main\n"
        f"{code}\n"
        "print('\\n' + json.dumps(sorted(sys.modules)))\n"
    )
    done = _python("-c", script, cwd=cwd)
    assert done.returncode == 0, done.stderr
    printed, _, modules = done.stdout.rstrip("\n").rpartition("\n")
    return json.loads(modules), printed


def _loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    """The `names` (packages count with their submodules) found in `modules`."""
    return sorted(
        {name for name in names for m in modules if m == name or m.startswith(f"{name}.")}
    )


def _help_code(argv: list[str]) -> str:
    return (
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "else:\n"
        "    raise AssertionError('--help did not exit')\n"
    )


@pytest.mark.parametrize("argv", [["--help"], *([name, "--help"] for name in COMMANDS)])
def test_help_imports_no_part_of_the_engine(argv: list[str]) -> None:
    modules, printed = _modules_after(_help_code(argv))
    assert "usage: planloom" in printed
    assert _loaded(modules, HEAVY) == []
    ours = {m for m in modules if m.split(".")[0] in OURS}
    assert ours == (TOP_HELP_MODULES if argv == ["--help"] else HELP_MODULES)
    third_party = {
        m.split(".")[0]
        for m in modules
        if m.split(".")[0] not in sys.stdlib_module_names
        and m.split(".")[0] not in OURS
        and not m.startswith(("__", "_distutils_hack", "_virtualenv"))
    }
    assert third_party == set(), "--help imports only the standard library"


def test_a_usage_error_imports_no_part_of_the_engine() -> None:
    code = "try:\n    main(['validate'])\nexcept SystemExit as exc:\n    print('exit', exc.code)\n"
    modules, printed = _modules_after(code)
    assert printed.split() == ["exit", "2"]
    assert _loaded(modules, HEAVY) == []


def test_validate_imports_only_what_validation_needs() -> None:
    modules, printed = _modules_after(
        f"assert main(['validate', {str(WORD_COUNT)!r}]) == 0", cwd=WORD_COUNT.parent
    )
    assert printed.strip().endswith("ok (4 steps)")
    assert _loaded(modules, NOT_FOR_VALIDATE) == []
    # What it does need: the recipe's YAML, the plan's models, the families' grants and
    # params, and the templates it checks.
    assert {"ruamel.yaml", "pydantic", "engine.validation", "capabilities.fs", "jinja2"} <= set(
        modules
    )


def test_a_command_module_is_imported_only_when_it_runs() -> None:
    modules, _ = _modules_after(
        f"assert main(['validate', {str(WORD_COUNT)!r}]) == 0", cwd=WORD_COUNT.parent
    )
    commands = {m for m in modules if m.startswith("engine.app.commands.")}
    assert commands == {"engine.app.commands.validate"}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _squeezed(text: str) -> str:
    """`text` without whitespace: argparse wraps help to the terminal's width."""
    return "".join(text.split())


def test_top_level_help_lists_every_command_with_its_help(tmp_path: Path) -> None:
    proc = planloom("--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (sub,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    listed = {choice.dest: choice.help for choice in sub._choices_actions}
    assert set(listed) == set(COMMANDS)
    for name, text in listed.items():
        assert f"    {name} " in proc.stdout
        assert _squeezed(text or "") in _squeezed(proc.stdout), name
    assert "--plugin MODULE" in proc.stdout


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_help_lists_every_flag_of_its_parser(name: str, tmp_path: Path) -> None:
    """The real command's `--help` shows each of its parser's arguments: its option
    strings (or its name), its metavar, its choices and its help text."""
    proc = planloom(name, "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    shown = _squeezed(proc.stdout)
    parser = _subparsers(build_parser())[name]
    assert proc.stdout.startswith(f"usage: planloom {name} ")
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:
            continue
        for option in action.option_strings:
            assert option in proc.stdout, (name, option)
        if not action.option_strings:  # a positional: shown by its metavar or its name
            assert str(action.metavar or action.dest) in proc.stdout, (name, action.dest)
        elif action.metavar is not None:
            assert f"{action.option_strings[-1]} {action.metavar}" in proc.stdout
        for choice in action.choices or ():
            assert str(choice) in proc.stdout, (name, action.dest, choice)
        if action.help:
            assert _squeezed(action.help) in shown, (name, action.dest)


def _attributes_read(module: Path) -> set[str]:
    """Every `args.X` the module reads."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "args"
    }


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_reads_only_flags_its_parser_declares(name: str) -> None:
    """The grammar (`engine.app.parser`) and the code (`engine.app.commands.<name>`) live in
    two modules: every `args.X` a command reads must be one of its parser's arguments."""
    parser = _subparsers(build_parser())[name]
    declared = {action.dest for action in parser._actions} | {"command", "plugin"}
    module = ROOT / "engine" / "app" / "commands" / f"{name}.py"
    assert _attributes_read(module) <= declared


def test_every_command_has_a_module_with_a_main_and_every_module_a_command() -> None:
    from engine.app.commands import command_main

    folder = ROOT / "engine" / "app" / "commands"
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    assert modules == set(COMMANDS)
    for name in COMMANDS:
        assert callable(command_main(name))


def test_the_record_modes_of_the_flags_are_the_cassettes() -> None:
    import engine.app.flags
    import engine.recording.cassette

    assert engine.app.flags.RECORD_MODES == engine.recording.cassette.RECORD_MODES


def test_python_dash_m_engine_app_prints_the_same_help(tmp_path: Path) -> None:
    script = planloom("--help", cwd=tmp_path)
    module = _python("-m", "engine.app", "--help", cwd=tmp_path)
    assert (module.returncode, module.stdout) == (0, script.stdout)


def test_the_process_command_line_ends_with_the_heap_frozen_and_a_call_does_not() -> None:
    """`main()` reading the process's own command line leaves the heap frozen (the
    interpreter's last collection then skips it); `main(argv)` called in a process that
    goes on leaves the collector as it found it."""
    code = (
        "import gc, sys\n"
        "from engine.app.main import main\n"
        f"assert main(['validate', {str(WORD_COUNT)!r}]) == 0\n"
        "print(gc.get_freeze_count(), gc.isenabled())\n"
        f"sys.argv = ['planloom', 'validate', {str(WORD_COUNT)!r}]\n"
        "assert main() == 0\n"
        "print(gc.get_freeze_count() > 0, gc.isenabled())\n"
    )
    done = _python("-c", code)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "ok (" not in line]
    assert lines == ["0 True", "True True"]


def test_a_heap_frozen_until_exit_stays_frozen_and_still_collects_what_came_after() -> None:
    """What existed before the block stays out of the collector past it (the interpreter's
    collections at exit skip it); what the block created is collected as usual."""
    code = (
        "import gc, weakref\n"
        "from engine._support.gc import heap_frozen\n"
        "class Node:\n"
        "    pass\n"
        "def ring():\n"
        "    node = Node()\n"
        "    node.me = node\n"
        "    return weakref.ref(node)\n"
        "before = ring()\n"
        "with heap_frozen(until_exit=True):\n"
        "    during = ring()\n"
        "gc.collect()\n"
        "print(gc.get_freeze_count() > 0, before() is not None, during() is None)\n"
        "gc.unfreeze()\n"
        "with heap_frozen():\n"
        "    pass\n"
        "print(gc.get_freeze_count())\n"
    )
    done = _python("-c", code)
    assert done.stdout.split() == ["True", "True", "True", "0"], done.stderr


def test_what_a_paused_block_keeps_is_frozen_inside_a_frozen_heap_and_scanned_outside() -> None:
    """A plan loaded inside `planloom` (a frozen heap) is frozen as its loading ends, not
    scanned by the next collection; loaded by a program outside one, it is left to the
    collector as usual, so nothing stays frozen past the caller's knowledge."""
    code = (
        "import gc\n"
        "from engine._support.gc import collector_paused, heap_frozen\n"
        "def load():\n"
        "    with collector_paused():\n"
        "        return [[i] for i in range(1000)]\n"
        "outside = load()\n"
        "print(gc.get_freeze_count())\n"
        "with heap_frozen():\n"
        "    before = gc.get_freeze_count()\n"
        "    inside = load()\n"
        "    print(gc.get_freeze_count() - before >= 1000, gc.isenabled())\n"
        "print(gc.get_freeze_count())\n"
    )
    done = _python("-c", code)
    assert done.stdout.split() == ["0", "True", "True", "0"], done.stderr


def test_a_long_run_freezes_what_it_keeps_after_freeing_its_young_garbage() -> None:
    """Inside a frozen heap, `freeze_survivors` frees young cyclic garbage first, then
    freezes what is kept (a run's results), so full collections stop rescanning it; outside
    one it does nothing."""
    code = (
        "import gc, weakref\n"
        "from engine._support.gc import freeze_survivors, heap_frozen\n"
        "class Node:\n"
        "    pass\n"
        "def ring():\n"
        "    node = Node()\n"
        "    node.me = node\n"
        "    return weakref.ref(node)\n"
        "freeze_survivors()\n"
        "print(gc.get_freeze_count())\n"
        "with heap_frozen():\n"
        "    kept = [[i] for i in range(1000)]\n"
        "    dropped = ring()\n"
        "    before = gc.get_freeze_count()\n"
        "    freeze_survivors()\n"
        "    print(gc.get_freeze_count() - before >= 1000, dropped() is None)\n"
        "print(gc.get_freeze_count())\n"
    )
    done = _python("-c", code)
    assert done.stdout.split() == ["0", "True", "True", "0"], done.stderr
