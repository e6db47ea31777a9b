"""Start one sandboxed child (a `shell.run` program) inside the confinement layers of `_layers`.

Run as `python -I -S _launcher.py CONFIG_FD STATUS_FD` (a script by path, with the
standard library only). CONFIG_FD is a file (a memfd) holding one JSON object: `argv` (the
program's real path and its arguments), `parent` (the engine's pid), `network`, `rlimits`,
`read_paths`, `write_paths`, `read_only` (protected paths beneath the writable folders, to
bind-mount read-only), `read_only_note` (a caveat for the report, or "") and `cgroup` (a
pids cgroup folder to join, or null), `memory_cgroup` (a memory cgroup folder to join, or
null: once joined, `rlimits` loses `as`, the address-space limit it stands in for), and
optionally `env` (the program's environment;
else the launcher's own). Keeping the program's arguments off the launcher's own command
line means only the program itself shows them in `ps`. STATUS_FD is a pipe to the engine.

The resident launcher (`_zygote.py`) loads this script by path and makes the same steps
(`enter`, `become_init`, `prepare_init`, `finish`) in the processes it forks, so both
launchers set up the same layers with the same code.

Processes: this launcher (in the engine's namespaces) creates the namespaces and forks the
sandbox's init, which applies the per-process layers (private mounts, /proc, read-only
protected paths, no_new_privs, rlimits, Landlock), starts the program and reaps everything
until the program exits (it spawns the program with `posix_spawn`, a vfork; without a PID
namespace it forks it, to set its parent-death signal before the exec). When that init
exits, the kernel kills whatever is left in its PID namespace. The launcher then exits
with the init's status. Without a PID namespace, the launcher is the init itself.

Dying with the engine: the launcher's first act is `PR_SET_PDEATHSIG(SIGKILL)`, so the
kernel kills it when the engine's thread that started it ends (`kill -9` of planloom
included); it then checks that the engine it was started by is still its parent, which
closes the race before the prctl. The init (and, without a PID namespace, the program) has
the same setting towards its own parent, so the chain falls: engine, launcher, init (and
with it the whole PID namespace, `setsid` and double-forked processes included), program.
Without a PID namespace, a descendant that left the program's process tree (`setsid`,
double fork) outlives a killed engine until the next engine start, which kills what is
left in dead engines' pids cgroups.

On the status pipe, one JSON object per line: `{"layers": {...}}` once the layers are in
place, then `{"exec_error": ...}` if the program could not be started, or `{"exit": N}` /
`{"signal": N}` with the program's end, with `"alone": true` when nothing else was left in
the PID namespace (the init has then closed the program's streams). A setup failure is
`{"setup_error": ...}` and exit code 125. The program never inherits the status pipe.
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
    from collections.abc import Callable, Mapping
    from types import ModuleType
    from typing import Any, NoReturn

SETUP_FAILED = 125
EXEC_FAILED = 127
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Be SIGKILLed when the parent (thread) ends; `_layers` is not loaded yet."""
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def load_confine() -> ModuleType:
    """`_layers`, loaded by path: `-I -S` hides the package, so not via sys.path."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_layers.py")
    spec = importlib.util.spec_from_file_location("_planloom_confine", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Status:
    """The status pipe to the engine: one JSON object a line."""

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
    status = Status(int(argv[2]))
    os.set_inheritable(status.fd, False)
    try:
        with os.fdopen(int(argv[1]), "rb") as file:
            config = json.loads(file.read())
        _check_parent(config)
        confine = load_confine()
    except Exception as exc:  # any failure here is reported, never half-applied silently
        status.send(setup_error=f"{type(exc).__name__}: {exc}")
        os._exit(SETUP_FAILED)
    run(confine, config, status)


def run(confine: ModuleType, config: dict[str, Any], status: Status) -> NoReturn:
    """Everything a call needs once its config is read: the pids cgroup, the namespaces,
    the sandbox's init with its layers, and the program. Never returns.

    The one-shot launcher calls it in its own process. The resident launcher (`_zygote.py`)
    makes the same calls (`enter`, `become_init`, `prepare_init`, `finish`) in the process
    it forks for a call, and a spare makes the first three before its call is known.
    """
    try:
        report = enter(
            confine, config.get("cgroup"), bool(config["network"]), config.get("memory_cgroup")
        )
        _check_parent(config)
    except Exception as exc:  # any failure here is reported, never half-applied silently
        status.send(setup_error=f"{type(exc).__name__}: {exc}")
        os._exit(SETUP_FAILED)
    become_init(confine, report)
    try:
        prepare_init(confine, report)
    except Exception as exc:  # a bug or an odd kernel: say so and start nothing
        status.send(setup_error=f"{type(exc).__name__}: {exc}")
        os._exit(SETUP_FAILED)
    finish(confine, config, report, status)


def enter(
    confine: ModuleType, cgroup: str | None, network: bool, memory_cgroup: str | None = None
) -> dict[str, Any]:
    """Join the pids cgroup `cgroup` and the memory cgroup `memory_cgroup` (if any), then
    make the namespaces; their report.

    In this order: the cgroups are joined from the engine's user namespace, and every
    process the call makes from here on starts in them.
    """
    report: dict[str, Any] = {}
    for layer, path in (("pids_cgroup", cgroup), ("memory_cgroup", memory_cgroup)):
        if not path:
            continue
        try:
            with open(os.path.join(path, "cgroup.procs"), "w") as file:
                file.write(str(os.getpid()))
            report[layer] = "active"
        except OSError as exc:
            report[layer] = f"unavailable: {exc.strerror}"
    report.update(confine.enter_namespaces(network))
    # A change of credentials may clear the parent-death signal; set it again.
    confine.set_pdeathsig(signal.SIGKILL)
    return report


def become_init(
    confine: ModuleType,
    report: dict[str, Any],
    started: Callable[[int | None], None] | None = None,
) -> None:
    """With a PID namespace (per `report`), fork its init and return in it, while this
    process relays the init's end and never returns; without one, this process is the init.

    `started` is called with the init's pid in this process (before it relays), or with
    None when there is no PID namespace: the resident launcher tells the engine the init's
    pidfd there, whose end is the call's end.
    """
    if report["pid_namespace"] != "active":
        if started is not None:
            started(None)
        return
    alive_r, alive_w = os.pipe2(os.O_CLOEXEC)
    init = os.fork()
    if init:
        os.close(alive_r)
        if started is not None:
            started(init)
        _relay(init)  # keeps `alive_w` open for as long as it lives
    os.close(alive_w)
    _follow_parent(confine, alive_r)


def prepare_init(confine: ModuleType, report: dict[str, Any]) -> None:
    """In the init, the layers no call's config changes: private mounts, /proc and
    no_new_privs (the read-only protected paths, rlimits and Landlock come in `finish`)."""
    _base_mounts(confine, report)
    try:
        report["no_new_privs"] = confine.no_new_privs()
    except confine.LayerUnavailable as exc:
        report["no_new_privs"] = f"unavailable: {exc}"


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


def _base_mounts(confine: ModuleType, report: dict[str, Any]) -> None:
    """The mount namespace's own layers: private propagation and /proc.

    Only in a mount namespace of our own: a mount made elsewhere would change the host's.
    `protected_paths` is left None (to do) when read-only mounts can be made.
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
    report["protected_paths"] = None


