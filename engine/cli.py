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
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine, MutableMapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO, TypeVar

import structlog
from rich.console import Console

from capabilities import Registry, default_registry
from engine._console import LiveProgress, print_summary
from engine._sanitize import neutralize
from engine._threads import DaemonThreadPool
from engine.approval import (
    ApproveAll,
    Approver,
    DenyAll,
    FailClosed,
    TerminalApprover,
    prompt_line,
)
from engine.diagnostics import render_diagnostics
from engine.errors import ConfigurationError, PlanValidationError, StepError
from engine.events import EventBus, structlog_subscriber
from engine.executor import Executor
from engine.inputs import parse_assignments
from engine.llm import Budget, LLMClient, LLMConfig, resolve_llm_config
from engine.model import FallbackAction, Limits, LLMSettings, Plan, plan_json_schema
from engine.policy import PolicyApprover, load_policy
from engine.recording import RECORD_MODES, Cassette, OfflineModel, RecordMode, Tape
from engine.render import plan_has_side_effects, render_graph, render_plan
from engine.results import ReplayReport, RunResult, StepResult, Usage
from engine.validation import validate_plan
from planners.llm import LLMPlanner
from planners.react import ReactAgent

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_REJECTED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
_T = TypeVar("_T")


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
    run.add_argument(
        "--policy", metavar="FILE", help="allow/ask/deny rules for gated calls (first match wins)"
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="run read-only actions; report side effects instead of making them",
    )
    _model_flags(run)
    _cassette_flags(run)

    plan = sub.add_parser("plan", help="plan a goal with the model, show it, approve, run")
    plan.add_argument("goal")
    plan.add_argument(
        "--capabilities",
        metavar="FILE",
        help="YAML with a 'capabilities:' block (and limits), as in recipes",
    )
    plan.add_argument("-o", "--output", metavar="RECIPE", help="save the plan as a recipe")
    plan.add_argument("-i", "--input", action="append", default=[], metavar="KEY=VALUE")
    plan_who = plan.add_mutually_exclusive_group()
    plan_who.add_argument("--yes", action="store_true", help="approve the plan and every gate")
    plan_who.add_argument("--no", action="store_true", help="reject the plan")
    plan.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    plan.add_argument("-v", "--verbose", action="store_true")
    plan.add_argument("--log-file", metavar="FILE")
    plan.add_argument("--dry-run", action="store_true")
    plan.add_argument("--policy", metavar="FILE")
    _model_flags(plan)
    _cassette_flags(plan)

    replay = sub.add_parser(
        "replay",
        help="replay a cassette offline: its plan (or goal), model answers, tool results and "
        "decisions",
    )
    replay.add_argument("cassette")
    replay.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    replay.add_argument("-v", "--verbose", action="store_true", help="log every event on stderr")
    replay.add_argument("--log-file", metavar="FILE", help="write every event as JSON lines")
    replay.add_argument(
        "--live-tools",
        action="store_true",
        help="run read-only tools for real instead of serving their recorded results",
    )

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


def _cassette_flags(parser: argparse.ArgumentParser) -> None:
    tape = parser.add_mutually_exclusive_group()
    tape.add_argument(
        "--record",
        metavar="CASSETTE",
        help="record the run's model answers, tool results and decisions to CASSETTE",
    )
    tape.add_argument(
        "--replay",
        metavar="CASSETTE",
        help="replay from CASSETTE: no live model, no side effects; unrecorded requests fail",
    )
    parser.add_argument(
        "--record-mode",
        choices=RECORD_MODES,
        help="none: replay only (the default of --replay); once: replay if the cassette "
        "exists, else record; new_episodes: replay what is recorded, record the rest; "
        "all: record everything again (the default of --record)",
    )
    parser.add_argument(
        "--live-tools",
        action="store_true",
        help="in a replay, run read-only tools for real instead of serving their recordings",
    )


