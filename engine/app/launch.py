"""Running a session for a command: the cassette, the frontend, the planner and agent
factories, the result printed and the exit code."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from engine.app.logs import open_log
from engine.app.outcome import print_result
from engine.app.output import EXIT_INTERRUPTED, print_json
from engine.app.registry import plugin_path
from engine.app.sqlite_store import open_store, process_start
from engine.app.telemetry import Telemetry
from engine.app.terminal import TerminalFrontend
from engine.capability import Registry
from engine.errors import ConfigurationError
from engine.inputs import parse_assignments
from engine.journal import Journal
from engine.llm.config import read_limit
from engine.model import Plan
from engine.policy import load_policy
from engine.recording import Tape
from engine.recording.cassette import RecordMode
from engine.results import StepResult
from engine.sanitize import neutralize
from engine.session import Session, SessionOptions, SessionResult
from engine.store import RunRecord, default_store_path
from planners.llm import LLMPlanner
from planners.react import ReactAgent

if TYPE_CHECKING:
    from engine.app.dask_backend import DaskBackend

__all__ = [
    "Resume",
    "RunSettings",
    "launch",
    "open_journal",
    "open_tape",
    "recorded_registry",
    "run_session",
    "store_path",
]


@dataclass(frozen=True)
class RunSettings:
    """The run flags of one command line (`run`, `plan`, `replay`), typed once."""

    inputs: tuple[str, ...] = ()
    yes: bool = False
    no: bool = False
    json: bool = False
    verbose: bool = False
    log_file: str | None = None
    policy: str | None = None
    dry_run: bool = False
    output: str | None = None
    model: str | None = None
    base_url: str | None = None
    llm_timeout: float | None = None
    llm_max_tokens: int | None = None
    llm_context: int | None = None
    preflight: Literal["models", "chat"] = "models"
    stream: bool = False
    record: str | None = None
    replay: str | None = None
    record_mode: RecordMode | None = None
    live_tools: bool = False
    # How to record again, said after a replay mismatch; None: the CLI's --record-mode.
    how_to_record: str | None = None
    store: str | None = None
    otel: bool = False
    executor: str | None = None
    plugin: tuple[str, ...] = ()
    force: bool = False
    # `resume --redo STEP` / `--skip STEP`: decisions on calls in doubt (checked by `resume`).
    redo: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()

    @classmethod
    def from_args(cls, args: argparse.Namespace, **overrides: Any) -> RunSettings:
        """The settings of the flags this command has (the others keep their defaults)."""
        given = {f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}
        if hasattr(args, "input"):
            given["inputs"] = tuple(args.input)
        given["plugin"] = tuple(map(_portable_plugin, getattr(args, "plugin", None) or ()))
        given["redo"] = tuple(getattr(args, "redo", None) or ())
        given["skip"] = tuple(getattr(args, "skip", None) or ())
        # Read here, first: a bad value is refused before anything begins (a run, a claim).
        for name, flag, field in (
            ("llm_timeout", "--llm-timeout", "timeout"),
            ("llm_max_tokens", "--llm-max-tokens", "max_tokens"),
            ("llm_context", "--llm-context", "context_window"),
        ):
            if given.get(name) is not None:
                value = read_limit(given[name], field, flag)
                given[name] = value if field == "timeout" else int(value)
        given["preflight"] = given.get("preflight") or "models"
        return cls(**{**given, **overrides})


def _portable_plugin(name: str) -> str:
    """A `--plugin` value as another process finds it (a Dask worker): a file's absolute
    path (also for a module found only as `NAME.py` in this folder), else the module name."""
    path = plugin_path(name)
    if path is None and "." not in name:
        here = (Path.cwd() / f"{name}.py").resolve()
        loaded = getattr(sys.modules.get(name), "__file__", None)
        path = here if loaded and Path(loaded).resolve() == here else None
    return str(path) if path is not None else name


@dataclass
class Resume:
    """A resumed run: its journal (serving what ran before), the results of the steps it
    keeps, and its earlier inputs (as text)."""

    journal: Journal
    kept: Mapping[str, StepResult]
    inputs: Mapping[str, str]


def launch(
    settings: RunSettings,
    registry: Registry,
    start: Plan | str,
    base: dict[str, Any],
    base_dir: Path,
    tape: Tape | None = None,
    *,
    recipe: Path | None = None,
    resume: Resume | None = None,
) -> int:
    """Run the session, print its result, and return the exit code.

    `tape`: the cassette of the settings, when the caller opened it already (to validate
    the recipe against its tool listings). `recipe`: the file `start` came from (a resume
    reads it again). `resume`: continue a stored run instead of starting one.
    """
    # Started first (a bad setting is refused before anything), closed last: the run's
    # result is printed before its traces are sent, whatever that wait brings.
    with contextlib.ExitStack() as stack:
        telemetry = Telemetry.start(flag=settings.otel)
        if telemetry is not None:
            stack.callback(telemetry.close)
        try:
            outcome = run_session(
                settings, registry, start, base, base_dir, tape, recipe=recipe, resume=resume,
                telemetry=telemetry,
            )  # fmt: skip
        except (KeyboardInterrupt, asyncio.CancelledError):  # a second Ctrl-C: stop at once
            sys.stderr.write("\ninterrupted: stopped at once\n")
            if settings.json:
                print_json(
                    {
                        "run_id": None,
                        "status": "cancelled",
                        "steps": {},
                        "outputs": {},
                        "errors": ["interrupted twice: stopped without finishing"],
                    }
                )
            return EXIT_INTERRUPTED
        code = print_result(outcome.result, outcome.secrets, as_json=settings.json)
        result = outcome.result
        if outcome.store is not None and outcome.ran and result.status in ("failed", "cancelled"):
            where = (
                ""
                if Path(outcome.store) == store_path(None, Path.cwd())
                else f" --store {outcome.store}"
            )
            sys.stderr.write(
                f"run {result.run_id} is stored: fix what failed, then continue it with: "
                f"planloom resume {result.run_id}{where}\n"
            )
        return code


def run_session(
    settings: RunSettings,
    registry: Registry,
    start: Plan | str,
    base: dict[str, Any],
    base_dir: Path,
    tape: Tape | None = None,
    *,
    recipe: Path | None = None,
    resume: Resume | None = None,
    telemetry: Telemetry | None = None,
) -> SessionResult:
    """The session the settings describe, run to its end, journaled in the run store
    (unless it is a dry run or a pure replay, where nothing is live). `telemetry`: where
    its traces go (the caller starts and closes it)."""
    # What can be refused is read first: a refusal must not leave a run begun in the store.
    policy = load_policy(settings.policy, registry=registry) if settings.policy else None
    with contextlib.ExitStack() as stack:
        backend = open_backend(settings)  # an unreachable cluster: exit 2, nothing begun
        if backend is not None:
            stack.callback(backend.close)
        if tape is None and resume is None:
            tape = open_tape(settings)
        if tape is not None and registry.listings is not tape.listings:
            registry = registry.with_listings(tape.listings)
        options = SessionOptions(
            dry_run=settings.dry_run,
            model=settings.model,
            base_url=settings.base_url,
            llm_timeout=settings.llm_timeout,
            llm_max_tokens=settings.llm_max_tokens,
            llm_context=settings.llm_context,
            preflight=settings.preflight,
            stream=settings.stream,
        )
        session = Session(
            registry,
            options,
            planner=lambda client: LLMPlanner(client, registry),
            agent=ReactAgent,
            recorder=tape,
            backend=backend,
        )
        session.model_config(start, base)  # no model configured: said before anything else
        inputs = parse_assignments(list(settings.inputs))
        log_stream = open_log(settings.log_file) if settings.log_file else None
        if log_stream is not None:
            stack.callback(log_stream.close)
        if resume is not None:
            inputs = {**resume.inputs, **inputs}
            session.journal = resume.journal
        else:
            name = start.name if isinstance(start, Plan) else str(base.get("name") or "plan")
            session.journal = open_journal(settings, base_dir, tape, name=name, recipe=recipe)
        if session.journal is not None:
            stack.callback(session.journal.store.close)
        base_url = settings.base_url or os.environ.get("OPENAI_BASE_URL")
        frontend = TerminalFrontend(
            registry,
            base_dir,
            yes=settings.yes,
            no=settings.no,
            policy=policy,
            redo=frozenset(settings.redo),
            skip=frozenset(settings.skip),
            verbose=settings.verbose,
            log_stream=log_stream,
            save_plan=settings.output,
            replace_saved=settings.force,
            spans=(lambda bus: telemetry.follow(bus, base_url=base_url)) if telemetry else None,
        )
        if tape is not None:
            sys.stderr.write(_banner(tape))
        return session.run(
            start,
            base=base,
            base_dir=base_dir,
            frontend=frontend,
            inputs=inputs,
            kept=resume.kept if resume is not None else None,
        )


def open_backend(settings: RunSettings) -> DaskBackend | None:
    """Where tool calls run (`--executor`, else `PLANLOOM_EXECUTOR`): None for this process;
    a Dask backend, its scheduler checked (or its local cluster started), otherwise.

    Raises:
        ConfigurationError: the value is not a known form, or the cluster cannot be had.
    """
    text = settings.executor
    where = "--executor"
    if text is None:
        text, where = (
            os.environ.get("PLANLOOM_EXECUTOR", "").strip() or "local",
            ("PLANLOOM_EXECUTOR"),
        )
    if text.strip() == "local":
        return None
    from engine.app.dask_backend import DaskBackend, parse_executor, worker_wait

    spec = parse_executor(text, where)
    return DaskBackend.start(
        spec, settings.plugin, wait=worker_wait(os.environ), say=_say_on_stderr
    )


def _say_on_stderr(text: str) -> None:
    sys.stderr.write(f"planloom: {text}\n")


def store_path(settings_store: str | None, base_dir: Path) -> Path:
    """The run store of a command: `--store`, else `$PLANLOOM_HOME/runs.db`, else
    `.planloom/runs.db` in `base_dir`."""
    return Path(settings_store) if settings_store else default_store_path(base_dir)


def open_journal(
    settings: RunSettings, base_dir: Path, tape: Tape | None, *, name: str, recipe: Path | None
) -> Journal | None:
    """A new run in the store, and its journal; None for a dry run or a pure replay
    (nothing in them is live, so there is nothing to resume)."""
    if settings.dry_run or (tape is not None and not tape.recording):
        return None
    store = open_store(store_path(settings.store, base_dir))
    pid = os.getpid()
    run_id = uuid.uuid4().hex[:12]
    store.begin(
        RunRecord(
            id=run_id,
            name=name,
            recipe=str(recipe.resolve()) if recipe is not None else None,
            base_dir=str(base_dir),
            started=time.time(),
            pid=pid,
            pid_start=process_start(pid),
        )
    )
    store.append(run_id, "start", None, {"segment": 1, "pid": pid}, durable=True)
    return Journal(store, run_id)


def recorded_registry(settings: RunSettings, registry: Registry) -> tuple[Registry, Tape | None]:
    """The cassette of `--record` / `--replay`, and the registry whose tool listings (the
    MCP servers' tools) it records or serves: open it before the recipe is validated."""
    tape = open_tape(settings)
    if tape is None:
        return registry, None
    return registry.with_listings(tape.listings), tape


def open_tape(settings: RunSettings) -> Tape | None:
    """The cassette of `--record` / `--replay`, checked against the other flags."""
    path = settings.record or settings.replay
    if path is None:
        if settings.record_mode or settings.live_tools:
            raise ConfigurationError(
                "--record-mode and --live-tools need a cassette: add --record FILE or --replay FILE"
            )
        return None
    if settings.dry_run:
        raise ConfigurationError(
            "--dry-run cannot be combined with --record or --replay: a dry run makes no side "
            "effects to record, and a replay makes none anyway"
        )
    mode: RecordMode = settings.record_mode or ("all" if settings.record else "none")
    if settings.how_to_record is not None:
        return Tape(path, mode, live_tools=settings.live_tools, how=settings.how_to_record)
    return Tape(path, mode, live_tools=settings.live_tools)


def _banner(tape: Tape) -> str:
    if tape.recording and not tape.replaying:
        return f"recording to {tape.path} (mode {tape.requested_mode})\n"
    live = "new requests go live and are recorded" if tape.recording else "nothing is live"
    tools = "; read-only tools run live" if tape.live_tools else ""
    note = f"\n  {neutralize(tape.recorded.note)}" if tape.recorded.note else ""
    return f"replaying {tape.path} (mode {tape.requested_mode}: {live}{tools}){note}\n"
