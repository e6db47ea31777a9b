"""Kernel confinement layers for `shell.run` children, called through ctypes.

This module imports only the standard library and nothing from planloom, because the
launcher (`_launcher.py`) runs it in a fresh `python -I -S` interpreter that
cannot see the installed package. Each function either applies its layer and returns a
short description ("abi 7", "active"), or raises `LayerUnavailable` with the reason; the
caller decides whether to go on without it.

Layers, outermost first:

* a new user namespace (uid/gid 0 inside mapped to the caller's ids outside), so the PID
  and network namespaces can be created without privileges and capabilities held inside
  do not extend to the host;
* a new PID namespace: its first process is the namespace's init, and when it exits the
  kernel kills every process left inside, `setsid` and double-forked ones included;
* a new network namespace: no interfaces but a loopback that is down, so TCP and UDP fail;
* a private mount namespace: its own /proc, and every protected path beneath the writable
  folder (`.git`, `.env*`, see `capabilities.protected`) bind-mounted read-only;
* `PR_SET_NO_NEW_PRIVS`: setuid bits and file capabilities no longer raise privileges;
* rlimits: address space, file size, CPU seconds, processes, no core files;
* Landlock: reads and execution limited to system folders (`SYSTEM_READ_PATHS`, the /etc
  files of `ETC_READ_NAMES`, a few devices) and the granted folder, writes limited to the
  granted folder (and `/dev/null`), TCP bind/connect denied (ABI >= 4), signals and
  abstract UNIX sockets scoped to the sandbox (ABI >= 6).
"""

from __future__ import annotations

import ctypes
import errno
import fnmatch
import os
import resource
import stat

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39

# Landlock system calls share one number on every architecture (added after the unified
# syscall table).
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
_READ_RIGHTS = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR

# Folders a program may read and execute from, besides the granted folder and its own.
# Programs and libraries only: not /etc, /home, /root, /var, /srv, /mnt or /media.
# /opt holds add-on software packages (FHS; their host config goes to /etc/opt, their data
# to /var/opt, neither readable). /proc is the PID namespace's own when there is one, and
# Landlock keeps a child from reading other processes' /proc files either way.
SYSTEM_READ_PATHS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/proc",
    "/sys/devices/system/cpu",  # CPU count and topology (glibc get_nprocs, nproc, JVMs)
    "/sys/devices/system/node",
)
# What ordinary programs read in /etc (measured with `strace -e trace=%file` for git, grep,
# sort, wc, sed, awk, find, tar, ls, cat, stat, id, date, file, less, curl, python3 and
# perl): the loader's cache, users and groups (names only: no password hashes), name
# service, time zone, locale, TLS trust roots, MIME and magic databases, terminfo, and the
# configuration of installed interpreters. fnmatch patterns over the names in /etc.
# Never: shadow, gshadow, sudoers*, ssh host keys, ssl/private, security/, machine-id,
# hostname, and configs that may hold credentials (pip.conf, npmrc, .netrc, ...).
ETC_READ_NAMES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "ld.so.preload",
    "alternatives",
    "localtime",
    "timezone",
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "host.conf",
    "resolv.conf",
    "gai.conf",
    "services",
    "protocols",
    "networks",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "ca-certificates.conf",
    "pki/tls/certs",
    "pki/ca-trust",
    "crypto-policies",
    "gnutls",
    "gitconfig",
    "mime.types",
    "magic",
    "magic.mgc",
    "terminfo",
    "locale.alias",
    "locale.conf",
    "default/locale",
    "os-release",
    "lsb-release",
    "debian_version",
    "selinux/config",
    "inputrc",
    "fonts",
    "perl",
    "python3",
    "python3.*",
    "java-*",
    "ssh/ssh_config",
    "ssh/ssh_config.d",
    "ssh/ssh_known_hosts",
)
# Device files a program may read besides those it may write; not disks, kmsg or ttys.
DEVICE_READ_PATHS = ("/dev/random", "/dev/urandom")
# Device files a program may write; everything else under /dev is unreadable.
DEVICE_WRITE_PATHS = ("/dev/null", "/dev/zero", "/dev/full")


