"""Text headed to a model or a terminal: control characters made visible, size capped.

Tool output is untrusted. Written raw to a terminal, an escape sequence can recolour,
retitle or clear the screen, plant a hyperlink (OSC 8), write the clipboard (OSC 52), or,
with `\\r` or a bidi override (U+202E), make text read differently from what it is. Sent to
a model, invisible characters (zero-width, Unicode tags) can hide instructions.

`neutralize` replaces each such character with a visible marker naming it, `⟨NAME⟩`, in
the brackets U+27E8/U+27E9 (chosen because they are not escaped themselves and rarely
occur in program output, so a literal backslash-`x1b` in source code stays distinguishable
from a real ESC):

* C0 controls except TAB and LF, and DEL: `\\x1b` → `⟨ESC⟩`, `\\0` → `⟨NUL⟩`, `\\x07` →
  `⟨BEL⟩`; CR becomes `⟨CR⟩` unless it ends a line (`\\r\\n` is left alone: it cannot
  overwrite anything).
* C1 controls U+0080–U+009F by their ECMA-48 names: `\\x9b` → `⟨CSI⟩`, `\\x9d` → `⟨OSC⟩`.
* Bidi controls (`⟨RLO⟩` for U+202E, `⟨LRI⟩`, `⟨ALM⟩`...), zero-width characters
  (`⟨ZWSP⟩`, `⟨ZWJ⟩`, `⟨BOM⟩`...), line/paragraph separators, invisible operators,
  interlinear annotations and Unicode tag and variation-selector-supplement characters
  (`⟨U+E0041⟩`), and lone surrogates (`⟨U+DC80⟩`, from undecodable bytes).

Only the introducer of an escape sequence is replaced: `\\x1b[31m` becomes `⟨ESC⟩[31m`,
which no terminal interprets, and the rest stays readable. Each marker stands for exactly
one character, so the original can be read back from the output.

`cap` and the `sanitize_*` functions cut long text to a limit and append a marker saying
how many characters were left out, never cutting a marker or a surrogate pair in two.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "DEFAULT_MARKER",
    "cap",
    "neutralize",
    "sanitize_for_llm",
    "sanitize_for_terminal",
]

DEFAULT_MARKER = "…[truncated {n} chars]"

# The ECMA-48 names, laid out as in the standard's tables (16 a row).
_C0 = (  # noqa: SIM905  # two rows of a table read better than 32 quoted items
    "NUL SOH STX ETX EOT ENQ ACK BEL BS TAB LF VT FF CR SO SI "
    "DLE DC1 DC2 DC3 DC4 NAK SYN ETB CAN EM SUB ESC FS GS RS US"
).split()
_C1 = (  # noqa: SIM905  # as above
    "PAD HOP BPH NBH IND NEL SSA ESA HTS HTJ VTS PLD PLU RI SS2 SS3 "
    "DCS PU1 PU2 STS CCH MW SPA EPA SOS SGCI SCI CSI ST OSC PM APC"
).split()
_FORMAT_NAMES = {
    0x061C: "ALM",
    0x200B: "ZWSP",
    0x200C: "ZWNJ",
    0x200D: "ZWJ",
    0x200E: "LRM",
    0x200F: "RLM",
    0x2028: "LSEP",
    0x2029: "PSEP",
    0x202A: "LRE",
    0x202B: "RLE",
    0x202C: "PDF",
    0x202D: "LRO",
    0x202E: "RLO",
    0x2060: "WJ",
    0x2066: "LRI",
    0x2067: "RLI",
    0x2068: "FSI",
    0x2069: "PDI",
    0xFEFF: "BOM",
}
_UNNAMED_RANGES = (
    (0x180E, 0x180E),  # Mongolian vowel separator (invisible)
    (0x2061, 0x2064),  # invisible operators
    (0x206A, 0x206F),  # deprecated format characters
    (0xD800, 0xDFFF),  # lone surrogates (surrogateescape'd bytes)
    (0xFFF9, 0xFFFB),  # interlinear annotation
    (0xE0000, 0xE007F),  # tags: invisible ASCII look-alikes ("ASCII smuggling")
    (0xE0100, 0xE01EF),  # variation selectors supplement (hides bytes the same way)
)


def _build_table() -> dict[int, str]:
    table = {code: f"⟨{name}⟩" for code, name in enumerate(_C0) if code not in (9, 10)}
    table[0x7F] = "⟨DEL⟩"
    table.update({0x80 + code: f"⟨{name}⟩" for code, name in enumerate(_C1)})
    table.update({code: f"⟨{name}⟩" for code, name in _FORMAT_NAMES.items()})
    table[0x0D] = "⟨CR⟩"
    for low, high in _UNNAMED_RANGES:
        table.update({code: f"⟨U+{code:04X}⟩" for code in range(low, high + 1)})
    return table


_TABLE = _build_table()
"""Code point → marker. CR is in it, but the regexes below only match a CR not before LF."""
_BY_CHAR = {chr(code): marker for code, marker in _TABLE.items()}


def _char_class() -> str:
    codes = sorted(code for code in _TABLE if code != 0x0D)
    ranges: list[tuple[int, int]] = []
    for code in codes:
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1] = (ranges[-1][0], code)
        else:
            ranges.append((code, code))
    return "".join(
        f"\\U{low:08x}" if low == high else f"\\U{low:08x}-\\U{high:08x}" for low, high in ranges
    )


# Detection is a plain character class (CR included): the fastest regex scan there is, and
# faster still over ASCII text with an ASCII-only class. A hit then takes the exact pass.
_DETECT_ASCII = re.compile("[\x00-\x08\x0b-\x1f\x7f]")
_DETECT = re.compile(f"[{_char_class()}\\r]")
_UNSAFE_ONE = re.compile(rf"([{_char_class()}]|\r(?!\n))")
_UNSAFE_RUN = re.compile(rf"(?:[{_char_class()}]|\r(?!\n))+")
_MARKER = re.compile(r"⟨(?:[A-Z][A-Z0-9]{1,3}|U\+[0-9A-F]{4,5})⟩")


def neutralize(text: str) -> str:
    """`text` with every character that could act on a terminal or hide text made visible.

    Returns `text` itself when there is nothing to replace. One regex pass over the text,
    plus one `str.translate` per run of unsafe characters.
    """
    detect = _DETECT_ASCII if text.isascii() else _DETECT
    if detect.search(text) is None:
        return text
    parts = _UNSAFE_ONE.split(text)  # safe, unsafe char, safe, ..., safe
    parts[1::2] = map(_BY_CHAR.__getitem__, parts[1::2])  # C-level: no Python call per char
    return "".join(parts)


# --- capping ---------------------------------------------------------------------------------

_Token = tuple[str, int, bool]
"""(rendered text, how many original characters it stands for, whether it may be split)."""


_WIDEST = max(map(len, _TABLE.values()))


def _plain_tokens(text: str) -> Iterator[_Token]:
    """Already-neutral text: markers are whole tokens, the rest splits anywhere."""
    pos = 0
    for match in _MARKER.finditer(text):
        if match.start() > pos:
            yield text[pos : match.start()], match.start() - pos, True
        yield match.group(), len(match.group()), False
        pos = match.end()
    if pos < len(text):
        yield text[pos:], len(text) - pos, True


def _raw_tokens(text: str) -> Iterator[_Token]:
    """Raw text rendered on the fly: each unsafe character becomes one whole marker."""
    pos = 0
    for match in _UNSAFE_RUN.finditer(text):
        if match.start() > pos:
            yield text[pos : match.start()], match.start() - pos, True
        for char in match.group():
            yield _BY_CHAR[char], 1, False
        pos = match.end()
    if pos < len(text):
        yield text[pos:], len(text) - pos, True


def _is_high(char: str) -> bool:
    return "\ud800" <= char <= "\udbff"


def _is_low(char: str) -> bool:
    return "\udc00" <= char <= "\udfff"


def _take(tokens: Iterator[_Token], budget: int, *, from_end: bool) -> tuple[str, int]:
    """The most of `tokens` that fits in `budget` characters, and the source chars used.

    With `from_end`, `tokens` come last-first and the part kept is the end of a span.
    """
    kept: list[str] = []
    used = consumed = 0
    for rendered, source, splittable in tokens:
        if used + len(rendered) <= budget:
            kept.append(rendered)
            used += len(rendered)
            consumed += source
            continue
        if splittable:
            room = budget - used
            if from_end:
                piece = rendered[len(rendered) - room :] if room else ""
                if piece and _is_low(piece[0]) and _is_high(rendered[-room - 1]):
                    piece = piece[1:]  # keep a surrogate pair whole
            else:
                piece = rendered[:room]
                if piece and _is_high(piece[-1]) and _is_low(rendered[room]):
                    piece = piece[:-1]
            kept.append(piece)
            consumed += len(piece)
        break
    if from_end:
        kept.reverse()
    return "".join(kept), consumed


def _cut(
    text: str, limit: int, tail: int, marker: str, tokens: Callable[[str], Iterator[_Token]]
) -> tuple[str, int]:
    tail = max(0, min(tail, limit))
    # Windows a little wider than the budgets, so that a marker at the edge is seen whole.
    window = text[: limit - tail + _WIDEST]
    head, head_used = _take(tokens(window), limit - tail, from_end=False)
    end = ""
    tail_used = 0
    if tail:
        window = text[max(head_used, len(text) - tail - _WIDEST) :]
        end, tail_used = _take(reversed(list(tokens(window))), tail, from_end=True)
    omitted = len(text) - head_used - tail_used
    return head + marker.format(n=omitted) + end, omitted


def cap(text: str, limit: int, *, marker: str = DEFAULT_MARKER, tail: int = 0) -> tuple[str, bool]:
    """`text` cut to at most `limit` characters plus `marker`, and whether it was cut.

    Keeps the first `limit - tail` characters and the last `tail`, with
    `marker.format(n=<characters left out>)` between them. A `⟨NAME⟩` marker from
    `neutralize` or a surrogate pair is never cut in two (the kept part may then be a few
    characters shorter than `limit`).
    """
    if limit < 0:
        raise ValueError(f"limit must be at least 0, not {limit}")
    if len(text) <= limit:
        return text, False
    out, _omitted = _cut(text, limit, tail, marker, _plain_tokens)
    return out, True


def _sanitize_text(text: str, limit: int, tail: int, marker: str) -> tuple[str, bool]:
    if len(text) <= limit:
        out = neutralize(text)
        if len(out) <= limit:
            return out, False
    # Render only what can be kept: a 5 MB output capped at 64 KB costs 64 KB of work.
    cut, _omitted = _cut(text, limit, tail, marker, _raw_tokens)
    return cut, True


def sanitize_for_terminal(
    text: str, *, limit: int, tail: int = 0, marker: str = DEFAULT_MARKER
) -> tuple[str, bool]:
    """`neutralize` then `cap` in one pass: text safe to print, and whether it was cut.

    The marker counts characters of the *original* text left out.
    """
    if limit < 0:
        raise ValueError(f"limit must be at least 0, not {limit}")
    return _sanitize_text(text, limit, tail, marker)


def sanitize_for_llm(
    value: Any, *, limit: int, tail: int = 0, marker: str = DEFAULT_MARKER
) -> tuple[Any, bool]:
    """JSON-like data with every string neutralized and capped at `limit` characters.

    Dicts, lists and tuples keep their shape (dict keys are neutralized, not capped); other
    values pass through. The flag says whether any string was cut. `limit` applies to each
    string: bound the total size at the source (the tools' own output caps).
    """
    if limit < 0:
        raise ValueError(f"limit must be at least 0, not {limit}")
    truncated = False

    def walk(item: Any) -> Any:
        nonlocal truncated
        if isinstance(item, str):
            out, cut = _sanitize_text(item, limit, tail, marker)
            truncated = truncated or cut
            return out
        if isinstance(item, dict):
            return {
                neutralize(key) if isinstance(key, str) else key: walk(val)
                for key, val in item.items()
            }
        if isinstance(item, list):
            return [walk(element) for element in item]
        if isinstance(item, tuple):
            return tuple(walk(element) for element in item)
        return item

    return walk(value), truncated
