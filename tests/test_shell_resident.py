"""`shell.run` through a run's resident launcher (zygote): the same sandbox, one zygote per run.

Within a run (the `shell` family's `Family.scope`, entered here as the executor enters
it), a zygote started on the first call forks each call's launcher, and a spare it
prepares serves the next call without network. These tests hold it to the one-shot
launcher's contract: the same layers, the kill of the whole tree on timeout, cancellation
and output cap, nothing of the zygote's in the program, calls isolated from each other;
and to its own: one zygote per run, gone when the run ends or its engine is killed, a
clear failure or a restart when it dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from _procs import PLANLOOM, alive, env, gone, marker_seconds, pids_with, until_async

from capabilities import shell
from capabilities.confine import zygote as zygote_client
from capabilities.confine.scratch import pids_cgroup_base
from capabilities.confine.zygote import Zygote
from capabilities.shell import ShellGrant, ShellParams, ShellResult
from engine.capability import CallContext, Registry
from engine.errors import StepFailed, StepTimeout

PYTHON = os.path.realpath(sys.executable)
_LAYERS = shell.confinement_report()
_HAVE_PIDNS = _LAYERS.get("pid_namespace") == "active"
_HAVE_LANDLOCK = _LAYERS.get("landlock", "").startswith("active")
_ZYGOTE = "_zygote.py"

T = TypeVar("T")


def _grant(tmp_path: Path, **extra: Any) -> ShellGrant:
    extra.setdefault("allow", ["true", "sh", "sleep", "yes", PYTHON])
    extra.setdefault("unsafe_args", ["sh", PYTHON])
    return ShellGrant(cwd=str(tmp_path), **extra)


def _in_run(
    tmp_path: Path,
    grant: ShellGrant,
    body: Callable[[Zygote, CallContext], Awaitable[T]],
    timeout: float = 20.0,
) -> T:
    """`body(zygote, ctx)` within the shell family's run scope, as the executor runs calls."""

    registry = Registry()
    shell.register(registry)
    scope = registry.families["shell"].scope
    assert scope is not None

    async def scenario() -> T:
        async with scope(grant, tmp_path) as zygote:
            ctx = CallContext(grant=grant, base_dir=tmp_path, timeout=timeout, scope=zygote)
            return await body(zygote, ctx)

    return asyncio.run(scenario())


def _run(ctx: CallContext, *argv: str, check: bool = True) -> Awaitable[ShellResult]:
    return shell.run(ShellParams(argv=list(argv), check=check), ctx)


