"""Variables that carry a program's options, or name a program, never reach a child.

An option the argument rules refuse in argv (`tar --checkpoint-action=exec=...`,
`zip -TT cmd`) must not come back through the environment (`TAR_OPTIONS`, `ZIPOPT`), so
the grant's `env`/`pass_env` refuses such variables by class. Through the `planloom`
command, as a user meets it.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from _procs import run_json

from capabilities.confine.env import is_refused_env as _is_refused_env
from engine.redaction import is_secret_env_name


def _recipe(folder: Path, env: dict[str, str], argv: list[str], allow: str) -> Path:
    (folder / "in.txt").write_text("data\n")
    recipe = folder / "recipe.yaml"
    recipe.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: env-classes
            capabilities:
              shell: {{allow: [{allow}], env: {json.dumps(env)}}}
            steps:
              - id: run
                tool: shell.run
                params: {{argv: {json.dumps(argv)}}}
            """
        )
    )
    return recipe


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env", "argv", "allow"),
    [
        (
            {"TAR_OPTIONS": "--checkpoint=1 --checkpoint-action=exec=touch\\ PWNED"},
            ["tar", "-cf", "a.tar", "in.txt"],
            "tar",
        ),
        (
            {"TAR_OPTIONS": "--use-compress-program=touch\\ PWNED"},
            ["tar", "-cf", "a.tar", "in.txt"],
            "tar",
        ),
        ({"ZIPOPT": "-T -TT=touch PWNED;"}, ["zip", "c.zip", "in.txt"], "zip"),
    ],
    ids=["tar-checkpoint", "tar-compress-program", "zip-testcommand"],
)
def test_option_variables_in_the_grant_are_refused(
    tmp_path: Path, env: dict[str, str], argv: list[str], allow: str
) -> None:
    proc, result = run_json(_recipe(tmp_path, env, argv, allow), tmp_path)
    step = result["steps"]["run"]
    assert step["status"] == "failed", step
    assert "shell.env" in step["error"]
    assert next(iter(env)) in step["error"]
    assert not (tmp_path / "PWNED").exists()
    assert proc.returncode == 1


@pytest.mark.slow
def test_ordinary_variables_still_reach_the_child(tmp_path: Path) -> None:
    recipe = _recipe(
        tmp_path, {"NOTES_DIR": "data", "TZ": "UTC"}, ["printenv", "NOTES_DIR"], "printenv"
    )
    _, result = run_json(recipe, tmp_path)
    assert result["steps"]["run"]["output"]["stdout"] == "data\n"


@pytest.mark.parametrize(
    "name",
    [
        "TAR_OPTIONS", "ZIPOPT", "UNZIPOPT", "XZ_OPT", "GZIP", "BZIP2", "LESSOPEN", "MANPAGER",
        "EDITOR", "VISUAL", "SHELL", "SSH_ASKPASS", "GIT_ASKPASS", "RSYNC_RSH", "XDG_CONFIG_HOME",
        "GCONV_PATH", "LOCPATH", "GLIBC_TUNABLES", "CLASSPATH", "NODE_OPTIONS", "PERL5LIB",
        "RUBYLIB", "MAKEFLAGS", "WGETRC", "TMPDIR", "ld_preload",
    ],
)  # fmt: skip
def test_each_class_of_hook_variable_is_refused(name: str) -> None:
    assert _is_refused_env(name)


@pytest.mark.parametrize("name", ["NOTES_DIR", "TZ", "LANG", "LC_ALL", "CI", "SRC", "TERM"])
def test_plain_names_pass(name: str) -> None:
    assert not _is_refused_env(name)


@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY", "DB_PASSWD", "AWS_SESSION_TOKEN", "MY_CREDENTIALS", "GH_AUTH",
        "SIGNING_KEY", "PRIVATE_PEM", "ACCESS_KEY_ID", "session_cookie",
    ],
)  # fmt: skip
def test_a_variable_the_engine_redacts_as_a_secret_never_reaches_a_child(name: str) -> None:
    # One rule: what the engine treats as a secret (and redacts) the grant cannot pass on.
    assert is_secret_env_name(name)
    assert _is_refused_env(name)


def test_passing_a_secret_variable_is_refused_through_the_cli(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, {"DB_PASSWD": "hunter22"}, ["printenv", "DB_PASSWD"], "printenv")
    _, result = run_json(recipe, tmp_path)
    step = result["steps"]["run"]
    assert step["status"] == "failed"
    assert "shell.env" in step["error"]
    assert "hunter22" not in json.dumps(result)
