"""Flags shared by the commands that run a session (`run`, `plan`, `replay`)."""

from __future__ import annotations

import argparse

from engine.cassette import RECORD_MODES

__all__ = ["cassette_flags", "model_flags"]


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