def _children(parent: int, needle: str) -> list[int]:
    """Live processes whose parent is `parent` and whose command line holds `needle`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and needle.encode() in cmdline and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _descendants(pid: int) -> list[int]:
    """Every live process below `pid`."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return [p for p in found if alive(p)]


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique `sleep` duration; whatever still carries it at the end is killed."""
    value = marker_seconds(600)
    yield value
    for pid in pids_with(value):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# --- one zygote per run ------------------------------------------------------------------


def test_one_zygote_serves_every_call_of_a_run(tmp_path: Path) -> None:
    me = os.getpid()

    async def body(zygote: Zygote, ctx: CallContext) -> tuple[list[int], int | None]:
        counts = []
        for n in range(4):
            result = await _run(ctx, "sh", "-c", f"echo {n}")
            assert result.stdout == f"{n}\n"
            counts.append(len(_children(me, _ZYGOTE)))
        results = await asyncio.gather(
            *(_run(ctx, "sh", "-c", f"echo {n}; sleep 0.2") for n in range(8))
        )
        assert [r.stdout for r in results] == [f"{n}\n" for n in range(8)]
        counts.append(len(_children(me, _ZYGOTE)))
        assert zygote.starts == 1
        return counts, zygote.pid

    counts, pid = _in_run(tmp_path, _grant(tmp_path), body)
    assert counts == [1] * 5
    assert pid is not None
    # The run is over: the zygote (and with it its spare) is gone, and reaped.
    assert _children(me, _ZYGOTE) == []
    assert not Path(f"/proc/{pid}").exists()


def test_a_run_without_shell_calls_starts_no_zygote(tmp_path: Path) -> None:
    async def body(zygote: Zygote, ctx: CallContext) -> int:
        return len(_children(os.getpid(), _ZYGOTE)) + zygote.starts

    assert _in_run(tmp_path, _grant(tmp_path), body) == 0


def test_a_call_from_another_event_loop_uses_the_one_shot_launcher(tmp_path: Path) -> None:
    grant = _grant(tmp_path)

    async def body(zygote: Zygote, ctx: CallContext) -> str:
        await _run(ctx, "true")  # the zygote is the run loop's
        outputs: list[str] = []

        def elsewhere() -> None:
            outputs.append(asyncio.run(_run(ctx, "sh", "-c", "echo other")).stdout)

        thread = threading.Thread(target=elsewhere)
        thread.start()
        await asyncio.to_thread(thread.join)
        assert zygote.starts == 1
        return outputs[0]

    assert _in_run(tmp_path, grant, body) == "other\n"


# --- the same sandbox as the one-shot launcher -------------------------------------------


def test_layers_are_those_of_the_one_shot_launcher(tmp_path: Path) -> None:
    grant = _grant(tmp_path)
    alone = CallContext(grant=grant, base_dir=tmp_path, timeout=20.0)
    one_shot = asyncio.run(_run(alone, "true")).confinement

    async def body(zygote: Zygote, ctx: CallContext) -> list[dict[str, str]]:
        # The first call is forked for it; the next ones are served by spares.
        return [(await _run(ctx, "true")).confinement for _ in range(3)]

    for layers in _in_run(tmp_path, grant, body):
        assert layers == one_shot
    assert all(not state.startswith("unavailable") for state in one_shot.values()) or (
        not _HAVE_PIDNS
    )


def test_a_call_with_network_gets_no_spare_and_the_same_report(tmp_path: Path) -> None:
    grant = _grant(tmp_path, network=True)
    alone = CallContext(grant=grant, base_dir=tmp_path, timeout=20.0)
    one_shot = asyncio.run(_run(alone, "true")).confinement

    async def body(zygote: Zygote, ctx: CallContext) -> list[dict[str, str]]:
        return [(await _run(ctx, "true")).confinement for _ in range(3)]

    for layers in _in_run(tmp_path, grant, body):
        assert layers == one_shot
        assert layers["network_namespace"] == "not used: network granted"


_OPEN_FDS = (
    "import os\n"
    "def is_open(fd):\n"
    "    try:\n"
    "        os.fstat(fd)\n"
    "    except OSError:\n"
    "        return False\n"
    "    return True\n"
    "print([fd for fd in range(1024) if is_open(fd)])\n"
    "print([os.readlink(f'/proc/self/fd/{fd}').split(':')[0] for fd in (0, 1, 2)])\n"
    "print(sorted(os.listdir('/proc/self/fd'), key=int))\n"  # 3: the listing's own
)


def test_the_program_holds_only_its_standard_streams(tmp_path: Path) -> None:
    """No descriptor of the zygote's (control socket, other calls' sockets, pidfds) nor
    of the launcher's reaches the program: exactly what the one-shot launcher leaves."""
    grant = _grant(tmp_path)
    alone = CallContext(grant=grant, base_dir=tmp_path, timeout=20.0)
    one_shot = asyncio.run(_run(alone, PYTHON, "-c", _OPEN_FDS)).stdout

    async def body(zygote: Zygote, ctx: CallContext) -> list[str]:
        # Forked for the call, then spares; then several at once (more sockets open).
        outputs = [(await _run(ctx, PYTHON, "-c", _OPEN_FDS)).stdout for _ in range(3)]
        several = await asyncio.gather(*(_run(ctx, PYTHON, "-c", _OPEN_FDS) for _ in range(4)))
        return outputs + [result.stdout for result in several]

    expected = "[0, 1, 2]\n['/dev/null', 'pipe', 'pipe']\n['0', '1', '2', '3']\n"
    assert one_shot == expected
    assert _in_run(tmp_path, grant, body) == [expected] * 7


