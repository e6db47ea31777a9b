"""Confined children: what starts a program inside the kernel's confinement layers.

Shared by the families that start processes: `shell.run` programs and MCP stdio servers.

* `launch`: the launcher's command line, its config (`files_config`: what a child may read
  and write) and its status report; the launcher is a script run as `python -I -S`
  (`_launcher.py`), which applies the layers of `_layers.py` (namespaces, Landlock,
  `no_new_privs`, rlimits, the pids cgroup, read-only mounts of protected entries) and execs;
* `zygote`: the engine's side of the resident launcher (`_zygote.py`, a script too), which
  forks each call's launcher within a run instead of starting an interpreter per call;
* `scratch`: a call's private TMPDIR and pids cgroup, and the sweep of stale ones;
* `env`: the fixed PATH and the variables no child gets.

The scripts load each other by path, so they stay side by side in this folder. Nothing is
imported here: a command that only validates loads none of it.
"""
