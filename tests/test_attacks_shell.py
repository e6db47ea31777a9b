"""ATTACKS.md section B against `shell.run`: one test (or a few) per row, B1-B21.

Setup per test: a jail J (holding ok.txt and sub/), a sibling J2 and a file outside, all
under `tmp_path`. Each test asserts the refusal (exception type and rule id) or the
contained outcome, and that nothing happened: no file appeared or changed outside J, and
no process carrying the test's unique marker argument is alive afterwards (zombies count
as gone). Every fork, loop and output is bounded; nothing relies on Unix permissions (the
suite runs as root) and nothing reaches beyond 127.0.0.1 / 10.255.255.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _procs import gone, marker_seconds, pids_with

from capabilities import shell
from capabilities.shell import ShellGrant, ShellParams, ShellResult
from engine.capability import CallContext
from engine.errors import CapabilityDenied, StepFailed, StepTimeout

PYTHON = os.path.realpath(sys.executable)
_LAYERS = shell.confinement_report()
_HAVE_PIDNS = _LAYERS.get("pid_namespace") == "active"
_HAVE_NETNS = _LAYERS.get("network_namespace") == "active"
_HAVE_LANDLOCK = _LAYERS.get("landlock", "").startswith("active")


# --- helpers ---------------------------------------------------------------------------------


def _snapshot(tmp_path: Path) -> dict[str, bytes | None]:
    """Everything under `tmp_path` except J: path -> content (None for folders/links)."""
    seen: dict[str, bytes | None] = {}
    for path in sorted(tmp_path.rglob("*")):
        rel = path.relative_to(tmp_path)
        if rel.parts[0] == "J":
            continue
        is_file = path.is_file() and not path.is_symlink()
        seen[str(rel)] = path.read_bytes() if is_file else None
    return seen


@pytest.fixture
def jail(tmp_path: Path) -> Iterator[Path]:
    """J with ok.txt and sub/, a sibling J2, a secret outside; checks nothing leaked out."""
    root = tmp_path / "J"
    (root / "sub").mkdir(parents=True)
    (root / "ok.txt").write_text("ok\n")
    (tmp_path / "J2").mkdir()
    (tmp_path / "J2" / "x").write_text("j2\n")
    (tmp_path / "secret").write_text("secret\n")
    before = _snapshot(tmp_path)
    yield root
    assert _snapshot(tmp_path) == before, "a file outside the jail was created or changed"


def _run(
    jail: Path,
    argv: list[str],
    *,
    timeout: float = 10.0,
    check: bool = True,
    cwd: str | None = None,
    **grant: Any,
) -> ShellResult:
    ctx = CallContext(grant=ShellGrant(cwd="J", **grant), base_dir=jail.parent, timeout=timeout)
    return asyncio.run(shell.run(ShellParams(argv=argv, cwd=cwd, check=check), ctx))


def _denied(jail: Path, argv: list[str], rule: str, **grant: Any) -> CapabilityDenied:
    with pytest.raises(CapabilityDenied) as info:
        _run(jail, argv, **grant)
    assert info.value.rule == rule, info.value.message
    return info.value


# --- B1: shell syntax is never interpreted ---------------------------------------------------


@pytest.mark.parametrize(
    "text", ["ok.txt; touch pwned", "$(touch pwned)", "`touch pwned`", "a && touch pwned", "a\nb"]
)
def test_b1_metacharacters_stay_literal(jail: Path, text: str) -> None:
    result = _run(jail, ["echo", text], allow=["echo"])
    assert result.stdout == text + "\n"
    assert not (jail / "pwned").exists()


def test_b1_command_line_as_program_is_denied(jail: Path) -> None:
    _denied(jail, ["ls; cat /etc/passwd"], "shell.not-allowed", allow=["ls"])


# --- B2-B4: exec-escape flags ----------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["find", ".", "-exec", "sh", "-c", "id", ";"],
        ["find", ".", "-execdir", "touch", "pwned", ";"],
        ["find", ".", "-ok", "id", ";"],
        ["find", ".", "-delete"],
        ["find", ".", "-fprint", "../pwned"],
    ],
)
def test_b2_find_exec_flags_are_denied(jail: Path, argv: list[str]) -> None:
    error = _denied(jail, argv, "shell.argument", allow=["find"])
    assert "find" in error.message
    assert "unsafe_args" in error.message
    assert (jail / "ok.txt").exists()
    assert not (jail / "pwned").exists()


def test_b2_find_without_actions_runs(jail: Path) -> None:
    result = _run(jail, ["find", ".", "-name", "*.txt"], allow=["find"])
    assert result.stdout == "./ok.txt\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["sed", "-n", "1e touch pwned", "ok.txt"],
        ["sed", "s/ok/touch pwned/e", "ok.txt"],
        ["sed", "-e", "p", "-e", "w ../pwned", "ok.txt"],
        ["sed", "--expression=1W ../pwned", "ok.txt"],
        ["sed", "s/ok/x/w ../pwned", "ok.txt"],
        ["sed", "-ne", "$!{e touch pwned\n}", "ok.txt"],
        ["sed", "-f", "script.sed", "ok.txt"],
        ["sed", "s/a/b/q", "ok.txt"],  # unknown flag: refused rather than guessed
        ["sed", "-i", "s/ok/no/", "../secret"],
    ],
)
def test_b3_sed_exec_and_write_commands_are_denied(jail: Path, argv: list[str]) -> None:
    (jail / "script.sed").write_text("1e touch pwned\n")
    with pytest.raises(CapabilityDenied) as info:
        _run(jail, argv, allow=["sed"])
    assert info.value.rule in ("shell.argument", "shell.output-path")
    assert not (jail / "pwned").exists()


def test_b3_plain_sed_script_runs(jail: Path) -> None:
    result = _run(jail, ["sed", "-n", "s/ok/fine/p;/x/d", "ok.txt"], allow=["sed"])
    assert result.stdout == "fine\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["tar", "cf", "a.tar", "ok.txt", "--checkpoint=1", "--checkpoint-action=exec=id"],
        ["tar", "xf", "a.tar", "--to-command=id"],
        ["tar", "-c", "-I", "id", "-f", "a.tar", "ok.txt"],
        ["tar", "--use-compress-program=id", "-cf", "a.tar", "ok.txt"],
        ["tar", "-cf", "evil:host.tar", "ok.txt"],
    ],
)
def test_b3_tar_exec_options_are_denied(jail: Path, argv: list[str]) -> None:
    _denied(jail, argv, "shell.argument", allow=["tar"])
    assert not (jail / "a.tar").exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@pytest.mark.parametrize(
    "argv",
    [
        ["git", "-c", "alias.x=!touch pwned", "x"],
        ["git", "-c", "core.sshCommand=touch pwned", "fetch", "ssh://h/r"],
        ["git", "clone", "--upload-pack=touch pwned", "x", "y"],
        ["git", "fetch", "-u", "touch pwned", "origin"],
        ["git", "--config-env=core.pager=X", "log"],
        ["git", "x"],  # not a built-in: could be an alias from the repository's config
        ["git", "config", "alias.x", "!touch pwned"],
        ["git", "rebase", "--exec", "touch pwned"],
    ],
)
def test_b4_git_exec_options_are_denied(jail: Path, argv: list[str]) -> None:
    _denied(jail, argv, "shell.argument", allow=["git"])
    assert not (jail / "pwned").exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_b4_repository_hooks_do_not_run(jail: Path) -> None:
    repo = {"allow": ["git"], "protected": [".git/**"]}  # the steps may write .git
    _run(jail, ["git", "init", "-q", "."], **repo)
    hook = jail / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\ntouch pwned\n")
    hook.chmod(0o755)
    _run(jail, ["git", "add", "ok.txt"], **repo)
    commit = ["git", "commit", "-q", "-m", "m", "--author", "a <a@b>"]
    result = _run(jail, commit, env={"EMAIL": "a@b"}, **repo)
    assert result.exit_code == 0  # the commit happened, so the hook would have run
    assert not (jail / "pwned").exists()
    log = _run(jail, ["git", "log", "--format=%an"], allow=["git"])
    assert log.stdout == "a\n"


# --- B5 and B7: output flags are held to the jail ---------------------------------------------


@pytest.mark.parametrize(
    ("argv", "allow"),
    [
        (["sort", "-o", "../pwned", "ok.txt"], "sort"),
        (["sort", "-o../pwned", "ok.txt"], "sort"),
        (["sort", "-uo", "../J2/pwned", "ok.txt"], "sort"),
        (["curl", "-o", "/etc/pwned", "file:///dev/null"], "curl"),
        (["curl", "-so", "../pwned", "file:///dev/null"], "curl"),
        (["wget", "-O", "../pwned", "http://127.0.0.1:9/"], "wget"),
        (["tee", "../pwned"], "tee"),
        (["dd", "if=ok.txt", "of=../pwned"], "dd"),
        (["cp", "ok.txt", "../pwned"], "cp"),
        (["mv", "ok.txt", "../pwned"], "mv"),
        (["ln", "/etc/passwd", "h"], "ln"),
        (["rm", "-f", "../secret"], "rm"),
    ],
)
def test_b5_output_outside_the_jail_is_denied(jail: Path, argv: list[str], allow: str) -> None:
    if shutil.which(allow) is None:
        pytest.skip(f"{allow} is not installed")
    _denied(jail, argv, "shell.output-path", allow=[allow])
    assert (jail / "ok.txt").exists()


def test_b5_output_inside_the_jail_is_allowed(jail: Path) -> None:
    _run(jail, ["sort", "-o", "sub/sorted.txt", "ok.txt"], allow=["sort"])
    assert (jail / "sub" / "sorted.txt").read_text() == "ok\n"


@pytest.mark.parametrize("name", ["--output=/etc/pwned", "--output=../pwned", "-o../pwned"])
def test_b7_file_name_that_looks_like_an_option_is_refused(jail: Path, name: str) -> None:
    # A template put a file name here; without `--` sort would read it as an option.
    _denied(jail, ["sort", name], "shell.output-path", allow=["sort"])


def test_b7_end_of_options_makes_dash_names_operands(jail: Path) -> None:
    (jail / "-n").write_text("from the file\n")
    result = _run(jail, ["cat", "-n"], allow=["cat"], end_of_options=True)
    assert result.stdout == "from the file\n"


# --- B6: wrappers, interpreters, awk -----------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "allow"),
    [
        (["env", "touch", "pwned"], "env"),
        (["env", "-S", "touch pwned"], "env"),
        (["xargs", "touch"], "xargs"),
        (["timeout", "5", "touch", "pwned"], "timeout"),
        (["nice", "touch", "pwned"], "nice"),
        (["nohup", "touch", "pwned"], "nohup"),
        (["setsid", "touch", "pwned"], "setsid"),
        (["stdbuf", "-o0", "touch", "pwned"], "stdbuf"),
        (["sh", "-c", "touch pwned"], "sh"),
        (["bash", "-c", "touch pwned"], "bash"),
        (["sh", "-s"], "sh"),
        (["sh", "../J2/x"], "sh"),
        ([PYTHON, "-c", "open('pwned', 'w')"], PYTHON),
        (["perl", "-e", "open(F, '>pwned')"], "perl"),
        (["awk", 'BEGIN{system("touch pwned")}'], "awk"),
        (["awk", 'BEGIN{print "x" | "sh"}'], "awk"),
        (["awk", 'BEGIN{"touch pwned" | getline}'], "awk"),
        (["awk", 'BEGIN{print "x" > "pwned"}'], "awk"),
        (["awk", "-f", "prog.awk"], "awk"),
    ],
)
def test_b6_wrappers_and_interpreters_are_denied(jail: Path, argv: list[str], allow: str) -> None:
    if shutil.which(allow) is None and not os.path.isabs(allow):
        pytest.skip(f"{allow} is not installed")
    (jail / "script.sh").write_text("touch pwned\n")
    (jail / "prog.awk").write_text('BEGIN{system("touch pwned")}\n')
    error = _denied(jail, argv, "shell.argument", allow=[allow])
    assert "unsafe_args" in error.message
    assert not (jail / "pwned").exists()


def test_b6_granted_interpreter_runs_but_stays_confined(jail: Path) -> None:
    script = "touch inside; touch ../outside; echo done"
    result = _run(jail, ["sh", "-c", script], allow=["sh"], unsafe_args=["sh"], check=False)
    assert (jail / "inside").exists()
    assert "done" in result.stdout
    if _HAVE_LANDLOCK:
        assert "Permission denied" in result.stderr
    # the jail fixture asserts ../outside was not created


def test_b6_unsafe_args_without_allow_is_still_denied(jail: Path) -> None:
    _denied(jail, ["sh", "-c", "id"], "shell.not-allowed", allow=["echo"], unsafe_args=["sh"])


def test_b6_plain_awk_and_env_listing_run(jail: Path) -> None:
    result = _run(jail, ["awk", "-F", ":", "NR == 1 || /x|y/ {print $1}", "ok.txt"], allow=["awk"])
    assert result.stdout == "ok\n"
    # `print $1 > 0` is not a comparison in awk: it writes a file named "0".
    _denied(jail, ["awk", "{print $1 > 0}", "ok.txt"], "shell.argument", allow=["awk"])
    assert not (jail / "0").exists()
    listing = _run(jail, ["env"], allow=["env"])
    assert "PATH=/usr/local/bin:/usr/bin:/bin" in listing.stdout


# --- B8: decisions by real path -----------------------------------------------------------------


def test_b8_real_path_decides(jail: Path) -> None:
    rm = os.path.realpath(shutil.which("rm") or "/bin/rm")
    (jail / "ls").symlink_to(rm)
    for argv in (["/usr/bin/rm", "ok.txt"], ["./ls", "ok.txt"], [rm, "ok.txt"]):
        error = _denied(jail, argv, "shell.not-allowed", allow=["ls"])
        assert "/rm" in error.message
    assert (jail / "ok.txt").exists()


# --- B9: environment ------------------------------------------------------------------------


# B9's caller-environment row is tests/test_shell.py::test_b9_child_env_is_scrubbed, which
# asserts the exact set of variables a child gets (so every hostile one is absent).


@pytest.mark.parametrize(
    "grant",
    [
        {"env": {"LD_PRELOAD": "x.so"}},
        {"env": {"PATH": "/tmp"}},
        {"pass_env": ["GITHUB_TOKEN"]},
        {"env": {"PYTHONPATH": "."}},
    ],
)
def test_b9_dangerous_grant_env_is_refused(jail: Path, grant: dict[str, Any]) -> None:
    _denied(jail, ["env"], "shell.env", allow=["env"], **grant)


# --- B10-B17: resources and the process tree ---------------------------------------------------


def test_b10_bounded_fork_bomb_is_contained(jail: Path) -> None:
    marker = marker_seconds(30)
    script = f"for i in $(seq 500); do sleep {marker} & done; wait"
    start = time.monotonic()
    result: ShellResult | None = None
    # Without a pids cgroup, the 500 sleepers run until the wall timeout.
    with contextlib.suppress(StepTimeout):
        result = _run(
            jail,
            ["sh", "-c", script],
            timeout=5.0,
            check=False,
            allow=["sh"],
            unsafe_args=["sh"],
            max_processes=64,
        )
    assert time.monotonic() - start < 10.0
    if _LAYERS.get("pids_cgroup", "").startswith("active"):
        assert result is not None
        assert "fork" in result.stderr.lower()  # stopped at the pids limit
    assert gone(lambda: pids_with(marker))


def test_b11_yes_is_capped_and_killed(jail: Path) -> None:
    start = time.monotonic()
    result = _run(jail, ["yes"], allow=["yes"], max_output=4096, check=False)
    assert time.monotonic() - start < 5.0
    assert result.truncated
    assert len(result.stdout) == 4096
    # A run cut short by the cap is not a success: with `check` (the default) it fails.
    with pytest.raises(StepFailed, match="passed max_output"):
        _run(jail, ["yes"], allow=["yes"], max_output=4096)


def test_b12_sleep_is_killed_at_the_wall_timeout(jail: Path) -> None:
    marker = marker_seconds(3600)
    with pytest.raises(StepTimeout) as info:
        _run(jail, ["sleep", marker], timeout=0.5, allow=["sleep"])
    assert info.value.kind == "timeout"
    assert gone(lambda: pids_with(marker))


def test_b13_busy_loop_is_killed(jail: Path) -> None:
    marker = f"planloom-{uuid.uuid4().hex}"
    start = time.monotonic()
    argv = [PYTHON, "-c", "while 1: pass", marker]
    with pytest.raises(StepTimeout):
        _run(jail, argv, timeout=1.0, allow=[PYTHON], unsafe_args=[PYTHON])
    assert time.monotonic() - start < 4.0
    assert gone(lambda: pids_with(marker))


def test_b14_background_child_dies_with_the_call(jail: Path) -> None:
    marker = marker_seconds(600)
    start = time.monotonic()
    result = _run(jail, ["sh", "-c", f"sleep {marker} & echo ok"], allow=["sh"], unsafe_args=["sh"])
    assert result.stdout == "ok\n"
    assert time.monotonic() - start < 3.0
    assert gone(lambda: pids_with(marker))


@pytest.mark.parametrize(
    "script",
    [
        "setsid sleep {m} > /dev/null 2>&1 < /dev/null & echo ok",
        "(sh -c 'sleep {m} > /dev/null 2>&1 &' &); echo ok",
        "setsid sh -c 'setsid sleep {m} > /dev/null 2>&1 &' & sleep 0.2; echo ok",
    ],
)
def test_b15_setsid_and_double_fork_die_too(jail: Path, script: str) -> None:
    if not _HAVE_PIDNS and not _LAYERS.get("pids_cgroup", "").startswith("active"):
        pytest.skip("neither a PID namespace nor a pids cgroup on this machine")
    marker = marker_seconds(600)
    argv = ["sh", "-c", script.format(m=marker)]
    result = _run(jail, argv, allow=["sh"], unsafe_args=["sh"])
    assert result.stdout == "ok\n"
    assert gone(lambda: pids_with(marker))


def test_b15_python_daemon_dies_too(jail: Path) -> None:
    marker = f"planloom-{uuid.uuid4().hex}"
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.closerange(0, 3)\n"
        "        time.sleep(600)\n"
        "    os._exit(0)\n"
        "print('parent done')\n"
    )
    result = _run(jail, [PYTHON, "-c", code, marker], allow=[PYTHON], unsafe_args=[PYTHON])
    assert result.stdout == "parent done\n"
    assert gone(lambda: pids_with(marker))


def test_b16_huge_allocation_fails_and_engine_survives(jail: Path) -> None:
    code = "bytearray(8 << 30)"
    argv = [PYTHON, "-c", code]
    if _LAYERS.get("memory_cgroup", "").startswith("active"):
        # The kernel kills it at max_memory of resident pages (a lower one than the
        # default: filling 2 GiB takes seconds), and the step says so.
        grant: dict[str, Any] = {"allow": [PYTHON], "unsafe_args": [PYTHON]}
        with pytest.raises(StepFailed, match=r"went over max_memory \(256 MiB\)"):
            _run(jail, argv, check=False, max_memory=256 << 20, **grant)
    else:
        result = _run(jail, argv, allow=[PYTHON], unsafe_args=[PYTHON], check=False)
        assert result.exit_code != 0
        assert "MemoryError" in result.stderr or result.exit_code < 0
        assert result.confinement["rlimits"].startswith("active (as=2147483648")
    again = _run(jail, ["echo", "alive"], allow=["echo"])
    assert again.stdout == "alive\n"


def test_b17_huge_file_stops_at_the_size_limit(jail: Path) -> None:
    limit = 10 << 20
    start = time.monotonic()
    result = _run(
        jail,
        ["sh", "-c", "head -c 10G /dev/zero > big"],
        allow=["sh"],
        unsafe_args=["sh"],
        max_file_size=limit,
        check=False,
    )
    assert time.monotonic() - start < 10.0
    assert result.exit_code != 0
    assert (jail / "big").stat().st_size <= limit


# --- B18: network -------------------------------------------------------------------------------

_NET_PROBE = """
import socket, sys
port = int(sys.argv[1])
for host, p in (("127.0.0.1", port), ("10.255.255.1", 80)):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect((host, p))
        print("tcp", host, "connected")
    except OSError as exc:
        print("tcp", host, "error", exc.errno)
    finally:
        s.close()
