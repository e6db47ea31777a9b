"""Flags shared by the commands that run a session (`run`, `plan`, `resume`) or read the
run store (`runs`, `show`, `report`)."""

from __future__ import annotations

import argparse

__all__ = [
    "PREFLIGHTS",
    "RECORD_MODES",
    "cassette_flags",
    "model_flags",
    "otel_flag",
    "run_flags",
    "store_flag",
]

# As engine.recording.cassette.RECORD_MODES (tests/test_cli_startup.py checks they agree); not
# imported, because `--help` must not import the engine (pydantic and the rest).
RECORD_MODES = ("none", "once", "new_episodes", "all")
PREFLIGHTS = ("models", "chat")


def run_flags(parser: argparse.ArgumentParser, *, yes: str, no: str) -> None:
    """Inputs, who approves, output and logs, policy and dry run."""
    parser.add_argument(
        "-i",
        "--input",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a run input, parsed by its declared type (JSON for arrays/objects)",
    )
    who = parser.add_mutually_exclusive_group()
    who.add_argument("--yes", action="store_true", help=yes)
    who.add_argument("--no", action="store_true", help=no)
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every event on stderr")
    parser.add_argument("--log-file", metavar="FILE", help="write every event as JSON lines")
    otel_flag(parser)
    parser.add_argument(
        "--policy", metavar="FILE", help="allow/ask/deny rules for gated calls (first match wins)"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="run read-only actions; report side effects instead of making them",
    )
    parser.add_argument(
        "--executor",
        metavar="WHERE",
        help="where tool calls run: local (default), dask://HOST:PORT (a Dask cluster), "
        "dask-local[:N] (a local cluster of N worker processes); else PLANLOOM_EXECUTOR",
    )
    store_flag(parser)
    model_flags(parser)
    cassette_flags(parser)


def otel_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--otel",
        action="store_true",
        help="export OpenTelemetry traces over OTLP/HTTP (to OTEL_EXPORTER_OTLP_ENDPOINT, "
        "else localhost:4318); on by itself when that variable is set",
    )


def store_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="PATH",
        help="the run store (else $PLANLOOM_HOME/runs.db, else .planloom/runs.db beside the "
        "recipe)",
    )


def cassette_flags(parser: argparse.ArgumentParser) -> None:
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


def model_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="model name (else PLANLOOM_MODEL, else the recipe's)")
    parser.add_argument(
        "--base-url", help="OpenAI-compatible endpoint (else OPENAI_BASE_URL, else OpenAI)"
    )
    parser.add_argument(
        "--llm-timeout",
        metavar="S",
        help="seconds to wait for one model answer (else PLANLOOM_LLM_TIMEOUT, else the "
        "recipe's llm: timeout; 30, or 600 for a base URL on loopback)",
    )
    parser.add_argument(
        "--llm-max-tokens",
        metavar="N",
        help="the longest model answer, in tokens, sent with every request (else "
        "PLANLOOM_LLM_MAX_TOKENS, else the recipe's llm: max_tokens; 2048)",
    )
    parser.add_argument(
        "--llm-context",
        metavar="N",
        help="the model's context window, in tokens (else PLANLOOM_LLM_CONTEXT, else the "
        "recipe's llm: context_window): a request that would not fit is not sent",
    )
    parser.add_argument(
        "--preflight",
        choices=PREFLIGHTS,
        help="the check of the model endpoint before anything runs: models (the default: "
        "GET /models) or chat (also a one-token chat request, which costs a generation)",
    )
