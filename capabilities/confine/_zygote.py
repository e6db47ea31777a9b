"""The resident launcher (zygote): one process per run that forks each `shell.run` call's sandbox.

Run as `python -I -S _zygote.py CONTROL_FD ENGINE_PID` (a script by path, like
`_launcher.py`, with the standard library and the two sibling scripts `_launcher.py` and
`_layers.py`, loaded by path). The engine's side is `zygote.py`; the `shell`
family's `Family.scope` starts it on a run's first call and stops it when the run ends.

Why: the one-shot launcher starts a fresh interpreter per call (~20 ms of start-up and
imports before the first layer). The zygote pays that once; per call, a forked child does
exactly what the one-shot launcher does, with the same code (`_launcher.py`): join the
call's pids cgroup, make the namespaces, fork the sandbox's init, which applies the layers
and starts the program.

Protocol. CONTROL_FD is a `SOCK_SEQPACKET` socket; the zygote first sends
`{"ready": PID}`, then serves two requests, each one message with descriptors
(`SCM_RIGHTS`), the first of which is a reply socket private to the request:

* `{"call": true}` with the reply socket, a memfd holding the launcher's config (as for
  `_launcher.py`, plus `env`, the program's environment, and `cwd`), the status pipe and
  the program's stdin, stdout and stderr: the zygote forks a child that runs the call;
* `{"spare": {"cgroup": PATH or null, "memory_cgroup": PATH or null}}` with the reply socket
  and a call socket: the zygote forks a spare, which does now all a call without network
  needs that no config changes (joins the cgroups, makes the namespaces, forks the init,
  which makes its mounts private, mounts /proc and sets no_new_privs), then waits: the
  engine later sends the call's five descriptors on the call socket, straight to the spare's
  init, which finishes the call (protected paths, rlimits, Landlock, the program).

On a reply socket, the zygote sends `{"pid": N}` with a pidfd of the child (opened before
the child can be reaped, so it names that child and no later holder of the pid), or
`{"error": ...}`; the child sends `{"init": N}` with a pidfd of the sandbox's init (or
`{"init": null}` without a PID namespace), whose end is the call's end; and the zygote
sends `{"exit": CODE}` once it has reaped the child, and closes it. An end of file on the
control socket (the engine closed it or died) ends the zygote.

What is shared, what is per call:

* shared: the interpreter, its imports and `_layers` (the start-up cost); nothing else.
  The zygote holds no confinement state: every layer is made in the forked child.
* per call, as with the one-shot launcher: the pids cgroup (its own `pids.max`; a shared one
  would let one call's fork bomb starve another), the memory cgroup (likewise, for memory),
  the user namespace (a shared one would give every program the capabilities over the other
  calls' namespaces and share uid 0's keyring between calls), the PID namespace and /proc (a
  shared one would let programs see and signal each other's processes, and one call's init
  would end every call), the network namespace (an empty shared one would still share UDP
  ports and abstract socket names between concurrent calls: one call could make another's
  `bind` fail), the mount namespace with its read-only protected paths (they differ per
  folder), the Landlock ruleset (its write folders include the call's own TMPDIR), the
  rlimits (per grant), the session and the scratch folder. A spare is made for one call and
  used by one call at most; what it prepares depends on no call's config.

Keeping programs away from the zygote. A forked child keeps only its own descriptors (the
call's stdin/stdout/stderr, its status pipe and reply or call socket, close-on-exec) and
closes every other one (the control socket, other calls' sockets and pidfds) before
anything else runs; the sandbox's init closes its sockets before the program starts, and
every descriptor the zygote opens is close-on-exec too. A program cannot signal or ptrace
the zygote: it lives outside the program's PID namespace, so no pid of the program's names
it; without a PID namespace, Landlock (ABI >= 6) scopes the program's signals to its own
domain, Landlock (any ABI) refuses ptrace of a process outside the domain, and the zygote
is not dumpable, so ptrace and /proc access need CAP_SYS_PTRACE in the engine's user
namespace, which a program in its own user namespace does not have. Its children make
themselves dumpable again before anything else (their /proc files must be their own, to
write their uid map as an unprivileged user).

Dying with the engine: `PR_SET_PDEATHSIG(SIGKILL)` first, then the check that the engine
is still the parent (the race before the prctl); each child does the same towards the
zygote, and from there the chain is the one-shot launcher's (init, PID namespace,
program). `kill -9` of the engine thus ends the zygote, every call's launcher and spare,
and with them every sandbox. The zygote is started in a session of its own, so a Ctrl-C at
the terminal reaches the engine, which cancels the calls, and never the zygote.
"""