for host in ("127.0.0.1", "10.255.255.1"):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.sendto(b"x" * 12, (host, 53))
        print("udp", host, "sent")
    except OSError as exc:
        print("udp", host, "error", exc.errno)
    finally:
        u.close()
"""


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    try:
        yield int(server.getsockname()[1])
    finally:
        server.close()


def test_b18_no_tcp_or_udp_without_a_network_grant(jail: Path, listener: int) -> None:
    if not (_HAVE_NETNS or _HAVE_LANDLOCK):
        pytest.skip("no network namespace and no Landlock here")
    argv = [PYTHON, "-c", _NET_PROBE, str(listener)]
    result = _run(jail, argv, allow=[PYTHON], unsafe_args=[PYTHON], timeout=20.0)
    lines = result.stdout.splitlines()
    assert len(lines) == 4, result.stderr
    for line in lines:
        assert " error " in line, line
    if _HAVE_NETNS:
        assert result.confinement["network_namespace"] == "active"


def test_b18_network_grant_reaches_the_local_listener(jail: Path, listener: int) -> None:
    argv = [PYTHON, "-c", _NET_PROBE, str(listener)]
    result = _run(jail, argv, allow=[PYTHON], unsafe_args=[PYTHON], network=True, timeout=20.0)
    assert "tcp 127.0.0.1 connected" in result.stdout
    assert result.confinement["network_namespace"].startswith("not used")


# --- B19: privileges ----------------------------------------------------------------------------


def test_b19_no_new_privs_is_set(jail: Path) -> None:
    result = _run(jail, ["cat", "/proc/self/status"], allow=["cat"])
    assert "NoNewPrivs:\t1" in result.stdout


def test_b19_setuid_bit_gives_nothing(jail: Path) -> None:
    copy = jail / "myid"
    shutil.copy(shutil.which("id") or "/usr/bin/id", copy)
    os.chown(copy, 4321, 4321)
    copy.chmod(0o4755)
    result = _run(jail, ["./myid", "-u"], allow=["./myid"])
    assert result.stdout == "0\n"


def test_b19_sudo_is_a_wrapper(jail: Path) -> None:
    if shutil.which("sudo") is None:
        pytest.skip("sudo is not installed")
    _denied(jail, ["sudo", "id"], "shell.argument", allow=["sudo"])


# --- B20, B21 -----------------------------------------------------------------------------------


def test_b20_stdin_is_closed(jail: Path) -> None:
    start = time.monotonic()
    result = _run(jail, ["cat"], timeout=5.0, allow=["cat"])
    assert result.stdout == ""
    assert time.monotonic() - start < 3.0


def test_b21_escapes_come_back_as_raw_data(jail: Path) -> None:
    # Escaping for terminals and logs happens elsewhere; this layer returns the bytes as data.
    text = "\x1b[31mred\x1b]0;title\x07\rover\u202eevil"
    result = _run(jail, ["printf", "%s", text], allow=["printf"])
    assert result.stdout == text


# --- other containment that the rows rely on ------------------------------------------------------


def test_confinement_is_reported_for_each_call(jail: Path) -> None:
    result = _run(jail, ["true"], allow=["true"])
    expected = {"pid_namespace", "network_namespace", "landlock", "no_new_privs", "rlimits"}
    assert expected <= set(result.confinement)
    for state in result.confinement.values():
        assert state.startswith(("active", "unavailable: ", "not used"))
    assert set(result.confinement) == set(_LAYERS)


def test_hard_link_to_outside_file_fails(jail: Path) -> None:
    if not _HAVE_LANDLOCK:
        pytest.skip("Landlock is unavailable")
    result = _run(
        jail, ["sh", "-c", "ln ../secret h"], allow=["sh"], unsafe_args=["sh"], check=False
    )
    assert result.exit_code != 0
    assert not (jail / "h").exists()


def test_engine_process_is_invisible_from_inside(
    jail: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not _HAVE_PIDNS:
        pytest.skip("no PID namespace")
    canary = f"canary-{uuid.uuid4().hex}"
    monkeypatch.setenv("PLANLOOM_CANARY_KEY", canary)
    path = f"/proc/{os.getpid()}/environ"
    result = _run(jail, ["cat", path, "/proc/1/environ"], allow=["cat"], check=False)
    assert canary not in result.stdout
    assert result.exit_code != 0


def test_reads_outside_system_folders_and_jail_fail(jail: Path) -> None:
    if not _HAVE_LANDLOCK:
        pytest.skip("Landlock is unavailable")
    result = _run(jail, ["cat", "../secret", "../J2/x"], allow=["cat"], check=False)
    assert "secret" not in result.stdout
    assert "j2" not in result.stdout
    assert result.exit_code != 0


def test_cancellation_kills_the_whole_tree(jail: Path) -> None:
    marker = marker_seconds(600)
    grant = ShellGrant(cwd="J", allow=["sh"], unsafe_args=["sh"])
    ctx = CallContext(grant=grant, base_dir=jail.parent, timeout=30.0)
    script = f"setsid sleep {marker} > /dev/null 2>&1 & wait"

    async def scenario() -> None:
        task = asyncio.create_task(shell.run(ShellParams(argv=["sh", "-c", script]), ctx))
        for _ in range(100):
            await asyncio.sleep(0.05)
            if pids_with(marker):
                break
        assert pids_with(marker)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5.0)

    asyncio.run(scenario())
    assert gone(lambda: pids_with(marker))


def test_exec_failure_is_a_clear_step_failure(jail: Path) -> None:
    (jail / "tool").mkdir()
    with pytest.raises(StepFailed, match="cannot execute"):
        _run(jail, ["./tool"], allow=["./tool"])