def _model_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="model name (else PLANLOOM_MODEL, else the recipe's)")
    parser.add_argument(
        "--base-url", help="OpenAI-compatible endpoint (else OPENAI_BASE_URL, else OpenAI)"
    )


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
            "plan": _cmd_plan,
            "validate": _cmd_validate,
            "graph": _cmd_graph,
            "schema": _cmd_schema,
            "tools": _cmd_tools,
            "replay": _cmd_replay,
        }[args.command]
        return command(args, registry)
    except ConfigurationError as exc:
        sys.stderr.write(f"planloom: error: {exc}\n")
        if args.command in ("run", "plan", "replay") and args.json:
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
            from engine._yaml import read_recipe

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
    base_dir = Path(args.recipe).resolve().parent
    goal = loaded.goal if not loaded.steps else None
    base = loaded.to_data()
    return _session(args, registry, loaded, base, base_dir, goal=goal)


def _cmd_plan(args: argparse.Namespace, registry: Registry) -> int:
    base: dict[str, Any] = {"version": 1, "name": "plan"}
    base_dir = Path.cwd()
    if args.capabilities:
        from engine._yaml import read_recipe

        try:
            data, _ = read_recipe(args.capabilities)
        except PlanValidationError as exc:
            sys.stderr.write(render_diagnostics(exc.diagnostics, None) + "\n")
            return EXIT_INVALID
        if not isinstance(data, dict) or not isinstance(data.get("capabilities"), dict):
            raise ConfigurationError(
                f"--capabilities {args.capabilities}: expected YAML with a 'capabilities:' "
                "mapping, as in recipes"
            )
        base.update({k: v for k, v in data.items() if k not in ("steps", "finally", "goal")})
        base_dir = Path(args.capabilities).resolve().parent
    return _session(args, registry, None, base, base_dir, goal=args.goal)


def _cmd_replay(args: argparse.Namespace, registry: Registry) -> int:
    from planners.replay import plan_from_cassette

    cassette = Cassette.load(args.cassette)
    for name, value in {
        "input": [f"{k}={_as_text(v)}" for k, v in cassette.inputs.items()],
        "yes": False,
        "no": False,
        "policy": None,
        "dry_run": False,
        "model": None,
        "base_url": None,
        "record": None,
        "replay": args.cassette,
        "record_mode": "none",
    }.items():
        setattr(args, name, value)
    base_dir = Path(args.cassette).resolve().parent
    if cassette.goal is not None:
        return _session(args, registry, None, cassette.base or {}, base_dir, goal=cassette.goal)
    try:
        plan = plan_from_cassette(cassette, args.cassette, registry, base_dir)
    except PlanValidationError as exc:
        sys.stderr.write(render_diagnostics(exc.diagnostics, None) + "\n")
        sys.stderr.write(f"{args.cassette}: the recorded plan is not valid here\n")
        return EXIT_INVALID
    return _session(args, registry, plan, plan.to_data(), base_dir, goal=None)


def _as_text(value: Any) -> str:
    """A recorded input as `-i` text (inputs are recorded as they were given)."""
    return value if isinstance(value, str) else json.dumps(value)


def _open_tape(args: argparse.Namespace) -> Tape | None:
    path = getattr(args, "record", None) or getattr(args, "replay", None)
    if path is None:
        if getattr(args, "record_mode", None) or getattr(args, "live_tools", False):
            raise ConfigurationError(
                "--record-mode and --live-tools need a cassette: add --record FILE or --replay FILE"
            )
        return None
    if args.dry_run:
        raise ConfigurationError(
            "--dry-run cannot be combined with --record or --replay: a dry run makes no side "
            "effects to record, and a replay makes none anyway"
        )
    mode: RecordMode = args.record_mode or ("all" if args.record else "none")
    return Tape(path, mode, live_tools=args.live_tools)


def _needs_model(plan: Plan) -> bool:
    return "llm" in plan.capabilities or any(
        step.agent is not None
        or isinstance(step.fallback, str)
        or (isinstance(step.fallback, FallbackAction) and step.fallback.agent is not None)
        for step in plan.all_steps()
    )


