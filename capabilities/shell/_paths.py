"""Where a `shell.run` call runs: the granted folder, the working folder and the program.

Folders are compared by real path, and so is the program: a name is looked up on a fixed
safe PATH, a path is relative to the working folder, and `./rm` or a symlink `ls -> /bin/rm`
counts as `/bin/rm` (ATTACKS B8).
"""

from __future__ import annotations

import os
import shutil

from capabilities.confine.env import SAFE_PATH
from capabilities.shell._models import ACTION, ShellGrant
from engine.capability import CallContext
from engine.diagnostics import did_you_mean
from engine.errors import CapabilityDenied, StepFailed

__all__ = ["grant_root", "real_program", "resolve_program", "workdir_of"]


def grant_root(grant: ShellGrant, ctx: CallContext) -> str:
    root = os.path.realpath(os.path.join(ctx.base_dir, grant.cwd))
    if not os.path.isdir(root):
        raise StepFailed(
            f"{ACTION}: the granted folder {grant.cwd!r} ({root}) is not an existing folder",
            step_id=ctx.step_id,
        )
    return root


def workdir_of(root: str, cwd: str | None, ctx: CallContext) -> str:
    if cwd is None:
        return root
    if os.path.isabs(cwd):
        raise CapabilityDenied(
            f"cwd {cwd!r} is absolute; give a folder relative to the granted folder {root}",
            rule="shell.cwd",
            step_id=ctx.step_id,
        )
    workdir = os.path.realpath(os.path.join(root, cwd))
    if os.path.commonpath([root, workdir]) != root:
        raise CapabilityDenied(
            f"cwd {cwd!r} resolves to {workdir}, outside the granted folder {root}",
            rule="shell.cwd",
            step_id=ctx.step_id,
        )
    if not os.path.isdir(workdir):
        raise StepFailed(
            f"{ACTION}: cwd {cwd!r} ({workdir}) is not an existing folder", step_id=ctx.step_id
        )
    return workdir


def real_program(name: str, base: str) -> str | None:
    """The real path `name` stands for: a path relative to `base`, or a safe-PATH lookup."""
    if "/" in name:
        return os.path.realpath(os.path.join(base, name))
    found = shutil.which(name, path=SAFE_PATH)
    return os.path.realpath(found) if found else None


def resolve_program(name: str, workdir: str, root: str, grant: ShellGrant, ctx: CallContext) -> str:
    allowed = {real for entry in grant.allow if (real := real_program(entry, root))}
    real = real_program(name, workdir)
    if real is not None and real in allowed:
        return real

    suggestion = did_you_mean(name, grant.allow)
    hint = f" ({suggestion})" if suggestion else ""
    if real is None:
        raise CapabilityDenied(
            f"program {name!r} was not found on the safe PATH {SAFE_PATH}{hint}; "
            "use an installed program and grant it with `capabilities: shell: {allow: [NAME]}`",
            rule="shell.not-allowed",
            step_id=ctx.step_id,
        )
    grant_as = real if "/" in name else name
    raise CapabilityDenied(
        f"program {name!r} ({real}) is not in the shell allow-list{hint}; "
        f"grant it with `capabilities: shell: {{allow: [{grant_as}]}}`",
        rule="shell.not-allowed",
        step_id=ctx.step_id,
    )
