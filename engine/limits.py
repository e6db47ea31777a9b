"""Bounds on documents read from files, models and people: nesting depth and size.

Recipes, policies, `--capabilities` files, cassettes and a model's JSON answers are all
user-controlled. Without bounds, 400 bytes of YAML aliases expand to a billion nodes and
500 nested brackets blow the interpreter's stack. The YAML reader (`engine.yaml`)
enforces these caps while it composes; JSON goes through `loads_json`/`decode_json`,
which measure the nesting before the parser recurses.

No real recipe comes near these numbers: a 10,000-step recipe nests 5 levels deep.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_DEPTH",
    "MAX_NODES",
    "TooDeep",
    "decode_json",
    "loads_json",
]

MAX_DEPTH = 100
"""Nested lists/mappings allowed (after YAML aliases are expanded)."""

MAX_NODES = 4_000_000
"""Nodes a YAML document may hold once its aliases are expanded (10,000 steps ≈ 150,000).

Aliases are bounded apart (`MAX_ALIAS_NODES`), so what this bounds is a document written
out in full: recipes of a few hundred thousand steps pass, within `MAX_RECIPE_BYTES`."""

MAX_ALIAS_NODES = 100_000
"""Nodes YAML aliases may add: anchors for shared params stay cheap, alias bombs do not."""

# A JSON string (the closing quote optional, so an unclosed one is consumed in one match
# and the scan stays linear), or one bracket. Everything else is skipped.
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.S)
_OPEN = frozenset("[{")


class TooDeep(ValueError):
    """A document nests lists/objects deeper than `MAX_DEPTH`.

    A `ValueError`, like every other "this is not usable JSON" error, so callers that
    already refuse bad JSON refuse this too, with its own message.

    Attributes:
        rule: `too-deep`, the rule id located diagnostics use.
        offset: where in the text the limit was passed.
    """

    rule = "too-deep"

    def __init__(self, message: str, *, offset: int) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


def loads_json(text: str, *, limit: int = MAX_DEPTH, strict: bool = True) -> Any:
    """`json.loads` that refuses nesting deeper than `limit` before parsing. With
    `strict=False` a string may hold raw control characters (a newline, a tab), as
    `json.loads(strict=False)` reads them.

    Raises:
        TooDeep: the text nests deeper than `limit`.
        ValueError: the text is not JSON (`json.JSONDecodeError`).
    """
    _check_json_depth(text, 0, limit, whole=True)
    return json.loads(text, strict=strict)


def decode_json(text: str, index: int = 0, *, limit: int = MAX_DEPTH) -> tuple[Any, int]:
    """`JSONDecoder.raw_decode` of the value starting at `index`, with the same bound.

    Only the value itself is scanned (up to its closing bracket), so trying every `{` of a
    long answer costs what `raw_decode` costs.

    Raises:
        TooDeep: the value nests deeper than `limit`.
        ValueError: no JSON value starts at `index`.
    """
    _check_json_depth(text, index, limit, whole=False)
    return _DECODER.raw_decode(text, index)


_DECODER = json.JSONDecoder()


def _check_json_depth(text: str, start: int, limit: int, *, whole: bool) -> None:
    depth = 0
    for token in _JSON_TOKEN.finditer(text, start):
        char = token.group()
        if char in _OPEN:
            depth += 1
            if depth > limit:
                raise TooDeep(
                    f"JSON nests deeper than {limit} levels (at offset {token.start()})",
                    offset=token.start(),
                )
        elif char in "]}":
            depth -= 1
            if depth <= 0 and not whole:
                return  # the end of the value that starts at `start`
