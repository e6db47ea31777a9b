"""Which confinement layers this machine gives `shell.run` children: one probe, once."""

from __future__ import annotations

import functools
import io
import os
import subprocess
import tempfile
from pathlib import Path

from capabilities import protected as protected_entries
from capabilities.confine.env import SAFE_PATH
from capabilities.confine.launch import STATUS_LIMIT, flatten, launcher_command, parse_status
from capabilities.confine.scratch import Scratch
from capabilities.shell._launch import launcher_config
from capabilities.shell._models import ShellGrant
from capabilities.shell._paths import real_program
from engine.capability import CallContext

__all__ = ["confinement_report"]


@functools.cache
def confinement_report() -> dict[str, str]:
    """Which confinement layers this machine gives `shell.run` children, probed once.

    Each entry is "active ..." or "unavailable: <reason>"; for `planloom tools` and audits.
    """
    grant = ShellGrant(allow=["true"])
    program = real_program("true", "/") or "/bin/true"
    with tempfile.TemporaryDirectory(prefix="planloom-probe-") as folder:
        ctx = CallContext(grant=grant, base_dir=Path(folder), timeout=10.0)
        real = os.path.realpath(folder)
        # One protected file, so the probe mounts one read-only as a real call would.
        Path(real, ".env").touch()
        protected = protected_entries.scan(real, [])
        with Scratch(grant.max_processes, grant.max_memory) as scratch:
            config = launcher_config(grant, ctx, real, program, scratch, protected)
            status_r, status_w = os.pipe()
            command, config_fd = launcher_command(config, status_w, [program])
            try:
                proc = subprocess.run(
                    command,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    pass_fds=(status_w, config_fd),
                    cwd=folder,
                    env={"PATH": SAFE_PATH, "LANG": "C.UTF-8"},
                    timeout=10.0,
                    check=False,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                return {"launcher": f"unavailable: {exc}"}
            finally:
                os.close(status_w)
                os.close(config_fd)
            with io.FileIO(status_r, "rb") as pipe:
                messages = parse_status(pipe.read(STATUS_LIMIT))
            report = flatten(messages, scratch.cgroup_state, scratch.memory_state)
    if report.get("protected_paths", "").startswith("active"):
        report["protected_paths"] = f"active (read-only bind mounts of {protected_entries.WHAT})"
    if proc.returncode != 0 and not report:
        report["launcher"] = f"unavailable: exit {proc.returncode}: {proc.stderr[-500:]!r}"
    return report
