"""`planners._stream_plan.StepStream`: a plan answer's steps as its text streams.

For any plan document, however it is cut into pieces, the steps handed on over all pieces
are those json.loads reads, in order, each once the piece holding its closing brace has
arrived and not later; any prefix hands on a prefix of them; prose and a fence before the
JSON are skipped. Where yajl (ijson) and json.loads read a text differently, no step is
handed on that json.loads would read otherwise: a text mutated at random hands on a prefix
of what json.loads reads from it, all of it unless the stream says why it stopped.
"""

from __future__ import annotations

import itertools
import json
import math
import tracemalloc
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planners._stream_plan import MAX_NESTING, StepStream

# Any character, astral ones too, with what JSON and a plan's text make hard to cut
# around written in more often: brackets, quotes, backslashes, control characters.
_chars = st.one_of(
    st.characters(blacklist_categories=("Cs",)),
    st.sampled_from(list('{}[]"\\/:,`\n\t\r\x00\x1f\u2028é中😀𝄞')),
)
_text = st.text(alphabet=_chars, max_size=12)
_numbers = st.one_of(
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=False, allow_infinity=False),
)
_scalars = st.none() | st.booleans() | _numbers | _text
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=10,
)
_step = st.fixed_dictionaries(
    {"id": st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), "params": _values},
    optional={"tool": _text, "depends_on": st.lists(_text, max_size=2), "note": _text},
)
_steps = st.lists(_step, max_size=6)
_layouts = st.sampled_from(["compact", "spaced", "indented"])
_wrappings = st.sampled_from(["none", "whitespace", "fence", "prose", "prose and fence"])


def _dumps(value: Any, layout: str, ascii_only: bool) -> str:
    if layout == "compact":
        return json.dumps(value, separators=(",", ":"), ensure_ascii=ascii_only)
    if layout == "indented":
        return json.dumps(value, indent=2, ensure_ascii=ascii_only)
    return json.dumps(value, ensure_ascii=ascii_only)


def _document(
    steps: list[Any], *, bare: bool, layout: str, ascii_only: bool, goal: str
) -> tuple[str, list[int]]:
    """A plan answer's JSON and where each step's text ends in it (just past its `}`)."""
    comma = "," if layout == "compact" else ",\n  " if layout == "indented" else ", "
    parts = [_dumps(step, layout, ascii_only) for step in steps]
    array = "[" + comma.join(parts) + "]"
    if bare:
        head, tail = "", ""
    else:
        # members around the steps that look like steps, and hold brackets in strings
        goal_json = _dumps(goal, layout, ascii_only)
        notes = '{"steps": [{"id": "no"}], "x": "}{"}'
        head = f'{{"goal": {goal_json}, "notes": {notes}, "steps": '
        tail = ', "outputs": {"steps.item": {"id": "no"}, "s": "]}"}}'
    ends, at = [], len(head) + 1
    for part in parts:
        at += len(part)
        ends.append(at)
        at += len(comma)
    return head + array + tail, ends


def _wrapped(body: str, wrapping: str) -> tuple[str, int]:
    """The answer as a model may send it, and where the JSON starts in it."""
    before = {
        "none": "",
        "whitespace": "\n  ",
        "fence": "```json\n",
        "prose": "Here is the plan (it reads the files first):\n\n",
        "prose and fence": "Sure! The plan:\n```JSON\n",
    }[wrapping]
    after = "\n```\n" if "fence" in wrapping else "\nTell me if it should change."
    return before + body + after, len(before)


def _pieces(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(cut, len(text)) for cut in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=_steps,
    bare=st.booleans(),
    layout=_layouts,
    ascii_only=st.booleans(),
    wrapping=_wrappings,
    goal=_text,
    cuts=st.lists(st.integers(0, 3000), max_size=60),
)
def test_any_cutting_hands_on_each_step_once_in_order_as_soon_as_it_is_complete(
    steps: list[Any],
    bare: bool,
    layout: str,
    ascii_only: bool,
    wrapping: str,
    goal: str,
    cuts: list[int],
) -> None:
    body, ends = _document(steps, bare=bare, layout=layout, ascii_only=ascii_only, goal=goal)
    whole = json.loads(body)
    expected = whole if bare else whole["steps"]
    text, start = _wrapped(body, wrapping)
    stream = StepStream()
    got: list[Any] = []
    arrived = 0
    for piece in _pieces(text, cuts):
        arrived += len(piece)
        got.extend(stream.feed(piece))
        complete = sum(1 for end in ends if start + end <= arrived)
        assert got == expected[:complete]  # none before its brace, none held back after
    assert got == expected
    assert stream.broken is None