def _approver(args: argparse.Namespace, live: LiveProgress | None, registry: Registry) -> Approver:
    person: Approver | None = None
    if args.yes:
        person = ApproveAll()
    elif args.no:
        person = DenyAll()
    elif sys.stdin.isatty() and sys.stderr.isatty():
        person = TerminalApprover(pause=live.paused if live is not None else None)
    if getattr(args, "policy", None):
        # The policy decides first; its `ask` rules go to the person, if there is one.
        return PolicyApprover(load_policy(args.policy, registry=registry), ask=person)
    return person if person is not None else FailClosed()


def _session(
    args: argparse.Namespace,
    registry: Registry,
    plan: Plan | None,
    base: dict[str, Any],
    base_dir: Path,
    *,
    goal: str | None,
) -> int:
    """Run the session, print its result, and return the exit code."""
    try:
        result, secrets = run_session(args, registry, plan, base, base_dir, goal=goal)
    except (KeyboardInterrupt, asyncio.CancelledError):  # a second Ctrl-C: stop at once
        sys.stderr.write("\ninterrupted: stopped at once\n")
        if args.json:
            _print_json(
                {
                    "run_id": None,
                    "status": "cancelled",
                    "steps": {},
                    "outputs": {},
                    "errors": ["interrupted twice: stopped without finishing"],
                }
            )
        return EXIT_INTERRUPTED
    return _print_result(args, result, secrets)


def run_session(
    args: argparse.Namespace,
    registry: Registry,
    plan: Plan | None,
    base: dict[str, Any],
    base_dir: Path,
    *,
    goal: str | None,
) -> tuple[RunResult, Any]:
    """Configure the model if the run needs one, plan if asked, approve, run (replanning
    after a failure if the plan allows), with the cassette if there is one: one event loop.
    Returns the result and the run's secrets (for redacting what is printed)."""
    recipe_llm = LLMSettings.model_validate(base["llm"]) if base.get("llm") else None
    needs_model = goal is not None or (plan is not None and _needs_model(plan))
    tape = _open_tape(args)
    offline = tape is not None and not tape.recording
    config = None
    if needs_model and offline:
        assert tape is not None
        recorded = tape.recorded.model or (recipe_llm.model if recipe_llm else None)
        config = LLMConfig(model=args.model or recorded or "unrecorded")
    elif needs_model:
        config = resolve_llm_config(recipe_llm, model=args.model, base_url=args.base_url)
    given = parse_assignments(args.input)
    inputs = given
    if tape is not None and tape.replaying:  # recorded inputs, unless given again
        recorded_inputs = parse_assignments(
            [f"{k}={_as_text(v)}" for k, v in tape.recorded.inputs.items()]
        )
        inputs = {**recorded_inputs, **given}
    limits = Limits.model_validate(base.get("limits") or {})
    log_stream = _open_log(args.log_file) if args.log_file else None

    async def execute(
        chosen: Plan, client: LLMClient | None, preloaded: dict[str, StepResult]
    ) -> tuple[RunResult, Any]:
        events = EventBus("pending")
        live = _live_view(args, chosen, events)
        executor = Executor(
            chosen,
            registry=registry,
            base_dir=base_dir,
            inputs=inputs,
            inputs_from_text=True,
            approver=_approver(args, live, registry),
            events=events,
            agent_runner=ReactAgent(client) if client is not None else None,
            llm=client,
            preloaded=preloaded,
            dry_run=args.dry_run,
            tape=tape,
        )
        events.run_id = executor.run_id
        _subscribe_logs(events, verbose=args.verbose, log_stream=log_stream)
        if live is None:
            return await _with_signals(executor), executor.secrets
        with live:
            return await _with_signals(executor), executor.secrets

    async def go() -> tuple[RunResult, Any]:
        client = None
        if config is not None:
            budget = Budget(
                max_calls=limits.max_llm_calls,
                max_tokens=limits.max_llm_tokens,
                deadline=time.monotonic() + limits.max_duration,
            )
            client = LLMClient(
                config, budget=budget, tape=tape, client=OfflineModel() if offline else None
            )
        try:
            if client is not None and not offline:
                await client.preflight()
            chosen = plan
            if goal is not None:
                assert client is not None
                try:
                    chosen = await _plan_and_approve(
                        args, registry, client, goal, base, base_dir, tape=tape
                    )
                    planned.append(chosen)
                except StepError as exc:  # the model failed us: nothing ran
                    sys.stderr.write(f"planning failed: {exc.message}\n")
                    failed = RunResult(
                        run_id="-", status="failed", errors=[exc.message], usage=_spent(client)
                    )
                    return failed, None
                if chosen is None:
                    return RunResult(run_id="-", status="rejected", usage=_spent(client)), None
            assert chosen is not None
            result, secrets = await execute(chosen, client, {})
            rounds = chosen.replan.max if chosen.replan and goal is not None else 0
            while result.status == "failed" and rounds > 0 and client is not None:
                rounds -= 1
                kept = {
                    step_id: step
                    for step_id, step in result.steps.items()
                    if step.status in ("succeeded", "fallback")
                }
                sys.stderr.write(f"replanning after the failure ({len(kept)} steps kept)\n")
                keep = [
                    s.model_dump(by_alias=True, exclude_unset=True)
                    for s in chosen.steps
                    if s.id in kept
                ]
                try:
                    replanned = await _plan_and_approve(
                        args,
                        registry,
                        client,
                        goal or "",
                        base,
                        base_dir,
                        context=_replan_context(result),
                        keep=keep,
                        tape=tape,
                    )
                except StepError as exc:  # keep the failed run's result, say why it stands
                    sys.stderr.write(f"replanning failed: {exc.message}\n")
                    result.errors.append(f"replanning failed: {exc.message}")
                    break
                if replanned is None:
                    break
                chosen = replanned
                earlier_calls = result.usage.tool_calls
                result, secrets = await execute(chosen, client, kept)
                result.usage.tool_calls += earlier_calls
            return result, secrets
        finally:
            if client is not None:
                await client.aclose()

    planned: list[Plan | None] = []
    if tape is not None:
        sys.stderr.write(_tape_banner(tape))
    try:
        result, secrets = _run_async(go())
    finally:
        if log_stream is not None:
            log_stream.close()
    if tape is not None:
        first = planned[0] if planned else plan
        _finish_tape(
            tape,
            result,
            plan=first.to_data() if first is not None else None,
            goal=goal,
            base=base if goal is not None else None,
            model=config.model if config is not None else None,
            inputs=inputs,
        )
    return result, secrets


