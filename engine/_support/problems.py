"""Pydantic validation errors as one line a person can act on: `path: message; ...`."""

from __future__ import annotations

from pydantic import ValidationError

__all__ = ["validation_problems"]


def validation_problems(
    exc: ValidationError,
    *,
    prefix: tuple[str | int, ...] = (),
    root: str = "value",
    most: int | None = None,
    limit: int = 2000,
) -> str:
    """`a.b: message; c: message`, at most `most` problems and `limit` characters.

    `prefix` is put before every path; `root` names a problem with the whole value.
    """
    problems = exc.errors(include_url=False)
    return "; ".join(
        f"{'.'.join(map(str, (*prefix, *e['loc']))) or root}: {e['msg']}" for e in problems[:most]
    )[:limit]