_ISOLATED = textwrap.dedent(
    """\
    import json, os, sys, time
    me, count = sys.argv[1], int(sys.argv[2])
    tmp = os.environ["TMPDIR"]

    def barrier(name):  # until every call has got here: all are alive meanwhile
        with open(name, "a") as file:
            file.write(tmp + "\\n")
        end = time.monotonic() + 30
        while len(open(name).read().split()) < count and time.monotonic() < end:
            time.sleep(0.02)
        return open(name).read().split()

    with open(os.path.join(tmp, "secret"), "w") as file:
        file.write(me)
    seen = []
    others = [other for other in barrier("dirs.txt") if other != tmp]
    for other in others:
        try:
            seen.append("read " + open(os.path.join(other, "secret")).read())
        except OSError as exc:
            seen.append(type(exc).__name__)
        try:
            open(os.path.join(other, "planted"), "w").close()
            seen.append("wrote")
        except OSError as exc:
            seen.append(type(exc).__name__)
    barrier("done.txt")
    pids = [name for name in os.listdir("/proc") if name.isdigit()]
    print(json.dumps([me, len(others), sorted(set(seen)), len(pids)]))
    """
)


@pytest.mark.skipif(not _HAVE_LANDLOCK, reason="no Landlock here to keep calls apart")
def test_parallel_calls_are_correct_and_kept_apart(tmp_path: Path) -> None:
    """Eight calls at once (forked and spare alike): each its own output, and none can read
    or write another's TMPDIR (Landlock), nor see another's processes (PID namespace)."""
    (tmp_path / "isolated.py").write_text(_ISOLATED)
    (tmp_path / "dirs.txt").write_text("")
    (tmp_path / "done.txt").write_text("")

    async def body(zygote: Zygote, ctx: CallContext) -> list[str]:
        await _run(ctx, "true")  # so that one of the eight gets the spare
        calls = [_run(ctx, PYTHON, "isolated.py", f"w{n}", "8") for n in range(8)]
        return [result.stdout for result in await asyncio.gather(*calls)]

    outputs = _in_run(tmp_path, _grant(tmp_path), body, timeout=60.0)
    for n, output in enumerate(outputs):
        me, others, seen, pids = json.loads(output)
        assert (me, others) == (f"w{n}", 7), output
        assert seen == ["PermissionError"], output  # Landlock: neither read nor written
        if _HAVE_PIDNS:
            assert pids == 2, output  # its init and itself
    assert not list(tmp_path.glob("planted"))


# --- timeouts, cancellation, output caps, the whole tree -----------------------------------


def test_timeout_kills_every_process_of_the_call(tmp_path: Path, marker: str) -> None:
    script = f"setsid sleep {marker} & sleep {marker} & sleep {marker}"

    async def body(zygote: Zygote, ctx: CallContext) -> None:
        await _run(ctx, "true")  # the timed-out call is then a spare's
        with pytest.raises(StepTimeout, match=r"'sh' timed out after 0\.5 s"):
            await _run(dataclasses.replace(ctx, timeout=0.5), "sh", "-c", script)

    _in_run(tmp_path, _grant(tmp_path), body)
    assert gone(lambda: pids_with(marker))


def test_background_descendant_is_killed_when_the_program_exits(
    tmp_path: Path, marker: str
) -> None:
    async def body(zygote: Zygote, ctx: CallContext) -> ShellResult:
        return await _run(ctx, "sh", "-c", f"sleep {marker} & echo ok")

    result = _in_run(tmp_path, _grant(tmp_path), body)
    assert result.stdout == "ok\n"
    assert gone(lambda: pids_with(marker))


def test_cancellation_kills_the_call_and_propagates(tmp_path: Path, marker: str) -> None:
    async def body(zygote: Zygote, ctx: CallContext) -> None:
        for _ in range(2):  # forked, then a spare's
            task = asyncio.create_task(_run(ctx, "sleep", marker))
            await until_async(lambda: pids_with(marker), 20.0, "the sleep to start")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 10.0)
            assert gone(lambda: pids_with(marker))

    _in_run(tmp_path, _grant(tmp_path), body)


