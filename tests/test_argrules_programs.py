"""The program table, program by program (exec-escapes through programs
the argument rules did not know, such as `setarch x86_64 sh -c ...` and
`sqlite3 :memory: '.shell ...'`).

Each dangerous invocation goes through `shell.run` and must be refused with rule
`shell.argument` before anything runs; where a program has a benign use, that use runs.
Rules are keyed by the basename of the program's real path, so a program that is not
installed here is stood in for by a copy of `true` under its name in the jail: the rule
judges the name, and nothing could run even if it failed to. Installed programs run for
real, and their dangerous invocations would leave a `pwned` file behind if let through.
The last tests go through the `planloom` command with the two reproductions of the issue.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _procs import planloom

from capabilities import shell
from capabilities.shell import ShellGrant, ShellParams, ShellResult
from engine.capability import CallContext
from engine.errors import CapabilityDenied

_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_TRUE = os.path.realpath(shutil.which("true", path=_SAFE_PATH) or "/bin/true")

# program -> (dangerous argv lists without the program, a benign argv or None)
CASES: dict[str, tuple[list[list[str]], list[str] | None]] = {
    "setarch": (
        [["x86_64", "sh", "-c", "touch pwned"], ["linux32", "touch", "pwned"]],
        ["--version"],
    ),
    "linux32": ([["sh", "-c", "touch pwned"]], None),
    "linux64": ([["sh", "-c", "touch pwned"]], None),
    "i386": ([["sh", "-c", "touch pwned"]], None),
    "x86_64": ([["sh", "-c", "touch pwned"], ["-R", "touch", "pwned"]], None),
    "uname26": ([["sh", "-c", "touch pwned"]], None),
    "sqlite3": (
        [
            [":memory:", ".shell touch pwned"],
            [":memory:", ".system touch pwned"],
            [":memory:", ".sh touch pwned"],  # the shell takes abbreviations
            [":memory:", ".output '|touch pwned'"],
            [":memory:", ".once '|touch pwned'"],
            [":memory:", ".import '|touch pwned' t"],
            [":memory:", ".load ./evil"],
            [":memory:", ".read evil.sql"],
            [":memory:", "select 1;\n.shell touch pwned"],
            [":memory:", "select load_extension('./evil')"],
            ["-cmd", ".shell touch pwned", ":memory:"],
            ["-init", "evil.sql", ":memory:"],
        ],
        [":memory:", "select 1 + 1"],
    ),
    "dc": ([["-e", "!touch pwned"], ["evil.dc"]], None),
    "m4": ([["evil.m4"], [], ["--version"]], None),
    "run-parts": ([["."], ["--test", "."]], ["--version"]),
    "flock": ([["lock", "touch", "pwned"], ["-c", "touch pwned", "lock"]], None),
    "chroot": ([["/", "sh", "-c", "touch pwned"]], None),
    "unshare": ([["sh", "-c", "touch pwned"]], None),
    "nsenter": ([["-t", "1", "sh", "-c", "touch pwned"]], None),
    "setpriv": ([["sh", "-c", "touch pwned"]], None),
    "stdbuf": ([["-o0", "touch", "pwned"]], None),
    "taskset": ([["1", "touch", "pwned"]], None),
    "ionice": ([["touch", "pwned"]], None),
    "chrt": ([["-o", "0", "touch", "pwned"]], None),
    "prlimit": ([["touch", "pwned"]], None),
    "script": ([["-q", "-c", "touch pwned", "/dev/null"]], None),
    "watch": ([["-n", "1", "touch", "pwned"]], None),
    "parallel": ([["touch", ":::", "pwned"]], None),
    "busybox": (
        [
            ["sh", "-c", "touch pwned"],
            ["xargs", "touch"],
            ["vi", "ok.txt"],
            ["httpd"],
            ["--install", "-s", "."],
        ],
        ["cat", "ok.txt"],
    ),
    "toybox": ([["sh", "-c", "touch pwned"]], ["wc", "-l", "ok.txt"]),
    "gdb": ([["-batch", "-ex", "!touch pwned"]], None),
    "strace": ([["-o", "/dev/null", "touch", "pwned"]], None),
    "ltrace": ([["touch", "pwned"]], None),
    "expect": ([["-c", "exec touch pwned"]], None),
    "vim.basic": ([["-c", "!touch pwned", "-c", "q"], ["ok.txt"]], None),
    "vim": ([["-es", "-c", "!touch pwned"]], None),
    "ex": ([["-c", "!touch pwned"]], None),
    "ed": ([["ok.txt"]], None),
    "less": ([["ok.txt"]], None),
    "more": ([["ok.txt"]], None),
    "man": ([["ls"]], None),
    "emacs": ([["--batch", "--eval", '(shell-command "touch pwned")']], None),
    "zip": (
        [
            ["-T", "-TT", "touch pwned", "a.zip", "ok.txt"],
            ["--unzip-command", "touch pwned", "-T", "a.zip", "ok.txt"],
        ],
        ["-q", "a.zip", "ok.txt"],
    ),
    "rsync": (
        [
            ["-e", "sh -c 'touch pwned'", "ok.txt", "h:x"],
            ["--rsh=touch", "ok.txt", "h:x"],
            ["ok.txt", "host:x"],
        ],
        ["ok.txt", "copy.txt"],
    ),
    "ssh": ([["-o", "ProxyCommand=touch pwned", "h"]], None),
    "scp": ([["-S", "./evil", "ok.txt", "h:x"]], None),
    "tar": (
        [
            ["-I", "touch pwned", "-cf", "a.tar", "ok.txt"],
            ["--use-compress-program=touch pwned", "-cf", "a.tar", "ok.txt"],
            ["--to-command=touch pwned", "-xf", "a.tar"],
        ],
        ["-cf", "a.tar", "ok.txt"],
    ),
    "make": ([["-f", "evil.mk"], []], None),
    "awk": ([['BEGIN{system("touch pwned")}'], ['BEGIN{print | "sh"}']], ["{print $1}", "ok.txt"]),
    "gawk": ([['BEGIN{system("touch pwned")}']], None),
    "mawk": ([['BEGIN{"touch pwned" | getline}']], ["{print $1}", "ok.txt"]),
    "perl": (
        [["-e", "system('touch pwned')"], ["-Mstrict;system(q(touch pwned))", "ok.txt"]],
        ["--version"],
    ),
    "ruby": ([["-e", "system('touch pwned')"]], None),
    "node": ([["-e", "require('fs').writeFileSync('pwned', '')"]], ["--version"]),
    "php": ([["-r", "touch('pwned');"]], None),
    "lua": ([["-e", "os.execute('touch pwned')"]], None),
    "tclsh": ([["evil.tcl"]], None),
    "wish": ([["evil.tcl"]], None),
    "openssl": ([["req", "-engine", "./evil.so"], ["engine", "dynamic"]], ["version"]),
    "gcc": ([["-wrapper", "sh,-c,touch pwned", "x.c"]], None),
    "install": ([["--strip-program=touch", "-s", "ok.txt", "sub/"]], None),
    "git": (
        [
            ["range-diff", "a...b"],
            ["grep", "--textconv", "x"],
            ["cat-file", "--textconv", "HEAD:ok.txt"],
        ],
        ["--version"],
    ),
}
DANGEROUS = [(name, args) for name, (bad, _) in CASES.items() for args in bad]
BENIGN = [(name, good) for name, (_, good) in CASES.items() if good is not None]


@pytest.fixture
def jail(tmp_path: Path) -> Path:
    root = tmp_path / "J"
    (root / "sub").mkdir(parents=True)
    (root / "ok.txt").write_text("ok\n")
    for script in ("evil.sql", "evil.dc", "evil.m4", "evil.pl", "evil.tcl", "evil.mk"):
        (root / script).write_text("touch pwned\n")
    return root


def _program(jail: Path, name: str) -> str:
    """The program to call: the installed one if there is one, else a stand-in copy."""
    if shutil.which(name, path=_SAFE_PATH):
        return name
    stand_in = jail / name
    if not stand_in.exists():
        shutil.copy(_TRUE, stand_in)
    return f"./{name}"


def _run(jail: Path, argv: list[str], **grant: Any) -> ShellResult:
    ctx = CallContext(
        grant=ShellGrant(cwd="J", allow=[argv[0]], **grant), base_dir=jail.parent, timeout=10.0
    )
    return asyncio.run(shell.run(ShellParams(argv=argv, check=False), ctx))


@pytest.mark.parametrize(
    ("name", "args"), DANGEROUS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(DANGEROUS)]
)
def test_dangerous_invocation_is_refused(jail: Path, name: str, args: list[str]) -> None:
    program = _program(jail, name)
    with pytest.raises(CapabilityDenied) as info:
        _run(jail, [program, *args])
    assert info.value.rule == "shell.argument", info.value.message
    assert "unsafe_args" in info.value.message
    assert not (jail / "pwned").exists()


@pytest.mark.parametrize(("name", "args"), BENIGN, ids=[n for n, _ in BENIGN])
def test_benign_invocation_runs(jail: Path, name: str, args: list[str]) -> None:
    program = _program(jail, name)
    result = _run(jail, [program, *args])
    assert result.exit_code == 0, result.stderr
    assert not (jail / "pwned").exists()


@pytest.mark.parametrize("name", ["setarch", "sqlite3", "m4", "busybox"])
def test_unsafe_args_lifts_the_rule(jail: Path, name: str) -> None:
    program = _program(jail, name)
    grant_name = program if program.startswith("./") else name
    argv = [program, *CASES[name][0][0]]
    result = _run(jail, argv, unsafe_args=[grant_name])
    assert result.confinement  # it ran, confined
    if program == name:  # the real program: the escape ran, inside the jail
        assert (jail / "pwned").exists()


def test_each_listed_name_has_exactly_one_entry() -> None:
    """A name matched by two entries would silently get the first one's rule."""
    from capabilities.shell.programs import PROGRAMS, lookup

    patterns = [re.compile(entry.names) for entry in PROGRAMS]
    for entry in PROGRAMS:
        for name in entry.names.split("|"):
            if re.fullmatch(r"[\w-]+", name) is None:
                continue  # a pattern, not a plain name
            matching = [p.pattern for p in patterns if p.fullmatch(name)]
            assert len(matching) == 1, (name, matching)
    assert (lookup("rm") or PROGRAMS[0]).rule == "writes-operands"
    assert (lookup("x86_64") or PROGRAMS[0]).rule == "wrapper"
    assert (lookup("vim.basic") or PROGRAMS[0]).rule == "runs-code"
    assert lookup("no-such-program") is None


