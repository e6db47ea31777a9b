"""Start one sandboxed child (a `shell.run` program) inside the confinement layers of `_confine`.

Run as `python -I -S _launcher.py CONFIG_FD STATUS_FD` (a script by path, with the
standard library only). CONFIG_FD is a file (a memfd) holding one JSON object: `argv` (the
program's real path and its arguments), `parent` (the engine's pid), `network`, `rlimits`,
`read_paths`, `write_paths`, `read_only` (protected paths beneath the writable folders, to
bind-mount read-only), `read_only_note` (a caveat for the report, or "") and `cgroup` (a
pids cgroup folder to join, or null). Keeping the program's arguments off the launcher's
own command line means only the program itself shows them in `ps`. STATUS_FD is a pipe to
the engine.

Processes: this launcher (in the engine's namespaces) creates the namespaces and forks the
sandbox's init, which applies the per-process layers (private mounts, /proc, read-only
protected paths, no_new_privs, rlimits, Landlock), forks the program and reaps everything
until the program exits. When that init exits, the kernel kills whatever is left in its
PID namespace. The launcher then exits with the init's status. Without a PID namespace,
the launcher is the init itself.

Dying with the engine: the launcher's first act is `PR_SET_PDEATHSIG(SIGKILL)`, so the
kernel kills it when the engine's thread that started it ends (`kill -9` of planloom
included); it then checks that the engine it was started by is still its parent, which
closes the race before the prctl. The init and the program have the same setting towards
their own parents, so the chain falls: engine, launcher, init (and with it the whole PID
namespace, `setsid` and double-forked processes included), program. Without a PID
namespace, a descendant that left the program's process tree (`setsid`, double fork)
outlives a killed engine until the next engine start, which kills what is left in dead
engines' pids cgroups.

On the status pipe, one JSON object per line: `{"layers": {...}}` once the layers are in
place, then `{"exec_error": ...}` if the program could not be started, or `{"exit": N}` /
`{"signal": N}` with the program's end. A setup failure is `{"setup_error": ...}` and
exit code 125. The program never inherits the status pipe.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import select
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `typing`'s names only for the checker: this script's start-up is per call
    from types import ModuleType
    from typing import Any, NoReturn

SETUP_FAILED = 125
EXEC_FAILED = 127
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Be SIGKILLed when the parent (thread) ends; `_confine` is not loaded yet."""
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


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
    _die_with_parent()
    if len(argv) != 3:
        sys.stderr.write("usage: _launcher.py CONFIG_FD STATUS_FD\n")
        os._exit(SETUP_FAILED)
    status = _Status(int(argv[2]))
    os.set_inheritable(status.fd, False)
    try:
        with os.fdopen(int(argv[1]), "rb") as file:
            config = json.loads(file.read())
        _check_parent(config)
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
        # A change of credentials may clear the parent-death signal; set it again.
        confine.set_pdeathsig(signal.SIGKILL)
        _check_parent(config)
    except Exception as exc:  # any failure here is reported, never half-applied silently
        status.send(setup_error=f"{type(exc).__name__}: {exc}")
        os._exit(SETUP_FAILED)
    if report["pid_namespace"] == "active":
        alive_r, alive_w = os.pipe2(os.O_CLOEXEC)
        init = os.fork()
        if init:
            os.close(alive_r)
            _relay(init)  # keeps `alive_w` open for as long as it lives
        os.close(alive_w)
        _follow_parent(confine, alive_r)
    _init(confine, config, target, report, status)


def _check_parent(config: dict[str, Any]) -> None:
    """Exit at once if the engine died before the parent-death signal was armed."""
    parent = config.get("parent")
    if parent is not None and os.getppid() != int(parent):
        os._exit(SETUP_FAILED)


def _follow_parent(confine: ModuleType, alive_r: int) -> None:
    """In the init: die with the launcher, and exit if it has already gone.

    Inside the PID namespace the launcher's pid is not visible (getppid() is 0), so the
    check is a pipe only the launcher holds the write end of: EOF means it has died.
    """
    confine.set_pdeathsig(signal.SIGKILL)
    readable, _, _ = select.select([alive_r], [], [], 0)
    if readable:
        os._exit(SETUP_FAILED)
    os.close(alive_r)


def _relay(pid: int) -> NoReturn:
    """Wait for the sandbox's init and end the same way."""
    _, wait_status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(wait_status))


def _mounts(confine: ModuleType, config: dict[str, Any], report: dict[str, Any]) -> None:
    """The mount namespace's layers: private propagation, /proc, read-only protected paths.

    Only in a mount namespace of our own: a mount made elsewhere would change the host's.
    """
    if report["mount_namespace"] != "active":
        report["proc_mount"] = "unavailable: no mount namespace"
        report["protected_paths"] = "unavailable: no mount namespace"
        return
    try:
        confine.make_mounts_private()
    except confine.LayerUnavailable as exc:
        report["proc_mount"] = report["protected_paths"] = f"unavailable: {exc}"
        return
    if report["pid_namespace"] == "active":
        try:
            report["proc_mount"] = confine.mount_proc()
        except confine.LayerUnavailable as exc:
            report["proc_mount"] = f"unavailable: {exc}"
    else:
        report["proc_mount"] = "unavailable: no PID namespace"
    paths = [str(path) for path in config.get("read_only", [])]
    try:
        count = confine.bind_read_only(paths)
    except confine.LayerUnavailable as exc:
        report["protected_paths"] = f"unavailable: {exc}"
        return
    note = config.get("read_only_note")
    report["protected_paths"] = f"active ({count} read-only{'; ' + note if note else ''})"


def _init(
    confine: ModuleType,
    config: dict[str, Any],
    target: list[str],
    report: dict[str, Any],
    status: _Status,
) -> NoReturn:
    try:
        _mounts(confine, config, report)
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
    me = os.getpid()
    child = os.fork()
    if child == 0:
        os.close(err_r)
        # Python ignores these at start-up, and an ignored signal stays ignored across exec.
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        # Kept across exec (no set-uid: no_new_privs): without a PID namespace this is what
        # ends the program when the launcher is killed.
        _die_with_parent()
        if os.getppid() != me:
            os._exit(EXEC_FAILED)
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