def etc_read_paths(etc: str = "/etc") -> list[str]:
    """The paths in `etc` that `ETC_READ_NAMES` name and this system has."""
    found = []
    for pattern in ETC_READ_NAMES:
        folder, _, name = pattern.rpartition("/")
        where = os.path.join(etc, folder)
        if not any(char in name for char in "*?["):
            path = os.path.join(where, name)
            if os.path.lexists(path):
                found.append(path)
            continue
        try:
            names = sorted(os.listdir(where))
        except OSError:
            continue
        found.extend(os.path.join(where, n) for n in names if fnmatch.fnmatchcase(n, name))
    return found


class LayerUnavailable(Exception):
    """A confinement layer cannot be applied here; the message says why."""


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _fail(what: str) -> LayerUnavailable:
    code = ctypes.get_errno()
    return LayerUnavailable(f"{what}: {errno.errorcode.get(code, code)} ({os.strerror(code)})")


def unshare(flags: int) -> None:
    """`unshare(2)`; raises `LayerUnavailable` on failure."""
    if _libc.unshare(ctypes.c_int(flags)) != 0:
        raise _fail("unshare")


def map_ids(uid: int, gid: int) -> None:
    """Map uid/gid 0 in a just-created user namespace to `uid`/`gid` outside."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        try:
            with open(f"/proc/self/{name}", "w") as file:
                file.write(text)
        except OSError as exc:
            raise LayerUnavailable(f"writing /proc/self/{name}: {exc.strerror}") from exc


def enter_namespaces(network: bool) -> dict[str, str]:
    """Create user, PID, mount and (unless `network`) network namespaces, best first.

    Returns one entry per layer, "active" or "unavailable: <reason>". Without a user
    namespace, the others are still tried (they need CAP_SYS_ADMIN). They are made by one
    `unshare`, so the mount namespace is new exactly when the PID namespace is.
    """
    wanted = CLONE_NEWPID | CLONE_NEWNS | (0 if network else CLONE_NEWNET)
    report = {
        "user_namespace": "",
        "pid_namespace": "",
        "mount_namespace": "",
        "network_namespace": "not used: network granted" if network else "",
    }
    uid, gid = os.getuid(), os.getgid()
    try:
        unshare(CLONE_NEWUSER | wanted)
        map_ids(uid, gid)
        report["user_namespace"] = "active"
    except LayerUnavailable as exc:
        report["user_namespace"] = f"unavailable: {exc}"
        try:
            unshare(wanted)
        except LayerUnavailable as inner:
            report["pid_namespace"] = f"unavailable: {inner}"
            report["mount_namespace"] = f"unavailable: {inner}"
            if not network:
                report["network_namespace"] = f"unavailable: {inner}"
            return report
    report["pid_namespace"] = "active"
    report["mount_namespace"] = "active"
    if not network:
        report["network_namespace"] = "active"
    return report


MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
# statvfs f_flag bits that are also mount flags, with the same value (ST_RELATIME is not).
_KEPT_MOUNT_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC | 16 | 64 | 1024 | 2048
_ST_RELATIME = 4096


def make_mounts_private() -> None:
    """Stop mount events propagating between this new mount namespace and the host's.

    Call right after `unshare(CLONE_NEWNS)`, before any other mount.
    """
    if _libc.mount(b"none", b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None) != 0:
        raise _fail("making / private")


def mount_proc() -> str:
    """In a new mount namespace, mount a /proc showing only the PID namespace's processes.

    Call from inside the PID namespace (its init), after `make_mounts_private()`.
    """
    flags = ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC)
    if _libc.mount(b"proc", b"/proc", b"proc", flags, None) != 0:
        raise _fail("mounting /proc")
    return "active"


def bind_read_only(paths: list[str]) -> int:
    """Bind-mount each path onto itself, read-only, in this (private) mount namespace.

    A child can then neither write nor replace, rename or delete it (`EROFS`/`EBUSY`),
    whatever Landlock allows beneath. Paths are opened with `O_NOFOLLOW` (a symlink is never
    mounted); one that is gone is skipped. Returns how many were mounted.
    """
    done = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # removed since the engine's walk: nothing left to protect
        except OSError as exc:
            raise LayerUnavailable(f"opening {path}: {exc.strerror}") from exc
        try:
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                continue
            _bind_read_only(path, fd)
        finally:
            os.close(fd)
        done += 1
    return done


def _bind_read_only(path: str, fd: int) -> None:
    # Through the descriptor: the bind covers exactly what was opened, with no second walk.
    source = f"/proc/self/fd/{fd}".encode()
    if _libc.mount(source, source, None, ctypes.c_ulong(MS_BIND | MS_REC), None) != 0:
        raise _fail(f"bind-mounting {path}")
    # The new mount is reached by opening the path again (the old descriptor still points
    # beneath it). A remount must keep the flags the kernel locked when the user namespace
    # was made (nosuid, nodev, noexec, atime), so they are read back and passed on.
    top = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        target = f"/proc/self/fd/{top}".encode()
        kept = os.statvfs(target).f_flag
        flags = (kept & _KEPT_MOUNT_FLAGS) | (MS_RELATIME if kept & _ST_RELATIME else 0)
        flags |= MS_REMOUNT | MS_BIND | MS_RDONLY | MS_REC
        if _libc.mount(None, target, None, ctypes.c_ulong(flags), None) != 0:
            raise _fail(f"remounting {path} read-only")
    finally:
        os.close(top)


PR_GET_PDEATHSIG = 2
PR_SET_DUMPABLE = 4


def set_pdeathsig(sig: int) -> None:
    """Have the kernel send `sig` to this process when the thread that forked it ends."""
    if _libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(sig), 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_PDEATHSIG)")


def set_dumpable(dumpable: bool) -> None:
    """`PR_SET_DUMPABLE`: a process that is not dumpable refuses ptrace and access to its
    /proc files to others with its uid but without CAP_SYS_PTRACE (the resident launcher's
    defence besides Landlock's domains); its /proc files then belong to root."""
    if _libc.prctl(PR_SET_DUMPABLE, int(dumpable), 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_DUMPABLE)")


def no_new_privs() -> str:
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_NO_NEW_PRIVS)")
    return "active"


