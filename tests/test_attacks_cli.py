"""The attack battery driven through a recipe and the real CLI.

Every attack is one step of one recipe run with `on_failure: continue` and `--yes` (so
gates do not hide what the sandbox itself refuses). Each step must end `failed` with the
denying rule in its error; a last, harmless step proves the run went on; the exit code is
1; and nothing happened outside the jail.

Written out in the recipe, a path, URL or program the grant refuses is refused by
`planloom validate` already; so the run's battery gives those from templates (as data
reaches a run), and the written-out battery is checked against validation on its own.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from _procs import planloom
from ruamel.yaml import YAML

PLANLOOM = str(Path(sys.executable).parent / "planloom")
SECRET = "outside-secret-2b7f\n"


class Attack(NamedTuple):
    id: str
    tool: str
    params: dict[str, Any]
    rule: str  # the text that must appear in the step's error


FS_ATTACKS = [
    Attack("a1_dotdot", "fs.read", {"path": "../../secret.txt"}, "fs.outside-root"),
    Attack("a2_absolute", "fs.read", {"path": "/etc/passwd"}, "fs.absolute-path"),
    Attack("a3_sub_dotdot", "fs.read", {"path": "sub/../../secret.txt"}, "fs.outside-root"),
    Attack("a4_sibling", "fs.read", {"path": "../J2/x.txt"}, "fs.outside-root"),
    Attack("a5_file_link", "fs.read", {"path": "link"}, "fs.symlink"),
    Attack("a5_abs_link", "fs.read", {"path": "abs"}, "fs.symlink"),
    Attack("a6_hardlink", "fs.read", {"path": "hard"}, "fs.hardlink"),
    Attack("a7_dir_link", "fs.read", {"path": "dirlink/secret.txt"}, "fs.symlink"),
    Attack("a8_write_link", "fs.write", {"path": "link", "content": "x"}, "fs.symlink"),
    Attack("a9_dangling", "fs.write", {"path": "new", "content": "x"}, "fs.symlink"),
    Attack("a11_nul", "fs.read", {"path": "ok.txt\x00../../etc/passwd"}, "fs.nul-byte"),
    Attack("a13_fifo", "fs.read", {"path": "fifo"}, "fs.not-regular"),
    Attack(
        "a16_git_hook",
        "fs.write",
        {"path": ".git/hooks/pre-commit", "content": "x"},
        "fs.protected",
    ),
    Attack("a16_env", "fs.write", {"path": ".ENV", "content": "x"}, "fs.protected"),
]

# Values only known at run time (templates), so the run-time gate decides, not validation.
POLICY_ATTACKS = [
    Attack("e9_extra_field", "fs.read", {"path": "ok.txt", "mode": "${{ 'r' }}"}, "params-schema"),
    Attack("e9_wrong_type", "fs.read", {"path": "${{ ['ok.txt'] }}"}, "params-schema"),
    Attack("e9_ten_megabytes", "fs.read", {"path": "${{ 'x' * 10000000 }}"}, "params-schema"),
]

READ_ONLY_ATTACKS = [
    Attack(
        "e8_write_with_read_grant",
        "fs.write",
        {"path": "x.txt", "content": "x"},
        "fs.write-not-granted",
    ),
    Attack("e8_delete_with_read_grant", "fs.delete", {"path": "ok.txt"}, "fs.write-not-granted"),
]

SHELL_ATTACKS = [
    Attack(
        "b1_metachar_literal", "shell.run", {"argv": ["ls", "; touch ../pwned"]}, "exited with code"
    ),
    Attack(
        "b2_find_exec",
        "shell.run",
        {"argv": ["find", ".", "-exec", "sh", "-c", "id", ";"]},
        "shell.argument",
    ),
    Attack("b3_sed_e", "shell.run", {"argv": ["sed", "-n", "1e id", "ok.txt"]}, "shell.argument"),
    Attack(
        "b3_tar_checkpoint",
        "shell.run",
        {
            "argv": [
                "tar",
                "-cf",
                "x.tar",
                "--checkpoint=1",
                "--checkpoint-action=exec=id",
                "ok.txt",
            ]
        },
        "shell.argument",
    ),
    Attack(
        "b4_git_alias", "shell.run", {"argv": ["git", "-c", "alias.x=!id", "x"]}, "shell.argument"
    ),
    Attack(
        "b5_sort_output",
        "shell.run",
        {"argv": ["sort", "-o", "../pwned", "ok.txt"]},
        "shell.output-path",
    ),
    Attack("b6_env_wrapper", "shell.run", {"argv": ["env", "id"]}, "shell.argument"),
    Attack("b6_sh_c", "shell.run", {"argv": ["sh", "-c", "touch ../pwned"]}, "shell.argument"),
    Attack(
        "b8_not_allowed",
        "shell.run",
        {"argv": ["/usr/bin/rm", "-rf", "../J2"]},
        "shell.not-allowed",
    ),
    Attack("cwd_escape", "shell.run", {"argv": ["ls"], "cwd": "../"}, "shell.cwd"),
]

SHELL_GRANT = {
    "shell": {"allow": ["ls", "find", "sed", "tar", "git", "sort", "env", "sh"], "cwd": "J"},
    "fs": {"root": "J", "read": True},
}

BATTERIES = {
    "filesystem": (FS_ATTACKS, {"fs": {"root": "J", "read": True, "write": True}}),
    "policy": (POLICY_ATTACKS, {"fs": {"root": "J", "read": True, "write": True}}),
    "read-only": (READ_ONLY_ATTACKS, {"fs": {"root": "J", "read": True}}),
    "shell": (SHELL_ATTACKS, SHELL_GRANT),
}


def build_jail(root: Path) -> Path:
    jail = root / "J"
    (jail / "sub").mkdir(parents=True)
    (jail / "ok.txt").write_text("ok\n")
    (root / "J2").mkdir()
    (root / "J2" / "x.txt").write_text("sibling\n")
    (root / "secret.txt").write_text(SECRET)
    (jail / "link").symlink_to("../secret.txt")
    (jail / "abs").symlink_to("/etc/passwd")
    os.link(root / "secret.txt", jail / "hard")
    (jail / "dirlink").symlink_to("..")
    (jail / "new").symlink_to(root / "evil.txt")
    os.mkfifo(jail / "fifo")
    (jail / ".git" / "hooks").mkdir(parents=True)
    return jail


def snapshot(root: Path, jail: Path) -> dict[str, bytes]:
    """Every regular file outside the jail, with its content."""
    files = {}
    for path in sorted(root.rglob("*")):
        if jail in path.parents or path == jail or not path.is_file() or path.is_symlink():
            continue
        files[str(path.relative_to(root))] = path.read_bytes()
    return files


def from_template(value: str) -> str:
    """`value` as a template of a string literal: known at run time only."""
    return "${{ " + json.dumps(value) + " }}"


def at_run_time(attack: Attack) -> Attack:
    """The attack with the field validation checks against the grant (`fs` path, `http`
    url, `shell` program) given by a template, so that the run's sandbox refuses it."""
    params = dict(attack.params)
    family = attack.tool.split(".")[0]
    key = {"fs": "path", "http": "url"}.get(family)
    if key is not None and isinstance(params.get(key), str) and "${{" not in params[key]:
        params[key] = from_template(params[key])
    argv = params.get("argv")
    if family == "shell" and isinstance(argv, list) and argv and "${{" not in argv[0]:
        params["argv"] = [from_template(argv[0]), *argv[1:]]
    return attack._replace(params=params)


