"""Secrets are redacted wherever they would be written: plain, encoded, or by their shape."""

from __future__ import annotations

import base64
import json
import threading
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.redaction import (
    REDACTED,
    Secrets,
    is_secret_env_name,
    redact_headers,
    redact_text_structures,
    redact_url,
)

CANARY = "sk-canary-7f3a9c1e2b4d"


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> Secrets:
    monkeypatch.setenv("PLANLOOM_TEST_API_KEY", CANARY)
    return Secrets.from_environ()


# --- the registry ------------------------------------------------------------------------


def test_from_environ_finds_the_planted_canary(secrets: Secrets) -> None:
    assert "PLANLOOM_TEST_API_KEY" in secrets.names
    assert secrets.redact(f"key is {CANARY}.") == f"key is {REDACTED}."
    assert CANARY not in repr(secrets)


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("OPENAI_API_KEY", True),
        ("github_token", True),
        ("DB_PASSWORD", True),
        ("MYSQL_PASSWD", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("GOOGLE_CREDENTIALS", True),
        ("SSH_PRIVATE", True),
        ("X_AUTH", True),
        ("SESSION_COOKIE", True),
        ("STRIPE_KEY", True),
        ("PATH", False),
        ("HOME", False),
        ("XDG_SESSION_TYPE", False),
        ("SSH_AUTH_SOCK", False),
        ("GIT_AUTHOR_NAME", False),
        ("KEYBOARD_LAYOUT", False),
        ("DBUS_SESSION_BUS_ADDRESS", False),
    ],
)
def test_secret_env_names(name: str, *, secret: bool) -> None:
    assert is_secret_env_name(name) is secret


def test_from_environ_skips_non_secret_names_and_short_values() -> None:
    env = {
        "XDG_SESSION_DESKTOP": "ubuntu",
        "EDITOR": "vim-with-long-name",
        "API_TOKEN": "abc",  # too short to redact without hitting ordinary words
        "REAL_TOKEN": "tok-1234567890",
    }
    secrets = Secrets.from_environ(env)
    assert secrets.names == ["REAL_TOKEN"]
    assert secrets.redact("ubuntu vim-with-long-name abc") == "ubuntu vim-with-long-name abc"


def test_from_environ_takes_the_password_out_of_a_database_url() -> None:
    secrets = Secrets.from_environ({"DATABASE_URL": "postgres://app:Hunter2Hunter2@db/app"})
    assert secrets.redact("auth failed for Hunter2Hunter2") == f"auth failed for {REDACTED}"


def test_min_length_is_configurable() -> None:
    assert not Secrets().add("abc12")
    short = Secrets(min_length=3)
    assert short.add("abc")
    assert short.redact("xabcx") == f"x{REDACTED}x"


def test_base64_of_the_secret_alone_padded_unpadded_and_urlsafe(secrets: Secrets) -> None:
    raw = CANARY.encode()
    for encoded in (
        base64.b64encode(raw).decode(),
        base64.b64encode(raw).decode().rstrip("="),
        base64.urlsafe_b64encode(raw).decode(),
    ):
        assert secrets.redact(f"data: {encoded}") == f"data: {REDACTED}"


@pytest.mark.parametrize("before", [b"", b"x", b"xy", b"Bearer "])
@pytest.mark.parametrize("after", [b"", b"\n", b"!!"])
def test_base64_of_text_holding_the_secret_at_every_alignment(
    secrets: Secrets, before: bytes, after: bytes
) -> None:
    """Best effort: the secret's stable base64 core is found; a few edge characters stay."""
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        encoded = encode(before + CANARY.encode() + after).decode()
        redacted = secrets.redact(encoded)
        assert REDACTED in redacted
        assert len(redacted) < len(encoded)  # the core is gone, not just wrapped


def test_base64_of_basic_auth_credentials(secrets: Secrets) -> None:
    header = base64.b64encode(f"user:{CANARY}".encode()).decode()
    assert REDACTED in secrets.redact(header)


@pytest.mark.parametrize(
    "encoded",
    [
        CANARY.encode().hex(),
        CANARY.encode().hex().upper(),
        quote(f"{CANARY}/+", safe=""),
        json.dumps({"k": CANARY}),
    ],
)
def test_hex_percent_and_json_forms(encoded: str) -> None:
    secrets = Secrets([CANARY, f"{CANARY}/+"])
    assert CANARY not in secrets.redact(encoded)
    assert REDACTED in secrets.redact(encoded)


def test_special_characters_in_secrets_are_literal() -> None:
    secrets = Secrets(["p@ss.w*rd(1)"])
    assert secrets.redact("x p@ss.w*rd(1) pXss.wwrd(1)") == f"x {REDACTED} pXss.wwrd(1)"


def test_longest_secret_wins_when_one_contains_another() -> None:
    secrets = Secrets(["abcdef", "abcdefghij"])
    assert secrets.redact("abcdefghij abcdef") == f"{REDACTED} {REDACTED}"


