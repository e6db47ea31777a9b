"""`planners._stream_plan.StepStream`: a plan answer's steps as its text streams.

For any plan document, however it is cut into pieces, the steps handed on over all pieces
are those json.loads reads, in order, each as soon as the piece holding its closing brace
has arrived; any prefix hands on a prefix of them; what cannot be the answer's JSON (prose
first, broken text) stops the steps without raising.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from planners._stream_plan import StepStream

_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)),  # any character, astral ones too
    max_size=12,
)
_scalars = st.none() | st.booleans() | st.integers(-(10**12), 10**12) | _text
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_steps = st.lists(
    st.fixed_dictionaries(
        {"id": st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), "params": _values},
        optional={"tool": _text, "depends_on": st.lists(_text, max_size=2)},
    ),
    max_size=6,
)


def _document(steps: list[dict[str, Any]], compact: bool, bare: bool, goal: str) -> str:
    value: Any = steps if bare else {"goal": goal, "steps": steps, "outputs": {"x": "}{"}}
    return json.dumps(value, separators=(",", ":") if compact else None, ensure_ascii=False)


def _cuts(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=500, deadline=None)
@given(
    steps=_steps,
    compact=st.booleans(),
    bare=st.booleans(),
    goal=_text,
    cuts=st.lists(st.integers(0, 4000), max_size=40),
    fenced=st.booleans(),
)
def test_any_cutting_hands_on_each_step_once_in_order_as_soon_as_it_is_complete(
    steps: list[dict[str, Any]],
    compact: bool,
    bare: bool,
    goal: str,
    cuts: list[int],
    fenced: bool,
) -> None:
    body = _document(steps, compact, bare, goal)
    text = f"```json\n{body}\n```" if fenced else f"\n {body} "
    stream = StepStream()
    got: list[Any] = []
    seen = ""
    for piece in _cuts(text, cuts):
        seen += piece
        new = stream.feed(piece)
        got.extend(new)
        # nothing is handed on before its text has arrived, nor held back after it
        complete = _complete_steps(seen, bare, fenced)
        assert got == steps[: len(got)]
        assert len(got) == complete, (seen, got)
    assert got == steps
    assert stream.broken is None


def _complete_steps(seen: str, bare: bool, fenced: bool) -> int:
    """How many steps `seen` (a prefix of the document) holds whole: found by trying
    json.loads on the prefix closed off after each candidate closing brace."""
    start = seen.find("[" if bare else '"steps"')
    if start < 0:
        return 0
    # Count top-level objects closed inside the steps array with a small scanner.
    depth, count, in_string, escaped = 0, 0, False, False
    index = seen.find("[", start)
    if index < 0:
        return 0
    for char in seen[index + 1 :]:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            if depth == 0:
                break  # the steps array closed
            depth -= 1
            if depth == 0 and char == "}":
                count += 1
    return count


@settings(max_examples=200, deadline=None)
@given(steps=_steps, cut=st.integers(0, 4000))
def test_a_prefix_hands_on_a_prefix_of_the_steps(steps: list[dict[str, Any]], cut: int) -> None:
    text = _document(steps, False, False, "g")
    got = StepStream().feed(text[:cut])
    assert got == steps[: len(got)]


@given(junk=st.text(max_size=200))
def test_junk_never_raises_and_a_broken_answer_says_so(junk: str) -> None:
    stream = StepStream()
    for piece in (junk[:7], junk[7:50], junk[50:]):
        stream.feed(piece)  # never raises
    broken = StepStream()
    assert broken.feed('{"steps": [{"id": "a"}, {"id": 1,,}]') == [{"id": "a"}]
    assert broken.broken is not None
    assert broken.feed('{"id": "b"}') == []


def test_prose_before_the_json_hands_on_nothing_as_the_whole_answer_would_be_refused() -> None:
    stream = StepStream()
    assert stream.feed('Here is the plan: {"steps": [{"id": "a"}]}') == []
    assert stream.broken is not None


def test_a_fence_split_across_pieces_and_begin_starting_over() -> None:
    stream = StepStream()
    assert stream.feed("``") == []
    assert stream.feed("`json\n[{") == []
    assert stream.feed('"id": "a"}, ') == [{"id": "a"}]
    stream.begin()
    assert stream.feed('{"goal": "g", "steps": [{"id": "b", "params": {"deep": [[[]]]}}]}') == [
        {"id": "b", "params": {"deep": [[[]]]}}
    ]


def test_a_step_nesting_deeper_than_an_answer_may_stops_the_stream() -> None:
    deep: Any = "x"
    for _ in range(150):
        deep = [deep]
    text = json.dumps({"steps": [{"id": "ok"}, {"id": "deep", "params": {"v": deep}}]})
    stream = StepStream()
    assert stream.feed(text) == [{"id": "ok"}]
    assert stream.broken is not None
    assert "deeper" in stream.broken


def test_duplicate_keys_give_what_json_loads_gives() -> None:
    text = '{"steps": [{"id": "a", "id": "b", "params": {"k": 1, "k": 2}}]}'
    assert StepStream().feed(text) == json.loads(text)["steps"]
