"""Table entries for programs whose purpose is to run other programs or code.

Wrappers run the command in their operands, interpreters take code or a script in their
arguments, and editors, pagers, build tools and toolchains run code whatever they are given.
All of them are refused unless the grant lists the program in `unsafe_args`; the
interpreters that may run a script file from the granted folder (sh, bash, python, perl,
ruby, node) have entries of their own in `_programs_scripts`.
"""

from __future__ import annotations

from capabilities.shell.programs._model import Program

__all__ = ["INTERPRETERS", "RUNS_CODE", "WRAPPERS"]

_WRAPPER = "runs its operands as another program"
_INTERPRETER = "runs code given in its arguments or in a script file"
_EDITOR = "is an editor or pager with shell escapes"
_BUILD = "runs recipe or package scripts"

# --- wrappers: their purpose is to run the command in their operands ------------------------
WRAPPERS = (
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

# --- interpreters: their arguments are code, or name a script (see also _programs_scripts) ---
INTERPRETERS = (
    Program(
        r"zsh|ksh|ksh93|mksh|ash|hush|msh|lash|csh|tcsh|fish|yash",
        "interpreter",
        _INTERPRETER,
    ),
    Program(
        r"pypy[\d.]*|irb|erb|deno|bun|"
        r"php[\d.]*|lua[\d.]*|luajit|tclsh[\d.]*|wish[\d.]*|expectk|Rscript|R|julia|pwsh|"
        r"guile[\d.-]*|java|jshell|jrunscript|scala|groovy|osascript|dc|"
        r"psql|mysql|mariadb|redis-cli|gnuplot|octave[\w.-]*",
        "interpreter",
        _INTERPRETER,
    ),
)

# --- programs that run code whatever they are given ---------------------------------------
RUNS_CODE = (
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