def recipe(attacks: list[Attack], grants: dict[str, Any]) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [
        {"id": a.id, "tool": a.tool, "params": a.params} for a in attacks
    ]
    steps.append(
        {
            "id": "still_running",
            "tool": "fs.read",
            "params": {"path": "ok.txt"},
            "depends_on": [a.id for a in attacks],
        }
    )
    return {
        "version": 1,
        "name": "attacks",
        "on_failure": "continue",
        "capabilities": grants,
        "steps": steps,
    }


def run_cli(path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`planloom run PATH --yes --json`, bounded."""
    return planloom("run", path, "--yes", "--json", cwd=cwd, environ=dict(os.environ), timeout=120)


def run_battery(tmp_path: Path, attacks: list[Attack], grants: dict[str, Any]) -> dict[str, Any]:
    path = tmp_path / "attacks.yaml"
    with path.open("w") as handle:
        YAML().dump(recipe([at_run_time(a) for a in attacks], grants), handle)
    done = run_cli(path, tmp_path)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 1, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def assert_refused(result: dict[str, Any], attacks: list[Attack]) -> None:
    assert result["status"] == "failed"
    wrong = {
        a.id: result["steps"][a.id]
        for a in attacks
        if result["steps"][a.id]["status"] != "failed"
        or a.rule not in result["steps"][a.id]["error"]
    }
    assert wrong == {}, json.dumps(wrong, indent=1)[:4000]
    # a skipped dependent would mean the run stopped; depends_on failed steps under continue
    # are skipped, so the harmless step must be skipped *because of* the failures, not
    # because the run crashed:
    assert result["steps"]["still_running"]["status"] == "skipped"


@pytest.mark.parametrize("battery", sorted(BATTERIES))
def test_battery_written_out_is_refused_at_validation(tmp_path: Path, battery: str) -> None:
    attacks, grants = BATTERIES[battery]
    build_jail(tmp_path)
    path = tmp_path / "attacks.yaml"
    with path.open("w") as handle:
        YAML().dump(recipe(attacks, grants), handle)

    done = planloom("validate", "--json", path, cwd=tmp_path, environ=dict(os.environ))

    problems = json.loads(done.stdout)
    assert done.returncode == (2 if problems else 0), done.stderr
    if battery != "policy":  # (its attacks are templates already: run-time values)
        assert problems, "validation let through every written-out attack"
    rules = {a.rule for a in attacks}
    # each problem is an attack's own refusal, said before anything runs
    assert all(any(p["rule"].startswith(r) for r in rules) for p in problems), problems
    assert len(problems) <= len(attacks)


@pytest.mark.parametrize("battery", sorted(BATTERIES))
def test_battery_through_the_cli(tmp_path: Path, battery: str) -> None:
    attacks, grants = BATTERIES[battery]
    jail = build_jail(tmp_path)
    before = snapshot(tmp_path, jail)
    result = run_battery(tmp_path, attacks, grants)
    assert_refused(result, attacks)
    after = snapshot(tmp_path, jail)
    after.pop("attacks.yaml", None)
    before.pop("attacks.yaml", None)
    # planloom's own run store beside the recipe: the one file the run itself writes
    assert sorted(p for p in after if p not in before) == [".planloom/runs.db"]
    after.pop(".planloom/runs.db")
    assert after == before  # nothing outside the jail was created or changed
    assert not (tmp_path / "evil.txt").exists()
    outputs = json.dumps(result)
    assert SECRET.strip() not in outputs
    assert "root:x:0:0" not in outputs
    assert (jail / "ok.txt").read_text() == "ok\n"
    assert not (tmp_path / "pwned").exists()
    assert (tmp_path / "J2" / "x.txt").exists()


class _Counter(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self) -> None:
        type(self).hits += 1
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_http_battery_through_the_cli_reaches_no_server(tmp_path: Path) -> None:
    build_jail(tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Counter)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        attacks = [
            Attack(
                "c1_plain_http",
                "http.request",
                {"url": f"http://allowed.example:{port}/"},
                "http.scheme",
            ),
            Attack(
                "c2_loopback",
                "http.request",
                {"url": f"https://127.0.0.1:{port}/"},
                "http.host-not-allowed",
            ),
            Attack(
                "c2_localhost",
                "http.request",
                {"url": f"https://localhost:{port}/"},
                "http.host-not-allowed",
            ),
            Attack(
                "c13_parser_confusion",
                "http.request",
                {"url": f"https://127.0.0.1:{port}\\@allowed.example/"},
                "http.",
            ),
            Attack(
                "c14_userinfo",
                "http.request",
                {"url": "https://user:pass@allowed.example/"},
                "http.userinfo",
            ),
            Attack("c15_file", "http.request", {"url": "file:///etc/passwd"}, "http.scheme"),
            Attack(
                "c15_gopher", "http.request", {"url": f"gopher://127.0.0.1:{port}/"}, "http.scheme"
            ),
            Attack(
                "c17_port",
                "http.request",
                {"url": "https://allowed.example:22/"},
                "http.port-not-allowed",
            ),
        ]
        grants = {"http": {"allow": ["allowed.example"]}, "fs": {"root": "J", "read": True}}
        result = run_battery(tmp_path, attacks, grants)
        assert_refused(result, attacks)
    finally:
        server.shutdown()
        server.server_close()
    assert _Counter.hits == 0


def test_ungranted_and_unknown_tools_are_refused_before_anything_runs(tmp_path: Path) -> None:
    build_jail(tmp_path)
    doc = recipe(
        [
            Attack("e8_shell_not_granted", "shell.run", {"argv": ["touch", "../pwned"]}, ""),
            Attack("e8_unknown_tool", "fs.exec", {"path": "ok.txt"}, ""),
        ],
        {"fs": {"root": "J", "read": True}},
    )
    path = tmp_path / "r.yaml"
    with path.open("w") as handle:
        YAML().dump(doc, handle)
    done = run_cli(path, tmp_path)
    assert done.returncode == 2
    rules = sorted(e["rule"] for e in json.loads(done.stdout)["errors"])
    assert rules == ["not-granted", "unknown-tool"]
    assert not (tmp_path / "pwned").exists()


@pytest.mark.slow
def test_an_independent_step_keeps_running_after_attacks(tmp_path: Path) -> None:
    build_jail(tmp_path)
    doc = recipe([at_run_time(a) for a in FS_ATTACKS[:3]], {"fs": {"root": "J", "read": True}})
    doc["steps"].append({"id": "independent", "tool": "fs.read", "params": {"path": "ok.txt"}})
    path = tmp_path / "r.yaml"
    with path.open("w") as handle:
        YAML().dump(doc, handle)
    done = run_cli(path, tmp_path)
    result = json.loads(done.stdout)
    assert done.returncode == 1
    assert result["steps"]["independent"]["status"] == "succeeded"
    assert result["steps"]["independent"]["output"]["content"] == "ok\n"