def _spent(client: LLMClient) -> Usage:
    """What planning spent on the model, when no run followed (its calls, failed ones too)."""
    budget = client.budget
    return Usage(
        llm_calls=budget.calls,
        prompt_tokens=budget.prompt_tokens,
        completion_tokens=budget.completion_tokens,
    )


def _print_result(args: argparse.Namespace, result: RunResult, secrets: Any) -> int:
    if args.json:
        # Outputs are the steps' raw data: redact at this sink, as at every other.
        data = result.model_dump(mode="json")
        _print_json(secrets.redact_value(data) if secrets is not None else data)
    if result.status == "rejected":
        sys.stderr.write("plan rejected: nothing ran\n")
    else:
        shown = result
        if secrets is not None:  # outputs and reasons are raw data: redacted at this sink too
            shown = result.model_copy(
                update={
                    "outputs": secrets.redact_value(result.outputs),
                    "approvals": [
                        d.model_copy(update={"reason": secrets.redact(d.reason)}) if d.reason else d
                        for d in result.approvals
                    ],
                }
            )
        print_summary(shown, sys.stderr, color=sys.stderr.isatty())
    for call in result.dry_run or []:
        params = json.dumps(call["params"], ensure_ascii=False, default=repr)
        sys.stderr.write(f"would run: {call['step_id']}: {call['action']} {neutralize(params)}\n")
    if result.replay is not None:
        _print_replay(result.replay)
    return {
        "succeeded": EXIT_OK,
        "failed": EXIT_FAILED,
        "rejected": EXIT_REJECTED,
        "cancelled": EXIT_INTERRUPTED,
    }[result.status]