from __future__ import annotations

import array
import ctypes
import json
import os
import select
import signal
import socket
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `typing`'s names only for the checker, as in `_launcher.py`
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any, NoReturn

SETUP_FAILED = 125
_PR_SET_PDEATHSIG = 1
_CALL_FDS = 6  # reply socket, config memfd, status pipe, stdin, stdout, stderr
_SPARE_FDS = 2  # reply socket, call socket
_MESSAGE_LIMIT = 4096  # a request's text is a small header; more is a bug
_TRUNCATED = socket.MSG_TRUNC | socket.MSG_CTRUNC


def _die_with_parent() -> None:
    """Be SIGKILLed when the engine's thread that started us ends; before any import."""
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _load_launcher() -> ModuleType:
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_launcher.py")
    spec = importlib.util.spec_from_file_location("_planloom_launcher", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> NoReturn:
    _die_with_parent()
    if len(argv) != 3:
        sys.stderr.write("usage: _zygote.py CONTROL_FD ENGINE_PID\n")
        os._exit(SETUP_FAILED)
    control_fd, engine = int(argv[1]), int(argv[2])
    if os.getppid() != engine:  # the engine died before the prctl
        os._exit(SETUP_FAILED)
    os.set_inheritable(control_fd, False)
    launcher = _load_launcher()
    confine = launcher.load_confine()
    confine.set_dumpable(False)
    control = socket.socket(fileno=control_fd)
    control.setblocking(True)
    control.send(json.dumps({"ready": os.getpid()}).encode())
    _Zygote(control, launcher, confine).serve()


class _Zygote:
    """The request loop: one `poll` over the control socket and the children's pidfds."""

    def __init__(self, control: socket.socket, launcher: ModuleType, confine: ModuleType) -> None:
        self.control = control
        self.launcher = launcher
        self.confine = confine
        self.pid = os.getpid()
        self.poller = select.poll()
        self.poller.register(control.fileno(), select.POLLIN)
        self.children: dict[int, tuple[int, socket.socket]] = {}  # pidfd: (pid, reply)

    def serve(self) -> NoReturn:
        while True:
            for fd, _events in self.poller.poll():
                if fd == self.control.fileno():
                    if not self._request():
                        os._exit(0)  # the engine is done (or gone): running calls die with us
                else:
                    self._ended(fd)

    def _request(self) -> bool:
        """Take one request and fork its child; False once the engine has closed the socket."""
        data, ancdata, flags, _ = self.control.recvmsg(
            _MESSAGE_LIMIT, socket.CMSG_SPACE(_CALL_FDS * 4), socket.MSG_CMSG_CLOEXEC
        )
        fds = _descriptors(ancdata)
        if not data and not fds:
            return False
        try:
            header = json.loads(data)
        except ValueError:
            header = None
        spare = header.get("spare") if isinstance(header, dict) else None
        if flags & _TRUNCATED:  # cannot happen with the engine's requests; be safe
            header = spare = None
        if isinstance(spare, dict) and len(fds) == _SPARE_FDS:
            cgroups = [spare.get(key) for key in ("cgroup", "memory_cgroup")]
            paths = [path if isinstance(path, str) else None for path in cgroups]
            self._fork(fds, lambda: _spare(self, fds, paths[0], paths[1]))
        elif isinstance(header, dict) and header.get("call") and len(fds) == _CALL_FDS:
            self._fork(fds, lambda: _call(self, fds))
        else:
            if fds:
                _answer(fds[0], error=f"malformed request ({len(fds)} descriptors)")
            _close(fds)
        return True

    def _fork(self, fds: list[int], child: Callable[[], NoReturn]) -> None:
        """Fork `child()` (which never returns), tell the engine its pid and pidfd, and
        keep the reply socket (`fds[0]`) for its exit code; the other descriptors are the
        child's alone."""
        reply = socket.socket(fileno=fds[0])
        try:
            pid = os.fork()
        except OSError as exc:
            _answer(reply.fileno(), error=f"fork: {exc.strerror}")
            reply.close()
            _close(fds[1:])
            return
        if pid == 0:
            try:
                child()
            finally:  # whatever happens, the child never runs on into this loop
                os._exit(SETUP_FAILED)
        _close(fds[1:])
        try:
            pidfd = os.pidfd_open(pid)  # our own unreaped child: the pid is still its own
        except OSError as exc:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            _answer(reply.fileno(), error=f"pidfd_open: {exc.strerror}")
            reply.close()
            return
        self.poller.register(pidfd, select.POLLIN)
        self.children[pidfd] = (pid, reply)
        if not _send_fd(reply.fileno(), {"pid": pid}, pidfd):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)  # the engine gave up on it

    def _ended(self, pidfd: int) -> None:
        """A child has exited (its pidfd is readable): reap it and tell the engine."""
        self.poller.unregister(pidfd)
        pid, reply = self.children.pop(pidfd)
        _, wait_status = os.waitpid(pid, 0)
        os.close(pidfd)
        _answer(reply.fileno(), exit=os.waitstatus_to_exitcode(wait_status))
        reply.close()