@settings(max_examples=300, deadline=None)
@given(
    steps=_steps,
    ascii_only=st.booleans(),
    layout=_layouts,
    cut=st.integers(0, 3000),
)
def test_a_prefix_hands_on_a_prefix_of_the_steps(
    steps: list[Any], ascii_only: bool, layout: str, cut: int
) -> None:
    body, ends = _document(steps, bare=False, layout=layout, ascii_only=ascii_only, goal="g")
    got = StepStream().feed(body[:cut])
    assert got == json.loads(body)["steps"][: sum(1 for end in ends if end <= cut)]


# What a model's text may hold that yajl and json.loads read differently, or not at all.
_junk = st.sampled_from(
    [
        "\\ud83d",  # a high surrogate's escape, alone or paired with what comes next
        "\\ude00",
        "\\ud83d\\ude00",
        "\f",
        "\v",
        "\n",
        "\t",
        "\x00",
        "1e400",
        "-1e400",
        "9" * 30,
        "NaN",
        "Infinity",
        "-0",
        "1E2",
        '"steps": [{"id": "z"}], ',
        '"steps": 1, ',
        '"id": "dup", ',
        '"p": {"k": 1}, "p": [2], ',
        "/* c */",
        ",",
        "{",
        "}",
        "[",
        "]",
        '"',
        "\\",
        "```",
        "\ud800",  # a lone surrogate in the text itself
    ]
)


def _loads_steps(text: str) -> list[Any] | None:
    """The steps the whole answer's reader gets from `text` (from its first bracket, one
    value, raw control characters in strings read as themselves), or None."""
    starts = [at for at in (text.find("{"), text.find("[")) if at >= 0]
    if not starts:
        return None
    try:
        value, _ = json.JSONDecoder(strict=False).raw_decode(text, min(starts))
    except (ValueError, RecursionError):
        return None
    if isinstance(value, list):
        return value
    steps = value.get("steps") if isinstance(value, dict) else None
    return steps if isinstance(steps, list) else None


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all through (1 is not 1.0 here), NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


@settings(max_examples=500, deadline=None)
@given(
    steps=_steps,
    bare=st.booleans(),
    ascii_only=st.booleans(),
    edits=st.lists(
        st.tuples(st.integers(0, 3000), st.integers(0, 3), _junk | _text), min_size=1, max_size=4
    ),
    cuts=st.lists(st.integers(0, 3000), max_size=40),
)
def test_a_mangled_answer_never_hands_on_a_step_json_loads_reads_otherwise(
    steps: list[Any],
    bare: bool,
    ascii_only: bool,
    edits: list[tuple[int, int, str]],
    cuts: list[int],
) -> None:
    text, _ = _document(steps, bare=bare, layout="spaced", ascii_only=ascii_only, goal="g")
    for at, dropped, junk in edits:
        at = min(at, len(text))
        text = text[:at] + junk + text[at + dropped :]
    stream = StepStream()
    got: list[Any] = []
    for piece in _pieces(text, cuts):
        got.extend(stream.feed(piece))  # never raises
    expected = _loads_steps(text)
    if expected is None:
        return  # the whole answer is refused: what was handed on is thrown away
    if stream.broken is not None and "second" in stream.broken:
        return  # json.loads keeps the last "steps": the first one's were handed on already
    assert len(got) <= len(expected)
    assert all(_same(mine, theirs) for mine, theirs in zip(got, expected, strict=False))
    if stream.broken is None:
        assert len(got) == len(expected)


@given(junk=st.text(alphabet=_chars, max_size=300), cuts=st.lists(st.integers(0, 300)))
def test_junk_never_raises(junk: str, cuts: list[int]) -> None:
    stream = StepStream()
    for piece in _pieces(junk, cuts):
        stream.feed(piece)


def test_broken_json_stops_the_steps_and_says_why() -> None:
    stream = StepStream()
    assert stream.feed('{"steps": [{"id": "a"}, {"id": 1,,}]') == [{"id": "a"}]
    assert stream.broken is not None
    assert "not a plan's JSON" in stream.broken
    assert stream.feed('{"id": "b"}') == []


def test_prose_and_a_fence_before_the_json_are_skipped_and_what_follows_is_not_read() -> None:
    stream = StepStream()
    assert stream.feed("Here is the plan") == []
    assert stream.feed(":\n``") == []
    assert stream.feed('`json\n{"steps": [{"id": "a"}') == [{"id": "a"}]
    assert stream.feed(', {"id": "b"}]}\n```\nAnything {"id": "c"} [1]') == [{"id": "b"}]
    assert stream.broken is None


