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

import json
import os
import re
import threading
import traceback
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from engine.redaction._encodings import encodings, trie_pattern
from engine.redaction._http import (
    SENSITIVE_WORDS,
    is_sensitive_field,
    redact_field,
    redact_headers,
    redact_url,
)
from engine.redaction._names import declare_secret_env_names, is_secret_env_name
from engine.redaction._text import REDACTED, TRIGGERS, redact_text_structures

__all__ = [
    "REDACTED",
    "Secrets",
    "declare_secret_env_names",
    "is_secret_env_name",
    "redact_headers",
    "redact_text_structures",
    "redact_url",
]

_MEMO_TEXT = 200  # longest string whose redaction is remembered
_FIELD_WORDS = re.compile(trie_pattern(SENSITIVE_WORDS))
_ANY_WORDS = re.compile(trie_pattern({*SENSITIVE_WORDS, *TRIGGERS}))
_MEMO_ENTRIES = 50_000


_CREDENTIAL = re.compile(r"(?=[^\s]*[A-Za-z])(?=[^\s]*[0-9])[^\s]{12,}")
"""A value that can be taken for a credential: 12 or more characters, no space, letters and
digits both."""


def _credential(value: str) -> str | None:
    """`value` (or what follows its auth scheme: `Bearer X`) if it looks like a credential."""
    text = value.strip()
    scheme, _, rest = text.partition(" ")
    if rest and scheme.isalpha():
        text = rest.strip()
    return text if _CREDENTIAL.fullmatch(text) and REDACTED not in text else None


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
            forms |= encodings(candidate)
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

    def add_inputs(self, inputs: Mapping[str, Any]) -> list[str]:
        """Register the string values of secret-named run inputs (`-i API_TOKEN=...`: a
        credential's name, as `is_sensitive_field` reads one). Returns the names registered.

        The executor and the run's journal both call this, with the one registry of the run:
        an input the run redacts is never written in clear.
        """
        added: list[str] = []
        for name, value in inputs.items():
            secret = isinstance(value, str) and is_sensitive_field(name)
            if secret and self.add(value, name=f"input {name}"):
                added.append(name)
        return added

    def learn(self, value: Any) -> list[str]:
        """Register the secrets JSON data (a tool's output) shows by where they stand: a
        string under a credential-named key (`access_token`, `X-Session-Token`, `password`;
        an `Authorization` value's credential, after its scheme), so that they are redacted
        wherever else they go (a later call's params, an output quoting them). Returns the
        keys they stood under.

        Only values that look like a credential are taken: at least 12 characters, no
        space, letters and digits both (`"token_type": "Bearer"` must not make every
        "Bearer" a secret); the others are still redacted where they stand.
        """
        learnt: list[str] = []
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                for key, inner in item.items():
                    if isinstance(inner, str):
                        if isinstance(key, str) and is_sensitive_field(key):
                            credential = _credential(inner)
                            if credential is not None and self.add(credential, name=key):
                                learnt.append(key)
                    elif isinstance(inner, dict | list | tuple):
                        stack.append(inner)
            elif isinstance(item, list | tuple):
                stack.extend(x for x in item if isinstance(x, dict | list | tuple))
        return learnt

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
                    self._pattern = re.compile(trie_pattern(ordered)) if ordered else None
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
            text = self._cut_tail(pattern.sub(REDACTED, text))
        return redact_text_structures(text) if self.structural else text

    def _cut_tail(self, text: str) -> str:
        """`text` with a secret it *ends inside* redacted: output cut at a size limit
        (`max_output`) can stop part-way through one, and its first characters are a
        secret's too. A tail counts from a third of the secret (at least `min_length`)."""
        for secret in list(self._values):
            least = max(self.min_length, len(secret) // 3)
            if len(secret) <= least or len(text) < least:
                continue
            start = text.rfind(secret[:least], max(0, len(text) - len(secret) + 1))
            if start != -1 and secret.startswith(text[start:]):
                return text[:start] + REDACTED
        return text

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
                if isinstance(key, str) and isinstance(value, str) and is_sensitive_field(key):
                    out[self.redact(key)] = redact_field(key, value)
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

    def redact_json(self, value: Any) -> str:
        """`value` as compact JSON text, redacted as `redact_value` redacts it.

        For large documents (a plan): one pass over the text shows whether anything in it
        can need redacting (a registered secret, a credential's trigger word, a sensitive
        field name, or an escape that could hide one), and only then is the value walked.
        """
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=repr)
        pattern = self._compiled()
        words = _ANY_WORDS if self.structural else _FIELD_WORDS
        if (
            "\\" in text
            or (pattern is not None and pattern.search(text) is not None)
            or words.search(text.lower()) is not None
        ):
            redacted = self.redact_value(value)
            return json.dumps(redacted, ensure_ascii=False, separators=(",", ":"), default=repr)
        return text

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
