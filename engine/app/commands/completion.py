"""`planloom completion SHELL`: print the script that makes SHELL complete planloom's
command line (see `engine.app.completion`).

A shell's start-up file runs it every time a shell starts, so the `planloom` command runs
it before building the registry (`engine.app.main`): it needs no capability.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from engine.app.completion import script
from engine.app.output import EXIT_OK

if TYPE_CHECKING:
    from engine.capability import Registry

__all__ = ["main", "print_script"]


def main(args: argparse.Namespace, registry: Registry) -> int:
    return print_script(args)


def print_script(args: argparse.Namespace) -> int:
    """Print the script for `args.shell` on stdout."""
    sys.stdout.write(script(args.shell))
    return EXIT_OK
