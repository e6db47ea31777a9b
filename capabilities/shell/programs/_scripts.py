"""Table entries for interpreters that may run a script file from the granted folder.

`python3 tools/build.py`, `bash build.sh`, `node tools/gen.js`: what the script does is
held by the confinement (namespaces, Landlock, rlimits, the pids cgroup) like anything
another allowed program does, so the rule lets such an interpreter run a script inside the
granted folder (`_argrules_scripts`). What stays refused unless the grant lists the
program in `unsafe_args`: code given in the arguments (`-c`, `-e`, `--eval`), a module or
library looked up elsewhere (`-m`, `-M`, `--require`, `--import`), standard input (`-`),
start-up files (`--rcfile`, `-l`, `-i`), search paths (`-I`, `-S`) and any option an entry
does not list. Each entry lists only options known to do none of that.

Interpreters not listed here (zsh, php, lua, tclsh, ...) keep the plain `interpreter`
rule of `_programs_runners`: every argument is refused but `--help`/`--version`.
"""

from __future__ import annotations

from capabilities.shell.programs._model import Program, Script

__all__ = ["SCRIPT_INTERPRETERS"]

_WHY = "runs code given in its arguments"
_INLINE = "runs code given in the arguments instead of a script file"
_STDIN = "reads the program from standard input instead of a script file"
_LOGIN = "makes a login shell, which runs /etc/profile and a profile file from HOME"
_PATH = "looks the script up on PATH, outside the granted folder"
_LOAD_PATH = "adds a folder to load code from"

# `set -o` names: none reads commands from elsewhere (dash's `stdin` and `interactive` do).
_SH_SET = (
    "allexport|debug|emacs|errexit|ignoreeof|monitor|noclobber|noexec|noglob|nolog|notify|"
    "nounset|pipefail|privileged|quiet|verbose|vi|xtrace"
)
_BASH_SET = (
    "allexport|braceexpand|emacs|errexit|errtrace|functrace|hashall|histexpand|history|"
    "ignoreeof|interactive-comments|keyword|monitor|noclobber|noexec|noglob|nolog|notify|"
    "nounset|onecmd|physical|pipefail|posix|privileged|verbose|vi|xtrace"
)
# `shopt` names allowed at start-up (`extdebug` there runs the debugger's start-up file).
_BASH_SHOPT = (
    "dotglob|expand_aliases|extglob|failglob|globasciiranges|globstar|inherit_errexit|"
    "lastpipe|nocaseglob|nocasematch|nullglob|shift_verbose|xpg_echo"
)

PYTHON = Program(
    r"python[\d.]*",
    "interpreter",
    _WHY,
    script=Script(
        flags="bBdEhIOPqRsSuvVx?",
        value="WX",
        long=(
            ("check-hash-based-pycs", True),
            ("help", False),
            ("help-all", False),
            ("help-env", False),
            ("help-xoptions", False),
            ("version", False),
        ),
        long_value="next",
        values=(
            (
                "-X",
                r"importtime(=\d)?|dev|utf8(=[01])?|faulthandler|tracemalloc(=\d+)?|"
                r"showrefcount|warn_default_encoding|no_debug_ranges|frozen_modules=(on|off)|"
                r"int_max_str_digits=\d+|perf|cpu_count=(\d+|default)|gil=[01]",
            ),
            # action:message:category:module:lineno; a dotted category is imported
            ("-W", r"[^:]*(:[^:]*(:[^:.]*(:[^:]*(:\d*)?)?)?)?"),
            ("--check-hash-based-pycs", r"always|default|never"),
        ),
        refused=(
            ("-c", _INLINE),
            ("-m", "runs a module from the module search path instead of a script file"),
            ("-i", "reads more code from standard input after the script"),
            ("-", _STDIN),
        ),
        info=frozenset(
            {"-V", "--version", "-h", "-?", "--help", "--help-all", "--help-env", "--help-xoptions"}
        ),
    ),
)

SH = Program(
    r"sh|dash",
    "interpreter",
    _WHY,
    script=Script(
        flags="abCefhmnpquvxEIV",
        value_next="o",
        plus=True,
        values=(("-o", _SH_SET),),
        refused=(
            ("-c", _INLINE),
            ("-s", _STDIN),
            ("-i", "makes an interactive shell, which reads commands from standard input"),
            ("-l", _LOGIN),
            ("-", _STDIN),
        ),
    ),
)

BASH = Program(
    r"bash|rbash",
    "interpreter",
    _WHY,
    script=Script(
        flags="abefhkmnprtuvxBCEHPT",
        value_next="oO",
        plus=True,
        long=(
            ("help", False),
            ("noediting", False),
            ("noprofile", False),
            ("norc", False),
            ("posix", False),
            ("restricted", False),
            ("verbose", False),
            ("version", False),
        ),
        values=(("-o", _BASH_SET), ("-O", _BASH_SHOPT)),
        refused=(
            ("-c", _INLINE),
            ("-s", _STDIN),
            ("-i", "makes an interactive shell, which runs .bashrc and reads standard input"),
            ("-l", _LOGIN),
            ("--login", _LOGIN),
            ("--rcfile", "runs the start-up file it names"),
            ("--init-file", "runs the start-up file it names"),
            ("--debugger", "runs the debugger's start-up file"),
            ("-", "ends the options in bash (write `--`) or reads standard input"),
        ),
        info=frozenset({"--version", "--help"}),
    ),
)

