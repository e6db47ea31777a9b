"""Shared test setup: Hypothesis profiles, a guard that keeps tests off the network, and the
fixtures many files use (`registry`: the built-in capabilities)."""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from capabilities import Registry, default_registry

pytest_plugins = ["pytester"]

# Bytecode is written, as a user's `pip install` writes it. Where PYTHONDONTWRITEBYTECODE is
# set (as on some CI images), nothing was cached: every `planloom` a test starts (about
# 1,100 of them) compiled the package again, and every pytest process rewrote the asserts of
# every module it imported again (the package's modules too: it ships a pytest plugin). That
# was a sixth of the suite's CPU time. Set here, before the xdist workers start, so they
# and every process the tests start inherit it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

settings.register_profile(
    "default",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "default")
)


def _loopback(address: Any) -> bool:
    if not isinstance(address, tuple):
        return True  # AF_UNIX paths and the like stay on this machine
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests may talk to servers on 127.0.0.1 only; anything else is a bug in the test."""
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def connect(self: socket.socket, address: Any) -> Any:
        if not _loopback(address):
            raise OSError(f"tests must not reach the network (tried {address!r})")
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> Any:
        if not _loopback(address):
            raise OSError(f"tests must not reach the network (tried {address!r})")
        return real_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)


@pytest.fixture
def registry() -> Registry:
    """The built-in capability families, as the `planloom` command has them."""
    return default_registry()


# Files that take longest, measured (`--durations=0`, 2 workers, 2026-11-29: seconds of
# test time per file in brackets): with `--dist loadfile` a file is one worker's, and a long
# file started last is a tail the other worker waits out (the real-model tests had started
# last, alone: minutes of a model server's CPU at the end). Started first, they run beside
# the rest. While the model server keeps one core busy the other worker should keep the
# other busy: the files that compute come next, then those that mostly wait (timeouts,
# kills, servers starting). A name not found here costs nothing.
LONGEST_FIRST = (
    "test_realmodel.py",  # [215] a model server's core
    "test_fast_path.py",  # [52] computing from here
    "test_fuzz_hostile_inputs.py",  # [18]
    "test_template_bombs.py",  # [15]
    "test_fast_path_edges.py",  # [15]
    "test_fuzz_templates.py",  # [14]
    "test_durable_crash.py",  # [54] mostly waiting from here
    "test_dask.py",  # [54]
    "test_plan_stream.py",  # [31]
    "test_mcp_interrupts.py",  # [24]
    "test_mcp.py",  # [20]
    "test_tracing_attacks.py",  # [19]
    "test_mcp_attacks.py",  # [15]
)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for `-n auto`: half again as many as the cores this process may use. Much of
    a test's time is waiting (for processes it started, timeouts, servers): with one
    worker per core the 2-core CI machine stood idle a quarter of the time (`.ci/run` at
    149-153% CPU of 200%, 10:22 to 12:43 over three runs; with three workers 174-179%,
    10:06 and 10:39)."""
    cores = len(os.sched_getaffinity(0))
    return max(2, cores + cores // 2)


def pytest_configure(config: pytest.Config) -> None:
    # xdist would otherwise order files by how many tests they have, not by this order.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (the order within a file kept; every worker sorts the same
    way, as xdist needs). Under `.ci/floors` (`FLOORS_WHOLE` set): the quick tests of the
    files given, and every test of the files or tests `FLOORS_WHOLE` names, in one session."""
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
    whole = os.environ.get("FLOORS_WHOLE")
    if whole is None:
        return
    names = whole.split()

    def kept(item: pytest.Item) -> bool:
        return item.get_closest_marker("slow") is None or any(
            item.nodeid == name or item.nodeid.startswith(name + "::") for name in names
        )

    config.hook.pytest_deselected(items=[item for item in items if not kept(item)])
    items[:] = [item for item in items if kept(item)]
