"""Table entries for programs whose only rule is how they read their options.

Mostly GNU tools: each entry says which options take a value and whether `--` ends the
options, so that `shell.run` knows where a templated argument would be read as an option
and can insert `--` before it (ATTACKS B7). The last entry lists programs that never read
`--` as the end of options.
"""

from __future__ import annotations

from capabilities.shell.programs._model import Options, Program

__all__ = ["GNU"]

GNU = (
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
