"""The `planloom` command.

Exit codes: 0 run succeeded; 1 run failed; 2 invalid recipe, usage or configuration;
3 plan rejected; 130 interrupted. `--json` prints one JSON object on stdout; progress,
prompts and summaries go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import json
import signal
import sys
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

import structlog
from rich.console import Console

from capabilities import Registry, default_registry
from capabilities._sanitize import neutralize
from engine._console import LiveProgress, print_summary
from engine.approval import ApproveAll, Approver, DenyAll, FailClosed, TerminalApprover
from engine.diagnostics import render_diagnostics
from engine.errors import ConfigurationError, PlanValidationError
from engine.events import EventBus, structlog_subscriber
from engine.executor import Executor
from engine.inputs import parse_assignments
from engine.model import Plan, plan_json_schema
from engine.render import render_graph
from engine.results import RunResult

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_REJECTED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        sys.stderr.write(f"planloom: error: {message}\n")
        raise SystemExit(EXIT_INVALID)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="planloom", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "-p",
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE and call its register(registry) to add capabilities (repeatable)",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="validate and run a recipe")
    run.add_argument("recipe")
    run.add_argument(
        "-i",
        "--input",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a run input, parsed by its declared type (JSON for arrays/objects)",
    )
    who = run.add_mutually_exclusive_group()
    who.add_argument("--yes", action="store_true", help="approve every confirmation gate")
    who.add_argument("--no", action="store_true", help="deny every confirmation gate")
    run.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    run.add_argument("-v", "--verbose", action="store_true", help="log every event on stderr")
    run.add_argument("--log-file", metavar="FILE", help="write every event as JSON lines")

    validate = sub.add_parser("validate", help="check a recipe without running it")
    validate.add_argument("recipe")
    validate.add_argument("--json", action="store_true", help="problems as a JSON list")

    graph = sub.add_parser("graph", help="draw a recipe's dependency graph")
    graph.add_argument("recipe")
    graph.add_argument("--format", choices=["mermaid", "dot", "ascii"], default="ascii")

    sub.add_parser("schema", help="print the recipe JSON Schema")

    tools = sub.add_parser("tools", help="list the actions steps can use")
    tools.add_argument("--json", action="store_true", help="as JSON, with params schemas")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `planloom` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        registry = _registry(args.plugin)
        # Everything imported so far lives for the whole process: keep the cyclic collector
        # from rescanning it on every collection during the run.
        gc.freeze()
        command = {
            "run": _cmd_run,
            "validate": _cmd_validate,
            "graph": _cmd_graph,
            "schema": _cmd_schema,
            "tools": _cmd_tools,
        }[args.command]
        return command(args, registry)
    except ConfigurationError as exc:
        sys.stderr.write(f"planloom: error: {exc}\n")
        if args.command == "run" and args.json:
            _print_json(_invalid([{"rule": "configuration", "message": str(exc)}]))
        return EXIT_INVALID


def _invalid(errors: list[dict[str, Any]]) -> dict[str, Any]:
    return {"run_id": None, "status": "invalid", "steps": {}, "outputs": {}, "errors": errors}


def _registry(plugins: list[str]) -> Registry:
    registry = default_registry()
    for name in plugins:
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # ImportError, or anything the module raises on import
            raise ConfigurationError(
                f"--plugin {name}: cannot import it ({type(exc).__name__}: {exc})"
            ) from exc
        register = getattr(module, "register", None)
        if not callable(register):
            raise ConfigurationError(
                f"--plugin {name}: the module has no register(registry) function"
            )
        try:
            register(registry)
        except Exception as exc:  # a broken plugin is a configuration problem, not a crash
            raise ConfigurationError(
                f"--plugin {name}: register() failed: {type(exc).__name__}: {exc}"
            ) from exc
    return registry


def _load(path: str, registry: Registry, *, as_json: bool, wrap: bool = False) -> Plan | int:
    """Load and validate; on problems print them (JSON on stdout or text on stderr).

    With `wrap`, JSON problems are printed inside a run-shaped object (for `run --json`).
    """
    from planners.recipe import load_recipe

    try:
        plan, _ = load_recipe(path, registry)
    except PlanValidationError as exc:
        if as_json:
            problems = [d.model_dump() for d in exc.diagnostics]
            _print_json(_invalid(problems) if wrap else problems)
        else:
            from planners.recipe import read_recipe

            try:
                _, source = read_recipe(path)
            except PlanValidationError:
                source = None
            sys.stderr.write(render_diagnostics(exc.diagnostics, source) + "\n")
            count = len(exc.diagnostics)
            sys.stderr.write(f"{path}: {count} problem{'s' if count != 1 else ''}\n")
        return EXIT_INVALID
    return plan


def _cmd_validate(args: argparse.Namespace, registry: Registry) -> int:
    loaded = _load(args.recipe, registry, as_json=args.json)
    if isinstance(loaded, int):
        return loaded
    if args.json:
        _print_json([])
    else:
        total = len(loaded.all_steps())
        print(f"{args.recipe}: ok ({total} step{'s' if total != 1 else ''})")
    return EXIT_OK


def _cmd_graph(args: argparse.Namespace, registry: Registry) -> int:
    loaded = _load(args.recipe, registry, as_json=False)
    if isinstance(loaded, int):
        return loaded
    sys.stdout.write(render_graph(loaded, args.format))
    return EXIT_OK


def _cmd_schema(args: argparse.Namespace, registry: Registry) -> int:
    _print_json(plan_json_schema())
    return EXIT_OK


def _cmd_tools(args: argparse.Namespace, registry: Registry) -> int:
    layers = {
        name: family.confinement() if family.confinement is not None else {}
        for name, family in registry.families.items()
    }
    rows = []
    for name in sorted(registry.actions):
        action = registry.actions[name]
        side = action.side_effects if isinstance(action.side_effects, bool) else "per call"
        rows.append(
            {
                "name": name,
                "description": action.description,
                "side_effects": side,
                "params": action.params_model.model_json_schema(),
                "grant": registry.families[action.family].grant_model.model_json_schema(),
                "confinement": layers[action.family],
            }
        )
    if args.json:
        _print_json(rows)
        return EXIT_OK
    width = max(len(r["name"]) for r in rows)
    for row in rows:
        props = row["params"].get("properties", {})
        required = set(row["params"].get("required", []))
        params = ", ".join(f"{p}{'' if p in required else '?'}" for p in props)
        effect = {True: "side effects", False: "read-only"}.get(row["side_effects"], "per call")
        print(f"{row['name']:<{width}}  {effect:<12}  {row['description']}")
        print(f"{'':<{width}}  params: {params}")
    print("\nconfinement on this machine:")
    for family, report in sorted(layers.items()):
        for layer, state in report.items():
            print(f"  {family:<6} {layer:<40} {state}")
        if not report:
            print(f"  {family:<6} (no confinement layers: runs in-process, gated by grants)")
    return EXIT_OK


def _cmd_run(args: argparse.Namespace, registry: Registry) -> int:
    loaded = _load(args.recipe, registry, as_json=args.json, wrap=True)
    if isinstance(loaded, int):
        return loaded
    inputs = parse_assignments(args.input)
    events = EventBus("pending")
    live = _live_view(args, loaded, events)
    approver: Approver
    if args.yes:
        approver = ApproveAll()
    elif args.no:
        approver = DenyAll()
    elif sys.stdin.isatty() and sys.stderr.isatty():
        approver = TerminalApprover(pause=live.paused if live is not None else None)
    else:
        approver = FailClosed()
    log_stream = _open_log(args.log_file) if args.log_file else None
    try:
        executor = Executor(
            loaded,
            registry=registry,
            base_dir=Path(args.recipe).resolve().parent,
            inputs=inputs,
            inputs_from_text=True,
            approver=approver,
            events=events,
        )
        events.run_id = executor.run_id
        _subscribe_logs(events, verbose=args.verbose, log_stream=log_stream)
        result = _run_with_signals(executor, live=live)
    finally:
        if log_stream is not None:
            log_stream.close()
    if args.json:
        # Outputs are the steps' raw data: redact at this sink, as at every other.
        _print_json(executor.secrets.redact_value(result.model_dump(mode="json")))
    print_summary(result, sys.stderr, color=sys.stderr.isatty())
    return {
        "succeeded": EXIT_OK,
        "failed": EXIT_FAILED,
        "rejected": EXIT_REJECTED,
        "cancelled": EXIT_INTERRUPTED,
    }[result.status]


def _live_view(args: argparse.Namespace, plan: Plan, events: EventBus) -> LiveProgress | None:
    if args.verbose or not sys.stderr.isatty():
        return None
    view = LiveProgress(Console(file=sys.stderr), [s.id for s in plan.all_steps()])
    events.subscribe(view)
    return view


def _run_with_signals(executor: Executor, live: LiveProgress | None) -> RunResult:
    async def go() -> RunResult:
        loop = asyncio.get_running_loop()
        presses = 0

        def interrupt() -> None:
            nonlocal presses
            presses += 1
            if presses == 1:
                sys.stderr.write("\ninterrupted: cancelling running steps (again to force)\n")
                executor.cancel()
            else:
                task.cancel()

        current = asyncio.current_task()
        assert current is not None
        task: asyncio.Task[Any] = current
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, interrupt)
        try:
            return await executor.run()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    if live is None:
        return asyncio.run(go())
    with live:
        return asyncio.run(go())


def _open_log(path: str) -> TextIO:
    try:
        return open(path, "a", encoding="utf-8")  # closed by the caller
    except OSError as exc:
        raise ConfigurationError(f"--log-file {path}: {exc.strerror or exc}") from exc


def _subscribe_logs(events: EventBus, *, verbose: bool, log_stream: TextIO | None) -> None:
    if verbose:
        logger = structlog.wrap_logger(
            structlog.PrintLogger(sys.stderr),
            processors=[
                structlog.processors.TimeStamper(fmt="%H:%M:%S"),
                _terminal_safe,
                structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()),
            ],
        )
        events.subscribe(structlog_subscriber(logger))
    if log_stream is not None:
        logger = structlog.wrap_logger(
            structlog.WriteLogger(log_stream),
            processors=[
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.JSONRenderer(default=repr),
            ],
        )
        events.subscribe(structlog_subscriber(logger))


def _terminal_safe(logger: Any, method: str, event: MutableMapping[str, Any]) -> dict[str, Any]:
    """structlog processor: escape sequences in logged values cannot reach the terminal."""
    return {k: neutralize(v) if isinstance(v, str) else v for k, v in event.items()}


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=repr) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
