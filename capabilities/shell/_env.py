"""The environment a `shell.run` child gets: fixed, scrubbed, and only what the grant names.

A fixed PATH, `HOME` set to the working folder, a UTF-8 locale (and a private `TMPDIR`, set
by the call) and the variables the grant names. Loader, interpreter and secret variables
are refused even when a grant asks for them (ATTACKS B9): which, `capabilities.confine.env`
says, for every confined child.
"""

from __future__ import annotations

import os

from capabilities.confine.env import SAFE_PATH, is_refused_env
from capabilities.shell._models import ShellGrant
from engine.capability import CallContext
from engine.errors import CapabilityDenied

__all__ = ["child_env"]


def child_env(grant: ShellGrant, workdir: str, ctx: CallContext) -> dict[str, str]:
    refused = sorted({n for n in [*grant.pass_env, *grant.env] if is_refused_env(n)})
    if refused:
        raise CapabilityDenied(
            f"the shell grant names environment variables that are never passed to programs "
            f"(loader, interpreter and shell hooks, search paths, program options or programs "
            f"named by variables, PATH/HOME/TMPDIR, or secrets): {', '.join(refused)}; "
            "remove them from `pass_env`/`env` (give options as arguments, where the "
            "argument rules check them)",
            rule="shell.env",
            step_id=ctx.step_id,
        )
    env = {"PATH": SAFE_PATH, "HOME": workdir, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    for name in grant.pass_env:
        value = os.environ.get(name)
        if value is not None:
            env[name] = value
    env.update(grant.env)
    return env
