"""The argument rules for `git`: no global option, subcommand or flag that runs a program.

`check_git` refuses what can make git run another program (`-c`, aliases, `--upload-pack`,
`rebase -x`, `submodule foreach`, config writes...) and holds output paths to the granted
folder. `git_arguments` switches off external diff drivers and textconv filters, which no
config value can unset; `_gitconfig` resets the rest of the repository's config.
"""

from __future__ import annotations

from collections.abc import Sequence

from capabilities.shell.argrules._context import ArgContext
from capabilities.shell.programs import Program

__all__ = ["check_git", "git_arguments"]

# Subcommands that print diffs: external diff drivers (`diff.external`,
# `diff.<driver>.command`) and textconv filters from the repository's config are switched
# off by flags, since no config value can unset them (`_gitconfig` resets the rest).
_GIT_DIFFING = frozenset(
    {
        "diff",
        "log",
        "show",
        "whatchanged",
        "format-patch",
        "diff-files",
        "diff-index",
        "diff-tree",
    }
)
_GIT_LOG_LIKE = {"stash": ("show", "list"), "reflog": ("show",)}
_GIT_NO_TEXTCONV = frozenset({"blame", "annotate"})


def git_arguments(args: Sequence[str]) -> list[str]:
    """`git` arguments with `--no-ext-diff --no-textconv` after a diff-printing subcommand."""
    out = list(args)
    index = _git_subcommand_index(out)
    if index is None:
        return out
    sub = out[index]
    after = out[index + 1] if index + 1 < len(out) else None
    if sub in _GIT_LOG_LIKE:  # `stash show|list`, `reflog [show]` take log's diff options
        if after in _GIT_LOG_LIKE[sub]:
            out[index + 2 : index + 2] = ["--no-ext-diff", "--no-textconv"]
        elif sub == "reflog" and (after is None or after.startswith("-")):
            out[index + 1 : index + 1] = ["--no-ext-diff", "--no-textconv"]
    elif sub in _GIT_DIFFING:
        out[index + 1 : index + 1] = ["--no-ext-diff", "--no-textconv"]
    elif sub in _GIT_NO_TEXTCONV:
        out[index + 1 : index + 1] = ["--no-textconv"]
    return out


def _git_subcommand_index(args: Sequence[str]) -> int | None:
    index = 0
    while index < len(args) and args[index].startswith("-"):
        index += 2 if args[index] in ("-C", "-c") else 1
    return index if index < len(args) else None


_GIT_GLOBAL_FLAGS = frozenset(
    {
        "--no-pager",
        "--bare",
        "--no-replace-objects",
        "--literal-pathspecs",
        "--glob-pathspecs",
        "--noglob-pathspecs",
        "--icase-pathspecs",
        "--no-optional-locks",
        "--version",
        "--help",
        "--exec-path",
        "--html-path",
        "--man-path",
        "--info-path",
        "--no-advice",
    }
)
_GIT_SUBCOMMANDS = frozenset(
    (
        "add",
        "annotate",
        "apply",
        "archive",
        "blame",
        "branch",
        "bundle",
        "cat-file",
        "check-attr",
        "check-ignore",
        "check-mailmap",
        "checkout",
        "cherry",
        "cherry-pick",
        "clean",
        "clone",
        "commit",
        "commit-tree",
        "config",
        "count-objects",
        "describe",
        "diff",
        "diff-files",
        "diff-index",
        "diff-tree",
        "fetch",
        "for-each-ref",
        "format-patch",
        "fsck",
        "gc",
        "grep",
        "hash-object",
        "init",
        "log",
        "ls-files",
        "ls-remote",
        "ls-tree",
        "merge",
        "merge-base",
        "mktree",
        "mv",
        "name-rev",
        "notes",
        "pull",
        "push",
        "range-diff",
        "read-tree",
        "rebase",
        "reflog",
        "remote",
        "reset",
        "restore",
        "rev-list",
        "rev-parse",
        "revert",
        "rm",
        "shortlog",
        "show",
        "show-ref",
        "sparse-checkout",
        "stash",
        "status",
        "submodule",
        "switch",
        "symbolic-ref",
        "tag",
        "update-index",
        "update-ref",
        "var",
        "verify-commit",
        "verify-tag",
        "version",
        "whatchanged",
        "worktree",
        "write-tree",
    )
)
_GIT_DENIED_TEXT = (
    "sshcommand",
    "core.pager",
    "fsmonitor",
    "hookspath",
    "alias.",
    "credential.helper",
    "ext::",
    "fd::",
    "--upload-pack",
    "--receive-pack",
    "--exec",
    "--config-env",
    "--open-files-in-pager",
    "--ext-diff",
    "--extcmd",
    "--textconv",
    "--filters",
)
_GIT_CONFIG_READ = frozenset(
    {
        "--get",
        "--get-all",
        "--get-regexp",
        "--get-urlmatch",
        "-l",
        "--list",
        "--show-origin",
        "--show-scope",
        "--name-only",
        "-z",
        "--null",
        "--local",
        "--global",
        "--system",
        "--worktree",
        "--bool",
        "--int",
        "--path",
        "--type=bool",
        "--type=int",
        "--type=path",
        "get",
        "list",
    }
)


