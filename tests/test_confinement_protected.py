"""Issue 10 items 3 and 15 through the CLI: what `shell.run` children may write and read.

Item 3 (ATTACKS A16 for shell children): `.git` folders and `.env*` files beneath the
granted folder are read-only to children (bind mounts in their mount namespace), and the
ones a child creates are removed and fail the step (rule `shell.protected`), unless the
shell grant lists them under `protected:`.

Item 15: children read the system folders and the jail, and from /etc only the files
ordinary programs need: never /etc/shadow (the suite runs as root, so only the
confinement stops that read).
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _procs import planloom

from capabilities import shell

_LAYERS = shell.confinement_report()
_NO_MOUNTS = _LAYERS.get("protected_paths", "").startswith("unavailable")
_HAVE_LANDLOCK = _LAYERS.get("landlock", "").startswith("active")

PAYLOAD = "#!/bin/sh\ntouch pwned\n"
CONFIG = "[core]\n\tbare = false\n"
ENV = "API_KEY=kept\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A folder holding a git-like `.git/` (hooks, config), a `.env` and a payload."""
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / ".git" / "config").write_text(CONFIG)
    (tmp_path / ".env").write_text(ENV)
    (tmp_path / "payload").write_text(PAYLOAD)
    return tmp_path


def _run(folder: Path, grant: str, steps: dict[str, list[str]]) -> dict[str, Any]:
    """`planloom run --yes --json` of one recipe: one step per entry, one after another."""
    body = "".join(
        f"  - id: {step}\n    tool: shell.run\n    params: {{argv: {json.dumps(argv)}}}\n"
        "    can_fail: true\n"
        for step, argv in steps.items()
    )
    recipe = textwrap.dedent(
        f"""\
        version: 1
        name: protected
        capabilities:
          shell: {grant}
        limits: {{max_parallel: 1, timeout: 30}}
        steps:
        """
    )
    (folder / "recipe.yaml").write_text(recipe + body)
    proc = planloom("run", "recipe.yaml", "--yes", "--json", cwd=folder)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1), proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result["steps"]


def _failed(step: dict[str, Any]) -> str:
    assert step["status"] == "failed_acceptable", step
    return str(step["error"])


@pytest.mark.slow
@pytest.mark.skipif(_NO_MOUNTS, reason="no mount namespace for read-only mounts here")
def test_children_cannot_write_existing_protected_paths(repo: Path) -> None:
    steps = _run(
        repo,
        "{allow: [cp, chmod]}",
        {
            "hook": ["cp", "payload", ".git/hooks/pre-commit"],
            "config": ["cp", "payload", ".git/config"],
            "env": ["cp", "payload", ".env"],
            "mode": ["chmod", "777", ".git/config"],
        },
    )
    for step in ("hook", "config", "env", "mode"):
        assert "Read-only file system" in _failed(steps[step])
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    assert (repo / ".git" / "config").read_text() == CONFIG
    assert (repo / ".git" / "config").stat().st_mode & 0o777 != 0o777
    assert (repo / ".env").read_text() == ENV


@pytest.mark.slow
def test_protected_paths_a_child_creates_are_removed_and_fail(repo: Path) -> None:
    steps = _run(
        repo,
        "{allow: [cp, mkdir]}",
        {
            "upper": ["cp", "payload", ".ENV"],
            "local": ["cp", "payload", ".env.local"],
            "nested": ["mkdir", "-p", "sub/.git/hooks"],
            "ordinary": ["cp", "payload", "notes.txt"],
        },
    )
    for step, rel in (("upper", ".ENV"), ("local", ".env.local"), ("nested", "sub/.git")):
        error = _failed(steps[step])
        assert "shell.protected" in error
        assert f"created {rel!r} (removed)" in error
        assert "capabilities: shell: {protected: [" in error
        assert not (repo / rel).exists()
    assert steps["ordinary"]["status"] == "succeeded"
    assert (repo / "notes.txt").read_text() == PAYLOAD
    assert (repo / ".env").read_text() == ENV


