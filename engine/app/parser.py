"""The `planloom` command line's grammar: every command's name, help and flags.

Only `argparse` is imported here, so `planloom --help` (and each command's `--help`, and a
usage error) print and exit without importing the engine; a command's module
(`engine.app.commands.<name>`) is imported only when that command runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from engine.app.flags import otel_flag, run_flags, store_flag
from engine.app.output import EXIT_INVALID

__all__ = ["COMMANDS", "SHELLS", "build_parser"]

SHELLS = ("bash", "zsh", "fish")
"""The shells `planloom completion` prints a script for."""

_EXIT_CODES = """\
exit codes:
  0 the run succeeded; 1 it failed; 2 invalid recipe, usage or configuration;
  3 plan rejected; 130 interrupted; 141 the output's reader went away (`| head`)"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        sys.stderr.write(f"planloom: error: {message}\n")
        raise SystemExit(EXIT_INVALID)


class _Planloom(_Parser):
    """The whole command line's parser: its help ends with the exit codes and the
    environment variables planloom reads (`engine.app.environment`, imported only when
    the help is printed)."""

    def format_help(self) -> str:
        from engine.app.environment import epilog

        self.epilog = f"{_EXIT_CODES}\n\n{epilog()}"
        return super().format_help()


if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[_Parser]