def test_a_bare_array_and_begin_starting_over() -> None:
    stream = StepStream()
    assert stream.feed('[{"id": "a"}, {"id": "half') == [{"id": "a"}]
    stream.begin()  # the same answer, asked again after a stream cut short
    assert stream.feed('[{"id": "b"}, {"id": "c", "params": {"deep": [[[]]]}}]') == [
        {"id": "b"},
        {"id": "c", "params": {"deep": [[[]]]}},
    ]
    stream.feed("x")
    stream.begin()
    assert stream.broken is None
    assert stream.feed('{"steps": [{"id": "d"}]}') == [{"id": "d"}]


def test_nesting_stops_beyond_the_bound_before_the_parser_builds_it() -> None:
    def answer(levels: int) -> str:  # the answer's object and its steps array are two
        inner = "[" * (levels - 3) + "]" * (levels - 3)
        return f'{{"steps": [{{"id": "ok"}}, {{"id": "deep", "v": {inner}}}, {{"id": "z"}}]}}'

    assert len(StepStream().feed(answer(MAX_NESTING))) == 3
    stream = StepStream()
    assert stream.feed(answer(MAX_NESTING + 1)) == [{"id": "ok"}]
    assert stream.broken is not None
    assert "deeper than 64" in stream.broken
    # a runaway answer (a model repeating "[") costs no more than its text: ijson's own
    # items() builder takes memory that grows with the square of the depth
    tracemalloc.start()
    try:
        runaway = StepStream()
        runaway.feed('{"steps": [{"id": "a", "v": ')
        for _ in range(2000):
            runaway.feed("[" * 50)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert runaway.broken is not None
    assert peak < 2_000_000


def test_duplicate_keys_in_a_step_give_what_json_loads_gives() -> None:
    text = '{"steps": [{"id": "a", "p": {"k": [1]}, "id": "b", "p": {"k": 2, "k": 3}}]}'
    got = StepStream().feed(text)
    assert got == json.loads(text)["steps"]
    assert list(got[0]) == list(json.loads(text)["steps"][0])  # the first one's place


def test_only_the_top_level_steps_array_is_read() -> None:
    text = (
        '{"goal": {"steps": [{"id": "nested"}]}, "steps.item": {"id": "dotted"}, '
        '"steps": [{"id": "a"}], "more": [{"id": "after"}]}'
    )
    assert StepStream().feed(text) == [{"id": "a"}]
    twice = StepStream()  # json.loads keeps the second: the stream stops at it
    assert twice.feed('{"steps": [{"id": "a"}], "steps": [{"id": "b"}]}') == [{"id": "a"}]
    assert twice.broken is not None
    assert "second" in twice.broken
    not_an_array = StepStream()
    assert not_an_array.feed('{"steps": {"item": {"id": "x"}}}') == []
    assert not_an_array.broken is not None


def test_numbers_are_what_json_loads_makes_of_them_huge_ones_too() -> None:
    text = (
        '{"steps": [{"big": 123456789012345678901234567890, "small": -9223372036854775809, '
        '"over": 1e400, "under": -1e400, "tiny": 1e-400, "e": 1E2, "zero": -0, "nz": -0.0, '
        '"long": 0.1000000000000000055511151231257827, "max": 1.7976931348623157e308}]}'
    )
    got = StepStream().feed(text)
    assert _same(got, json.loads(text)["steps"])
    assert math.copysign(1, got[0]["nz"]) == -1


def test_raw_control_characters_in_strings_are_read_as_the_whole_answer_reads_them() -> None:
    text = '{"steps": [{"id": "a", "cmd": "line one\nline two\tand a tab\r\x00"}]}'
    pieces = [text[:30], text[30:31], text[31:]]
    stream = StepStream()
    got = [step for piece in pieces for step in stream.feed(piece)]
    assert got == json.loads(text, strict=False)["steps"]
    assert stream.broken is None


def test_surrogate_escapes_paired_across_any_cut_and_a_lone_one_stops_the_stream() -> None:
    text = r'{"steps": [{"id": "a", "s": "x\ud83d\ude00y"}, {"id": "b"}]}'
    for cut in range(len(text) + 1):
        stream = StepStream()
        got = stream.feed(text[:cut]) + stream.feed(text[cut:])
        assert got == [{"id": "a", "s": "x😀y"}, {"id": "b"}], cut
    for lone in (r"\ud83d x", r"\ud83d", r"\ude00", r"\ud83d\n"):
        text = '{"steps": [{"id": "ok"}, {"id": "s", "s": "' + lone + '"}, {"id": "z"}]}'
        stream = StepStream()
        assert stream.feed(text) == [{"id": "ok"}], lone  # yajl would say "?"
        assert stream.broken is not None
        assert "surrogate" in stream.broken


def test_whitespace_json_loads_refuses_stops_the_stream() -> None:
    stream = StepStream()
    assert stream.feed('{"steps": [{"id": "a"},\f{"id": "b"}]}') == [{"id": "a"}]
    assert stream.broken is not None