@pytest.mark.slow
def test_protected_grant_lets_the_step_write_the_hook(repo: Path) -> None:
    steps = _run(
        repo,
        "{allow: [cp, chmod], protected: ['.git/**', '.env']}",
        {
            "hook": ["cp", "payload", ".git/hooks/pre-commit"],
            "exec": ["chmod", "+x", ".git/hooks/pre-commit"],
            "env": ["cp", "payload", ".env"],
            "other": ["cp", "payload", ".env.prod"],
        },
    )
    assert steps["hook"]["status"] == "succeeded", steps["hook"]
    assert steps["exec"]["status"] == "succeeded", steps["exec"]
    assert steps["env"]["status"] == "succeeded", steps["env"]
    assert os.access(repo / ".git" / "hooks" / "pre-commit", os.X_OK)
    assert (repo / ".env").read_text() == PAYLOAD
    assert "shell.protected" in _failed(steps["other"])  # `.env` does not open `.env.prod`
    assert not (repo / ".env.prod").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_in_a_repository_reads_and_only_writes_with_the_grant(repo: Path) -> None:
    shutil.rmtree(repo / ".git")
    (repo / "file.txt").write_text("one\n")
    steps = _run(repo, "{allow: [git]}", {"init": ["git", "init", "-q", "."]})
    assert "shell.protected" in _failed(steps["init"])
    assert not (repo / ".git").exists()

    granted = "{allow: [git], protected: ['.git/**'], env: {EMAIL: a@b}}"
    steps = _run(repo, granted, {"init": ["git", "init", "-q", "."], "add": ["git", "add", "."]})
    assert steps["init"]["status"] == steps["add"]["status"] == "succeeded", steps
    steps = _run(
        repo,
        "{allow: [git]}",
        {"status": ["git", "status", "--short"], "commit": ["git", "commit", "-qm", "m"]},
    )
    assert steps["status"]["status"] == "succeeded", steps["status"]
    assert "A  file.txt" in steps["status"]["output"]["stdout"]
    assert "Read-only file system" in _failed(steps["commit"])


@pytest.mark.slow
def test_protected_paths_layer_is_reported(repo: Path) -> None:
    steps = _run(repo, "{allow: ['true']}", {"t": ["true"]})
    state = steps["t"]["output"]["confinement"]["protected_paths"]
    if not _NO_MOUNTS:
        assert state == "active (2 read-only)"  # .git and .env
    else:
        assert state.startswith("unavailable: ")
    tools = planloom("tools", cwd=repo)
    assert "protected_paths" in tools.stdout


# --- item 15: what children may read -----------------------------------------------------


@pytest.mark.skipif(not _HAVE_LANDLOCK, reason="Landlock is unavailable")
@pytest.mark.parametrize(
    "argv",
    [
        ["cat", "/etc/shadow"],
        ["cat", "/etc/gshadow"],
        ["cat", "/etc/hostname"],
        ["ls", "/etc/ssl/private"],
        ["ls", "/etc/ssh"],
        ["ls", "/root"],
        ["ls", "/var"],
    ],
)
def test_children_cannot_read_secrets_in_etc(tmp_path: Path, argv: list[str]) -> None:
    if not os.path.lexists(argv[1]):
        pytest.skip(f"{argv[1]} does not exist here")
    steps = _run(tmp_path, "{allow: [cat, ls]}", {"read": argv})
    assert "Permission denied" in _failed(steps["read"])
    assert steps["read"]["output"] is None


@pytest.mark.slow
@pytest.mark.skipif(not _HAVE_LANDLOCK, reason="Landlock is unavailable")
def test_ordinary_programs_still_find_what_they_need(tmp_path: Path) -> None:
    (tmp_path / "words.txt").write_text("b\na\n")
    steps = _run(
        tmp_path,
        "{allow: [ls, sort, date, id, cat, awk, sed, find, tar, wc, grep]}",
        {
            "ls": ["ls", "-l", "words.txt"],  # user and group names: /etc/passwd, /etc/group
            "sort": ["sort", "words.txt"],
            "date": ["date", "+%Z"],  # /etc/localtime
            "id": ["id", "-un"],
            "release": ["cat", "/etc/os-release"],
            "awk": ["awk", "{print $1}", "words.txt"],
            "sed": ["sed", "s/a/x/", "words.txt"],
            "find": ["find", ".", "-name", "*.txt"],
            "tar": ["tar", "cf", "out.tar", "words.txt"],
            "wc": ["wc", "-l", "words.txt"],
            "grep": ["grep", "-c", "a", "words.txt"],
        },
    )
    failed = {k: v["error"] for k, v in steps.items() if v["status"] != "succeeded"}
    assert not failed
    assert " root " in steps["ls"]["output"]["stdout"]  # uid 0 in the user namespace
    assert steps["sort"]["output"]["stdout"] == "a\nb\n"
    assert steps["id"]["output"]["stdout"] == "root\n"
    assert (tmp_path / "out.tar").stat().st_size > 0


