"""The program table behind `shell.run`'s argument rules: one entry per program (or family).

This module is data. Each `Program` names programs by a regular expression matched against
the basename of the program's *real* path (so `x86_64 -> setarch`, `vim -> vim.basic`,
`awk -> mawk` meet the rule of what they really are), and says:

* `rule`: the kind of rule (see `Rule`): a wrapper that runs its operands as a command, an
  interpreter whose arguments are code, a program that runs code whatever it is given, an
  option scan (`checked`), paths it writes, a multi-call binary, or one of the parsers in
  `_argrules` for programs whose syntax needs one (`find`-like expressions are `checked`).
* `options`: its getopt options that take a value (a separate next argument), those whose
  value is an output path held to the granted folder and those refused. They drive the
  option scan and tell where a templated argument is an option's value (see `_argrules`).
* `deny`: patterns searched in every argument, each with the reason it is refused.
* `end_of_options`: whether it reads `--` as the end of its options (GNU getopt does;
  `echo`, `printf`, `test`, `[` and subcommand-style programs such as `git` do not), so that
  `shell.run` may insert `--` before arguments that come from templates.
* `dot_commands`: for SQL shells that take commands from their arguments, the dot-commands
  that are allowed (every other one is refused).
* `prepend`: arguments `shell.run` puts first, after the checks: they keep a program from
  reading a start-up file from HOME (which is the working folder), where a file written by
  an earlier step could set options the checks never saw.

A program that is not listed gets no argument rule, and a templated argument that starts
with `-` is refused for it (it is not known to accept `--`). The principle for what must be
listed: a program whose purpose is to run another program or code is refused unless the
grant lists it in `unsafe_args`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["PROGRAMS", "Options", "Program", "Rule", "lookup"]

Rule = Literal[
    "wrapper",  # runs its operands as a command: refused (except --help/--version)
    "interpreter",  # its arguments are code or name a script: refused (except --help/--version)
    "runs-code",  # runs code or other programs whatever it is given: always refused
    "checked",  # `deny` patterns and the `options` scan (refused and jailed options)
    "writes-operands",  # every path operand is written or removed: held to the folder
    "writes-last-operand",  # writes its last operand (or `-t DIR`): held to the folder
    "multi-call",  # the first operand names an applet, judged by that applet's own entry
    "plain",  # no argument rule; listed for `options`/`end_of_options`
    # programs whose syntax needs a parser of its own (functions in `_argrules`):
    "env",
    "sed",
    "awk",
    "tar",
    "git",
    "dd",
    "split",
    "sqlite",
]


@dataclass(frozen=True, slots=True)
class Options:
    """A program's getopt options that matter to the rules.

    Attributes:
        value_short: short options taking a value (`-k KEY`, `-kKEY`).
        value_long: long options taking a value (`--key KEY`, `--key=KEY`).
        jail_short: short options whose value is a path the program writes.
        jail_long: long options whose value is a path the program writes.
        deny_short: short options that run another program or read options from a file.
        deny_long: long options that do (a unique abbreviation is refused too).
        stop_at_ddash: whether the scan stops at `--` (false when the program may read
            options after it).
    """

    value_short: str = ""
    value_long: tuple[str, ...] = ()
    jail_short: str = ""
    jail_long: tuple[str, ...] = ()
    deny_short: str = ""
    deny_long: tuple[str, ...] = ()
    stop_at_ddash: bool = True

    def short_takes_value(self, letter: str) -> bool:
        return letter in self.value_short or letter in self.jail_short

    def long_takes_value(self, name: str) -> bool:
        return name in self.value_long or name in self.jail_long


@dataclass(frozen=True, slots=True)
class Program:
    """One entry of the table (see the module docstring)."""

    names: str
    rule: Rule = "plain"
    why: str = ""
    end_of_options: bool = False
    options: Options | None = None
    deny: tuple[tuple[str, str], ...] = ()
    dot_commands: frozenset[str] = frozenset()
    prepend: tuple[str, ...] = ()


_WRAPPER = "runs its operands as another program"
_INTERPRETER = "runs code given in its arguments or in a script file"
_EDITOR = "is an editor or pager with shell escapes"
_BUILD = "runs recipe or package scripts"
_LOADS = "loads code into the program"

# --- wrappers: their purpose is to run the command in their operands ------------------------
_WRAPPERS = (
    Program(r"xargs|parallel|sem|env-parallel", "wrapper", _WRAPPER),
    Program(
        r"timeout|nice|nohup|setsid|stdbuf|time|flock|watch|entr|rlwrap|unbuffer",
        "wrapper",
        _WRAPPER,
    ),
    # setarch is also installed as linux32, linux64, i386, x86_64, uname26, ...
    Program(r"setarch|linux32|linux64|i386|x86_64|uname26|arch-run", "wrapper", _WRAPPER),
    Program(
        r"chroot|unshare|nsenter|setpriv|capsh|prlimit|taskset|ionice|chrt|numactl|"
        r"cgexec|systemd-run|systemd-nspawn|start-stop-daemon|runcon|sandbox",
        "wrapper",
        _WRAPPER,
    ),
    Program(
        r"sudo|su|doas|runuser|pkexec|sg|newgrp|chpst|setuidgid|envuidgid|envdir|"
        r"softlimit|runsv|runsvdir|sv|tini|dumb-init",
        "wrapper",
        _WRAPPER,
    ),
    Program(
        r"run-parts|script|expect|tmux|screen|dtach|abduco|at|batch|crontab",
        "wrapper",
        "runs the commands or scripts it is given",
    ),
    Program(
        r"strace|ltrace|gdb|gdbserver|valgrind|perf|catchsegv|eatmydata|fakeroot|"
        r"fakechroot|proot|faketime|torsocks|torify|proxychains\d*|firejail|bwrap|"
        r"dbus-launch|dbus-run-session|xvfb-run|ssh-agent|ld-linux.*|ld\.so|ld-.*\.so.*",
        "wrapper",
        _WRAPPER,
    ),
    Program(
        r"ssh|scp|sftp|rsh|rlogin|telnet|ftp|socat|nc|ncat|netcat|tcpsvd|udpsvd|inetd",
        "wrapper",
        "runs commands on another host or serves a command on a socket",
    ),
    Program(r"coreutils", "wrapper", "runs the utility named in its arguments"),
)

# --- interpreters: their arguments are code, or name a script -------------------------------
_INTERPRETERS = (
    Program(
        r"sh|bash|dash|zsh|ksh|ksh93|mksh|ash|hush|msh|lash|csh|tcsh|fish|yash|rbash",
        "interpreter",
        _INTERPRETER,
    ),
    Program(
        r"python[\d.]*|pypy[\d.]*|perl[\d.]*|ruby[\d.]*|irb|erb|node|nodejs|deno|bun|"
        r"php[\d.]*|lua[\d.]*|luajit|tclsh[\d.]*|wish[\d.]*|expectk|Rscript|R|julia|pwsh|"
        r"guile[\d.-]*|java|jshell|jrunscript|scala|groovy|osascript|dc|"
        r"psql|mysql|mariadb|redis-cli|gnuplot|octave[\w.-]*",
        "interpreter",
        _INTERPRETER,
    ),
)

# --- programs that run code whatever they are given ---------------------------------------
_RUNS_CODE = (
    Program(
        r"(vi|vim|nvim|rvim|gvim|view|rview|vimdiff|ex)(\.\w+)?|editor|sensible-editor|"
        r"select-editor|emacs[\w.-]*|nano|pico|ed|red|joe|jed|mc|mcedit|micro|"
        r"less|more|most|pg|pager|sensible-pager|man|info|lynx|w3m|xdg-open|"
        r"sensible-browser|www-browser",
        "runs-code",
        _EDITOR,
    ),
    Program(r"m4|gm4", "runs-code", "runs commands through its syscmd and esyscmd macros"),
    Program(
        r"make|gmake|bmake|ninja|cmake|meson|scons|npm|npx|yarn|pnpm|pip[\d.]*|pipx|"
        r"uv|poetry|cargo|go|rake|bundle|gem|gradle|mvn|ant|sbt|dotnet|composer",
        "runs-code",
        _BUILD,
    ),
    Program(
        r"(.*-)?(gcc|g\+\+|cc|c\+\+|cpp|clang|clang\+\+|ld|ld\.bfd|ld\.gold)(-[\d.]+)?",
        "runs-code",
        "runs the toolchain programs, plugins and wrappers it is told to",
    ),
    Program(
        r"gpg|gpg2|gpgv|gpgsm",
        "runs-code",
        "runs helper programs (photo viewers, keyserver helpers) named in its options",
    ),
    Program(r"ssh-keygen|ssh-add|ssh-keyscan", "runs-code", "loads PKCS#11 provider libraries"),
)

# --- GNU tools: only their value options matter (for `--` insertion) ----------------------
_GNU = (
    Program(
        r"cat|rev|md5sum|sha\d*sum|b2sum|cksum|sum|dirname|readlink|tr|sync",
        end_of_options=True,
        options=Options(),
    ),
    Program(
        r"tac", end_of_options=True, options=Options(value_short="s", value_long=("separator",))
    ),
    Program(r"wc", end_of_options=True, options=Options(value_long=("files0-from",))),
    Program(
        r"head",
        end_of_options=True,
        options=Options(value_short="cn", value_long=("bytes", "lines")),
    ),
    Program(
        r"tail",
        end_of_options=True,
        options=Options(
            value_short="cns",
            value_long=("bytes", "lines", "max-unchanged-stats", "pid", "sleep-interval"),
        ),
    ),
    Program(
        r"uniq",
        end_of_options=True,
        options=Options(value_short="fsw", value_long=("check-chars", "skip-chars", "skip-fields")),
    ),
    Program(
        r"cut",
        end_of_options=True,
        options=Options(
            value_short="bcdf",
            value_long=("bytes", "characters", "delimiter", "fields", "output-delimiter"),
        ),
    ),
    Program(
        r"grep|egrep|fgrep",
        end_of_options=True,
        options=Options(
            value_short="ABCDdefm",
            value_long=(
                "after-context",
                "before-context",
                "binary-files",
                "context",
                "devices",
                "directories",
                "exclude",
                "exclude-dir",
                "exclude-from",
                "file",
                "group-separator",
                "include",
                "label",
                "max-count",
                "regexp",
            ),
        ),
    ),
    Program(
        r"ls|dir|vdir",
        end_of_options=True,
        options=Options(
            value_short="ITw",
            value_long=(
                "block-size",
                "format",
                "hide",
                "ignore",
                "indicator-style",
                "quoting-style",
                "sort",
                "tabsize",
                "time",
                "time-style",
                "width",
            ),
        ),
    ),
    Program(
        r"nl",
        end_of_options=True,
        options=Options(
            value_short="bdfhilnsvw",
            value_long=(
                "body-numbering",
                "footer-numbering",
                "header-numbering",
                "join-blank-lines",
                "line-increment",
                "number-format",
                "number-separator",
                "number-width",
                "section-delimiter",
                "starting-line-number",
            ),
        ),
    ),
    Program(
        r"stat",
        end_of_options=True,
        options=Options(value_short="c", value_long=("cached", "format", "printf")),
    ),
    Program(
        r"du",
        end_of_options=True,
        options=Options(
            value_short="BXdt",
            value_long=(
                "block-size",
                "exclude",
                "exclude-from",
                "files0-from",
                "max-depth",
                "threshold",
                # not "time": its value is optional (`--time[=WORD]`), never the next argument
                "time-style",
            ),
        ),
    ),
    Program(
        r"basename", end_of_options=True, options=Options(value_short="s", value_long=("suffix",))
    ),
    Program(
        r"realpath",
        end_of_options=True,
        options=Options(value_long=("relative-base", "relative-to")),
    ),
    Program(r"comm", end_of_options=True, options=Options(value_long=("output-delimiter",))),
    Program(r"join", end_of_options=True, options=Options(value_short="12aejotv")),
    Program(
        r"paste", end_of_options=True, options=Options(value_short="d", value_long=("delimiters",))
    ),
    Program(r"fold", end_of_options=True, options=Options(value_short="w", value_long=("width",))),
    Program(
        r"fmt",
        end_of_options=True,
        options=Options(value_short="gpw", value_long=("goal", "prefix", "width")),
    ),
    Program(
        r"base64|base32|basenc",
        end_of_options=True,
        options=Options(value_short="w", value_long=("wrap",)),
    ),
    Program(
        r"expand|unexpand",
        end_of_options=True,
        options=Options(value_short="t", value_long=("tabs",)),
    ),
    Program(
        r"cmp",
        end_of_options=True,
        options=Options(value_short="in", value_long=("bytes", "ignore-initial")),
    ),
    Program(
        r"od",
        end_of_options=True,
        options=Options(
            value_short="ANSjt",
            value_long=("address-radix", "endian", "format", "read-bytes", "skip-bytes"),
        ),
    ),
    Program(
        r"pr",
        end_of_options=True,
        options=Options(
            value_short="DNWhlow",
            value_long=(
                "columns",
                "date-format",
                "first-line-number",
                "header",
                "indent",
                "length",
                "page-width",
                "width",
            ),
        ),
    ),
    Program(
        r"csplit",
        end_of_options=True,
        options=Options(value_short="bfn", value_long=("digits", "prefix", "suffix-format")),
    ),
    Program(
        r"gzip|gunzip|zcat",
        end_of_options=True,
        options=Options(value_short="S", value_long=("suffix",)),
    ),
    Program(
        r"seq",
        end_of_options=True,
        options=Options(value_short="fs", value_long=("format", "separator")),
    ),
    Program(
        r"diff",
        end_of_options=True,
        options=Options(
            value_short="CDFISUWXx",
            value_long=(
                "changed-group-format",
                "exclude",
                "exclude-from",
                "from-file",
                "horizon-lines",
                "ifdef",
                "ignore-matching-lines",
                "label",
                "line-format",
                "new-group-format",
                "new-line-format",
                "old-group-format",
                "old-line-format",
                "palette",
                "show-function-line",
                "starting-file",
                "tabsize",
                "to-file",
                "unchanged-group-format",
                "unchanged-line-format",
                "width",
            ),
        ),
    ),
    # Programs that never read `--` as the end of options: a templated argument that
    # starts with `-` is refused for them.
    Program(
        r"echo|printf|test|\[|expr|true|false|yes|sleep|id|whoami|uname|hostname|pwd|"
        r"date|jq|xxd"
    ),
)

# --- programs checked option by option -----------------------------------------------------
_CHECKED = (
    Program(
        r"find",
        "checked",
        "runs a program, deletes or writes files",
        deny=(
            (
                r"^-(exec|execdir|ok|okdir|delete|fprint|fprint0|fprintf|fls)$",
                "runs a program, deletes or writes files",
            ),
        ),
    ),
    Program(
        r"sort",
        "checked",
        end_of_options=True,
        options=Options(
            value_short="kSt",
            value_long=(
                "batch-size",
                "buffer-size",
                "field-separator",
                "files0-from",
                "key",
                "parallel",
                "random-source",
                "sort",
            ),
            jail_short="oT",
            jail_long=("output", "temporary-directory"),
            deny_long=("compress-program",),
        ),
    ),
    Program(
        r"shuf",
        "checked",
        end_of_options=True,
        options=Options(
            value_short="in",
            value_long=("head-count", "input-range", "random-source"),
            jail_short="o",
            jail_long=("output",),
        ),
    ),
    Program(
        r"curl",
        "checked",
        options=Options(
            jail_short="oDc",
            jail_long=(
                "output",
                "output-dir",
                "dump-header",
                "cookie-jar",
                "trace",
                "trace-ascii",
                "stderr",
                "libcurl",
                "etag-save",
                "hsts",
                "alt-svc",
            ),
            deny_short="K",
            deny_long=("config",),
            stop_at_ddash=False,
        ),
        prepend=("-q",),  # first argument only: do not read .curlrc
    ),
    Program(
        r"wget",
        "checked",
        options=Options(
            jail_short="OoaP",
            jail_long=(
                "output-document",
                "output-file",
                "append-output",
                "directory-prefix",
                "save-cookies",
                "warc-file",
                "save-headers",
            ),
            deny_short="e",
            deny_long=("execute", "config", "use-askpass"),
        ),
        prepend=("--no-config",),  # no .wgetrc
    ),
    Program(
        r"rsync",
        "checked",
        options=Options(
            value_short="fBT",
            jail_long=("log-file", "write-batch", "only-write-batch"),
            deny_short="e",
            deny_long=("rsh", "rsync-path", "server", "config"),
        ),
        deny=((r"^(?!-)[^/]*:", "names a remote host, which rsync reaches through a shell"),),
    ),
    Program(
        r"sdiff|diff3", "checked", end_of_options=True, options=Options(deny_long=("diff-program",))
    ),
    Program(
        r"zip|zipnote|zipsplit|zipcloak",
        "checked",
        deny=((r"^--un|^-[^-]*TT", "runs another program to test the archive"),),
    ),
    Program(
        r"openssl",
        "checked",
        deny=(
            (
                r"^-(engine|ssl_client_engine|provider|provider-path|config)$|^engine$",
                _LOADS + " (engines, providers, config files)",
            ),
        ),
    ),
    Program(r"tar", "tar"),
    Program(r"git", "git"),
    Program(
        r"sed",
        "sed",
        end_of_options=True,
        options=Options(value_short="efl", value_long=("expression", "file", "line-length")),
    ),
    Program(
        r"awk|gawk|mawk|nawk|original-awk|busybox-awk",
        "awk",
        end_of_options=True,
        options=Options(
            value_short="Fvfe", value_long=("field-separator", "assign", "file", "source")
        ),
    ),
    Program(r"env", "env"),
    Program(r"dd", "dd"),
    Program(
        r"split",
        "split",
        end_of_options=True,
        options=Options(
            value_short="Cablnt",
            value_long=(
                "additional-suffix",
                "bytes",
                "line-bytes",
                "lines",
                "number",
                "separator",
                "suffix-length",
            ),
            deny_long=("filter",),
        ),
    ),
    # sqlite3 reads SQL and dot-commands from its arguments; `.shell`/`.system` (and their
    # abbreviations), `.import '|cmd'`, `.output '|cmd'`, `.load` run programs or code.
    Program(
        r"sqlite3?|duckdb",
        "sqlite",
        deny=(
            (r"^-{1,2}(cmd|init)$", "runs commands from another argument or a file"),
            (r"(?i)\bload_extension\b", _LOADS + " (load_extension)"),
            (r"(?i)\bedit\s*\(", "runs an editor program (edit())"),
        ),
        dot_commands=frozenset(
            {
                "bail",
                "changes",
                "databases",
                "dbinfo",
                "dump",
                "echo",
                "eqp",
                "explain",
                "fullschema",
                "headers",
                "help",
                "indexes",
                "indices",
                "lint",
                "mode",
                "nullvalue",
                "parameter",
                "print",
                "prompt",
                "schema",
                "separator",
                "sha3sum",
                "show",
                "stats",
                "tables",
                "timer",
                "version",
                "width",
            }
        ),
        prepend=("-init", "/dev/null"),  # instead of .sqliterc
    ),
    Program(r"busybox|toybox", "multi-call", "runs the applet named in its first argument"),
)

# --- programs that write their path operands ---------------------------------------------
_WRITERS = (
    Program(r"rm|rmdir|unlink|tee", "writes-operands", end_of_options=True, options=Options()),
    Program(
        r"touch",
        "writes-operands",
        end_of_options=True,
        options=Options(value_short="drt", value_long=("date", "reference", "time")),
    ),
    Program(
        r"mkdir|mkfifo|mknod",
        "writes-operands",
        end_of_options=True,
        options=Options(value_short="m", value_long=("mode",)),
    ),
    Program(
        r"chmod", "writes-operands", end_of_options=True, options=Options(value_long=("reference",))
    ),
    Program(
        r"chown|chgrp",
        "writes-operands",
        end_of_options=True,
        options=Options(value_long=("from", "reference")),
    ),
    Program(
        r"truncate",
        "writes-operands",
        end_of_options=True,
        options=Options(value_short="rs", value_long=("reference", "size")),
    ),
    Program(
        r"shred",
        "writes-operands",
        end_of_options=True,
        options=Options(value_short="ns", value_long=("iterations", "size", "random-source")),
    ),
    Program(
        r"ln|mv",
        "writes-operands",
        end_of_options=True,
        options=Options(value_short="St", value_long=("suffix", "target-directory")),
    ),
    Program(r"chattr|setfacl", "writes-operands"),
    Program(
        r"cp",
        "writes-last-operand",
        end_of_options=True,
        options=Options(
            value_short="St", value_long=("suffix", "target-directory", "no-preserve", "sparse")
        ),
    ),
    Program(
        r"install",
        "writes-last-operand",
        end_of_options=True,
        options=Options(
            value_short="Stmog",
            value_long=("suffix", "target-directory", "mode", "owner", "group"),
            deny_long=("strip-program",),
        ),
    ),
)

# Earlier entries win: the specific rules come before the GNU `--` list that repeats some
# names (e.g. `rm` is a writer and accepts `--`).
PROGRAMS: tuple[Program, ...] = (
    *_WRAPPERS,
    *_INTERPRETERS,
    *_RUNS_CODE,
    *_CHECKED,
    *_WRITERS,
    *_GNU,
)


@functools.cache
def _compiled() -> tuple[tuple[re.Pattern[str], Program], ...]:
    return tuple((re.compile(entry.names), entry) for entry in PROGRAMS)


@functools.cache
def lookup(name: str) -> Program | None:
    """The table entry for a program basename, or None when it is not listed."""
    for pattern, entry in _compiled():
        if pattern.fullmatch(name):
            return entry
    return None
