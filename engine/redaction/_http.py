"""Redacting credentials in URLs, HTTP headers and credential-named fields."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import overload
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from engine.redaction._text import REDACTED, redact_text_structures

__all__ = [
    "is_sensitive_field",
    "redact_field",
    "redact_headers",
    "redact_url",
]


_SENSITIVE_PARAMS = frozenset(
    {"key", "sig", "auth", "pwd", "code", "jwt", "session", "sessionid", "signature"}
)
_SENSITIVE_SUFFIXES = (
    "apikey",
    "api_key",
    "token",
    "secret",
    "password",
    "passwd",
    "_key",
    "_sig",
    "signature",
    "credential",
    "credentials",
)


def _is_sensitive_param(name: str) -> bool:
    normal = unquote_plus(name).strip().lower().replace("-", "_")
    return normal in _SENSITIVE_PARAMS or normal.endswith(_SENSITIVE_SUFFIXES)


def _redact_params(query: str) -> str:
    pairs = re.split(r"([&;])", query)
    for index in range(0, len(pairs), 2):
        name, equals, _value = pairs[index].partition("=")
        if equals and _is_sensitive_param(name):
            pairs[index] = f"{name}={REDACTED}"
    return "".join(pairs)


def redact_url(url: str) -> str:
    """A URL with its userinfo and sensitive query/fragment parameters redacted.

    `https://user:pass@host/p?api_key=k&q=1` → `https://[REDACTED]@host/p?api_key=[REDACTED]&q=1`.
    Sensitive parameters: `api_key`, `apikey`, `key`, `token`, `access_token`, `secret`,
    `password`, `sig`, `signature`, `auth`, `code` and names ending in `_token`, `_key`,
    `_secret`, `_password`, `signature`, `credential` (case-insensitive). Text that does not
    parse as a URL is passed through `redact_text_structures`.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text_structures(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = REDACTED + "@" + netloc.rpartition("@")[2]
    query = _redact_params(parts.query) if parts.query else parts.query
    fragment = _redact_params(parts.fragment) if "=" in parts.fragment else parts.fragment
    if (netloc, query, fragment) == (parts.netloc, parts.query, parts.fragment):
        return url  # untouched: keep the caller's exact spelling
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


SENSITIVE_WORDS = (
    "authorization",
    "cookie",
    "token",
    "secret",
    "passw",
    "apikey",
    "api-key",
    "api_key",
    "access-key",
    "access_key",
    "private-key",
    "private_key",
    "credential",
)
"""Words one of which every sensitive field name holds (lowercase), for a quick check."""
_SENSITIVE_FIELD = re.compile(
    r"(?:^|[-_])(?:authorization|cookie|token|secret|password|passwd|api[-_]?key|apikey"
    r"|access[-_]key|secret[-_]key|private[-_]key|credentials?)(?:$|[-_])",
    re.IGNORECASE,
)
_AUTH_SCHEME = re.compile(r"(?i)^\s*([a-z][a-z0-9-]*)\s+\S")


@functools.lru_cache(maxsize=4096)  # field names repeat: every event and entry has the same few
def is_sensitive_field(name: str) -> bool:
    """Whether a header or field named `name` holds a credential (`X-Api-Key`, `password`)."""
    return _SENSITIVE_FIELD.search(name) is not None


def redact_field(name: str, value: str) -> str:
    """`value` of a credential field, redacted whole (an `Authorization` keeps its scheme)."""
    if name.lower().endswith("authorization"):
        scheme = _AUTH_SCHEME.match(value)
        if scheme:
            return f"{scheme.group(1)} {REDACTED}"
    return REDACTED


@overload
def redact_headers(headers: Mapping[str, str]) -> dict[str, str]: ...
@overload
def redact_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]: ...
def redact_headers(
    headers: Mapping[str, str] | Iterable[tuple[str, str]],
) -> dict[str, str] | list[tuple[str, str]]:
    """HTTP headers with credential values redacted, as a new dict (or list of pairs).

    Redacts `Authorization` and `Proxy-Authorization` (keeping the scheme:
    `Bearer [REDACTED]`), `Cookie`, `Set-Cookie`, and any header whose name has a part
    `token`, `secret`, `password`, `api-key`, `credential`... (`X-Api-Key`,
    `X-Auth-Token`, `Private-Token`, `X-Amz-Security-Token`). Pass a list of pairs to keep
    repeated headers.
    """
    if isinstance(headers, Mapping):
        return {
            name: redact_field(name, value) if is_sensitive_field(name) else value
            for name, value in headers.items()
        }
    return [
        (name, redact_field(name, value) if is_sensitive_field(name) else value)
        for name, value in headers
    ]