def _run_parallel(folder: Path, capabilities: str, steps: str) -> dict[str, Any]:
    recipe = f"version: 1\nname: side-by-side\ncapabilities:\n{capabilities}\nsteps:\n{steps}"
    (folder / "recipe.yaml").write_text(recipe)
    proc = planloom("run", "recipe.yaml", "--yes", "--json", cwd=folder)
    assert "Traceback" not in proc.stderr, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result["steps"]


@pytest.mark.slow
def test_a_step_beside_others_cannot_hide_its_protected_write(repo: Path) -> None:
    """Steps running side by side in one folder see each other's files appear: the one
    that created `.env.x` fails whichever of them finishes first."""
    steps = _run_parallel(
        repo,
        "  shell: {allow: [cp, sleep]}",
        "".join(
            f"  - {{id: {step}, tool: shell.run, params: {{argv: {argv}}}, can_fail: true}}\n"
            for step, argv in [
                ("wait1", '[sleep, "0.5"]'),
                ("culprit", "[cp, payload, .env.x]"),
                ("wait2", '[sleep, "0.7"]'),
            ]
        ),
    )
    assert "shell.protected" in _failed(steps["culprit"])
    assert not (repo / ".env.x").exists()


@pytest.mark.slow
def test_fs_write_allowed_beside_a_shell_step_is_kept(repo: Path) -> None:
    steps = _run_parallel(
        repo,
        "  fs: {root: ., write: true, protected: ['.env.local']}\n  shell: {allow: [sleep]}",
        '  - {id: wait, tool: shell.run, params: {argv: [sleep, "0.8"]}}\n'
        "  - id: write\n    tool: fs.write\n"
        "    params: {path: .env.local, content: 'A=1'}\n"
        "    depends_on: []\n",
    )
    assert steps["wait"]["status"] == "succeeded", steps["wait"]
    assert steps["write"]["status"] == "succeeded", steps["write"]
    assert (repo / ".env.local").read_text() == "A=1"


@pytest.mark.slow
@pytest.mark.skipif(_NO_MOUNTS, reason="no mount namespace for read-only mounts here")
def test_writing_through_a_protected_symlink_cannot_change_its_target(repo: Path) -> None:
    (repo / "config").mkdir()
    (repo / "config" / "app.env").write_text(ENV)
    (repo / ".env.local").symlink_to("config/app.env")
    steps = _run(repo, "{allow: [cp]}", {"through": ["cp", "payload", ".env.local"]})
    assert "Read-only file system" in _failed(steps["through"])
    assert (repo / "config" / "app.env").read_text() == ENV


@pytest.mark.slow
def test_a_tree_too_deep_to_check_fails_closed(repo: Path) -> None:
    # Past the walk's bound a `.git` could be hidden from the read-only mounts, so a call
    # that makes the tree too deep fails, and no call starts in such a tree.
    deep = "/".join(["d"] * 70)
    steps = _run(
        repo,
        "{allow: [mkdir, cp]}",
        {
            "dig": ["mkdir", "-p", deep],
            "hook": ["cp", "payload", ".git/hooks/pre-commit"],
        },
    )
    assert "deeper than 64 levels" in _failed(steps["dig"])
    hook = _failed(steps["hook"])
    assert "shell.protected" in hook
    assert "grant a narrower folder" in hook
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()


def test_protected_everywhere_allowed_needs_no_walk(repo: Path) -> None:
    deep = "/".join(["d"] * 70)
    steps = _run(
        repo,
        "{allow: [mkdir, cp], protected: ['**']}",
        {"dig": ["mkdir", "-p", deep], "again": ["mkdir", "-p", deep + "/e"]},
    )
    assert steps["dig"]["status"] == "succeeded", steps["dig"]
    assert steps["again"]["status"] == "succeeded", steps["again"]
