"""The encoded forms of a secret value, and one regex that finds many secrets at once."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

__all__ = ["encodings", "trie_pattern"]

_MIN_ENCODED = 8
"""Shortest encoded form registered: shorter base64/hex fragments would hit ordinary text."""


def _base64_forms(raw: bytes) -> set[str]:
    forms: set[str] = set()
    whole = base64.b64encode(raw).decode()
    forms.update({whole, whole.rstrip("=")})
    for offset in (0, 1, 2):
        # Encode the secret as if `offset` unknown bytes came before it and unknown bytes
        # after it, then keep only the characters that depend on the secret alone.
        encoded = base64.b64encode(b"\0" * offset + raw).decode().rstrip("=")
        head = -(-8 * offset // 6)  # ceil: characters touched by the unknown prefix
        tail = 1 if (offset + len(raw)) % 3 else 0  # last character mixes in what follows
        forms.add(encoded[head : len(encoded) - tail])
    forms |= {f.replace("+", "-").replace("/", "_") for f in forms}
    return forms


def encodings(value: str) -> set[str]:
    """The usual encodings of `value` (hex, percent, JSON, base64) long enough to look for."""
    raw = value.encode("utf-8", "surrogatepass")
    hexed = raw.hex()
    percent = quote(value, safe="")
    forms = {
        hexed,
        hexed.upper(),
        percent,
        re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), percent),
        quote_plus(value, safe=""),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        *_base64_forms(raw),
    }
    return {form for form in forms if len(form) >= _MIN_ENCODED}


def trie_pattern(words: Iterable[str]) -> str:
    """One regex matching any of `words`, longest first, as a prefix tree.

    A flat `a|b|c` alternation makes the regex engine try every word at every position;
    a prefix tree branches on one character at a time, so many secrets cost little more
    than one.
    """
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}  # end of a word

    def emit(node: dict[str, Any]) -> str:
        chunks: list[str] = []
        # Follow single-child chains without recursing (secrets can be thousands long).
        while len(node) == 1 and "" not in node:
            (char, node), *_ = node.items()
            chunks.append(re.escape(char))
        if node.keys() == {""}:
            return "".join(chunks)
        branches = [re.escape(char) + emit(child) for char, child in node.items() if char]
        if "" in node:  # a word ends here: the longer ones are optional, tried first
            return "".join(chunks) + "(?:" + "|".join(branches) + ")?"
        group = "(?:" + "|".join(branches) + ")" if len(branches) > 1 else branches[0]
        return "".join(chunks) + group

    return emit(root)
