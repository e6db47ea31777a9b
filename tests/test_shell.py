"""`shell.run` against real subprocesses: the allow-list, cwd jail, env scrub and kill-tree.

Row numbers (B1, B8, ...) refer to section B of the sandbox attack list. Every command is
bounded by a timeout of at most a few seconds; no test depends on Unix permissions.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from _procs import gone, marker_seconds, pids_with, until_async
from pydantic import ValidationError

from capabilities import shell
from capabilities.shell import ShellGrant, ShellParams, ShellResult
from engine.capability import CallContext, Registry
from engine.errors import CapabilityDenied, StepFailed, StepTimeout


def pids_with_arg(marker: str) -> list[int]:
    return pids_with(marker, whole_argument=True)


PYTHON = os.path.realpath(sys.executable)


def _ctx(tmp_path: Path, timeout: float, grant: dict[str, Any]) -> CallContext:
    grant.setdefault("cwd", str(tmp_path))
    return CallContext(grant=ShellGrant(**grant), base_dir=tmp_path, timeout=timeout)


def _run(
    tmp_path: Path,
    argv: list[str],
    *,
    timeout: float = 10.0,
    cwd: str | None = None,
    check: bool = True,
    **grant: Any,
) -> ShellResult:
    params = ShellParams(argv=argv, cwd=cwd, check=check)
    return asyncio.run(shell.run(params, _ctx(tmp_path, timeout, grant)))


# --- registration and models -------------------------------------------------------------


def test_register_adds_family_and_action() -> None:
    registry = Registry()
    shell.register(registry)
    assert registry.families["shell"].grant_model is ShellGrant
    action = registry.get("shell.run")
    assert action is not None
    assert action.params_model is ShellParams
    assert action.result_model is ShellResult
    assert action.has_side_effects(ShellParams(argv=["ls"]))


@pytest.mark.parametrize("argv", [[], ["echo", "a\x00b"], ["ec\x00ho"], [""]])
def test_bad_argv_is_a_validation_error(argv: list[str]) -> None:
    with pytest.raises(ValidationError):
        ShellParams(argv=argv)


def test_params_and_grant_forbid_extra_keys() -> None:
    with pytest.raises(ValidationError):
        ShellParams.model_validate({"argv": ["ls"], "shell": True})
    with pytest.raises(ValidationError):
        ShellGrant.model_validate({"allow": ["ls"], "sudo": True})


@pytest.mark.parametrize("env", [{"A=B": "x"}, {"": "x"}, {"OK": "a\x00b"}])
def test_malformed_grant_env_is_a_validation_error(env: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        ShellGrant(env=env)


# --- running -----------------------------------------------------------------------------


def test_echo_happy_path(tmp_path: Path) -> None:
    result = _run(tmp_path, ["echo", "hello", "world"], allow=["echo"])
    assert result.model_dump(exclude={"confinement"}) == {
        "exit_code": 0,
        "stdout": "hello world\n",
        "stderr": "",
        "truncated": False,
    }


def test_nonzero_exit_with_check_raises_with_code_and_stderr(tmp_path: Path) -> None:
    code = "import sys; print('first', file=sys.stderr); print('boom', file=sys.stderr); exit(3)"
    with pytest.raises(StepFailed) as info:
        _run(tmp_path, [PYTHON, "-c", code], allow=[PYTHON], unsafe_args=[PYTHON])
    assert "exited with code 3" in info.value.message
    assert "first\nboom" in info.value.message


def test_stepfailed_keeps_only_the_stderr_tail(tmp_path: Path) -> None:
    code = "import sys\nfor i in range(100): print(f'line{i}', file=sys.stderr)\nexit(1)"
    with pytest.raises(StepFailed) as info:
        _run(tmp_path, [PYTHON, "-c", code], allow=[PYTHON], unsafe_args=[PYTHON])
    assert "line99" in info.value.message
    assert "line80" in info.value.message
    assert "line79" not in info.value.message


def test_false_with_check_raises(tmp_path: Path) -> None:
    with pytest.raises(StepFailed, match="exited with code 1"):
        _run(tmp_path, ["false"], allow=["false"])


def test_false_without_check_returns_result(tmp_path: Path) -> None:
    result = _run(tmp_path, ["false"], check=False, allow=["false"])
    assert result.exit_code == 1
    assert not result.truncated


def test_output_is_decoded_with_replacement(tmp_path: Path) -> None:
    code = "import sys; sys.stdout.buffer.write(b'ok \\xff\\xfe end')"
    result = _run(tmp_path, [PYTHON, "-c", code], allow=[PYTHON], unsafe_args=[PYTHON])
    assert result.stdout == "ok \ufffd\ufffd end"


@pytest.mark.parametrize(
    "text",
    ["a; touch pwned", "$(touch pwned)", "`touch pwned`", "a && touch pwned", "a\ntouch pwned"],
)
def test_b1_metacharacters_are_literal_arguments(tmp_path: Path, text: str) -> None:
    result = _run(tmp_path, ["echo", text], allow=["echo"])
    assert result.stdout == text + "\n"
    assert not (tmp_path / "pwned").exists()


def test_b1_command_line_as_program_name_is_denied(tmp_path: Path) -> None:
    with pytest.raises(CapabilityDenied) as info:
        _run(tmp_path, ["ls; cat /etc/passwd"], allow=["ls"])
    assert info.value.rule == "shell.not-allowed"


def test_b20_stdin_is_devnull(tmp_path: Path) -> None:
    start = time.monotonic()
    result = _run(tmp_path, ["cat"], timeout=5.0, allow=["cat"])
    assert result.stdout == ""
    assert result.exit_code == 0
    assert time.monotonic() - start < 3.0


# --- the allow-list (B8) -----------------------------------------------------------------


def test_b8_absolute_path_of_other_program_is_denied(tmp_path: Path) -> None:
    with pytest.raises(CapabilityDenied) as info:
        _run(tmp_path, ["/usr/bin/rm", "-rf", str(tmp_path)], allow=["ls"])
    assert info.value.rule == "shell.not-allowed"
    assert tmp_path.exists()


def test_b8_relative_symlink_is_judged_by_its_target(tmp_path: Path) -> None:
    (tmp_path / "rm").symlink_to(shutil.which("rm") or "/bin/rm")
    (tmp_path / "ls").symlink_to(shutil.which("rm") or "/bin/rm")
    (tmp_path / "victim").write_text("keep")
    for name in ("./rm", "./ls"):
        with pytest.raises(CapabilityDenied) as info:
            _run(tmp_path, [name, "victim"], allow=["ls"])
        assert info.value.rule == "shell.not-allowed"
        assert "/rm" in info.value.message
    assert (tmp_path / "victim").read_text() == "keep"


def test_b8_symlink_to_allowed_program_is_allowed(tmp_path: Path) -> None:
    (tmp_path / "listing").symlink_to(shutil.which("ls") or "/bin/ls")
    (tmp_path / "marker.txt").write_text("")
    result = _run(tmp_path, ["./listing"], allow=["ls"])
    assert "marker.txt" in result.stdout


def test_b8_allow_entry_by_absolute_path_matches_name(tmp_path: Path) -> None:
    result = _run(tmp_path, ["echo", "hi"], allow=["/bin/echo"])
    assert result.stdout == "hi\n"


def test_b8_caller_path_is_not_used_for_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "bin" / "echo"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho HIJACKED\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ.get('PATH', '')}")
    result = _run(tmp_path, ["echo", "real"], allow=["echo"])
    assert result.stdout == "real\n"


def test_unknown_program_is_denied_with_hint(tmp_path: Path) -> None:
    with pytest.raises(CapabilityDenied) as info:
        _run(tmp_path, ["ecoh-planloom-missing"], allow=["echo"])
    assert info.value.rule == "shell.not-allowed"
    assert "not found" in info.value.message


def test_not_allowed_program_message_says_how_to_grant(tmp_path: Path) -> None:
    with pytest.raises(CapabilityDenied) as info:
        _run(tmp_path, ["cat", "x"], allow=["cut", "echo"])
    assert info.value.rule == "shell.not-allowed"
    assert "capabilities: shell: {allow: [cat]}" in info.value.message
    assert "did you mean 'cut'?" in info.value.message


def test_empty_allow_list_denies_everything(tmp_path: Path) -> None:
    with pytest.raises(CapabilityDenied):
        _run(tmp_path, ["echo", "x"])


def test_non_executable_file_fails_cleanly(tmp_path: Path) -> None:
    script = tmp_path / "notes.txt"
    script.write_text("just some words, no interpreter line\n")
    script.chmod(0o755)  # executable bits set, but no ELF header and no '#!'
    with pytest.raises(StepFailed, match="cannot execute"):
        _run(tmp_path, ["./notes.txt"], allow=[str(script)])


def test_directory_as_program_fails_cleanly(tmp_path: Path) -> None:
    (tmp_path / "tool").mkdir()
    with pytest.raises(StepFailed, match="cannot execute"):
        _run(tmp_path, ["./tool"], allow=["./tool"])


# --- the working folder ------------------------------------------------------------------


def test_runs_in_grant_cwd_relative_to_base_dir(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    ctx = CallContext(grant=ShellGrant(allow=["pwd"], cwd="work"), base_dir=tmp_path, timeout=5.0)
    result = asyncio.run(shell.run(ShellParams(argv=["pwd"]), ctx))
    assert result.stdout == f"{os.path.realpath(tmp_path / 'work')}\n"


def test_params_cwd_inside_grant(tmp_path: Path) -> None:
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    result = _run(tmp_path, ["pwd"], cwd="sub/deeper/../deeper", allow=["pwd"])
    assert result.stdout == f"{os.path.realpath(tmp_path / 'sub' / 'deeper')}\n"


@pytest.mark.parametrize("cwd", ["../", "..", "sub/../../", "/tmp", "/", "link", "link/x"])
def test_cwd_escape_is_denied(tmp_path: Path, cwd: str) -> None:
    jail = tmp_path / "jail"
    (jail / "sub").mkdir(parents=True)
    (tmp_path / "outside" / "x").mkdir(parents=True)
    (jail / "link").symlink_to(tmp_path / "outside")
    ctx = CallContext(grant=ShellGrant(allow=["pwd"], cwd="jail"), base_dir=tmp_path, timeout=5.0)
    with pytest.raises(CapabilityDenied) as info:
        asyncio.run(shell.run(ShellParams(argv=["pwd"], cwd=cwd), ctx))
    assert info.value.rule == "shell.cwd"


def test_cwd_sibling_with_shared_prefix_is_denied(tmp_path: Path) -> None:
    (tmp_path / "J").mkdir()
    (tmp_path / "J2").mkdir()
    ctx = CallContext(grant=ShellGrant(allow=["pwd"], cwd="J"), base_dir=tmp_path, timeout=5.0)
    with pytest.raises(CapabilityDenied):
        asyncio.run(shell.run(ShellParams(argv=["pwd"], cwd="../J2"), ctx))


def test_missing_grant_folder_fails(tmp_path: Path) -> None:
    ctx = CallContext(grant=ShellGrant(allow=["pwd"], cwd="nope"), base_dir=tmp_path, timeout=5.0)
    with pytest.raises(StepFailed, match="not an existing folder"):
        asyncio.run(shell.run(ShellParams(argv=["pwd"]), ctx))


# --- the environment (B9) ----------------------------------------------------------------


def test_b9_child_env_is_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    hostile = {
        "LD_PRELOAD": "/nonexistent/evil.so",
        "BASH_ENV": str(tmp_path / "evil.sh"),
        "PYTHONSTARTUP": str(tmp_path / "evil.py"),
        "GIT_SSH_COMMAND": "touch pwned",
        "PAGER": "touch pwned",
        "MY_API_KEY": canary,
    }
    for name, value in hostile.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ.get('PATH', '')}")
    result = _run(tmp_path, ["env"], allow=["env"])
    lines = dict(line.split("=", 1) for line in result.stdout.splitlines())
    for name in hostile:
        assert name not in lines
    assert canary not in result.stdout
    assert lines["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    assert lines["HOME"] == os.path.realpath(tmp_path)
    assert lines["LC_ALL"] == "C.UTF-8"
    assert lines["TMPDIR"].startswith(tempfile.gettempdir())
    assert set(lines) == {"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR"}


def test_b9_granted_variables_are_passed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANLOOM_REGION", "eu-west")
    monkeypatch.delenv("PLANLOOM_UNSET_VAR", raising=False)
    result = _run(
        tmp_path,
        ["env"],
        allow=["env"],
        pass_env=["PLANLOOM_REGION", "PLANLOOM_UNSET_VAR"],
        env={"COLOR": "blue"},
    )
    lines = dict(line.split("=", 1) for line in result.stdout.splitlines())
    assert lines["PLANLOOM_REGION"] == "eu-west"
    assert lines["COLOR"] == "blue"
    assert "PLANLOOM_UNSET_VAR" not in lines


@pytest.mark.parametrize(
    "grant",
    [
        {"pass_env": ["MY_API_KEY"]},
        {"pass_env": ["LD_PRELOAD"]},
        {"pass_env": ["PATH"]},
        {"pass_env": ["github_token"]},
        {"env": {"BASH_ENV": "/tmp/x"}},
        {"env": {"PythonPath": "/tmp"}},
        {"env": {"DB_Password": "hunter2"}},
        {"env": {"AWS_SECRET_ACCESS_KEY": "x"}},
        {"env": {"GIT_SSH_COMMAND": "id"}},
        {"env": {"PAGER": "id"}},
        {"env": {"ENV": "/tmp/x"}},
        {"env": {"DYLD_INSERT_LIBRARIES": "x"}},
        {"env": {"BASH_FUNC_echo%%": "() { id; }"}},
    ],
)
def test_b9_dangerous_names_in_grant_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grant: dict[str, Any]
) -> None:
    monkeypatch.setenv("MY_API_KEY", "canary")
    with pytest.raises(CapabilityDenied) as info:
        _run(tmp_path, ["env"], allow=["env"], **grant)
    assert info.value.rule == "shell.env"


# --- output caps, timeouts and the process tree -------------------------------------------


def test_b11_endless_output_is_capped_and_killed(tmp_path: Path) -> None:
    start = time.monotonic()
    result = _run(tmp_path, ["yes"], timeout=10.0, check=False, allow=["yes"], max_output=1000)
    assert time.monotonic() - start < 5.0
    assert result.truncated
    assert result.exit_code != 0
    assert len(result.stdout) == 1000
    assert result.stdout.startswith("y\ny\n")


def test_b11_output_at_the_cap_is_not_truncated(tmp_path: Path) -> None:
    result = _run(tmp_path, ["echo", "abcd"], allow=["echo"], max_output=5)
    assert result.stdout == "abcd\n"
    assert not result.truncated


def test_b11_stderr_is_capped_too(tmp_path: Path) -> None:
    code = "import sys\nwhile True: sys.stderr.write('e' * 4096)"
    start = time.monotonic()
    result = _run(
        tmp_path,
        [PYTHON, "-c", code],
        timeout=10.0,
        check=False,
        allow=[PYTHON],
        unsafe_args=[PYTHON],
        max_output=10,
    )
    assert time.monotonic() - start < 5.0
    assert result.truncated
    assert result.stderr == "e" * 10


def test_b12_sleep_is_killed_at_timeout(tmp_path: Path) -> None:
    marker = marker_seconds(3600)
    start = time.monotonic()
    with pytest.raises(StepTimeout, match=r"'sleep' timed out after 0\.5 s") as info:
        _run(tmp_path, ["sleep", marker], timeout=0.5, allow=["sleep"])
    assert info.value.kind == "timeout"
    assert time.monotonic() - start < 3.0
    assert gone(lambda: pids_with_arg(marker))


def test_b13_busy_loop_is_killed_at_timeout(tmp_path: Path) -> None:
    marker = f"planloom-{uuid.uuid4().hex}"
    start = time.monotonic()
    with pytest.raises(StepTimeout):
        _run(
            tmp_path,
            [PYTHON, "-c", "while 1: pass", marker],
            timeout=0.5,
            allow=[PYTHON],
            unsafe_args=[PYTHON],
        )
    assert time.monotonic() - start < 3.0
    assert gone(lambda: pids_with_arg(marker))


def test_b14_background_descendant_is_killed(tmp_path: Path) -> None:
    # `$!` is a pid inside the sandbox's PID namespace, so look the sleeper up by marker.
    marker = marker_seconds(600)
    start = time.monotonic()
    result = _run(
        tmp_path,
        ["sh", "-c", f"sleep {marker} & echo ok", "x"],
        timeout=10.0,
        allow=["sh"],
        unsafe_args=["sh"],
    )
    assert time.monotonic() - start < 3.0
    assert result.stdout == "ok\n"
    assert result.exit_code == 0
    assert gone(lambda: pids_with_arg(marker))


def test_cancellation_kills_the_process_and_propagates(tmp_path: Path) -> None:
    marker = marker_seconds(600)
    ctx = _ctx(tmp_path, 30.0, {"allow": ["sleep"]})

    async def scenario() -> None:
        task = asyncio.create_task(shell.run(ShellParams(argv=["sleep", marker]), ctx))
        await until_async(lambda: pids_with_arg(marker), 10.0, "the sleep to start")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5.0)

    asyncio.run(scenario())
    assert gone(lambda: pids_with_arg(marker))


def test_concurrent_runs_keep_their_own_output(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, 10.0, {"allow": ["sh"], "unsafe_args": ["sh"]})
    script = "for i in 1 2 3; do echo $0-$i; sleep 0.05; done"

    async def scenario() -> list[ShellResult]:
        calls = [shell.run(ShellParams(argv=["sh", "-c", script, f"w{n}"]), ctx) for n in range(4)]
        return await asyncio.gather(*calls)

    results = asyncio.run(scenario())
    for n, result in enumerate(results):
        assert result.stdout == "".join(f"w{n}-{i}\n" for i in (1, 2, 3))


def test_cpu_rlimit_is_applied(tmp_path: Path) -> None:
    # The launcher sets the limits before exec, so the first read already sees them.
    code = "import resource; print(*resource.getrlimit(resource.RLIMIT_CPU))"
    result = _run(tmp_path, [PYTHON, "-c", code], timeout=4.0, allow=[PYTHON], unsafe_args=[PYTHON])
    soft, hard = (int(x) for x in result.stdout.split())
    assert soft == 5
    assert hard == 6
