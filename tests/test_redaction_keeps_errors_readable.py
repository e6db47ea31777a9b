"""Redaction leaves error messages about files named `secret` readable.

`name: value` / `name=value` is redacted for credential names (`secret`, `token`,
`password`, ...) when the name is a key; a name that ends a path (`/run/x/secret: ...`) is
a file, and the words after it are the error (`Permission denied`), not a value.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _procs import planloom

from engine.redaction import REDACTED, redact_text_structures


@pytest.mark.parametrize(
    "text",
    [
        "open('/tmp/x/secret'): Permission denied",
        "cat: /tmp/x/secret: Permission denied",
        "ls: cannot access 'nosuch/secret': No such file or directory",
        "cp: cannot open '/srv/app/db_password': Permission denied",
        "~/.secret: Permission denied",
        "C:/data/token: Access is denied",
    ],
)
def test_a_path_ending_in_a_credential_name_is_not_a_key(text: str) -> None:
    assert redact_text_structures(text) == text


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("secret: abc123", f"secret: {REDACTED}"),
        ("SECRET=abc123", f"SECRET={REDACTED}"),
        ("--secret abc123", f"--secret {REDACTED}"),
        ("export DB_PASSWORD=hunter22", f"export DB_PASSWORD={REDACTED}"),
        ("app.secret: abc123", f"app.secret: {REDACTED}"),
        ("x-api-key=abc123", f"x-api-key={REDACTED}"),
        ('{"client_secret": "abc123"}', f'{{"client_secret": "{REDACTED}"}}'),
        ("https://h/p?token=abc123", f"https://h/p?token={REDACTED}"),
    ],
)
def test_credentials_after_a_key_are_still_redacted(text: str, redacted: str) -> None:
    assert redact_text_structures(text) == redacted


def test_a_shell_error_about_a_file_named_secret_reaches_the_user_intact(
    tmp_path: Path,
) -> None:
    (tmp_path / "work" / "sub" / "secret").mkdir(parents=True)  # cat on a folder fails
    (tmp_path / "job.yaml").write_text(
        "version: 1\nname: readable\ncapabilities:\n  shell: {allow: [cat], cwd: work}\n"
        "steps:\n  - {id: show, tool: shell.run, params: {argv: [cat, sub/secret]}}\n",
        encoding="utf-8",
    )
    done = planloom("run", "job.yaml", "--yes", "--json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    error = json.loads(done.stdout)["steps"]["show"]["error"]
    assert "sub/secret: Is a directory" in error
    assert REDACTED not in error
