"""The `shell` family: run an allowed program with an argv list, never through a shell.

Each call is checked before anything runs:

* the program is resolved the way the kernel will see it (a name on a fixed safe PATH, or a
  path relative to the working folder) and judged by its *real* path, so `./rm` or a
  symlink `ls -> /bin/rm` counts as `/bin/rm` (ATTACKS B8). The resolved real path is what
  gets executed, and it is also the child's `argv[0]`, so the check and the exec agree even
  for multi-call binaries that change behaviour with their name;
* arguments whose recipe text began with a template (`CallContext.data_paths`) are never
  read as options: `--` is inserted before them for programs that accept it, and one that
  starts with `-` and is still unprotected is refused (B7);
* the arguments pass the program's rules in `argrules`, from the table in `programs` (no
  `find -exec`, `sed e`, `git -c`, `sqlite3 .shell`, wrappers such as `setarch` or
  interpreter code unless the grant lists the program in `unsafe_args`; output files held
  to the granted folder) (B2-B6); an interpreter whose command line the table knows may
  run a script file from inside the granted folder, since the confinement below holds what
  the script does, but never code from its arguments, standard input or a start-up file;
* the working folder must stay inside the grant's folder, checked on real paths;
* the child gets a scrubbed environment: a fixed PATH, `HOME` set to the working folder,
  a private `TMPDIR`, a UTF-8 locale and only the variables the grant names. Loader,
  interpreter and secret variables are refused even when a grant asks for them (B9).

The program is started by the code of `capabilities/confine/_launcher.py` (a `python -I -S`
script), which puts it in new user, PID, mount and network namespaces, a pids cgroup, a
memory cgroup (`max_memory` for the call's processes together; where there is none, an
address-space rlimit instead), `no_new_privs`, rlimits (file size, CPU, core) and Landlock
(writes only beneath the granted folder, reads only from system folders, the /etc files
programs need and that folder, no TCP) before `exec`. Layers the kernel does not offer are
skipped and listed as unavailable in `ShellResult.confinement` and in
`confinement_report()`, never silently. Within a run, the family's scope keeps a resident
launcher (`capabilities/confine/_zygote.py`, started by the run's first call, stopped when the run
ends) that forks each call's launcher instead of starting an interpreter per call, and
prepares a spare for the next call without network (see `_zygote.py` for what is shared
and what is per call); a call from outside a run starts the launcher as a script.

Protected paths (`.git` folders, `.env*` files; see `capabilities.protected`) beneath the
granted folder are bind-mounted read-only in the child's mount namespace, unless the grant's
`protected:` globs open them; protected entries that appear during the call (which no
mount could cover) are removed afterwards and the call fails (rule `shell.protected`).
The launcher (and the resident one) dies with the engine (`PR_SET_PDEATHSIG`), and with
it the PID namespace; pids cgroups of engines that died anyway are emptied and removed at
the next start.

While it runs, stdin is `/dev/null` (B20); each output stream is capped (B11); on
timeout, cancellation or once the program exits, the launcher's process group and the PID
namespace's init are killed, whose end makes the kernel kill every process left in the
namespace, `setsid` and double-forked ones included (B12-B15). Without a PID
namespace, the pids cgroup (when writable) is swept instead.
"""

from __future__ import annotations

import os

from capabilities.shell._admit import admit
from capabilities.shell._models import ACTION, ShellGrant, ShellParams, ShellResult
from capabilities.shell._run import run, scope
from engine.capability import Action, Family, Registry

__all__ = ["ShellGrant", "ShellParams", "ShellResult", "confinement_report", "register", "run"]


def confinement_report() -> dict[str, str]:
    """Which confinement layers this machine gives `shell.run` children, probed once (the
    probe's module is imported on the first ask: `planloom tools`, audits; not by a
    command that only builds the registry, as `planloom validate` does).

    Each entry is "active ..." or "unavailable: <reason>".
    """
    from capabilities.shell._probe import confinement_report as probed

    return probed()


def _facts(grant: ShellGrant) -> str:
    """`programs: wc, grep; argv is a list: [program, arg, ...]`."""
    programs = ", ".join(grant.allow) or "none"
    return f"programs {programs} only; argv is a list [program, arg, ...], no shell syntax"


def register(registry: Registry) -> None:
    """Add the `shell` family and its `shell.run` action to `registry`."""
    registry.add_family(
        Family(
            "shell",
            "run allowed programs with an argv list (no shell)",
            ShellGrant,
            confinement_report,
            scope=scope,
            # Each call is a confined process tree: more at once than CPUs only queue up
            # (a recipe's `limits.per_family: {shell: N}` says otherwise).
            max_parallel=os.cpu_count() or 1,
            facts=_facts,
        )
    )
    registry.add(
        Action(
            ACTION,
            "Run an allowed program with arguments in the granted folder; returns its output.",
            ShellParams,
            run,
            result_model=ShellResult,
            side_effects=True,
            admit=admit,
            truncated_note="an output stream passed the grant's max_output, and the program "
            "was stopped there",
        )
    )