# --- the reproductions, through the planloom command ----------------------------------


@pytest.mark.parametrize(
    ("program", "argv"),
    [
        ("setarch", ["x86_64", "sh", "-c", "touch pwned"]),
        ("sqlite3", ["sqlite3", ":memory:", ".shell touch pwned"]),
    ],
)
def test_cli_exec_escapes_are_denied(tmp_path: Path, program: str, argv: list[str]) -> None:
    if shutil.which(argv[0], path=_SAFE_PATH) is None:
        pytest.skip(f"{argv[0]} is not installed")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: escape
            capabilities:
              shell: {{allow: [{argv[0]}], cwd: .}}
            steps:
              - id: escape
                tool: shell.run
                params: {{argv: {json.dumps(argv)}}}
            """
        )
    )
    # The recipe writes the call out, so it is refused before anything runs
    proc = planloom("run", recipe, "--yes", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "recipe.yaml:8:" in proc.stderr, proc.stderr  # at the argument in params
    assert "error[shell.argument]" in proc.stderr
    assert f"unsafe_args: [{argv[0]}]" in proc.stderr  # the name the recipe wrote
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("option", ["--o=../pwned", "--out=../pwned", "--output=../pwned"])
def test_abbreviated_output_option_is_held_to_the_folder(jail: Path, option: str) -> None:
    # getopt_long takes any unique abbreviation of `--output`.
    with pytest.raises(CapabilityDenied) as info:
        _run(jail, ["sort", option, "ok.txt"])
    assert info.value.rule == "shell.output-path"
    assert not (jail.parent / "pwned").exists()
