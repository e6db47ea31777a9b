"""The environment a `shell.run` child gets: fixed, scrubbed, and only what the grant names.

A fixed PATH, `HOME` set to the working folder, a UTF-8 locale (and a private `TMPDIR`, set
by the call) and the variables the grant names. Loader, interpreter and secret variables
are refused even when a grant asks for them (ATTACKS B9).
"""

from __future__ import annotations

import fnmatch
import os

from capabilities._shell_models import ShellGrant
from capabilities._shell_paths import SAFE_PATH
from engine.capability import CallContext
from engine.errors import CapabilityDenied
from engine.redaction import is_secret_env_name

__all__ = ["child_env", "is_refused_env"]

# Variables a child never receives, whatever the grant says (matched case-insensitively),
# by class rather than by program, since any program may read its own: loader and libc hooks;
# interpreter hooks and code search paths; variables that hold a program's options or name a
# program to run (an option refused in argv must not come back through `TAR_OPTIONS` or
# `ZIPOPT`); shell start-up hooks; the fixed PATH, HOME and TMPDIR; and secret-looking ones.
_REFUSED_ENV = (
    # the loader and libc: shared objects and code paths
    "LD_*",
    "DYLD_*",
    "GLIBC_TUNABLES",
    "MALLOC_*",
    "GCONV_PATH",
    "LOCPATH",
    "NLSPATH",
    "HOSTALIASES",
    "RES_OPTIONS",
    # interpreters: start-up code, options and module search paths
    "PYTHON*",
    "PERL*",
    "RUBY*",
    "NODE_*",
    "*JAVA_*OPTIONS",
    "JDK_*",
    "LUA_*",
    "TCL*",
    "*PATH",
    # program options and programs named by variables
    "*OPT",
    "*OPTS",
    "*OPTION*",
    "MAKEFLAGS",
    "MFLAGS",
    "GZIP",
    "BZIP*",
    "XZ_*",
    "ZSTD_*",
    "LESS*",
    "MORE",
    "*PAGER",
    "EDITOR",
    "VISUAL",
    "SHELL",
    "BROWSER",
    "*_RSH",
    "RSYNC_*",
    "SSH_*",
    "*ASKPASS*",
    "XDG_*",
    "WGETRC",
    "INPUTRC",
    "SCREENRC",
    "VIMINIT",
    "EXINIT",
    "MYVIMRC",
    "CURL_HOME",
    "SQLITE_*",
    "GIT_*",
    # shells
    "BASH_ENV",
    "ENV",
    "BASH_*",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "IFS",
    # fixed by planloom
    "HOME",
    "TMPDIR",
)
# Secrets are the engine's one rule (`is_secret_env_name`): a variable the engine redacts as
# a secret is never handed to a child either.


def is_refused_env(name: str) -> bool:
    upper = name.upper()
    return is_secret_env_name(upper) or any(
        fnmatch.fnmatchcase(upper, pattern) for pattern in _REFUSED_ENV
    )


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