def test_output_cap_kills_and_truncates(tmp_path: Path) -> None:
    async def body(zygote: Zygote, ctx: CallContext) -> ShellResult:
        await _run(ctx, "true")
        return await _run(ctx, "yes", check=False)

    result = _in_run(tmp_path, _grant(tmp_path, max_output=1000), body)
    assert result.truncated
    assert result.stdout == "y\n" * 500
    assert result.exit_code == -signal.SIGKILL


def test_exit_codes_and_exec_errors_are_reported(tmp_path: Path) -> None:
    (tmp_path / "not-executable").write_text("data")

    async def body(zygote: Zygote, ctx: CallContext) -> tuple[int, int, str]:
        failed = await _run(ctx, "sh", "-c", "exit 3", check=False)
        killed = await _run(ctx, "sh", "-c", "kill -TERM $$", check=False)
        grant = ShellGrant(cwd=str(tmp_path), allow=["./not-executable"])
        other = CallContext(grant=grant, base_dir=tmp_path, timeout=20.0, scope=zygote)
        with pytest.raises(StepFailed, match="cannot execute") as info:
            await _run(other, "./not-executable")
        return failed.exit_code, killed.exit_code, str(info.value)

    code, signalled, message = _in_run(tmp_path, _grant(tmp_path), body)
    assert (code, signalled) == (3, -signal.SIGTERM)
    assert "Permission denied" in message


