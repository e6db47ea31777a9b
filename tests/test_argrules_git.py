"""`git` inside `shell.run`: diffs work, the repository's own programs do not run.

Issue 10 item 9: `git diff` always failed, because the sandbox set `diff.external` to an
empty string and git tried to run "". External diff drivers and textconv filters are now
switched off with `--no-ext-diff --no-textconv`, so a repository whose `.git/config` names
such programs (or whose global config in HOME, the working folder, does) cannot make them
run, and `git diff`, `git log -p`, `git show`, `git status` and `git commit` work. Through
the `planloom` command, in a real repository made in `tmp_path`.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _procs import run_json

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

MARKERS = ("EXTERNAL_RAN", "TEXTCONV_RAN", "DRIVER_RAN", "FILTER_RAN", "INCLUDE_RAN", "GLOBAL_RAN")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@e", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(repo), "GIT_CONFIG_NOSYSTEM": "1"},
        timeout=30,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one commit and an uncommitted change to `notes.txt`."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", ".")
    (repo / "notes.txt").write_text("first line\n")
    (repo / "data.bin").write_text("binary-ish\n")
    (repo / ".gitattributes").write_text(
        "*.txt diff=evil filter=evil\n*.bin diff=driver filter=inc\n"
    )
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    (repo / "notes.txt").write_text("first line\nsecond line\n")
    (repo / "data.bin").write_text("binary-ish, changed\n")
    return repo


def _hostile(repo: Path) -> None:
    """Config that names programs which leave a marker file when they run."""

    def command(marker: str) -> str:
        script = repo / f"{marker.lower()}.sh"
        script.write_text(
            f'#!/bin/sh\ntouch "{repo / marker}"\nif [ -n "$1" ]; then cat "$1"; else cat; fi\n'
        )
        script.chmod(0o755)
        return str(script)

    hostile = textwrap.dedent(
        f"""\
        [diff]
            external = {command("EXTERNAL_RAN")}
        [diff "evil"]
            textconv = {command("TEXTCONV_RAN")}
        [diff "driver"]
            command = {command("DRIVER_RAN")}
        [filter "evil"]
            clean = {command("FILTER_RAN")}
        [include]
            path = ../more.config
        """
    )
    # Included files count too (here: the filter `.gitattributes` gives the .bin file).
    (repo / "more.config").write_text(f"[filter.inc]\n    clean = {command('INCLUDE_RAN')}\n")
    with (repo / ".git" / "config").open("a") as config:
        config.write(hostile)
    # HOME is the working folder inside the sandbox: a .gitconfig there is no user's, and
    # it must not be read as the global config (here: a clean filter git would run).
    (repo / ".gitconfig").write_text(
        f"[diff]\n    external = {command('GLOBAL_RAN')}\n"
        f'[filter "evil"]\n    clean = {command("GLOBAL_RAN")}\n'
    )


RECIPE = """\
    version: 1
    name: git-in-shell
    capabilities:
      shell: {allow: [git], cwd: repo}
    steps:
      - {id: status, tool: shell.run, params: {argv: [git, status, --short]}}
      - {id: diff, tool: shell.run, params: {argv: [git, diff]}}
      - {id: log, tool: shell.run, params: {argv: [git, log, -p, "-1", "--format=%s"]}}
      - {id: show, tool: shell.run, params: {argv: [git, show, --stat, --patch, HEAD]}}
    """

# Committing writes `.git`, which children may only write when the grant opens it.
COMMIT_RECIPE = """\
    version: 1
    name: git-commit-in-shell
    capabilities:
      shell: {allow: [git], cwd: repo, env: {EMAIL: t@e}, protected: [".git/**"]}
    steps:
      - id: commit
        tool: shell.run
        params: {argv: [git, commit, -q, -a, -m, second, --author, "t <t@e>"]}
      - id: log
        tool: shell.run
        params: {argv: [git, log, -p, "-1", "--format=%s"]}
        depends_on: [commit]
    """


def _run(tmp_path: Path, recipe: str = RECIPE) -> dict[str, Any]:
    (tmp_path / "recipe.yaml").write_text(textwrap.dedent(recipe))
    result: dict[str, Any] = run_json("recipe.yaml", tmp_path)[1]
    return result


def _succeeded(result: dict[str, Any]) -> None:
    assert result["status"] != "invalid", result
    failed = {k: v["error"] for k, v in result["steps"].items() if v["status"] != "succeeded"}
    assert not failed, failed
    assert result["status"] == "succeeded"


def _stdout(result: dict[str, Any], step: str) -> str:
    text: str = result["steps"][step]["output"]["stdout"]
    return text


def _assert_diffs_work(result: dict[str, Any]) -> None:
    _succeeded(result)
    assert _stdout(result, "status").startswith(" M data.bin\n M notes.txt\n")
    diff = _stdout(result, "diff")
    assert "+second line" in diff, diff
    assert "+binary-ish, changed" in diff, diff
    for step in ("log", "show"):
        stdout = _stdout(result, step)
        assert "+first line" in stdout, (step, stdout)
        assert "+binary-ish" in stdout, (step, stdout)
    assert _stdout(result, "log").startswith("first\n")


def test_git_status_diff_log_and_show_work(tmp_path: Path, repo: Path) -> None:
    _assert_diffs_work(_run(tmp_path))


def test_repository_diff_programs_do_not_run(tmp_path: Path, repo: Path) -> None:
    _hostile(repo)
    result = _run(tmp_path)
    assert [m for m in MARKERS if (repo / m).exists()] == []
    _assert_diffs_work(result)


def test_git_commit_works(tmp_path: Path, repo: Path) -> None:
    _hostile(repo)
    result = _run(tmp_path, COMMIT_RECIPE)
    _succeeded(result)
    log = _stdout(result, "log")
    assert log.startswith("second\n")
    assert "+second line" in log
    assert [m for m in MARKERS if (repo / m).exists()] == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["diff"], ["diff", "--no-ext-diff", "--no-textconv"]),
        (["-C", "sub", "log", "-p"], ["-C", "sub", "log", "--no-ext-diff", "--no-textconv", "-p"]),
        (["stash", "show", "-p"], ["stash", "show", "--no-ext-diff", "--no-textconv", "-p"]),
        (["stash", "list", "-p"], ["stash", "list", "--no-ext-diff", "--no-textconv", "-p"]),
        (["stash", "push"], ["stash", "push"]),
        (["reflog", "-p"], ["reflog", "--no-ext-diff", "--no-textconv", "-p"]),
        (["reflog", "expire", "--all"], ["reflog", "expire", "--all"]),
        (["blame", "f"], ["blame", "--no-textconv", "f"]),
        (["status"], ["status"]),
        (["--version"], ["--version"]),
    ],
)
def test_diff_printing_subcommands_get_the_flags(args: list[str], expected: list[str]) -> None:
    from capabilities.shell.argrules import ArgContext, final_arguments

    git = shutil.which("git") or "/usr/bin/git"
    assert final_arguments(args, ArgContext(git, "/j", "/j")) == expected


def test_named_program_settings_are_reset(tmp_path: Path, repo: Path) -> None:
    from capabilities.shell._gitconfig import git_env  # new in this change

    _hostile(repo)
    with (repo / ".git" / "config").open("a") as config:
        config.write('[remote "origin"]\n  uploadpack = evil\n')
    env = git_env(["status"], str(repo), str(tmp_path))
    settings = {
        env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"]
        for i in range(int(env["GIT_CONFIG_COUNT"]))
    }
    assert settings["filter.evil.clean"] == ""
    assert settings["filter.inc.clean"] == ""  # from the included file, legacy header
    assert settings["remote.origin.uploadpack"] == "git-upload-pack"
    assert settings["core.hooksPath"] == "/dev/null"
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null"
