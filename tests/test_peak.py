"""`_procs.peaked` measures a command's own peak memory, not the peak of the test process
that started it (which a plain fork and exec carries into the child's `ru_maxrss`)."""

from __future__ import annotations

import os
import subprocess
import sys

from _procs import peaked

MIB = 1 << 20
GROWN = 400  # MiB this test process touches before it starts a small command


def test_a_small_command_started_by_a_large_process_peaks_small() -> None:
    ballast = b"x" * (GROWN * MIB)  # written, so resident
    # what a plain child reports: the parent's peak, inherited through fork and exec
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    assert usage.ru_maxrss / 1024 >= GROWN
    done = peaked([sys.executable, "-c", "pass"])
    assert len(ballast) == GROWN * MIB
    assert done.returncode == 0
    assert done.peak_mib < 60, done.peak_mib


def test_what_the_command_itself_uses_is_counted() -> None:
    done = peaked([sys.executable, "-c", f"x = b'y' * ({GROWN // 2} << 20); print(len(x))"])
    assert done.stdout.strip() == str(GROWN // 2 * MIB)
    assert GROWN // 2 <= done.peak_mib < GROWN // 2 + 60, done.peak_mib


def test_the_address_space_limit_and_the_timeout_hold() -> None:
    done = peaked(
        [sys.executable, "-c", "x = b'y' * (600 << 20)"], address_space=300 * MIB, timeout=30
    )
    assert done.returncode == 1
    assert "MemoryError" in done.stderr
    done = peaked([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert done.timed_out
    assert done.returncode == -9
    assert done.seconds < 10
