"""Table entries for programs checked argument by argument, and those that write operands.

An option scan refuses the options that run another program and holds output options to
the granted folder; `tar`, `git`, `sed`, `awk`, `env`, `dd`, `split` and the SQL shells get
a parser of their own in `argrules`; `rm`, `cp`, `mv` and kin have their path operands
held to the folder.
"""

from __future__ import annotations

from capabilities.shell.programs._model import Options, Program

__all__ = ["CHECKED", "WRITERS"]

_LOADS = "loads code into the program"

# --- programs checked option by option -----------------------------------------------------
CHECKED = (
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
WRITERS = (
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
