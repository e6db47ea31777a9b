"""Starting the launcher for a confined child: its command line and config, and its report.

The config says what the launcher (`_launcher.py`, run as `python -I -S`) sets up before it
executes the program: namespaces, rlimits, the pids and memory cgroups, Landlock's read and write
folders and the protected entries mounted read-only. The launcher reports back one JSON
message a line on a status pipe: setup and exec errors, the exit status and the state of
each confinement layer. A `shell.run` call's config is made by the `shell` family
(`capabilities/shell/_launch.py`); an MCP stdio server's by the `mcp` family.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from typing import Any

from capabilities.confine._layers import (
    DEVICE_READ_PATHS,
    DEVICE_WRITE_PATHS,
    SYSTEM_READ_PATHS,
    etc_read_paths,
)
from capabilities.protected import Scan

__all__ = [
    "STATUS_LIMIT",
    "config_memfd",
    "files_config",
    "flatten",
    "launcher_command",
    "parse_status",
    "readable_paths",
]

STATUS_LIMIT = 64 * 1024  # bytes kept from the launcher's status pipe
_LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_launcher.py")


def launcher_command(
    config: dict[str, Any], status_fd: int, argv: list[str]
) -> tuple[list[str], int]:
    """The launcher's command line and the memfd holding its config (the caller closes it).

    The config, with the program's argv, travels in a memfd rather than on the command
    line, so only the program itself carries its arguments (`ps`, markers in tests).
    """
    config_fd = config_memfd({**config, "argv": argv})
    python = os.path.realpath(sys.executable)
    return [python, "-I", "-S", _LAUNCHER, str(config_fd), str(status_fd)], config_fd


def config_memfd(config: dict[str, Any]) -> int:
    """A memfd holding `config` as JSON, read from its start (the caller closes it).

    Close-on-exec: `pass_fds` lets it through to the one-shot launcher, `SCM_RIGHTS` to the
    resident one.
    """
    config_fd = os.memfd_create("planloom-launch", os.MFD_CLOEXEC)
    try:
        os.write(config_fd, json.dumps(config).encode())
        os.lseek(config_fd, 0, os.SEEK_SET)
    except OSError:
        os.close(config_fd)
        raise
    return config_fd


def files_config(write_root: str, tmpdir: str, reads: list[str], protected: Scan) -> dict[str, Any]:
    """The file-system part of a launcher config, for any confined child.

    Children may read and execute from the system folders, the /etc files programs need and
    `reads`; read and write beneath `write_root` and `tmpdir` (and /dev/null, /dev/zero,
    /dev/full), except the protected entries `protected` found beneath `write_root`, which
    are mounted read-only.
    """
    return {
        "read_paths": readable_paths(reads),
        "write_paths": [write_root, tmpdir, *DEVICE_WRITE_PATHS],
        "read_only": protected.mounts(),
        "read_only_note": protected.note(),
    }


def readable_paths(reads: list[str]) -> list[str]:
    """The folders and files a confined child may read: the system's, then `reads`."""
    return [*_system_reads(), *reads]


@functools.cache
def _system_reads() -> tuple[str, ...]:
    return (*SYSTEM_READ_PATHS, *etc_read_paths(), *DEVICE_READ_PATHS)


def parse_status(data: bytes) -> list[dict[str, Any]]:
    messages = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            message = json.loads(line)
            if isinstance(message, dict):
                messages.append(message)
    return messages


def flatten(messages: list[dict[str, Any]], cgroup_state: str, memory_state: str) -> dict[str, str]:
    """The launcher's layer report as `{layer: "active ..." | "unavailable: ..."}`, with
    the states of the call's pids and memory cgroups (`Scratch.cgroup_state`,
    `Scratch.memory_state`) where the launcher joined them or was given none."""
    report: dict[str, str] = {}
    for message in messages:
        layers = message.get("layers")
        if not isinstance(layers, dict):
            continue
        for layer, state in layers.items():
            if isinstance(state, dict):  # rlimits: {name: value or "unavailable: ..."}
                parts = [f"{k}={v}" for k, v in state.items()]
                if os.getuid() == 0:  # measured: the kernel exempts (mapped) root
                    parts.append("nproc not enforced for uid 0, see pids_cgroup")
                state = "active (" + ", ".join(parts) + ")"
            report[str(layer)] = str(state)
    if report and report.get("pids_cgroup", "active") == "active":
        report["pids_cgroup"] = cgroup_state
    if report and report.get("memory_cgroup", "active") == "active":
        report["memory_cgroup"] = memory_state
    return report