def test_multiline_secret_lines_are_registered() -> None:
    key = (
        "-----BEGIN X-----\nMIIEvQIBADANBgkqhkiG9w0BAQEF\nAASCBKcwggSjAgEAAoIBAQC7\n-----END X-----"
    )
    secrets = Secrets([key])
    assert "MIIEvQIBADANBgkqhkiG9w0BAQEF" not in secrets.redact("line MIIEvQIBADANBgkqhkiG9w0BAQEF")


def test_redact_value_recurses_into_keys_values_lists_and_tuples(secrets: Secrets) -> None:
    data = {
        f"by-{CANARY}": [CANARY, (f"x{CANARY}", 3)],
        "nested": {"deep": [{"v": f"{CANARY}!"}]},
        "n": None,
        "i": 7,
    }
    out = secrets.redact_value(data)
    assert CANARY not in json.dumps(out)
    assert out == {
        f"by-{REDACTED}": [REDACTED, (f"x{REDACTED}", 3)],
        "nested": {"deep": [{"v": f"{REDACTED}!"}]},
        "n": None,
        "i": 7,
    }
    assert data[f"by-{CANARY}"] == [CANARY, (f"x{CANARY}", 3)]  # the input is untouched


def test_redact_value_redacts_credential_named_fields() -> None:
    out = Secrets().redact_value(
        {"Authorization": "Bearer abc", "password": "hunter2", "api_key": "zz", "name": "bob"}
    )
    assert out == {
        "Authorization": f"Bearer {REDACTED}",
        "password": REDACTED,
        "api_key": REDACTED,
        "name": "bob",
    }


def test_exception_text_is_redacted(secrets: Secrets) -> None:
    try:
        raise RuntimeError(f"call failed: {CANARY}")
    except RuntimeError as exc:
        exc.add_note(f"argv: ['tool', '--key-file', 'x', '--token', '{CANARY}']")
        text = secrets.redact_exception_text(exc)
        trace = secrets.redact_traceback(exc)
    assert CANARY not in text
    assert CANARY not in trace
    assert text.startswith(f"call failed: {REDACTED}")


def test_exception_with_a_credentialed_url_is_redacted_without_a_registry() -> None:
    exc = ConnectionError("GET https://bob:Sup3rS3cret@api.example.com/v1?api_key=k123 failed")
    text = Secrets().redact_exception_text(exc)
    assert "Sup3rS3cret" not in text
    assert "k123" not in text
    assert "api.example.com" in text


def test_structlog_processor_redacts_the_event_dict(secrets: Secrets) -> None:
    event = {"event": "tool.finished", "error": f"bad {CANARY}", "exception": CANARY}
    assert CANARY not in json.dumps(secrets.structlog_processor(None, "info", event))


def test_child_env_holding_secrets_is_reported(secrets: Secrets) -> None:
    env = {"PATH": "/usr/bin", "HOME": "/w", "PASSED": f"x{CANARY}", "GH_TOKEN": "short"}
    assert secrets.env_names_holding_secrets(env) == ["PASSED", "GH_TOKEN"]


