"""The environment `git` runs with under `shell.run`: a repository's config runs nothing.

A repository folder can carry a hostile `.git/config` (or, since HOME is the working folder,
a `.gitconfig` there): `core.pager`, `core.fsmonitor`, hooks, `filter.<name>.clean` selected
by `.gitattributes`, `merge.<name>.driver`, `remote.<name>.uploadpack`,
`submodule.<name>.update = !cmd` all name programs git would run. Settings given through
`GIT_CONFIG_COUNT`/`KEY_n`/`VALUE_n` override every config file, so:

* fixed settings reset the programs git knows by a fixed key (pager, fsmonitor, hooks, ssh,
  editors, credential helpers, signing programs);
* for the settings keyed by a name (filters, merge drivers, remotes, submodules), the names
  are read from the repository's config files (and the files they include, inside the
  granted folder) and each is reset;
* the global and system config files are not read at all.

External diff drivers and textconv filters (`diff.external`, `diff.<name>.command`,
`diff.<name>.textconv`) cannot be reset to "none" by a value; `argrules` switches them off
with `--no-ext-diff --no-textconv`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence

from engine.errors import CapabilityDenied

__all__ = ["git_env"]

_MAX_FILES = 16  # config files read for one call (the repository's, and what they include)
_MAX_BYTES = 1 << 20  # bytes read from one config file
_MAX_NAMES = 200  # named sections reset for one call

_FIXED = {
    "core.hooksPath": "/dev/null",
    "core.fsmonitor": "false",
    "core.pager": "cat",
    "core.sshCommand": "false",
    "core.askPass": "",
    "core.editor": ":",  # git's no-op editor: a message is never edited
    "sequence.editor": ":",
    "protocol.ext.allow": "never",
    "credential.helper": "",
    "commit.gpgSign": "false",
    "tag.gpgSign": "false",
    "log.showSignature": "false",
    "gpg.program": "gpg",
    "gpg.ssh.program": "ssh-keygen",
    "gpg.x509.program": "gpgsm",
}
# Per named section: the keys that name a program, and the value that runs none. An empty
# filter command means "no filter"; an empty merge driver fails the merge of that file.
_NAMED = {
    "filter": {"clean": "", "smudge": "", "process": "", "required": "false"},
    "merge": {"driver": ""},
    "remote": {"uploadpack": "git-upload-pack", "receivepack": "git-receive-pack"},
    "submodule": {"update": "checkout"},
}
_HEADER = re.compile(
    r'\s*\[\s*(?P<section>[A-Za-z0-9.-]+?)(?:\s+"(?P<sub>(?:[^"\\\n]|\\.)*)"|\.(?P<legacy>[^\s\]]+))?\s*\]',
)
_INCLUDE_PATH = re.compile(r"\s*path\s*=\s*(?P<value>.*)", re.IGNORECASE)


def git_env(
    args: Sequence[str], workdir: str, root: str, step_id: str | None = None
) -> dict[str, str]:
    """The environment for `git ARGS` run in `workdir`, inside the granted folder `root`.

    Raises:
        CapabilityDenied: rule `shell.argument`, when the repository's config names more
            sections with programs than can be reset.
    """
    settings = dict(_FIXED)
    names = _named_sections(_config_files(args, workdir, root))
    if len(names) > _MAX_NAMES:
        raise CapabilityDenied(
            f"git: the repository's config defines {len(names)} filter, merge, remote and "
            f"submodule sections, more than the {_MAX_NAMES} that can be kept from running "
            "programs; remove the ones you do not use",
            rule="shell.argument",
            step_id=step_id,
        )
    for section, name in sorted(names):
        for key, value in _NAMED[section].items():
            settings[f"{section}.{name}.{key}"] = value
    env = {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_COUNT": str(len(settings)),
    }
    for index, (key, value) in enumerate(settings.items()):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([root, path]) == root


def _start_dirs(args: Sequence[str], workdir: str) -> tuple[list[str], list[str]]:
    """Where git will look for its repository: (folders to search up from, git dirs)."""
    here, git_dirs = workdir, []
    index = 0
    while index < len(args) and args[index].startswith("-"):
        arg = args[index]
        if arg == "-C" and index + 1 < len(args):
            here = os.path.join(here, args[index + 1])
            index += 1
        elif arg.startswith("--git-dir="):
            git_dirs.append(os.path.join(here, arg.split("=", 1)[1]))
        index += 1
    return [workdir, here], git_dirs


def _git_dir(folder: str, root: str) -> str | None:
    """The git dir of the repository `folder` is in, searching up to `root`."""
    folder = os.path.realpath(folder)
    while _inside(folder, root):
        dot_git = os.path.join(folder, ".git")
        if os.path.isdir(dot_git):
            return dot_git
        if os.path.isfile(dot_git):
            text = _read(dot_git)
            if text.startswith("gitdir:"):
                return os.path.join(folder, text[len("gitdir:") :].strip())
        if all(os.path.exists(os.path.join(folder, n)) for n in ("HEAD", "config", "objects")):
            return folder  # a bare repository
        if folder == root:
            break
        folder = os.path.dirname(folder)
    return None


def _config_files(args: Sequence[str], workdir: str, root: str) -> list[str]:
    """The repository's config files and those they include, inside `root`, bounded."""
    starts, git_dirs = _start_dirs(args, workdir)
    for start in starts:
        found = _git_dir(start, root)
        if found is not None:
            git_dirs.append(found)
    queue: list[str] = []
    for git_dir in git_dirs:
        queue += [os.path.join(git_dir, "config"), os.path.join(git_dir, "config.worktree")]
        common = os.path.join(git_dir, "commondir")
        if os.path.isfile(common):
            queue.append(os.path.join(git_dir, _read(common).strip(), "config"))
    files: list[str] = []
    while queue and len(files) < _MAX_FILES:
        path = os.path.realpath(queue.pop(0))
        if path in files or not _inside(path, root) or not os.path.isfile(path):
            continue
        files.append(path)
        queue += _includes(path, workdir)
    return files


def _read(path: str) -> str:
    try:
        with open(path, "rb") as file:
            return file.read(_MAX_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _lines(path: str) -> Iterator[str]:
    """The file's lines, continuation lines joined (a value may go on after a backslash)."""
    yield from re.sub(r"\\\r?\n", "", _read(path)).splitlines()


def _includes(path: str, home: str) -> list[str]:
    """The files `path` includes (`[include]`, `[includeIf ...]`), conditions ignored."""
    found: list[str] = []
    including = False
    for line in _lines(path):
        header = _HEADER.match(line)
        if header:
            including = header.group("section").lower() in ("include", "includeif")
            line = line[header.end() :]
        match = _INCLUDE_PATH.match(line) if including else None
        if match:
            value = match.group("value").split("#")[0].split(";")[0].strip().strip('"')
            if value.startswith("~/"):
                value = os.path.join(home, value[2:])  # HOME is the working folder
            found.append(os.path.join(os.path.dirname(path), value))
    return found


def _named_sections(files: list[str]) -> set[tuple[str, str]]:
    """(section, name) for every filter, merge, remote and submodule section in `files`."""
    names: set[tuple[str, str]] = set()
    for path in files:
        for line in _lines(path):
            header = _HEADER.match(line)
            if header is None:
                continue
            section = header.group("section").lower()
            if header.group("sub") is not None:
                name = re.sub(r"\\(.)", r"\1", header.group("sub"))
            elif header.group("legacy") is not None:
                name = header.group("legacy").lower()  # the old `[section.name]` folds case
            else:
                continue
            if section in _NAMED:
                names.add((section, name))
    return names
