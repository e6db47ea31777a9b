"""Recipe bytes to text: UTF-8 only, and a byte that is not is a located error."""

from __future__ import annotations

import codecs

from engine.diagnostics import Diagnostic, split_lines
from engine.errors import RecipeSyntaxError

MAX_RECIPE_BYTES = 20_000_000

_SAVE_AS_UTF8 = "save the file as UTF-8 (in most editors: Save As, Encoding: UTF-8)"
# Byte order marks of the encodings YAML allows besides UTF-8 (UTF-32 first: its
# little-endian mark starts with UTF-16's).
_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


def decode_text(raw: bytes, file: str) -> str:
    """The text of a YAML file's bytes: UTF-8, with or without a byte order mark.

    Raises:
        RecipeSyntaxError: UTF-16 or UTF-32 text, a binary file, or a byte that is not
            UTF-8, reported at its line and column with its line (the bad byte shown as
            U+FFFD) and how to fix it.
    """
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_BE)):
        raise RecipeSyntaxError([_wide(raw, file)])
    if b"\x00" in raw:
        if _wide_without_bom(raw):
            raise RecipeSyntaxError([_wide(raw, file)])
        kind = "JSON" if file.lower().endswith(".json") else "YAML"
        raise syntax_error(
            file,
            "binary-file",
            f"this is a binary file, not a {kind} recipe",
            "name the recipe's text file: YAML, or JSON in a file named *.json",
        )
    body = raw[len(codecs.BOM_UTF8) :] if raw.startswith(codecs.BOM_UTF8) else raw
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecipeSyntaxError([_bad_byte(body, exc.start, file)]) from None


def _wide(raw: bytes, file: str) -> Diagnostic:
    """UTF-16 or UTF-32 text: YAML allows it, planloom reads UTF-8 (and says so)."""
    found = next((name for bom, name in _WIDE_BOMS if raw.startswith(bom)), None)
    how = "it starts with a byte order mark" if found else "every other byte is zero"
    return Diagnostic(
        file=file,
        line=1,
        column=1,
        rule="encoding",
        message=f"the file is {found or 'UTF-16'} text ({how}); planloom reads UTF-8",
        hint=_SAVE_AS_UTF8,
    )


def _wide_without_bom(raw: bytes) -> bool:
    """Whether `raw` looks like UTF-16 with no byte order mark: YAML is mostly ASCII, so
    one byte of each pair is zero."""
    head = raw[:64]
    if len(head) < 4:
        return False
    for zeros, chars in ((head[1::2], head[0::2]), (head[0::2], head[1::2])):
        if zeros.count(0) * 4 >= len(zeros) * 3 and chars.count(0) * 4 < len(chars):
            return True
    return False


def _bad_byte(body: bytes, start: int, file: str) -> Diagnostic:
    """The first byte that is not UTF-8, at its line and column (characters, as the YAML
    parser counts them), keeping its line with the bad bytes shown as U+FFFD."""
    before = split_lines(body[:start].decode("utf-8") + "^")  # valid up to the bad byte
    rest = body[start : start + 4096].decode("utf-8", errors="replace")
    byte = body[start]
    hint = _SAVE_AS_UTF8
    latin = bytes([byte]).decode("cp1252", errors="replace")
    if latin.isprintable() and latin != "\ufffd":  # a Western editor's default, most often
        hint = (
            "save the file as UTF-8: it is probably Latin-1 or Windows-1252, "
            f"where 0x{byte:02X} is '{latin}'"
        )
    return Diagnostic(
        file=file,
        line=len(before),
        column=len(before[-1]),
        rule="encoding",
        message=f"the file is not UTF-8 text: byte 0x{byte:02X} cannot be read as UTF-8",
        hint=hint,
    ).with_source_line(before[-1][:-1] + split_lines(rest)[0])


def syntax_error(file: str, rule: str, message: str, hint: str | None = None) -> RecipeSyntaxError:
    diagnostic = Diagnostic(file=file, line=1, column=1, rule=rule, message=message, hint=hint)
    return RecipeSyntaxError([diagnostic])
