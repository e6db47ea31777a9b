"""The shape of an entry in the program table: `Program`, its `Options` and its `Rule`.

Each `Program` names programs by a regular expression matched against the basename of the
program's *real* path (so `x86_64 -> setarch`, `vim -> vim.basic`, `awk -> mawk` meet the
rule of what they really are), and says:

* `rule`: the kind of rule (see `Rule`): a wrapper that runs its operands as a command, an
  interpreter whose arguments are code, a program that runs code whatever it is given, an
  option scan (`checked`), paths it writes, a multi-call binary, or one of the parsers in
  `argrules` for programs whose syntax needs one (`find`-like expressions are `checked`).
* `options`: its getopt options that take a value (a separate next argument), those whose
  value is an output path held to the granted folder and those refused. They drive the
  option scan and tell where a templated argument is an option's value (see `argrules`).
* `deny`: patterns searched in every argument, each with the reason it is refused.
* `end_of_options`: whether it reads `--` as the end of its options (GNU getopt does;
  `echo`, `printf`, `test`, `[` and subcommand-style programs such as `git` do not), so that
  `shell.run` may insert `--` before arguments that come from templates.
* `dot_commands`: for SQL shells that take commands from their arguments, the dot-commands
  that are allowed (every other one is refused).
* `prepend`: arguments `shell.run` puts first, after the checks: they keep a program from
  reading a start-up file from HOME (which is the working folder), where a file written by
  an earlier step could set options the checks never saw.
* `script`: for an interpreter, how its command line names a script file (see `Script`):
  such an interpreter may run a script inside the granted folder, under the options the
  entry knows to be harmless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Options", "Program", "Rule", "Script"]

Rule = Literal[
    "wrapper",  # runs its operands as a command: refused (except --help/--version)
    "interpreter",  # its arguments are code; with a `script`, a script file in the folder runs
    "runs-code",  # runs code or other programs whatever it is given: always refused
    "checked",  # `deny` patterns and the `options` scan (refused and jailed options)
    "writes-operands",  # every path operand is written or removed: held to the folder
    "writes-last-operand",  # writes its last operand (or `-t DIR`): held to the folder
    "multi-call",  # the first operand names an applet, judged by that applet's own entry
    "plain",  # no argument rule; listed for `options`/`end_of_options`
    # programs whose syntax needs a parser of its own (in the `argrules` modules):
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
class Script:
    """How an interpreter's command line names a script file, option by option.

    The first argument that is not an option (or the one after `--`) is the script; what
    follows it belongs to the script. An option the entry does not list is refused, so an
    interpreter option that runs inline code, a module or a start-up file from elsewhere is
    never let through by being unknown. Options are written with their dash (`-c`, `--eval`).

    Attributes:
        flags: short options without a value (clustered as `-Bu`).
        value: short options whose value is the rest of the cluster or else the next
            argument (`-Wdefault`, `-W default`); they end the cluster.
        value_next: short options whose value is the next argument while the cluster goes
            on (`bash -eo pipefail`).
        attached: short options with an optional value attached in the cluster, each with
            the pattern of the text it takes from there (`perl -l0`, `-0777`, `-i.bak`).
        long: long options without `--` and whether each takes a value.
        long_value: how a long option's value is given: `next` argument, `equals` (`=`) or
            `both`.
        plus: options may also start with `+` (sh: `+e` switches `-e` off).
        underscores: `_` and `-` are the same in long option names (node).
        values: option -> the pattern its value must match whole (others are refused).
        refused: option -> why it is refused: inline code, modules, standard input,
            start-up files, search paths. `-` (standard input) belongs here too.
        info: options that only print and exit; given alone, no script is needed.
    """

    flags: str = ""
    value: str = ""
    value_next: str = ""
    attached: tuple[tuple[str, str], ...] = ()
    long: tuple[tuple[str, bool], ...] = ()
    long_value: Literal["next", "equals", "both"] = "both"
    plus: bool = False
    underscores: bool = False
    values: tuple[tuple[str, str], ...] = ()
    refused: tuple[tuple[str, str], ...] = ()
    info: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Program:
    """One entry of the program table (see this module's docstring)."""

    names: str
    rule: Rule = "plain"
    why: str = ""
    end_of_options: bool = False
    options: Options | None = None
    deny: tuple[tuple[str, str], ...] = ()
    dot_commands: frozenset[str] = frozenset()
    prepend: tuple[str, ...] = ()
    script: Script | None = None
