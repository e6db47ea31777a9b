"""How a person is asked at the terminal: the one loop every prompt goes through (a gate,
the plan review, a `human.ask` question, where to save a plan).

An answer a prompt does not know is never taken as a "no": the person is told what the
valid answers are and asked again. The asking ends at a valid answer, at the end of input
(stdin closed, or Ctrl-D at a terminal), or after `TRIES` answers that were not valid; the
last two raise `NoAnswer`, and the caller fails closed (a gate denied, a plan rejected, a
question unanswered).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["ENDED", "TRIES", "Menu", "NoAnswer", "ask", "read_line"]

TRIES = 10  # answers that were not valid before the asking gives up (and fails closed)
ENDED = "no answer: the terminal's input ended"

T = TypeVar("T")


class NoAnswer(Exception):
    """The asking ended without a valid answer.

    Attributes:
        ended: the input ended (as if nobody were there), rather than every answer given
            being invalid.
    """

    def __init__(self, message: str, *, ended: bool) -> None:
        super().__init__(message)
        self.ended = ended


async def ask(
    prompt: str, parse: Callable[[str], T], *, again: str | None = None, tries: int = TRIES
) -> T:
    """Ask until `parse` takes the answer.

    Args:
        prompt: shown first.
        parse: the answer's value from the line read; raises `ValueError` saying what a
            valid answer is, which is shown before asking again.
        again: shown (after that message) when asking again; `prompt` if not given.
        tries: answers read at most.

    Raises:
        NoAnswer: at the end of input, or after `tries` answers that were not valid.
    """
    shown = prompt
    for _ in range(tries):
        line = await read_line(shown)
        if line is None:
            raise NoAnswer(ENDED, ended=True)
        try:
            return parse(line)
        except ValueError as exc:
            shown = f"{exc}\n{again if again is not None else prompt}"
    raise NoAnswer(f"no valid answer in {tries} tries", ended=False)


@dataclass(frozen=True)
class Menu:
    """Answers by key: `[a]pprove  [d]eny ...`. There is no default: an empty answer, like
    an unknown one, is asked again.

    Attributes:
        labels: each choice with its key in brackets, in the order shown.
        aliases: other answers taken, and the key each one stands for (which may be one
            not shown, for an answer kept for habit's sake, like `n`).
        fold_case: keys are matched in lower case (no two keys differ only in case).
    """

    labels: tuple[str, ...]
    aliases: Mapping[str, str] = field(default_factory=dict)
    fold_case: bool = False

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(label[label.index("[") + 1 : label.index("]")] for label in self.labels)

    @property
    def prompt(self) -> str:
        return "(no default) " + "  ".join(self.labels) + " > "

    def parse(self, text: str) -> str:
        """The key `text` stands for.

        Raises:
            ValueError: an empty or unknown answer, saying which keys are valid.
        """
        answer = text.strip()
        if self.fold_case:
            answer = answer.lower()
        if answer in self.keys:
            return answer
        if answer in self.aliases:
            return self.aliases[answer]
        *rest, last = self.keys
        valid = f"type {', '.join(rest)} or {last}"
        if not answer:
            raise ValueError(f"there is no default: {valid}")
        raise ValueError(f"{answer[:40]!r} is not an answer here: {valid}")


async def read_line(prompt: str) -> str | None:
    """Write `prompt` to stderr and read one line from stdin without blocking the loop;
    None at the end of input.

    A daemon thread rather than the default executor: if the run is cancelled while the
    person has not answered, the blocked read must not keep the interpreter from exiting.
    """
    # asyncio is imported where it is used: `planloom validate` imports this module
    # without running it, and asyncio (with ssl, which loads OpenSSL) is much of its start-up.
    import asyncio

    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str | None] = loop.create_future()

    def deliver(line: str | None) -> None:
        if not answer.done():
            answer.set_result(line)

    def read() -> None:
        line = _read(prompt)
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is waiting
            loop.call_soon_threadsafe(deliver, line)

    threading.Thread(target=read, name="planloom-prompt", daemon=True).start()
    return await answer


def _read(prompt: str) -> str | None:
    sys.stderr.write(prompt)
    sys.stderr.flush()
    line = sys.stdin.readline()
    return line if line else None  # "" only at the end of input; an empty answer is "\n"
