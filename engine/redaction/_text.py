"""Redacting credentials in free text that are recognisable by their surroundings.

No registry is needed: credentialed URLs, `Authorization:` and cookie headers,
`Bearer <token>`, `password=...` / `--token VALUE`, and token shapes that announce
themselves (`sk-...`, `ghp_...`, `AKIA...`, JWTs, PEM private keys) are found by pattern.
"""

from __future__ import annotations

import re

from engine.redaction._encodings import trie_pattern

__all__ = ["REDACTED", "redact_text_structures"]

REDACTED = "[REDACTED]"

# Names whose value is a credential wherever `name=value` / `name: value` appears.
_NAME_CORE = (
    r"(?:api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key|access[_-]?token"
    r"|refresh[_-]?token|id[_-]?token|auth[_-]?token|client[_-]?secret"
    r"|token|secret|password|passwd|credentials?)"
)
# Names too common in prose to redact outside a URL query or fragment.
_QUERY_ONLY = r"(?:[\w.-]*[_-])?(?:key|sig|signature|auth|pwd|code|jwt|session|sessionid)"
_KNOWN_TOKENS = (
    r"sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}",  # OpenAI / Anthropic
    r"gh[pousr]_[A-Za-z0-9]{30,}",  # GitHub
    r"github_pat_[A-Za-z0-9_]{30,}",
    r"xox[abposr]-[A-Za-z0-9-]{10,}",  # Slack
    r"(?:AKIA|ASIA)[0-9A-Z]{16}",  # AWS access key id
    r"AIza[0-9A-Za-z_-]{35}",  # Google API key
    r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWT
    # A PEM private key, through its END line when there is one (base64 body only, so a
    # truncated key does not swallow the rest of the text).
    r"-----BEGIN[A-Z ]*PRIVATE KEY-----[A-Za-z0-9+/=\s]*(?:-----END[A-Z ]*PRIVATE KEY-----)?",
)


def _value(tag: str) -> str:
    """A value after a separator: quoted (redact inside the quotes) or a bare word."""
    return (
        rf""""(?P<v_{tag}_dq>[^"\r\n]+)"|'(?P<v_{tag}_sq>[^'\r\n]+)'"""
        rf"""|(?P<v_{tag}>\[REDACTED\]|[^\s"'&,;<>]+)"""
    )


_STRUCTURES = re.compile(
    "|".join(
        (
            # https://user:pass@host -> https://[REDACTED]@host ('@' allowed inside, so the
            # last '@' before the host ends the userinfo)
            r"""(?<=://)(?P<v_userinfo>[^\s/?#"'<>]+)(?=@)""",
            # Authorization: Bearer xyz (the scheme is kept)
            r"""(?<![\w-])(?:proxy-)?authorization["']?[ \t]*[:=][ \t]*["']?"""
            r"""(?:(?:bearer|basic|token|digest|bot|apikey|negotiate|ntlm)[ \t]+)?"""
            r"""(?P<v_auth>[^\s"',;]+)""",
            # Cookie: a=b; c=d  (the rest of the line)
            r"""(?<![\w-])(?:set-cookie|cookie|x-api-key|x-auth-token|private-token)["']?"""
            r"""[ \t]*:[ \t]*["']?(?P<v_header>[^\r\n"']+)""",
            # --password hunter2 / ['--token', 'xyz']  (a flag and the next argv word)
            rf"""(?<![\w-])--(?:[A-Za-z0-9]+-)*{_NAME_CORE}(?![A-Za-z0-9_])["']?"""
            rf"""(?:,[ \t]*|[ \t]+)(?:{_value("flag")})""",
            # api_key=xyz, "password": "xyz", DB_PASSWORD: xyz, ?access_token=xyz. The
            # name is a whole key (`DB_` / `app.` prefixes allowed), never the last part
            # of a path: in `cat: /run/x/secret: Permission denied` the word after the
            # colon is the error, not a value.
            rf"""(?<![\w/.-])(?:[\w.-]*?[_.-])?{_NAME_CORE}(?![A-Za-z0-9])["']?[ \t]*"""
            rf"""[:=][ \t]*(?:{_value("kv")})""",
            # ?key=xyz&sig=xyz: only inside a query string or fragment
            rf"""(?<=[?&;#]){_QUERY_ONLY}=(?P<v_query>[^&#\s"'<>]+)""",
            # Bearer xyz in prose: the token must contain a digit ("bearer of bad news")
            r"""(?<![\w-])bearer[ \t]+(?P<v_bearer>(?=[\w.~+/-]*\d)[\w.~+/-]{6,}=*)""",
            r"(?<![A-Za-z0-9])(?-i:(?P<v_shape>" + "|".join(_KNOWN_TOKENS) + "))",
        )
    ),
    re.IGNORECASE,
)
_SECRET_GROUPS = tuple(name for name in _STRUCTURES.groupindex if name.startswith("v_"))


def _replace_structure(match: re.Match[str]) -> str:
    whole = match.group()
    origin = match.start()
    for name in _SECRET_GROUPS:
        start = match.start(name)
        if start >= 0:
            return whole[: start - origin] + REDACTED + whole[match.end(name) - origin :]
    return whole  # pragma: no cover  # every alternative has one secret group


_TRIGGERS = (
    # Literals (lower case) at least one of which every match of `_STRUCTURES` contains:
    # text with none of them, most program output, skips the regex pass (~40x cheaper).
    "://",
    "authorization",
    "cookie",
    "x-api-key",
    "-token",
    "--",
    "key",
    "token",
    "secret",
    "passw",
    "credential",
    "sig=",
    "signature=",
    "auth=",
    "pwd=",
    "code=",
    "jwt=",
    "session",
    "bearer",
    "sk-",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "xox",
    "akia",
    "asia",
    "aiza",
    "eyj",
    "-----begin",
)


_TRIGGER = re.compile(trie_pattern(_TRIGGERS))


TRIGGERS = _TRIGGERS
"""Lowercase words without one of which no text holds a recognisable credential."""


def _may_hold_structures(text: str) -> bool:
    # One regex pass rather than a substring test per trigger: this runs on every string
    # redacted (each event, each journal entry).
    return _TRIGGER.search(text.lower()) is not None


def redact_text_structures(text: str) -> str:
    """Redact credentials recognisable by their surroundings, in any free text.

    Covers credentialed URLs, sensitive query parameters, `Authorization:`/`Cookie:`
    headers, `Bearer <token>` (a token containing a digit), `name=value` and
    `name: value` for credential names (`api_key`, `token`, `password`, `client_secret`,
    ...), `--password VALUE` argv pairs, and self-announcing token shapes (`sk-...`,
    `ghp_...`, `AKIA...`, JWTs, PEM private keys). No registry is needed.

    Errs towards redacting: `Password: incorrect` loses the word `incorrect`.
    """
    if not text or not _may_hold_structures(text):
        return text
    return _STRUCTURES.sub(_replace_structure, text)
