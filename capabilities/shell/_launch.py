"""A `shell.run` call's launcher config (from its grant), and what the launcher reported.

The launcher itself, its command line and its status messages are `capabilities.confine`'s
(`capabilities/confine/launch.py`), shared with the MCP stdio servers.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from typing import Any

from capabilities.confine.launch import files_config, flatten
from capabilities.confine.scratch import Scratch
from capabilities.protected import Scan
from capabilities.shell._models import ShellGrant, ShellResult
from engine.capability import CallContext

__all__ = ["Outcome", "launcher_config"]


def launcher_config(
    grant: ShellGrant,
    ctx: CallContext,
    root: str,
    program: str,
    scratch: Scratch,
    protected: Scan,
) -> dict[str, Any]:
    reads = [
        os.path.realpath(sys.base_prefix),
        os.path.dirname(program),
        *(os.path.realpath(os.path.join(ctx.base_dir, extra)) for extra in grant.read_paths),
    ]
    rlimits = {
        "as": grant.max_memory,
        "fsize": grant.max_file_size,
        "nproc": grant.max_processes,
        "core": 0,
    }
    if math.isfinite(ctx.timeout) and ctx.timeout >= 0:
        rlimits["cpu"] = math.ceil(ctx.timeout) + 1
    return {
        "parent": os.getpid(),
        "network": grant.network,
        "rlimits": rlimits,
        **files_config(root, scratch.tmpdir, reads, protected),
        "cgroup": scratch.cgroup,
        "memory_cgroup": scratch.memory_cgroup,
    }


@dataclass
class Outcome:
    """What `launch` saw: the program's end, its output and the launcher's reports."""

    exit_code: int
    stdout: str
    stderr: str
    truncated: bool
    messages: list[dict[str, Any]]
    setup_error: str | None = None
    exec_error: str | None = None

    def __post_init__(self) -> None:
        for message in self.messages:
            if "setup_error" in message:
                self.setup_error = str(message["setup_error"])
            if "exec_error" in message:
                self.exec_error = str(message["exec_error"])
            if "exit" in message:
                self.exit_code = int(message["exit"])
            if "signal" in message:
                self.exit_code = -int(message["signal"])

    def result(self, scratch: Scratch) -> ShellResult:
        return ShellResult(
            exit_code=self.exit_code,
            stdout=self.stdout,
            stderr=self.stderr,
            truncated=self.truncated,
            confinement=flatten(self.messages, scratch.cgroup_state, scratch.memory_state),
        )