async def _plan_and_approve(
    args: argparse.Namespace,
    registry: Registry,
    client: LLMClient,
    goal: str,
    base: dict[str, Any],
    base_dir: Path,
    *,
    context: str | None = None,
    keep: list[dict[str, Any]] | None = None,
    tape: Tape | None = None,
) -> Plan | None:
    """Plan the goal, show the plan, save it if asked; None if the plan was rejected."""
    sys.stderr.write(f"planning: {goal}\n")
    outcome = await LLMPlanner(client, registry).plan(
        goal, base=base, base_dir=base_dir, context=context, keep=keep
    )
    if outcome.fell_back:
        sys.stderr.write(
            f"the model's plan was still invalid after {outcome.repairs} repairs: "
            "falling back to one agent step\n"
        )
    elif outcome.repairs:
        sys.stderr.write(f"plan repaired {outcome.repairs} time(s) from validation errors\n")
    sys.stderr.write(render_plan(outcome.plan, registry))
    save = getattr(args, "output", None)
    if save:
        await asyncio.to_thread(Path(save).write_text, outcome.text, encoding="utf-8")
        sys.stderr.write(f"plan saved to {save} (run it with: planloom run {save})\n")
    if args.dry_run or not plan_has_side_effects(outcome.plan, registry):
        return outcome.plan  # nothing with side effects will run

    async def decide() -> tuple[bool, str | None]:
        if args.yes:
            return True, None
        if args.no:
            return False, None
        if not (sys.stdin.isatty() and sys.stderr.isatty()):
            sys.stderr.write(
                "the plan has side effects and there is no terminal to approve it: pass --yes "
                "to approve it, or review it with -o FILE and run that\n"
            )
            return False, None
        return await _review_plan(outcome.plan, outcome.text, registry, base_dir)

    approved, edited = await tape.review(outcome.text, decide) if tape else await decide()
    if tape is not None and tape.replaying and not tape.recording:
        verdict = "approved" if approved else "rejected"
        sys.stderr.write(f"plan {verdict} (recorded decision{', edited' if edited else ''})\n")
    if not approved:
        return None
    return outcome.plan if edited is None else _revalidate(edited, registry, base_dir)


async def _review_plan(
    plan: Plan, text: str, registry: Registry, base_dir: Path
) -> tuple[bool, str | None]:
    """The person's review of a plan: approve, edit in $EDITOR (re-validated, with located
    errors until it is valid or given up), reject, or save it as a recipe. Returns whether
    it was approved, and the edited YAML if it was edited."""
    valid: Plan | None = plan
    edited = False
    while True:
        answer = (await prompt_line(_PLAN_MENU)).strip().lower()
        if answer in {"a", "y", "yes"}:
            if valid is not None:
                return True, text if edited else None
            sys.stderr.write("the plan is invalid: edit it again, or reject it\n")
        elif answer == "e":
            text = await asyncio.to_thread(_edit, text)
            edited = True
            valid = _revalidate(text, registry, base_dir)
            if valid is not None:
                sys.stderr.write(render_plan(valid, registry))
        elif answer == "s":
            target = (await prompt_line("save as [plan.yaml] > ")).strip()
            target = target or "plan.yaml"
            await asyncio.to_thread(Path(target).write_text, text, encoding="utf-8")
            sys.stderr.write(f"saved to {target} (run it with: planloom run {target})\n")
        else:  # r, an empty answer, or end of input
            return False, None


_PLAN_MENU = "[a]pprove  [e]dit  [r]eject  [s]ave as recipe > "