def set_rlimits(limits: dict[str, int]) -> dict[str, str]:
    """Lower each `RLIMIT_<NAME>` to the value given (never above the current hard limit).

    RLIMIT_CPU gets one more second of hard limit so SIGXCPU can end the program first.
    """
    done: dict[str, str] = {}
    for name, wanted in limits.items():
        kind = getattr(resource, f"RLIMIT_{name.upper()}")
        _soft, hard = resource.getrlimit(kind)
        soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        new_hard = soft + 1 if name == "cpu" else soft
        if hard != resource.RLIM_INFINITY:
            new_hard = min(new_hard, hard)
        try:
            resource.setrlimit(kind, (soft, new_hard))
        except (OSError, ValueError) as exc:
            done[name] = f"unavailable: {exc}"
        else:
            done[name] = str(soft)
    return done


def landlock_abi() -> int:
    """The Landlock ABI version the kernel offers; raises `LayerUnavailable` without one."""
    abi = _libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    if abi < 0:
        raise _fail("landlock_create_ruleset")
    return int(abi)


def landlock(read_paths: list[str], write_paths: list[str], network: bool) -> str:
    """Restrict this process and its future children with Landlock.

    Requires no_new_privs (or CAP_SYS_ADMIN). Paths that do not exist are skipped.
    """
    abi = landlock_abi()
    handled_fs = _FS_BY_ABI[max(k for k in _FS_BY_ABI if k <= abi)]
    attr = _RulesetAttr(handled_fs, 0, 0)
    size = 8
    parts = ["fs"]
    if abi >= 4:
        size = 16
        if not network:
            attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
            parts.append("tcp")
    if abi >= 6:
        size = 24
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        parts.append("scope")
    ruleset = _libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        raise _fail("landlock_create_ruleset")
    try:
        for path in read_paths:
            rights = _READ_RIGHTS | (FS_IOCTL_DEV if path.startswith("/dev/") else 0)
            _allow(ruleset, path, rights & handled_fs)
        for path in write_paths:
            _allow(ruleset, path, handled_fs)
        if _libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0) != 0:
            raise _fail("landlock_restrict_self")
    finally:
        os.close(ruleset)
    return f"active (abi {abi}: {', '.join(parts)})"


def _allow(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a folder this system does not have
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):  # fstat of an O_PATH fd: no /proc lookup
            rights &= _FILE_RIGHTS
        rule = _PathBeneath(rights, fd)
        if _libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            raise _fail(f"landlock_add_rule({path})")
    finally:
        os.close(fd)
