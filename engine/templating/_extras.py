"""The filters and tests planloom adds to Jinja's: regular expressions under a deadline
(`match`, `search`, `regex_replace`), `fromjson` under the nesting bound, `basename`,
`split`, and a `join` that joins null as nothing."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable
from typing import Any

import jinja2
from jinja2.filters import make_attrgetter, sync_do_join
from jinja2.nodes import EvalContext

from engine import regex
from engine.limits import loads_json
from engine.templating._limits import (
    TemplateLimit,
    check_size,
    deadline,
)


def match(value: Any, pattern: str) -> bool:
    return isinstance(value, str) and _user_regex(regex.match, pattern, value) is not None


def search(value: Any, pattern: str) -> bool:
    return isinstance(value, str) and _user_regex(regex.search, pattern, value) is not None


def regex_replace(value: str, pattern: str, replacement: str = "") -> str:
    written = 0

    def expand(found: Any) -> str:  # counts what it writes: `\g<0>` can repeat the input
        nonlocal written
        text: str = found.expand(replacement)
        written += len(text)
        check_size(len(value) + written, "regex_replace")
        return text

    result: str = _user_regex(regex.sub, pattern, expand, value)
    return result


def _user_regex(run: Callable[..., Any], pattern: str, *args: Any) -> Any:
    try:
        return run(pattern, *args, deadline=deadline())
    except regex.RegexTimeout as exc:
        raise TemplateLimit(str(exc)) from exc


def fromjson(value: str) -> Any:
    return loads_json(value)  # nesting past engine.limits.MAX_DEPTH: a clear TooDeep


def basename(value: str) -> str:
    return posixpath.basename(value)


def split(value: str, separator: str | None = None, maxsplit: int = -1) -> list[str]:
    return value.split(separator, maxsplit)


@jinja2.pass_eval_context
def join(
    eval_ctx: EvalContext, value: Iterable[Any], d: str = "", attribute: str | int | None = None
) -> str:
    """Jinja's `join`, with null joined as nothing, as `${{ none }}` prints (a failed
    `for_each` item is null: its text is empty, not "None")."""
    if attribute is not None:
        value = map(make_attrgetter(eval_ctx.environment, attribute), value)
    return sync_do_join(eval_ctx, ("" if item is None else item for item in value), d)