def _edit(text: str) -> str:
    """Open $VISUAL / $EDITOR on the plan's YAML; the edited text (comments kept)."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False, encoding="utf-8") as f:
        f.write(text)
        path = f.name
    try:
        subprocess.run([*shlex.split(editor), path], check=False)
        return Path(path).read_text(encoding="utf-8")
    finally:
        os.unlink(path)


def _revalidate(text: str, registry: Registry, base_dir: Path) -> Plan | None:
    from engine._yaml import parse_recipe_text

    try:
        data, source = parse_recipe_text(text, "plan.yaml")
        return validate_plan(data, source, registry, base_dir=base_dir)
    except PlanValidationError as exc:
        try:
            _, source = parse_recipe_text(text, "plan.yaml")
        except PlanValidationError:
            source = None
        sys.stderr.write(render_diagnostics(exc.diagnostics, source) + "\n")
        return None


def _tape_banner(tape: Tape) -> str:
    if tape.recording and not tape.replaying:
        return f"recording to {tape.path} (mode {tape.requested_mode})\n"
    live = "new requests go live and are recorded" if tape.recording else "nothing is live"
    tools = "; read-only tools run live" if tape.live_tools else ""
    note = f"\n  {neutralize(tape.recorded.note)}" if tape.recorded.note else ""
    return f"replaying {tape.path} (mode {tape.requested_mode}: {live}{tools}){note}\n"


def _finish_tape(
    tape: Tape,
    result: RunResult,
    *,
    plan: dict[str, Any] | None,
    goal: str | None,
    base: dict[str, Any] | None,
    model: str | None,
    inputs: dict[str, Any],
) -> None:
    """Write the cassette (not for an interrupted run) and attach the replay report."""
    written = False
    if result.status != "cancelled":
        written = tape.save(plan=plan, goal=goal, base=base, model=model, inputs=inputs)
    elif tape.recording:
        sys.stderr.write(f"interrupted: {tape.path} was not written (the recording is partial)\n")
    result.replay = ReplayReport(
        cassette=str(tape.path),
        mode=tape.requested_mode,
        mismatches=list(tape.mismatches),
        unused=tape.unused(),
        written=written,
    )
    if tape.mismatches and result.status == "succeeded":
        result.status = "failed"  # a replay that diverged proves nothing


def _print_replay(report: ReplayReport) -> None:
    for mismatch in report.mismatches:
        sys.stderr.write(f"\n{neutralize(mismatch)}\n")
    if report.unused:
        sys.stderr.write(
            f"\n{len(report.unused)} recording(s) in {report.cassette} were not used:\n"
        )
        for line in report.unused:
            sys.stderr.write(f"  unused: {neutralize(line)}\n")
    if report.written:
        sys.stderr.write(f"cassette written: {report.cassette}\n")


def _replan_context(result: RunResult) -> str:
    """What the planner is told after a failure: what ran, what it gave, what failed."""
    lines = [
        "The previous plan failed. Steps marked succeeded keep their outputs and must not be "
        "repeated (read them as ${{ steps.ID.output }}); plan the rest again.",
    ]
    for step_id, step in result.steps.items():
        line = f"- {step_id}: {step.status}"
        if step.status in ("succeeded", "fallback"):
            line += f"; output: {json.dumps(step.output, default=repr)[:300]}"
        elif step.error:
            line += f"; error: {step.error[:300]}"
        lines.append(line)
    return "\n".join(lines)


def _live_view(args: argparse.Namespace, plan: Plan, events: EventBus) -> LiveProgress | None:
    if args.verbose or not sys.stderr.isatty():
        return None
    view = LiveProgress(Console(file=sys.stderr), [s.id for s in plan.all_steps()])
    events.subscribe(view)
    return view


def _run_async(main: Coroutine[Any, Any, _T]) -> _T:
    """`asyncio.run(main)`, on worker threads that cannot hold up the exit: a step cancelled
    by Ctrl-C or its timeout may leave a thread running (a slow user function), and the
    default executor would be waited for without bound (see `engine._threads`)."""
    with asyncio.Runner() as runner:
        runner.get_loop().set_default_executor(DaemonThreadPool())
        return runner.run(main)


async def _with_signals(executor: Executor) -> RunResult:
    """Run; the first Ctrl-C cancels running steps (finally steps still run), the second
    cancels everything."""
    loop = asyncio.get_running_loop()
    presses = 0
    current = asyncio.current_task()
    assert current is not None
    task: asyncio.Task[Any] = current

    def interrupt() -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            sys.stderr.write("\ninterrupted: cancelling running steps (again to force)\n")
            executor.cancel()
        else:
            task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, interrupt)
    try:
        return await executor.run()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


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
