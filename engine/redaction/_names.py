"""Which environment variables hold secrets, judged by their names alone."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

__all__ = ["declare_secret_env_names", "is_secret_env_name"]

_STRONG_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE|API_?KEY|ACCESS_?KEY", re.IGNORECASE
)
_WEAK_NAME = re.compile(r"KEY|AUTH|COOKIE|SESSION", re.IGNORECASE)
_NOT_SECRET_NAMES = (
    # Desktop and agent plumbing whose names contain SESSION/AUTH/KEY but whose values are
    # ids, paths or words ("ubuntu") that would be redacted all over ordinary output.
    "XDG_SESSION_*",
    "DESKTOP_SESSION",
    "DBUS_SESSION_BUS_ADDRESS",
    "SESSION_MANAGER",
    "XAUTHORITY",
    "SSH_AUTH_SOCK",
    "*AUTHOR*",
    "KEYBOARD*",
    "*KEYMAP*",
    "*KEYRING_BACKEND",
)
_ALWAYS_SECRET_NAMES = frozenset({"OPENAI_API_KEY"})
_DECLARED_NAMES: set[str] = set()


def declare_secret_env_names(names: Iterable[str]) -> None:
    """Count these variables as secrets from now on in this process, whatever their names:
    a grant that reads a credential from the environment (`headers_from_env`) says so."""
    _DECLARED_NAMES.update(name.upper() for name in names)


def is_secret_env_name(name: str) -> bool:
    """Whether an environment variable's *name* says its value is a secret.

    Names containing TOKEN, SECRET, PASSWORD, PASSWD, CREDENTIAL, PRIVATE, API_KEY/APIKEY or
    ACCESS_KEY always count. Names containing only KEY, AUTH, COOKIE or SESSION count unless
    they are well-known non-secrets (`XDG_SESSION_TYPE`, `SSH_AUTH_SOCK`, `GIT_AUTHOR_NAME`,
    `KEYBOARD...`; see `_NOT_SECRET_NAMES`). Matching is case-insensitive.
    """
    upper = name.upper()
    if upper in _ALWAYS_SECRET_NAMES or upper in _DECLARED_NAMES or _STRONG_NAME.search(upper):
        return True
    if not _WEAK_NAME.search(upper):
        return False
    return not any(fnmatch.fnmatchcase(upper, pattern) for pattern in _NOT_SECRET_NAMES)
