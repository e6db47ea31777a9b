"""The `planloom` command: parse the command line, build the registry, run the command.

Exit codes: 0 run succeeded; 1 run failed; 2 invalid recipe, usage or configuration;
3 plan rejected; 130 interrupted. `--json` prints one JSON object on stdout; progress,
prompts and summaries go to stderr.

Start-up is kept short: this module imports the grammar of the command line and nothing of
the engine, so `--help` and usage errors exit at once; then only the chosen command's
module is imported (`engine.app.commands.command_main`). A shell asking for completions on
TAB (`_ARGCOMPLETE` in the environment: `engine.app.completion`) is answered from the
parser before anything else, and `planloom completion SHELL` builds no registry.

A reader that goes away (`planloom tools | head -1`) ends the command quietly with exit
code 141 (128 + SIGPIPE, what a shell shows for a program SIGPIPE ended), as Python's
documentation of SIGPIPE advises: no traceback.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import IO

from engine._support.gc import collector_paused, heap_frozen
from engine.app.commands import command_main
from engine.app.output import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    invalid,
    print_json,
)
from engine.app.parser import build_parser
from engine.errors import ConfigurationError

__all__ = ["main"]

_SESSIONS = ("run", "plan", "replay")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `planloom` console script; returns the exit code.

    Args:
        argv: the arguments; None reads this process's command line, and is taken to mean
            the process ends when this returns (the console script, `python -m
            engine.app`): what the command imported is then left frozen, so the
            interpreter's collections at exit do not rescan it
            (`engine._support.gc.heap_frozen(until_exit=True)`).
    """
    try:
        code = _main(argv)
        sys.stdout.flush()  # here, not at exit, where a closed pipe could not be handled
    except BrokenPipeError:
        gone = [stream for stream in (sys.stdout, sys.stderr) if _reader_gone(stream)]
        if not gone:
            raise  # a pipe of something else (a child's stdin): a real error
        # What is still buffered for a stream whose reader left goes nowhere, so the
        # interpreter's flush at exit cannot fail on it again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in gone:
            os.dup2(devnull, stream.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    finally:
        if argv is None:
            _ignored_until_exit()
    return code


def _reader_gone(stream: IO[str]) -> bool:
    """Whether `stream` is a pipe (or socket, or terminal) whose other end has closed."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's StringIO), closed
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(mask & (select.POLLERR | select.POLLHUP) for _, mask in poller.poll(0))


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    if argv is None and "_ARGCOMPLETE" in os.environ:
        # A shell asks for completions on TAB (the script `planloom completion` prints):
        # answered and the process ended there, before anything else is imported.
        from engine.app.completion import complete

        complete(parser)
    args = parser.parse_args(argv)
    args.plugin = [*args.plugin, *getattr(args, "plugin_after", ())]
    if args.command == "completion":  # run by a shell's start-up file: no registry to build
        from engine.app.commands.completion import print_script

        return print_script(args)
    _interrupt_once()
    try:
        # Importing the command and the capability families builds modules, classes and
        # pydantic models that live as long as the process and frees almost nothing: the
        # collector would only rescan them (a full pass costs ~20 ms by the end).
        with collector_paused():
            command = command_main(args.command)
            # Imported here, not at the top: `--help` and usage errors exit before it.
            from engine.app.registry import build_registry

            registry = build_registry(args.plugin)
        # Everything imported so far lives for the whole command: keep the cyclic collector
        # from rescanning it on every collection (nor at exit, when the process ends).
        # A server started to list its tools at validation serves the run's calls too.
        with heap_frozen(until_exit=argv is None), registry.keep_discovered():
            return command(args, registry)
    except ConfigurationError as exc:
        sys.stderr.write(f"planloom: error: {exc}\n")
        if args.command in _SESSIONS and args.json:
            print_json(invalid([{"rule": "configuration", "message": str(exc)}]))
        return EXIT_INVALID
    except KeyboardInterrupt:
        # Ctrl-C before a run began (loading, validating, listing a server's tools) or a
        # second one while it ends: what was started is stopped on the way out of the
        # blocks above; a run begun was marked in the store by its session.
        sys.stderr.write("\nplanloom: interrupted\n")
        if args.command in _SESSIONS and args.json:
            print_json(_interrupted())
        return EXIT_INTERRUPTED


def _interrupt_once() -> None:
    """Ctrl-C interrupts as Python's default does (`KeyboardInterrupt`), once: presses
    after it are ignored while the command stops what it started (a server listing its
    tools, say), so a second one cannot cut that short into a traceback and an orphan. A
    run's session handles its own presses, and restores the default when it ends."""
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers; a caller in a thread keeps its own

    def first(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGINT, _ignore)  # a handler, not SIG_IGN: a child resets it
        raise KeyboardInterrupt

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, first)


def _ignore(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C again while the command stops: it is stopping already."""


def _ignored_until_exit() -> None:
    """Presses ignored while the command stopped stay ignored while the process ends: the
    interpreter's finalization puts a handler written in Python (`_ignore`) back to the
    default, so a press in its last tens of milliseconds would end planloom by SIGINT
    instead of with its exit code (130). SIG_IGN outlives finalization; it would be
    inherited by a child, but none is started any more."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is _ignore:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _interrupted() -> dict[str, object]:
    """The `--json` result of a command interrupted before it had a run to report."""
    return {
        "run_id": None,
        "status": "cancelled",
        "steps": {},
        "outputs": {},
        "errors": ["interrupted before the run began"],
    }