def check_git(args: Sequence[str], ctx: ArgContext, entry: Program) -> None:
    for arg in args:
        lowered = arg.lower()
        for text in _GIT_DENIED_TEXT:
            if text in lowered:
                raise ctx.deny(arg, "can make git run another program")
    index = 0
    while index < len(args) and args[index].startswith("-"):
        arg = args[index]
        index += 1
        if arg in _GIT_GLOBAL_FLAGS:
            continue
        if arg == "-C" and index < len(args):
            ctx.jail(args[index], f"-C {args[index]}")
            index += 1
        elif arg.startswith(("--git-dir=", "--work-tree=")):
            ctx.jail(arg.split("=", 1)[1], arg)
        else:  # -c, --exec-path=DIR, -p and anything unknown before the subcommand
            raise ctx.deny(arg, "is a global git option that can change what git runs")
    if index >= len(args):
        return
    sub, rest = args[index], args[index + 1 :]
    if sub not in _GIT_SUBCOMMANDS:
        raise ctx.deny(sub, "is not a built-in git command (aliases and helpers may run programs)")
    if sub in ("clone", "fetch", "pull", "ls-remote", "archive") and "-u" in rest:
        raise ctx.deny("-u", "sets the upload-pack program")
    if sub == "range-diff":
        raise ctx.deny(sub, "runs the repository's textconv filters whatever flags it is given")
    if sub == "rebase" and any(a == "-x" or a.startswith("-x") for a in rest):
        raise ctx.deny("-x", "runs a command after each commit")
    if sub == "submodule" and "foreach" in rest:
        raise ctx.deny("foreach", "runs a command in each submodule")
    if sub == "grep" and any(a.startswith("-O") for a in rest):
        raise ctx.deny("-O", "opens files in a pager program")
    if sub == "config":
        positional = [a for a in rest if not a.startswith("-") and a not in ("get", "list")]
        options = [a for a in rest if a.startswith("-") or a in ("get", "list")]
        if len(positional) > 1 or any(a not in _GIT_CONFIG_READ for a in options):
            raise ctx.deny(" ".join(rest), "changes git configuration (aliases, hooks, helpers)")
    for pos, arg in enumerate(rest):
        if arg.startswith("--output="):
            ctx.jail(arg.split("=", 1)[1], arg)
        elif arg in ("--output", "-o", "--output-directory") and pos + 1 < len(rest):
            ctx.jail(rest[pos + 1], f"{arg} {rest[pos + 1]}")
        elif arg.startswith("--output-directory="):
            ctx.jail(arg.split("=", 1)[1], arg)