def _protected_mounts(confine: ModuleType, config: dict[str, Any], report: dict[str, Any]) -> None:
    """The call's protected paths, bind-mounted read-only, if `_base_mounts` could."""
    if report["protected_paths"] is not None:
        return
    paths = [str(path) for path in config.get("read_only", [])]
    try:
        count = confine.bind_read_only(paths)
    except confine.LayerUnavailable as exc:
        report["protected_paths"] = f"unavailable: {exc}"
        return
    note = config.get("read_only_note")
    report["protected_paths"] = f"active ({count} read-only{'; ' + note if note else ''})"


def finish(
    confine: ModuleType, config: dict[str, Any], report: dict[str, Any], status: Status
) -> NoReturn:
    """In the init, with the call's config: the read-only protected paths, rlimits and
    Landlock; then the report, the program, and its end. Never returns."""
    try:
        target = [str(arg) for arg in config["argv"]]
        _protected_mounts(confine, config, report)
        rlimits = dict(config["rlimits"])
        if report.get("memory_cgroup") == "active":
            # Resident memory is bounded there; an address-space limit would only break
            # programs that reserve more than they use (V8's WebAssembly, ~10 GiB).
            rlimits.pop("as", None)
        report["rlimits"] = confine.set_rlimits(rlimits)
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
    env = config.get("env")
    child = _start(target, os.environ if env is None else env, report, status)
    while True:
        try:
            pid, wait_status = os.waitpid(-1, 0)
        except ChildProcessError:  # cannot happen while `child` is unreaped; be safe
            os._exit(EXEC_FAILED)
        if pid == child:
            break
    alone = _alone(report)
    if alone:
        # Nothing else is left in the PID namespace, and nothing can start there now:
        # let go of the program's streams and say so, before this process's own exit.
        os.closerange(0, 3)
    if os.WIFSIGNALED(wait_status):
        killed_by = os.WTERMSIG(wait_status)
        status.send(signal=killed_by, alone=alone)
        os._exit(128 + killed_by)
    code = os.waitstatus_to_exitcode(wait_status)
    status.send(exit=code, alone=alone)
    os._exit(code)


def _alone(report: dict[str, Any]) -> bool:
    """In the init of a PID namespace with its own /proc, once the program has ended:
    whether no other process is left (the zombies of earlier children reaped first).

    Then no process can start in the namespace any more (only its members could fork),
    so the call is over; the init's own exit (the kernel's teardown of its memory) need
    not be waited for.
    """
    if report.get("pid_namespace") != "active" or report.get("proc_mount") != "active":
        return False
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            return False  # a child is still running
    try:
        return [name for name in os.listdir("/proc") if name.isdigit()] == ["1"]
    except OSError:
        return False


def _start(
    target: list[str], env: Mapping[str, str], report: dict[str, Any], status: Status
) -> int:
    """Start the program; its pid. An exec failure is reported and ends this process.

    In a PID namespace of its own, the program dies with this init (the kernel kills the
    namespace), so it needs no parent-death signal and is spawned with `posix_spawn`
    (a vfork: no copy of this interpreter's page tables, a millisecond less a call).
    Without one, it is forked, to set the parent-death signal before the exec.
    """
    # Python ignores these at start-up, and an ignored signal stays ignored across exec.
    defaults = (signal.SIGPIPE, signal.SIGXFSZ)
    if report["pid_namespace"] == "active":
        try:
            return os.posix_spawn(target[0], target, env, setsigdef=defaults)
        except OSError as exc:
            status.send(exec_error=exc.strerror, errno=exc.errno)
            os._exit(EXEC_FAILED)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    me = os.getpid()
    child = os.fork()
    if child == 0:
        os.close(err_r)
        for sig in defaults:
            signal.signal(sig, signal.SIG_DFL)
        # Kept across exec (no set-uid: no_new_privs): without a PID namespace this is what
        # ends the program when the launcher is killed.
        _die_with_parent()
        if os.getppid() != me:
            os._exit(EXEC_FAILED)
        try:
            os.execve(target[0], target, env)
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
    return child


if __name__ == "__main__":
    main(sys.argv)
