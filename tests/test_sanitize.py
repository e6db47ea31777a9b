"""Output headed to a model or a terminal: escapes made visible, size capped with a marker."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.sanitize import (
    DEFAULT_MARKER,
    cap,
    neutralize,
    sanitize_for_llm,
    sanitize_for_terminal,
)

_DANGEROUS = (
    [chr(c) for c in range(0x20) if chr(c) not in "\t\n\r"]
    + ["\x7f"]
    + [chr(c) for c in range(0x80, 0xA0)]
    + list("\u061c\u200b\u200c\u200d\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e")
    + list("\u2066\u2067\u2068\u2069\ufeff\U000e0041\udc80")
)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[31mred\x1b[0m", "⟨ESC⟩[31mred⟨ESC⟩[0m"),
        (
            "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\",
            "⟨ESC⟩]8;;https://evil.example⟨ESC⟩\\click⟨ESC⟩]8;;⟨ESC⟩\\",
        ),
        ("\x1b]52;c;cm0gLXJmIH4=\x07", "⟨ESC⟩]52;c;cm0gLXJmIH4=⟨BEL⟩"),
        ("ok: all tests passed\rFAIL", "ok: all tests passed⟨CR⟩FAIL"),
        ("file\u202etxt.exe", "file⟨RLO⟩txt.exe"),
        ("nul\x00byte", "nul⟨NUL⟩byte"),
        ("c1 \x9b2J csi", "c1 ⟨CSI⟩2J csi"),
        ("\x1bP+q\x1b\\", "⟨ESC⟩P+q⟨ESC⟩\\"),
        ("zero\u200bwidth\ufeff", "zero⟨ZWSP⟩width⟨BOM⟩"),
        ("tag\U000e0069\U000e0067", "tag⟨U+E0069⟩⟨U+E0067⟩"),
        ("bad \udc80 byte", "bad ⟨U+DC80⟩ byte"),
    ],
)
def test_neutralize_makes_escapes_visible(raw: str, shown: str) -> None:
    assert neutralize(raw) == shown


def test_newline_tab_and_crlf_are_kept() -> None:
    text = "line one\tcol\r\nline two\n"
    assert neutralize(text) is text


def test_clean_text_is_returned_as_is() -> None:
    text = "héllo wörld ✓ — ordinary “text” 🙂\n" * 3
    assert neutralize(text) is text


@given(st.text())
def test_neutralized_text_holds_nothing_dangerous(text: str) -> None:
    out = neutralize(text)
    assert not any(char in out for char in _DANGEROUS)
    assert "\r" not in out.replace("\r\n", "")


def test_cap_keeps_the_head_and_counts_what_it_left_out() -> None:
    out, truncated = cap("a" * 100, 10)
    assert truncated
    assert out == "a" * 10 + DEFAULT_MARKER.format(n=90)
    assert cap("short", 10) == ("short", False)


def test_cap_can_keep_a_tail() -> None:
    out, truncated = cap("0123456789" * 10, 10, tail=4)
    assert truncated
    assert out == "012345" + DEFAULT_MARKER.format(n=90) + "6789"


def test_cap_never_splits_a_marker_or_a_surrogate_pair() -> None:
    out, _ = cap("abcdefgh⟨ESC⟩xyz", 10)
    assert out == "abcdefgh" + DEFAULT_MARKER.format(n=8)
    pair = "\ud83d\ude00"  # a surrogate pair, as surrogatepass decoding leaves it
    out, _ = cap("abc" + pair + "def", 4)
    assert out == "abc" + DEFAULT_MARKER.format(n=5)


@given(text=st.text(), limit=st.integers(0, 50), tail=st.integers(0, 20))
def test_sanitized_length_is_bounded(text: str, limit: int, tail: int) -> None:
    out, truncated = sanitize_for_terminal(text, limit=limit, tail=tail, marker="~")
    assert len(out) <= limit + 1
    assert truncated == (len(neutralize(text)) > limit)
    if not truncated:
        assert out == neutralize(text)
    else:
        assert "~" in out


def test_sanitize_marker_counts_original_characters() -> None:
    out, truncated = sanitize_for_terminal("ab\x1bcd" + "x" * 100, limit=10)
    assert truncated
    assert out == "ab⟨ESC⟩cdx" + DEFAULT_MARKER.format(n=99)  # 10 shown, 99 of 105 left out


def test_sanitize_for_llm_keeps_structure() -> None:
    value = {
        "stdout": "\x1b[2J" + "y" * 50,
        "lines": ["ok", ("\u202e", 3)],
        "exit\x1b": 0,
        "none": None,
    }
    out, truncated = sanitize_for_llm(value, limit=20)
    assert truncated
    assert out == {
        "stdout": "⟨ESC⟩[2J" + "y" * 12 + DEFAULT_MARKER.format(n=38),
        "lines": ["ok", ("⟨RLO⟩", 3)],
        "exit⟨ESC⟩": 0,
        "none": None,
    }
    assert sanitize_for_llm({"a": ["b"]}, limit=5) == ({"a": ["b"]}, False)


def test_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="limit"):
        cap("x", -1)


def test_five_megabytes_sanitize_well_under_a_second() -> None:
    chunk = "build step ok \x1b[32m✓\x1b[0m\r\n progress 50%\r" + "x" * 64 + "\n"
    text = chunk * (5_000_000 // len(chunk))
    assert len(text) >= 4_900_000
    start = time.perf_counter()
    neutralized = neutralize(text)
    full = time.perf_counter() - start
    start = time.perf_counter()
    capped, truncated = sanitize_for_llm(text, limit=1_000_000, tail=100_000)
    capped_time = time.perf_counter() - start
    assert "\x1b" not in neutralized
    assert truncated
    assert len(capped) <= 1_000_000 + len(DEFAULT_MARKER) + 10
    assert full < 0.6
    assert capped_time < 0.3
