"""Secret values, and keeping them out of every place a run writes to.

Two layers, both applied by `Secrets.redact` / `Secrets.redact_value`, the one pair of
functions every sink calls (logs, audit events, tool output sent to a model, exception text,
cassettes, `--json`):

* **Registered values.** `Secrets` holds known secret strings: API keys found in the
  engine's environment (`add_environ`) and secrets a recipe is granted (`add`). Each is
  redacted wherever it appears, together with its usual encodings: hex (lower and upper),
  percent-encoding, JSON string escaping, and base64 (standard and URL-safe, padded or not).
  Base64 of a secret *inside longer data* depends on the secret's offset modulo 3, so for
  each of the three alignments the characters that depend only on the secret (its "stable
  core") are registered as well; a core is found wherever that data is base64-encoded in
  one piece. This is best effort: base64 split across lines (MIME), compressed, encrypted,
  reversed or otherwise transformed secrets are not recognised, and neither is a secret
  shorter than `min_length` (default 6; shorter values would match ordinary text).
* **Structures, registry or not.** Credentials recognisable by where they stand:
  userinfo in URLs (`https://user:pass@host`), sensitive query parameters (`?api_key=`),
  `Authorization:` and cookie headers, `Bearer <token>`, `password=...` / `--token VALUE`
  in free text (exception messages, joined argv), and a few token shapes that announce
  themselves (`sk-...`, `ghp_...`, `AKIA...`, JWTs, PEM private keys). See
  `redact_text_structures`, `redact_url` and `redact_headers`.

Both layers replace what they find with `[REDACTED]` and are idempotent.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import os
import re
import threading
import traceback
from collections.abc import Iterable, Mapping
from typing import Any, overload
from urllib.parse import quote, quote_plus, unquote_plus, urlsplit, urlunsplit

__all__ = [
    "REDACTED",
    "Secrets",
    "is_secret_env_name",
    "redact_headers",
    "redact_text_structures",
    "redact_url",
]

REDACTED = "[REDACTED]"

# --- which environment variables hold secrets --------------------------------------------

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


def is_secret_env_name(name: str) -> bool:
    """Whether an environment variable's *name* says its value is a secret.

    Names containing TOKEN, SECRET, PASSWORD, PASSWD, CREDENTIAL, PRIVATE, API_KEY/APIKEY or
    ACCESS_KEY always count. Names containing only KEY, AUTH, COOKIE or SESSION count unless
    they are well-known non-secrets (`XDG_SESSION_TYPE`, `SSH_AUTH_SOCK`, `GIT_AUTHOR_NAME`,
    `KEYBOARD...`; see `_NOT_SECRET_NAMES`). Matching is case-insensitive.
    """
    upper = name.upper()
    if upper in _ALWAYS_SECRET_NAMES or _STRONG_NAME.search(upper):
        return True
    if not _WEAK_NAME.search(upper):
        return False
    return not any(fnmatch.fnmatchcase(upper, pattern) for pattern in _NOT_SECRET_NAMES)


# --- structural redaction (no registry needed) -------------------------------------------

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


def _may_hold_structures(text: str) -> bool:
    lowered = text.lower()
    return any(trigger in lowered for trigger in _TRIGGERS)


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


_SENSITIVE_FIELD = re.compile(
    r"(?:^|[-_])(?:authorization|cookie|token|secret|password|passwd|api[-_]?key|apikey"
    r"|access[-_]key|secret[-_]key|private[-_]key|credentials?)(?:$|[-_])",
    re.IGNORECASE,
)
_AUTH_SCHEME = re.compile(r"(?i)^\s*([a-z][a-z0-9-]*)\s+\S")


def _is_sensitive_field(name: str) -> bool:
    return _SENSITIVE_FIELD.search(name) is not None


def _redact_field(name: str, value: str) -> str:
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
            name: _redact_field(name, value) if _is_sensitive_field(name) else value
            for name, value in headers.items()
        }
    return [
        (name, _redact_field(name, value) if _is_sensitive_field(name) else value)
        for name, value in headers
    ]


# --- registered values ---------------------------------------------------------------------

_MIN_ENCODED = 8
"""Shortest encoded form registered: shorter base64/hex fragments would hit ordinary text."""


def _base64_forms(raw: bytes) -> set[str]:
    forms: set[str] = set()
    whole = base64.b64encode(raw).decode()
    forms.update({whole, whole.rstrip("=")})
    for offset in (0, 1, 2):
        # Encode the secret as if `offset` unknown bytes came before it and unknown bytes
        # after it, then keep only the characters that depend on the secret alone.
        encoded = base64.b64encode(b"\0" * offset + raw).decode().rstrip("=")
        head = -(-8 * offset // 6)  # ceil: characters touched by the unknown prefix
        tail = 1 if (offset + len(raw)) % 3 else 0  # last character mixes in what follows
        forms.add(encoded[head : len(encoded) - tail])
    forms |= {f.replace("+", "-").replace("/", "_") for f in forms}
    return forms


def _encodings(value: str) -> set[str]:
    raw = value.encode("utf-8", "surrogatepass")
    hexed = raw.hex()
    percent = quote(value, safe="")
    forms = {
        hexed,
        hexed.upper(),
        percent,
        re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), percent),
        quote_plus(value, safe=""),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        *_base64_forms(raw),
    }
    return {form for form in forms if len(form) >= _MIN_ENCODED}


def _trie_pattern(words: Iterable[str]) -> str:
    """One regex matching any of `words`, longest first, as a prefix tree.

    A flat `a|b|c` alternation makes the regex engine try every word at every position;
    a prefix tree branches on one character at a time, so many secrets cost little more
    than one.
    """
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}  # end of a word

    def emit(node: dict[str, Any]) -> str:
        chunks: list[str] = []
        # Follow single-child chains without recursing (secrets can be thousands long).
        while len(node) == 1 and "" not in node:
            (char, node), *_ = node.items()
            chunks.append(re.escape(char))
        if node.keys() == {""}:
            return "".join(chunks)
        branches = [re.escape(char) + emit(child) for char, child in node.items() if char]
        if "" in node:  # a word ends here: the longer ones are optional, tried first
            return "".join(chunks) + "(?:" + "|".join(branches) + ")?"
        group = "(?:" + "|".join(branches) + ")" if len(branches) > 1 else branches[0]
        return "".join(chunks) + group

    return emit(root)


_MEMO_TEXT = 200  # longest string whose redaction is remembered
_MEMO_ENTRIES = 50_000


class Secrets:
    """A thread-safe registry of secret values, and the redactor every sink calls.

    ```python
    secrets = Secrets.from_environ()  # API keys, tokens, passwords in os.environ
    secrets.add(granted_value, name="github")
    secrets.redact("token sk-... leaked")  # 'token [REDACTED] leaked'
    secrets.redact_value({"out": ["...sk-..."]})
    ```

    Args:
        values: secret strings to register now.
        min_length: values shorter than this are ignored (they would match ordinary text).
        structural: also apply `redact_text_structures` in `redact` (default on).
    """

    def __init__(
        self, values: Iterable[str] = (), *, min_length: int = 6, structural: bool = True
    ) -> None:
        self.min_length = min_length
        self.structural = structural
        self._lock = threading.Lock()
        self._values: dict[str, str | None] = {}  # value -> name, in insertion order
        self._forms: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._stale = False
        # Short strings recur (action names, rules, statuses in every event): remember
        # their redaction. Emptied whenever a secret is added.
        self._memo: dict[str, str] = {}
        for value in values:
            self.add(value)

    # registering

    def add(self, value: str, *, name: str | None = None) -> bool:
        """Register a secret (and its encodings). Returns whether it was registered.

        Values shorter than `min_length` (after stripping surrounding whitespace) are
        ignored. A multi-line value (a PEM key) also registers each long line.
        """
        stripped = value.strip()
        if len(stripped) < self.min_length:
            return False
        candidates = {value, stripped} if len(value) >= self.min_length else {stripped}
        if "\n" in stripped:
            candidates |= {
                line.strip()
                for line in stripped.splitlines()
                if len(line.strip()) >= max(self.min_length, 16)
                and not line.lstrip().startswith("-----")
            }
        forms: set[str] = set()
        for candidate in candidates:
            forms.add(candidate)
            forms |= _encodings(candidate)
        with self._lock:
            self._values.setdefault(stripped, name)
            if not forms <= self._forms:
                self._forms |= forms
                self._stale = True
                self._memo = {}
        return True

    def add_environ(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """Register the values of secret-named variables (`is_secret_env_name`).

        Also registers the password of any variable holding a credentialed URL
        (`DATABASE_URL=postgres://app:PASSWORD@db/app`). Returns the names registered.
        """
        env = os.environ if environ is None else environ
        added: list[str] = []
        for name, value in env.items():
            if is_secret_env_name(name):
                if self.add(value, name=name):
                    added.append(name)
            elif "://" in value and "@" in value:
                try:
                    password = urlsplit(value.strip()).password
                except ValueError:
                    continue
                if password and self.add(password, name=name):
                    added.append(name)
        return added

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str] | None = None, *, min_length: int = 6
    ) -> Secrets:
        """A registry holding the secrets of `environ` (default `os.environ`)."""
        secrets = cls(min_length=min_length)
        secrets.add_environ(environ)
        return secrets

    @property
    def names(self) -> list[str]:
        """The names given to registered secrets (never their values)."""
        with self._lock:
            return [name for name in self._values.values() if name is not None]

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Secrets({len(self)} values, names={self.names!r})"

    # finding

    def _compiled(self) -> re.Pattern[str] | None:
        if self._stale:
            with self._lock:
                if self._stale:
                    ordered = sorted(self._forms, key=len, reverse=True)
                    self._pattern = re.compile(_trie_pattern(ordered)) if ordered else None
                    self._stale = False
        return self._pattern

    def contains(self, text: str) -> bool:
        """Whether `text` holds a registered secret in any recognised encoding."""
        pattern = self._compiled()
        return pattern is not None and pattern.search(text) is not None

    def env_names_holding_secrets(self, env: Mapping[str, str]) -> list[str]:
        """Names in a child environment whose name or value carries a secret (for refusal)."""
        return [
            name for name, value in env.items() if is_secret_env_name(name) or self.contains(value)
        ]

    # redacting

    def redact(self, text: str) -> str:
        """`text` with every registered secret (and, if `structural`, every recognisable
        credential) replaced by `[REDACTED]`. Returns `text` itself when nothing matched."""
        short = len(text) <= _MEMO_TEXT
        if short:
            known = self._memo.get(text)
            if known is not None:
                return known
        redacted = self._redact(text)
        if short and len(self._memo) < _MEMO_ENTRIES:
            self._memo[text] = redacted
        return redacted

    def _redact(self, text: str) -> str:
        pattern = self._compiled()
        if pattern is not None:
            text = pattern.sub(REDACTED, text)
        return redact_text_structures(text) if self.structural else text

    def redact_value(self, obj: Any) -> Any:
        """A copy of JSON-like data with `redact` applied to every string, keys included.

        Dicts, lists and tuples are rebuilt (tuples stay tuples); other values are returned
        as they are. A string value under a credential-named key (`Authorization`,
        `password`, `api_key`, `X-Auth-Token`, `cookie`...) is redacted whole.
        """
        if isinstance(obj, str):
            return self.redact(obj)
        if isinstance(obj, dict):
            out: dict[Any, Any] = {}
            for key, value in obj.items():
                if isinstance(key, str) and isinstance(value, str) and _is_sensitive_field(key):
                    out[self.redact(key)] = _redact_field(key, value)
                else:
                    out[self.redact(key) if isinstance(key, str) else key] = self.redact_value(
                        value
                    )
            return out
        if isinstance(obj, list):
            return [self.redact_value(item) for item in obj]
        if isinstance(obj, tuple):
            return tuple(self.redact_value(item) for item in obj)
        return obj

    def redact_exception_text(self, exc: BaseException) -> str:
        """`str(exc)` (plus any `add_note` notes), redacted: safe to log or show a model."""
        try:
            text = str(exc)
        except Exception:  # a broken __str__ must not hide the failure being reported
            text = f"<unprintable {type(exc).__name__}>"
        notes = getattr(exc, "__notes__", None)
        if isinstance(notes, list):
            text = "\n".join([text, *map(str, notes)])
        return self.redact(text)

    def redact_traceback(self, exc: BaseException) -> str:
        """The formatted traceback of `exc`, with its chain, redacted (for `--debug`)."""
        return self.redact("".join(traceback.format_exception(exc)))

    def structlog_processor(
        self, logger: Any, method_name: str, event_dict: dict[str, Any]
    ) -> dict[str, Any]:
        """A structlog processor: put it after `format_exc_info`, before the renderer."""
        redacted: dict[str, Any] = self.redact_value(event_dict)
        return redacted
