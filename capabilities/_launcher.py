"""Start one `shell.run` child inside the confinement layers of `_confine`.

Run as `python -I -S _launcher.py CONFIG_FD STATUS_FD` (a script by path, with the
standard library only). CONFIG_FD is a file (a memfd) holding one JSON object: `argv` (the
program's real path and its arguments), `network`, `rlimits`, `read_paths`, `write_paths`
and `cgroup` (a pids cgroup folder to join, or null). Keeping the program's arguments off
the launcher's own command line means only the program itself shows them in `ps`.
STATUS_FD is a pipe to the engine.

Processes: this launcher (in the engine's namespaces) creates the namespaces and forks the
sandbox's init, which applies the per-process layers (no_new_privs, rlimits, Landlock),
forks the program and reaps everything until the program exits. When that init exits, the
kernel kills whatever is left in its PID namespace. The launcher then exits with the
init's status. Without a PID namespace, the launcher is the init itself.

On the status pipe, one JSON object per line: `{"layers": {...}}` once the layers are in
place, then `{"exec_error": ...}` if the program could not be started, or `{"exit": N}` /
`{"signal": N}` with the program's end. A setup failure is `{"setup_error": ...}` and
exit code 125. The program never inherits the status pipe.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `typing`'s names only for the checker: this script's start-up is per call
    from types import ModuleType
    from typing import Any, NoReturn

SETUP_FAILED = 125
EXEC_FAILED = 127


def _load_confine() -> ModuleType:
    # `-I -S` hides the package; load the sibling module by path, not via sys.path.
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_confine.py")
    spec = importlib.util.spec_from_file_location("_planloom_confine", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Status:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, **message: Any) -> None:
        data = (json.dumps(message) + "\n").encode()
        try:  # noqa: SIM105  # contextlib costs ~4 ms of start-up per call
            os.write(self.fd, data)
        except OSError:
            pass  # the engine has gone; nothing left to tell


def main(argv: list[str]) -> NoReturn:
    if len(argv) != 3:
        sys.stderr.write("usage: _launcher.py CONFIG_FD STATUS_FD\n")
        os._exit(SETUP_FAILED)
    status = _Status(int(argv[2]))
    os.set_inheritable(status.fd, False)
    try:
        with os.fdopen(int(argv[1]), "rb") as file:
            config = json.loads(file.read())
        target = [str(arg) for arg in config["argv"]]
        confine = _load_confine()
        report: dict[str, Any] = {}
        cgroup = config.get("cgroup")
        if cgroup:
            try:
                with open(os.path.join(cgroup, "cgroup.procs"), "w") as file:
                    file.write(str(os.getpid()))
                report["pids_cgroup"] = "active"
            except OSError as exc:
                report["pids_cgroup"] = f"unavailable: {exc.strerror}"
        report.update(confine.enter_namespaces(bool(config["network"])))
    except Exception as exc:  # any failure here is reported, never half-applied silently
        status.send(setup_error=f"{type(exc).__name__}: {exc}")
        os._exit(SETUP_FAILED)
    if report["pid_namespace"] == "active":
        init = os.fork()
        if init:
            _relay(init)
        confine.set_pdeathsig(signal.SIGKILL)
    _init(confine, config, target, report, status)


def _relay(pid: int) -> NoReturn:
    """Wait for the sandbox's init and end the same way."""
    _, wait_status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(wait_status))


def _init(
    confine: ModuleType,
    config: dict[str, Any],
    target: list[str],
    report: dict[str, Any],
    status: _Status,
) -> NoReturn:
    try:
        if report["pid_namespace"] == "active":
            try:
                report["proc_mount"] = confine.mount_proc()
            except confine.LayerUnavailable as exc:
                report["proc_mount"] = f"unavailable: {exc}"
        else:
            report["proc_mount"] = "unavailable: no PID namespace"
        try:
            report["no_new_privs"] = confine.no_new_privs()
        except confine.LayerUnavailable as exc:
            report["no_new_privs"] = f"unavailable: {exc}"
        report["rlimits"] = confine.set_rlimits(config["rlimits"])
        try:
            report["landlock"] = confine.landlock(
                config["read_paths"], config["write_paths"], bool(config["network"])
            )
        except confine.LayerUnavailable as exc:
            report["landlock"] = f"unavailable: {exc}"
    except Exception as exc:  # a bug or an odd kernel: say so and start nothing
        status.send(setup_error=f"{type(exc).__name__}: {exc}")
        os._exit(SETUP_FAILED)
    status.send(layers=report)

    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    child = os.fork()
    if child == 0:
        os.close(err_r)
        # Python ignores these at start-up, and an ignored signal stays ignored across exec.
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execv(target[0], target)
        except OSError as exc:
            os.write(err_w, json.dumps([exc.errno, exc.strerror]).encode())
        os._exit(EXEC_FAILED)
    os.close(err_w)
    with os.fdopen(err_r, "rb") as pipe:
        failure = pipe.read()
    if failure:
        code, text = json.loads(failure)
        status.send(exec_error=text, errno=code)
        os.waitpid(child, 0)
        os._exit(EXEC_FAILED)
    while True:
        try:
            pid, wait_status = os.waitpid(-1, 0)
        except ChildProcessError:  # cannot happen while `child` is unreaped; be safe
            os._exit(EXEC_FAILED)
        if pid == child:
            break
    if os.WIFSIGNALED(wait_status):
        killed_by = os.WTERMSIG(wait_status)
        status.send(signal=killed_by)
        os._exit(128 + killed_by)
    code = os.waitstatus_to_exitcode(wait_status)
    status.send(exit=code)
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv)
