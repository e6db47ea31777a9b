"""Run a command as this small process's child, and report the command's own peak memory.

usage: python _peak.py REPORT ADDRESS_SPACE TIMEOUT -- ARGV...

A process's `ru_maxrss` starts at its parent's peak: fork copies the parent's memory map
with its high-water mark, and Linux keeps that mark across exec (it is recorded in the
process's maxrss when exec drops the old map). A test worker that had grown to 850 MiB
made every command it started "peak" at 850 MiB, whatever the command used. This launcher
is a fresh small process: the command, forked from it, starts near zero, and `wait4`
gives its own figure. The command runs with `RLIMIT_AS` at ADDRESS_SPACE bytes (0: no
limit), is killed after TIMEOUT seconds, and has the launcher's standard streams. REPORT
gets one JSON object: `returncode` (negative: the signal), `peak_kib`, `seconds`,
`timed_out`.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time


def main(argv: list[str]) -> None:
    report, address_space, timeout, separator, *command = argv
    if separator != "--" or not command:
        sys.exit(__doc__)
    limit = int(address_space)

    def confine() -> None:
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    started = time.monotonic()
    proc = subprocess.Popen(command, preexec_fn=confine)
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        proc.kill()

    timer = threading.Timer(float(timeout), kill)
    timer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    figures = {
        "returncode": proc.returncode,
        "peak_kib": usage.ru_maxrss,
        "seconds": time.monotonic() - started,
        "timed_out": killed.is_set(),
    }
    with open(report, "w", encoding="utf-8") as out:
        json.dump(figures, out)


if __name__ == "__main__":
    main(sys.argv[1:])