def _spare(
    zygote: _Zygote, fds: list[int], cgroup: str | None, memory_cgroup: str | None
) -> NoReturn:
    """In a spare: everything a call without network needs that its config does not
    change, done now; then wait for the call on the call socket and finish it.

    The kernel moves a process into a cgroup only after an RCU grace period when no other
    move happened just before (~10 ms here); the namespaces, the init's fork and its
    mounts take another two milliseconds: all done while no call waits. This process
    joins the cgroup, makes the namespaces and forks the init, which makes its mounts
    private, mounts /proc, sets no_new_privs and waits for the call (this process relays
    its end, as the one-shot launcher does). Its network namespace is its own, empty one:
    the engine never gives a call with network to a spare.
    """
    reply, call = fds
    launcher, confine = zygote.launcher, zygote.confine
    report: dict[str, Any] = {}
    failure = ""
    try:
        _detach(zygote.pid, confine)
        _keep_only(reply, call)
        report = launcher.enter(confine, cgroup, False, memory_cgroup)
        if os.getppid() != zygote.pid:
            os._exit(SETUP_FAILED)
    except Exception as exc:  # reported to the call it would have served
        failure = f"{type(exc).__name__}: {exc}"
    if failure:
        _started(reply, None)
    else:
        # In the init from here (the spare relays its end), or the spare itself without
        # a PID namespace; either way, the call's end is this process's end.
        launcher.become_init(confine, report, lambda init: _started(reply, init, call))
        os.close(reply)
        try:
            launcher.prepare_init(confine, report)
        except Exception as exc:
            failure = f"{type(exc).__name__}: {exc}"
    sock = socket.socket(fileno=call)
    _data, ancdata, _flags, _ = sock.recvmsg(
        _MESSAGE_LIMIT, socket.CMSG_SPACE((_CALL_FDS - 1) * 4), socket.MSG_CMSG_CLOEXEC
    )
    sock.close()
    given = _descriptors(ancdata)
    if len(given) != _CALL_FDS - 1:  # the engine let it go
        os._exit(0)
    config_fd, status_fd, stdin, stdout, stderr = given
    status = launcher.Status(status_fd)
    config = _take(config_fd, status_fd, (stdin, stdout, stderr), status, failure)
    if config["network"]:
        status.send(setup_error="RuntimeError: a spare (no network) was given a network call")
        os._exit(SETUP_FAILED)
    launcher.finish(confine, config, report, status)
    os._exit(SETUP_FAILED)  # not reached: `finish` ends the process