def test_protected_paths_are_read_only_for_a_spare_too(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("KEY=kept\n")

    async def body(zygote: Zygote, ctx: CallContext) -> list[ShellResult]:
        return [await _run(ctx, "sh", "-c", "echo x >> .env", check=False) for _ in range(2)]

    for result in _in_run(tmp_path, _grant(tmp_path), body):
        assert result.exit_code != 0
        assert "Read-only file system" in result.stderr
    assert (tmp_path / ".env").read_text() == "KEY=kept\n"


def test_a_program_cannot_signal_the_zygote(tmp_path: Path) -> None:
    """The zygote is outside the program's PID namespace: its pid names nothing there (or
    another process of the sandbox), and Landlock scopes signals to the sandbox anyway."""

    async def body(zygote: Zygote, ctx: CallContext) -> tuple[ShellResult, str]:
        await _run(ctx, "true")
        pid = zygote.pid
        assert pid is not None
        # The program gets the zygote's real pid; `kill` of it must not reach the zygote.
        script = 'kill -KILL "$1" 2>/dev/null; kill -STOP "$1" 2>/dev/null; echo done'
        tried = await _run(ctx, "sh", "-c", script, "x", str(pid), check=False)
        assert alive(pid)
        assert zygote.pid == pid
        after = await _run(ctx, "sh", "-c", "echo served")
        return tried, after.stdout

    tried, after = _in_run(tmp_path, _grant(tmp_path), body)
    assert tried.stdout == "done\n"
    assert after == "served\n"


# --- when the zygote dies ------------------------------------------------------------------


def test_a_killed_zygote_is_restarted_for_the_next_call(tmp_path: Path) -> None:
    async def body(zygote: Zygote, ctx: CallContext) -> tuple[str, int]:
        await _run(ctx, "true")
        first = zygote.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        await until_async(lambda: not alive(first), 20.0, "the first launcher to end")
        result = await _run(ctx, "sh", "-c", "echo again")
        assert zygote.pid != first
        assert len(_children(os.getpid(), _ZYGOTE)) == 1
        return result.stdout, zygote.starts

    assert _in_run(tmp_path, _grant(tmp_path), body) == ("again\n", 2)


def test_a_call_running_when_its_zygote_dies_fails_clearly(tmp_path: Path, marker: str) -> None:
    async def body(zygote: Zygote, ctx: CallContext) -> str:
        await _run(ctx, "true")  # the next call is a spare's
        task = asyncio.create_task(_run(ctx, "sleep", marker))
        await until_async(lambda: pids_with(marker), 20.0, "the sleep to start")
        assert zygote.pid is not None
        os.kill(zygote.pid, signal.SIGKILL)
        with pytest.raises(StepFailed) as info:
            await asyncio.wait_for(task, 10.0)
        assert (await _run(ctx, "sh", "-c", "echo after")).stdout == "after\n"
        return str(info.value)

    message = _in_run(tmp_path, _grant(tmp_path), body)
    assert "resident sandbox launcher ended while 'sleep' ran" in message
    assert gone(lambda: pids_with(marker))


def test_a_zygote_that_cannot_start_fails_the_call_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(zygote_client, "_ZYGOTE", str(tmp_path / "missing.py"))

    async def body(zygote: Zygote, ctx: CallContext) -> str:
        with pytest.raises(StepFailed) as info:
            await _run(ctx, "true")
        return str(info.value)

    message = _in_run(tmp_path, _grant(tmp_path), body)
    assert "cannot start the sandbox for 'true' through the run's resident launcher" in message
    assert "missing.py" in message


# --- through the CLI: gone after the run, and after kill -9 of the engine ------------------


def _recipe(folder: Path, seconds: str) -> None:
    (folder / "zygote.yaml").write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: zygote
            capabilities:
              shell: {{allow: [sleep, "true"]}}
            limits: {{max_parallel: 4, timeout: 900, max_duration: 900}}
            steps:
              - {{id: a, tool: shell.run, params: {{argv: ["true"]}}}}
              - {{id: b, tool: shell.run, params: {{argv: ["true"]}}, depends_on: [a]}}
              - {{id: slow, tool: shell.run, params: {{argv: [sleep, "{seconds}"]}},
                  depends_on: [b]}}
              - {{id: c, tool: shell.run, params: {{argv: ["true"]}}, depends_on: [b]}}
            """
        )
    )


def _start(folder: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PLANLOOM, "run", "zygote.yaml", "--yes", "--json"],
        cwd=folder,
        env=env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_sleeper(proc: subprocess.Popen[str], marker: str) -> list[int]:
    end = time.monotonic() + 60
    while not pids_with(marker, whole_argument=True):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "the sleeping step never started"
        time.sleep(0.05)
    return _children(proc.pid, _ZYGOTE)


@pytest.mark.slow
def test_the_zygote_ends_with_its_run(tmp_path: Path) -> None:
    marker = marker_seconds(2)
    _recipe(tmp_path, marker)
    proc = _start(tmp_path)
    try:
        zygotes = _wait_for_sleeper(proc, marker)
        tree = _descendants(zygotes[0]) if zygotes else []
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert json.loads(out)["status"] == "succeeded"
    assert len(zygotes) == 1  # one for the run's four calls
    assert tree  # its children then: the sleeping call's launcher, a spare
    assert gone(lambda: [p for p in [*zygotes, *tree] if alive(p)], within=5.0)


@pytest.mark.slow
def test_kill_9_of_the_engine_ends_the_zygote_and_every_sandbox(tmp_path: Path) -> None:
    marker = marker_seconds(600)
    _recipe(tmp_path, marker)
    proc = _start(tmp_path)
    try:
        zygotes = _wait_for_sleeper(proc, marker)
        tree = _descendants(zygotes[0]) if zygotes else []
        proc.kill()
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    try:
        assert len(zygotes) == 1
        assert tree
        assert gone(lambda: [p for p in [*zygotes, *tree] if alive(p)], within=5.0)
        assert gone(lambda: pids_with(marker), within=5.0)
    finally:
        for pid in pids_with(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _remove_scratch_of(proc.pid)


def _remove_scratch_of(engine: int) -> None:
    """What a killed engine left (its calls' and spare's pids cgroups and TMPDIRs), which
    the next engine would sweep: removed here, so the test leaves nothing behind."""
    base, _ = pids_cgroup_base()
    folders = list(Path(tempfile.gettempdir()).glob(f"planloom-shell-{engine}-*"))
    cgroups = list(Path(base).glob(f"planloom-{engine}-*")) if base else []
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    end = time.monotonic() + 5
    while cgroups and time.monotonic() < end:
        for cgroup in list(cgroups):
            with contextlib.suppress(OSError):
                cgroup.rmdir()
                cgroups.remove(cgroup)
        time.sleep(0.02)