@pytest.mark.slow
def test_adding_concurrently_is_safe() -> None:
    secrets = Secrets()
    values = [f"secret-value-{i:04d}" for i in range(200)]

    def add(chunk: list[str]) -> None:
        for value in chunk:
            secrets.add(value)
            secrets.redact(value)

    threads = [threading.Thread(target=add, args=(values[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(secrets) == 200
    assert secrets.redact(" ".join(values)) == " ".join([REDACTED] * 200)


@pytest.mark.slow
def test_many_secrets_stay_fast() -> None:
    import time

    secrets = Secrets([f"tok-{i:06d}-{i * 7919:08x}" for i in range(1000)])
    text = "ordinary log line with words and numbers 12345\n" * 20_000  # ~1 MB
    secrets.redact("warm up")  # builds the pattern
    start = time.perf_counter()
    assert secrets.redact(text) == text
    assert time.perf_counter() - start < 1.0


# --- structural redaction -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "https://user:pass@example.com/x",
            f"https://{REDACTED}@example.com/x",
        ),
        (
            "https://example.com/v1?api_key=abc&q=cats&Token=t1",
            f"https://example.com/v1?api_key={REDACTED}&q=cats&Token={REDACTED}",
        ),
        (
            "https://s3.example.com/o?X-Amz-Credential=AK&X-Amz-Signature=ff&x=1",
            f"https://s3.example.com/o?X-Amz-Credential={REDACTED}&X-Amz-Signature={REDACTED}&x=1",
        ),
        (
            "https://cb.example.com/#access_token=zzz&state=1",
            f"https://cb.example.com/#access_token={REDACTED}&state=1",
        ),
        ("https://example.com/a?page=2&sort=asc", "https://example.com/a?page=2&sort=asc"),
    ],
)
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert redact_text_structures(f"GET {url} -> 500") == f"GET {expected} -> 500"


def test_redact_headers_keeps_the_auth_scheme_and_repeated_headers() -> None:
    headers = {
        "Authorization": "Bearer sk-live-123",
        "Proxy-Authorization": "Basic dXNlcjpwYXNz",
        "Cookie": "sid=1",
        "X-Api-Key": "k",
        "X-Auth-Token": "t",
        "Accept": "application/json",
    }
    assert redact_headers(headers) == {
        "Authorization": f"Bearer {REDACTED}",
        "Proxy-Authorization": f"Basic {REDACTED}",
        "Cookie": REDACTED,
        "X-Api-Key": REDACTED,
        "X-Auth-Token": REDACTED,
        "Accept": "application/json",
    }
    pairs = [("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"), ("Vary", "Accept")]
    assert redact_headers(pairs) == [
        ("Set-Cookie", REDACTED),
        ("Set-Cookie", REDACTED),
        ("Vary", "Accept"),
    ]


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("request had Authorization: Bearer abc.def-123", "abc.def-123"),
        ('headers={"authorization": "Basic dXNlcjpwYXNz"}', "dXNlcjpwYXNz"),
        ("sent with Bearer eyJhbGciOi.x9 to the API", "eyJhbGciOi.x9"),
        ("Cookie: sessionid=abc123; csrftoken=zz", "abc123"),
        ("config api_key=live_987654 loaded", "live_987654"),
        ('{"password": "hunter 2 with spaces"}', "hunter 2 with spaces"),
        ("DB_PASSWORD: s3cr3t-value", "s3cr3t-value"),
        ("argv ['mysql', '--password', 'pw-value-1']", "pw-value-1"),
        ("mysql --db-password pw-value-2 -h db", "pw-value-2"),
        ("git clone https://x-access-token:ghs_abcd@github.com/o/r", "ghs_abcd"),
        ("token ghp_0123456789abcdefghijABCDEFGHIJ012345 leaked", "ghp_0123456789abcdefghij"),
        ("aws AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
        ("key sk-proj-AbCdEfGhIjKlMnOpQrStUvWx", "AbCdEfGhIjKlMnOpQrStUvWx"),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY----- ok",
            "MIIEpAIBAAKCAQEA",
        ),
    ],
)
def test_credentials_in_free_text(text: str, secret: str) -> None:
    redacted = redact_text_structures(text)
    assert secret not in redacted
    assert REDACTED in redacted
    assert redact_text_structures(redacted) == redacted  # idempotent


@pytest.mark.parametrize(
    "text",
    [
        "The quick brown fox jumps over the lazy dog.",
        "Authorization failed for user bob; see https://example.com/help?page=2",
        "max_tokens=512 prompt_tokens=10 completion_tokens: 5",
        "the bearer of bad news arrived; bearer bonds",
        "sort key=name, primary key (id), keyboard shortcuts",
        "mail bob@example.com or git@github.com:org/repo.git",
        'Traceback (most recent call last):\n  File "x.py", line 3, in <module>',
        "monkey donkey turkey; a tokenizer tokenizes tokens",
        "-----BEGIN CERTIFICATE-----",
        "",
    ],
)
def test_ordinary_text_is_unchanged(text: str) -> None:
    assert redact_text_structures(text) == text
    assert Secrets([CANARY]).redact(text) == text


# --- properties --------------------------------------------------------------------------

_SECRET = st.text(alphabet=st.characters(codec="utf-8"), min_size=6, max_size=40).filter(
    lambda s: len(s.strip()) >= 6
)


@given(before=st.text(), after=st.text(), secret=_SECRET)
def test_redact_never_leaves_the_secret(before: str, after: str, secret: str) -> None:
    secrets = Secrets([secret], structural=False)
    assert secret.strip() not in secrets.redact(before + secret + after)


@given(text=st.text())
def test_text_without_secrets_comes_back_unchanged(text: str) -> None:
    secrets = Secrets([CANARY])
    if CANARY not in text:
        assert secrets.redact(text) == text


@given(before=st.binary(max_size=20), after=st.binary(max_size=20))
def test_base64_core_found_at_any_offset(before: bytes, after: bytes) -> None:
    secrets = Secrets([CANARY], structural=False)
    encoded = base64.b64encode(before + CANARY.encode() + after).decode()
    assert REDACTED in secrets.redact(encoded)


def test_a_secret_added_later_is_redacted_in_text_already_seen() -> None:
    secrets = Secrets()
    text = "deploy key is zq81-late-secret-44"
    assert secrets.redact(text) == text  # seen (and remembered) before the secret exists
    secrets.add("zq81-late-secret-44")
    assert secrets.redact(text) == "deploy key is [REDACTED]"
