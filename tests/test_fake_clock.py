"""`engine.testing.FakeClock`: a run's timeouts, backoff, deadlines and durations on virtual
time. Runs that would take minutes end at once, with the same statuses as on the real
clock, and their durations are exact."""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
import time
from pathlib import Path

import pytest

from capabilities import Registry
from engine.testing import Fail, FakeClock, Hang, ScriptedTools, Wait, run_recipe_text


def recipe(*steps: str, limits: str = "") -> str:
    body = "\n".join(steps)
    return f"version: 1\nname: clock\ncapabilities: {{test: {{}}}}\n{limits}steps:\n{body}\n"


def step(sid: str, key: str, *, needs: str = "", extra: str = "") -> str:
    lines = [f"  - id: {sid}", "    tool: test.run", f"    params: {{key: {key}}}"]
    if needs:
        lines.append(f"    depends_on: [{needs}]")
    if extra:
        lines.append(f"    {extra}")
    return "\n".join(lines)


def test_waits_pass_at_once_and_in_order(registry: Registry, tmp_path: Path) -> None:
    tools = ScriptedTools(registry)
    tools.script("a", Wait(60, "a"))
    tools.script("b", Wait(20, "b"))
    tools.script("c", Wait(5, "c"))
    clock = FakeClock()
    began = time.monotonic()
    result = run_recipe_text(
        recipe(step("a", "a", extra="timeout: 90"), step("b", "b"), step("c", "c", needs="b")),
        registry,
        base_dir=tmp_path,
        clock=clock,
    )
    assert time.monotonic() - began < 5  # 60 s of waiting, in no real time
    assert result.status == "succeeded"
    assert clock.time() == 60  # a and b side by side, c after b: the critical path
    calls = {call.key: call for call in tools.calls}
    assert (calls["a"].started, calls["a"].ended) == (0, 60)
    assert (calls["b"].started, calls["b"].ended) == (0, 20)
    assert (calls["c"].started, calls["c"].ended) == (20, 25)
    assert result.steps["a"].duration == 60
    assert result.steps["c"].duration == 5


def test_a_timeout_ends_a_hung_call_at_its_time(registry: Registry, tmp_path: Path) -> None:
    tools = ScriptedTools(registry)
    tools.script("stuck", Hang())
    clock = FakeClock()
    stuck = step("stuck", "stuck", extra="timeout: 45")
    result = run_recipe_text(recipe(stuck), registry, base_dir=tmp_path, clock=clock)
    assert result.steps["stuck"].status == "failed"
    assert "timed out" in (result.steps["stuck"].error or "")
    assert clock.time() == 45
    assert tools.calls_for("stuck")[0].outcome == "cancelled"


def test_retries_back_off_on_the_clock(registry: Registry, tmp_path: Path) -> None:
    tools = ScriptedTools(registry)
    tools.script("flaky", Fail("503"), Fail("503"), "ok")
    clock = FakeClock()
    result = run_recipe_text(
        recipe(step("flaky", "flaky", extra="retry: {attempts: 3, backoff: fixed, initial: 10}")),
        registry,
        base_dir=tmp_path,
        sleep=asyncio.sleep,  # the run's own waits, not the instant default
        clock=clock,
    )
    assert result.steps["flaky"].status == "succeeded"
    assert result.steps["flaky"].attempts == 3
    starts = [call.started for call in tools.calls_for("flaky")]
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert len(gaps) == 2
    assert all(gap >= 10 for gap in gaps), gaps
    assert clock.time() == pytest.approx(sum(gaps))


def test_max_duration_cancels_on_the_clock(registry: Registry, tmp_path: Path) -> None:
    tools = ScriptedTools(registry)
    tools.script("long", Wait(3600, "late"))
    clock = FakeClock()
    result = run_recipe_text(
        recipe(step("long", "long", extra="timeout: 600"), limits="limits: {max_duration: 120}\n"),
        registry,
        base_dir=tmp_path,
        clock=clock,
    )
    assert result.status == "failed"
    assert result.steps["long"].status == "cancelled"
    assert clock.time() == 120


def test_it_waits_for_threads_instead_of_jumping() -> None:
    """A thread's work is real: the clock does not jump past a timeout while it runs."""
    clock = FakeClock()

    async def main() -> str:
        async with asyncio.timeout(1):  # on the fake clock: a jump would end it at once
            return await asyncio.to_thread(lambda: time.sleep(0.2) or "done")

    assert clock.run(main()) == "done"
    assert clock.time() < 1


def test_a_threshold_lets_real_io_answer_before_the_clock_jumps() -> None:
    clock = FakeClock(autojump_threshold=0.5)

    async def main() -> bytes:
        reader, writer = await asyncio.open_connection(*server_address)
        writer.write(b"ping\n")
        async with asyncio.timeout(10):  # a jump at once would time out the read
            line = await reader.readline()
        writer.close()
        return line

    listener = socket.create_server(("127.0.0.1", 0))
    server_address = listener.getsockname()

    def echo_once() -> None:
        connection, _ = listener.accept()
        with connection:
            time.sleep(0.05)  # a real answer takes real time
            connection.sendall(connection.recv(64))

    thread = threading.Thread(target=echo_once, daemon=True)
    thread.start()
    try:
        assert clock.run(main()) == b"ping\n"
    finally:
        listener.close()
        thread.join(5)
    assert clock.time() < 10


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="autojump_threshold"):
        FakeClock(autojump_threshold=-1)
    with pytest.raises(ValueError, match="does not go back"):
        FakeClock().advance(-1)