PERL = Program(
    r"perl[\d.]*",
    "interpreter",
    _WHY,
    script=Script(
        flags="acfhnpstTvwWX",
        # the text each takes from its cluster: `-0777`, `-l0`, `-CSD`, `-i.bak`, `-V:name`
        attached=(
            ("0", r"x[0-9A-Fa-f]*|[0-7]*"),
            ("l", r"[0-7]*"),
            ("C", r"[0-9]+|[IOEioeSDALa]*"),
            ("i", r".*"),
            ("x", r".*"),
            ("V", r"(:.*)?"),
        ),
        long=(("help", False), ("version", False)),
        values=(("-x", r""),),  # `-xDIR` changes folder first
        refused=(
            ("-e", _INLINE),
            ("-E", _INLINE),
            ("-M", "loads a module before the script (its text can carry code)"),
            ("-m", "loads a module before the script (its text can carry code)"),
            ("-I", _LOAD_PATH),
            ("-d", "runs the script under a debugger module loaded from elsewhere"),
            ("-D", "sets the interpreter's internal debugging flags"),
            ("-F", "puts its pattern into the program's code"),
            ("-S", _PATH),
            ("-u", "dumps core"),
            ("-", _STDIN),
        ),
        info=frozenset({"-v", "-V", "-h", "--version", "--help"}),
    ),
)

RUBY = Program(
    r"ruby[\d.]*",
    "interpreter",
    _WHY,
    script=Script(
        flags="acdhlnpsvwy",
        value="EF",
        attached=(("0", r"[0-7]*"), ("W", r":[\w-]+|[012]?"), ("i", r".*"), ("x", r".*")),
        long=(
            ("backtrace-limit", True),
            ("copyright", False),
            ("disable", True),
            ("disable-all", False),
            ("disable-did_you_mean", False),
            ("disable-error_highlight", False),
            ("disable-frozen-string-literal", False),
            ("disable-gems", False),
            ("disable-rubyopt", False),
            ("disable-syntax_suggest", False),
            ("enable", True),
            ("enable-frozen-string-literal", False),
            ("encoding", True),
            ("external-encoding", True),
            ("help", False),
            ("internal-encoding", True),
            ("verbose", False),
            ("version", False),
            ("yjit", False),
        ),
        long_value="equals",
        values=(
            ("-x", r""),  # `-xDIR` changes folder first
            ("--enable", r"frozen[-_]string[-_]literal"),
            ("--disable", r"[\w,-]+"),
            ("--backtrace-limit", r"-?\d+"),
        ),
        refused=(
            ("-e", _INLINE),
            ("-r", "requires a library before the script"),
            ("-I", _LOAD_PATH),
            ("-C", "changes folder before it finds the script"),
            ("-S", _PATH),
            ("--crash-report", "can pipe its report to a command"),
            ("-", _STDIN),
        ),
        info=frozenset({"-v", "-h", "--version", "--help", "--copyright"}),
    ),
)

_NODE_MODULE = "loads a module before the script"
NODE = Program(
    r"node|nodejs",
    "interpreter",
    _WHY,
    script=Script(
        flags="chv",
        value="C",
        long=(
            ("abort-on-uncaught-exception", False),
            ("check", False),
            ("conditions", True),
            ("disable-proto", True),
            ("dns-result-order", True),
            ("enable-source-maps", False),
            ("experimental-default-type", True),
            ("expose-gc", False),
            ("frozen-intrinsics", False),
            ("help", False),
            ("input-type", True),
            ("max-old-space-size", True),
            ("max-semi-space-size", True),
            ("no-addons", False),
            ("no-deprecation", False),
            ("no-global-search-paths", False),
            ("no-warnings", False),
            ("pending-deprecation", False),
            ("preserve-symlinks", False),
            ("preserve-symlinks-main", False),
            ("stack-size", True),
            ("stack-trace-limit", True),
            ("throw-deprecation", False),
            ("title", True),
            ("trace-deprecation", False),
            ("trace-uncaught", False),
            ("trace-warnings", False),
            ("unhandled-rejections", True),
            ("v8-options", False),
            ("version", False),
        ),
        underscores=True,
        values=(
            ("--disable-proto", r"delete|throw"),
            ("--dns-result-order", r"ipv4first|ipv6first|verbatim"),
            ("--experimental-default-type", r"commonjs|module"),
            ("--input-type", r"commonjs|module"),
            ("--max-old-space-size", r"\d+"),
            ("--max-semi-space-size", r"\d+"),
            ("--stack-size", r"\d+"),
            ("--stack-trace-limit", r"\d+"),
            ("--unhandled-rejections", r"strict|warn|none|throw|warn-with-error-code"),
        ),
        refused=(
            ("-e", _INLINE),
            ("--eval", _INLINE),
            ("-p", _INLINE),
            ("--print", _INLINE),
            ("-r", _NODE_MODULE),
            ("--require", _NODE_MODULE),
            ("--import", _NODE_MODULE),
            ("--loader", "loads module hooks before the script"),
            ("--experimental-loader", "loads module hooks before the script"),
            ("-i", "starts a REPL reading standard input"),
            ("--interactive", "starts a REPL reading standard input"),
            ("--env-file", "reads variables, NODE_OPTIONS among them, from a file"),
            ("--snapshot-blob", "starts from a heap snapshot: code from a file"),
            ("--inspect", "opens a debugger that runs code it is sent"),
            ("--inspect-brk", "opens a debugger that runs code it is sent"),
            ("--test", "runs the test files it finds instead of a script"),
            ("--watch", "runs the script again and again"),
            ("-", _STDIN),
        ),
        info=frozenset({"-v", "-h", "--version", "--help", "--v8-options"}),
    ),
)

SCRIPT_INTERPRETERS = (PYTHON, SH, BASH, PERL, RUBY, NODE)
