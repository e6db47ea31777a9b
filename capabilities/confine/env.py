"""The environment every confined child may have: a fixed PATH, and the variables it never gets.

`shell.run` children and MCP stdio servers get the same PATH and are refused the same
variables, whatever their grant names: loader, interpreter, shell and program-option hooks,
search paths, the fixed PATH, HOME and TMPDIR, and secrets (ATTACKS B9).
"""

from __future__ import annotations

import fnmatch

__all__ = ["SAFE_PATH", "is_refused_env"]

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"

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
    # here, not at the top: a grant with no `env` (and `planloom validate`) needs no redaction
    from engine.redaction import is_secret_env_name

    upper = name.upper()
    return is_secret_env_name(upper) or any(
        fnmatch.fnmatchcase(upper, pattern) for pattern in _REFUSED_ENV
    )