def _call(zygote: _Zygote, fds: list[int]) -> NoReturn:
    """In a child forked for a call: run it as the one-shot launcher's `run` would, telling
    the engine the init's pidfd on the way."""
    reply, config_fd, status_fd, stdin, stdout, stderr = fds
    launcher, confine = zygote.launcher, zygote.confine
    status = launcher.Status(status_fd)
    try:
        _detach(zygote.pid, confine)
    except Exception as exc:  # reported, never half-applied silently
        status.send(setup_error=f"{type(exc).__name__}: {exc}")
        os._exit(SETUP_FAILED)
    config = _take(config_fd, status_fd, (stdin, stdout, stderr), status, "", reply)
    try:
        network = bool(config["network"])
        report = launcher.enter(confine, config.get("cgroup"), network, config.get("memory_cgroup"))
        if os.getppid() != zygote.pid:  # it died before the parent-death signal was re-armed
            os._exit(SETUP_FAILED)
    except Exception as exc:
        status.send(setup_error=f"{type(exc).__name__}: {exc}")
        os._exit(SETUP_FAILED)
    # The launcher keeps nothing of the call's once the init is forked: the pipes close
    # when the init is done with them.
    launcher.become_init(confine, report, lambda init: _started(reply, init, status_fd, 0, 1, 2))
    os.close(reply)  # in the init (or in this process, without a PID namespace)
    try:
        launcher.prepare_init(confine, report)
    except Exception as exc:  # a bug or an odd kernel: say so and start nothing
        status.send(setup_error=f"{type(exc).__name__}: {exc}")
        os._exit(SETUP_FAILED)
    launcher.finish(confine, config, report, status)
    os._exit(SETUP_FAILED)  # not reached: `finish` ends the process


def _take(
    config_fd: int,
    status_fd: int,
    streams: tuple[int, int, int],
    status: Any,
    failure: str,
    keep: int = -1,
) -> dict[str, Any]:
    """Make `streams` the standard streams, read the config, close every descriptor but
    the standard streams, the status pipe and `keep`, and enter the call's folder."""
    try:
        if failure:
            raise RuntimeError(failure)
        for fd, target in zip(streams, (0, 1, 2), strict=True):
            os.dup2(fd, target)  # inheritable: the program's standard streams
        with os.fdopen(config_fd, "rb") as file:
            config: dict[str, Any] = json.loads(file.read())
        # Nothing of the zygote's (its control socket, other calls' sockets and pidfds)
        # goes further; what is kept is close-on-exec.
        _keep_only(status_fd, keep)
        os.chdir(config["cwd"])
    except Exception as exc:  # reported, never half-applied silently
        status.send(setup_error=f"{type(exc).__name__}: {exc}")
        os._exit(SETUP_FAILED)
    return config


def _started(reply: int, init: int | None, *close: int) -> None:
    """Tell the engine the init's pidfd (None: no PID namespace, the child is its own
    init); then close the reply socket (and `close`) here: only the relay keeps nothing."""
    if init is None:
        _send_fd(reply, {"init": None}, None)
        return
    try:
        pidfd = os.pidfd_open(init)  # our own child: it is still the init
    except OSError:
        _send_fd(reply, {"init": None}, None)
    else:
        _send_fd(reply, {"init": init}, pidfd)
        os.close(pidfd)
    os.close(reply)
    for fd in close:
        os.close(fd)


def _detach(zygote: int, confine: ModuleType) -> None:
    """First thing in a forked child: die with the zygote, be dumpable again (our own
    /proc files: the uid map), and lead a process group the engine kills via the pidfd."""
    confine.set_pdeathsig(signal.SIGKILL)
    if os.getppid() != zygote:  # the zygote died before the prctl
        os._exit(SETUP_FAILED)
    confine.set_dumpable(True)
    os.setsid()


def _keep_only(*keep: int) -> None:
    """Close every descriptor but the standard streams and `keep` (-1: none)."""
    low = 3
    for fd in sorted(fd for fd in keep if fd >= low):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, max(os.sysconf("SC_OPEN_MAX"), low + 1))


def _descriptors(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds = array.array("i")
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return list(fds)


def _send_fd(fd: int, message: dict[str, Any], carried: int | None) -> bool:
    """`message` on the socket `fd`, with the descriptor `carried`; False if it is gone."""
    ancillary = []
    if carried is not None:
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [carried]))]
    sock = socket.socket(fileno=fd)
    try:
        sock.sendmsg([json.dumps(message).encode()], ancillary)
    except OSError:
        return False
    finally:
        sock.detach()  # the descriptor stays open: its owner closes it
    return True


def _answer(fd: int, **message: Any) -> None:
    _send_fd(fd, message, None)


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


if __name__ == "__main__":
    main(sys.argv)