class _Version(argparse.Action):
    """`--version`: read from the installed package only when asked (start-up stays short)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("planloom")
        except PackageNotFoundError:  # a checkout run without installing it
            found = "unknown (not installed: pip install -e .)"
        sys.stdout.write(f"planloom {found}\n")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The parser of the whole command line: `-p/--plugin`, then one command of `COMMANDS`."""
    parser = _Planloom(
        prog="planloom",
        description="The `planloom` command.",
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the epilog's lines as laid
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="print planloom's version and exit"
    )
    parser.add_argument(
        "-p",
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE (a module name or a .py file's path) and call its "
        "register(registry) to add capabilities (repeatable; before or after the command)",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in COMMANDS.values():
        add(sub)
    for command in sub.choices.values():  # `planloom run --plugin X ...` works too
        command.add_argument(
            "-p",
            "--plugin",
            action="append",
            default=[],
            dest="plugin_after",
            metavar="MODULE",
            help="as planloom --plugin MODULE (a module name or a .py file's path)",
        )
    return parser


def _run(sub: Subparsers) -> None:
    run = sub.add_parser("run", help="validate and run a recipe")
    run.add_argument("recipe", help="the recipe (YAML; JSON if named *.json) to validate and run")
    run_flags(run, yes="approve every confirmation gate", no="deny every confirmation gate")


def _plan(sub: Subparsers) -> None:
    plan = sub.add_parser("plan", help="plan a goal with the model, show it, approve, run")
    plan.add_argument("goal", help="what to get done, in words; the model plans the steps")
    plan.add_argument(
        "--capabilities",
        metavar="FILE",
        help="YAML with a 'capabilities:' block (and limits), as in recipes",
    )
    plan.add_argument("-o", "--output", metavar="RECIPE", help="save the plan as a recipe")
    plan.add_argument(
        "--force", action="store_true", help="let -o replace a file that already exists"
    )
    plan.add_argument(
        "--stream",
        action="store_true",
        help="read the plan as the model writes it: read-only steps start as they arrive; "
        "steps with side effects wait for the whole plan, validated and approved",
    )
    run_flags(plan, yes="approve the plan and every gate", no="reject the plan")


def _resume(sub: Subparsers) -> None:
    resume = sub.add_parser(
        "resume",
        help="continue an interrupted, crashed or failed run: what finished is kept, the "
        "rest runs (a call that may already have happened is asked about)",
    )
    resume.add_argument("run_id", metavar="RUN_ID", help="the run (`planloom runs` lists them)")
    run_flags(resume, yes="approve every confirmation gate", no="deny every confirmation gate")
    resume.add_argument(
        "--redo",
        action="append",
        default=[],
        metavar="STEP",
        help="make STEP's call that may already have happened (in flight when the run "
        "stopped) again: your decision, as at the terminal (repeatable)",
    )
    resume.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="STEP",
        help="do not make STEP's call that may already have happened again: the step fails, "
        "and its fallback, can_fail and on_failure apply (repeatable)",
    )


def _replay(sub: Subparsers) -> None:
    replay = sub.add_parser(
        "replay",
        help="replay a cassette offline: its plan (or goal), model answers, tool results and "
        "decisions",
    )
    replay.add_argument("cassette", help="the cassette (YAML) a --record made")
    replay.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    replay.add_argument("-v", "--verbose", action="store_true", help="log every event on stderr")
    replay.add_argument("--log-file", metavar="FILE", help="write every event as JSON lines")
    otel_flag(replay)
    replay.add_argument(
        "--live-tools",
        action="store_true",
        help="run read-only tools for real instead of serving their recorded results",
    )


def _runs(sub: Subparsers) -> None:
    runs = sub.add_parser("runs", help="list stored runs (to show, report or resume them)")
    runs.add_argument("--json", action="store_true", help="as JSON on stdout")
    runs.add_argument("--limit", type=int, default=50, metavar="N", help="at most N (50)")
    store_flag(runs)


def _show(sub: Subparsers) -> None:
    show = sub.add_parser("show", help="a stored run's summary, as at its end")
    show.add_argument("run_id", metavar="RUN_ID", help="the run (`planloom runs` lists them)")
    show.add_argument("--json", action="store_true", help="as JSON on stdout (as run --json)")
    store_flag(show)


def _report(sub: Subparsers) -> None:
    report = sub.add_parser(
        "report", help="write a run's report (graph, timeline, errors...) as one HTML file"
    )
    report.add_argument("run_id", metavar="RUN_ID", help="the run (`planloom runs` lists them)")
    report.add_argument(
        "-o",
        "--output",
        metavar="FILE.html",
        help="where to write it (default: report-RUN_ID.html in this folder)",
    )
    store_flag(report)


def _validate(sub: Subparsers) -> None:
    validate = sub.add_parser("validate", help="check a recipe without running it")
    validate.add_argument("recipe", help="the recipe (YAML; JSON if named *.json) to check")
    validate.add_argument("--json", action="store_true", help="problems as a JSON list")


def _graph(sub: Subparsers) -> None:
    graph = sub.add_parser("graph", help="draw a recipe's dependency graph")
    graph.add_argument("recipe", help="the recipe (YAML; JSON if named *.json) whose steps to draw")
    graph.add_argument(
        "--format",
        choices=["mermaid", "dot", "ascii"],
        help="ascii (the default, for a terminal), mermaid (Markdown) or dot (Graphviz)",
    )
    graph.add_argument(
        "--json",
        action="store_true",
        help="the graph as data on stdout: steps, and edges with their kind (not with --format)",
    )


def _schema(sub: Subparsers) -> None:
    schema = sub.add_parser("schema", help="print the recipe JSON Schema")
    schema.add_argument(
        "--json", action="store_true", help="accepted for scripts: the schema is JSON already"
    )


def _tools(sub: Subparsers) -> None:
    tools = sub.add_parser("tools", help="list the actions steps can use")
    tools.add_argument(
        "recipe",
        nargs="?",
        help="also list the tools of the MCP servers this recipe grants (they are started "
        "and asked)",
    )
    tools.add_argument("--json", action="store_true", help="as JSON, with params schemas")


def _completion(sub: Subparsers) -> None:
    completion = sub.add_parser(
        "completion",
        help="print the shell script that completes planloom's commands, flags, recipes, "
        "run ids and step ids on TAB",
        description="Print the script that makes SHELL complete planloom's command line. "
        'Load it in the shell\'s start-up file: bash: eval "$(planloom completion bash)"; '
        'zsh: eval "$(planloom completion zsh)" (after compinit); fish: planloom completion '
        "fish | source",
    )
    completion.add_argument(
        "shell", choices=SHELLS, metavar="SHELL", help="bash, zsh or fish: the shell it is for"
    )


COMMANDS: dict[str, Callable[[Subparsers], None]] = {
    "run": _run,
    "plan": _plan,
    "resume": _resume,
    "replay": _replay,
    "runs": _runs,
    "show": _show,
    "report": _report,
    "validate": _validate,
    "graph": _graph,
    "schema": _schema,
    "tools": _tools,
    "completion": _completion,
}
"""Each command's parser, by name, in the order `planloom --help` lists them; the command
itself is `engine.app.commands.<name>.main`."""
