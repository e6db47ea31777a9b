"""The cycle check validation makes without a graph library, against networkx's."""

from __future__ import annotations

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from engine._graph import build_graph, is_acyclic
from engine.model import Step

IDS = [f"s{i}" for i in range(8)]


@st.composite
def steps(draw: st.DrawFn) -> list[Step]:
    count = draw(st.integers(1, len(IDS)))
    made = []
    for step_id in IDS[:count]:
        deps = draw(st.lists(st.sampled_from([*IDS, "outside"]), max_size=3, unique=True))
        read = draw(st.sampled_from([None, *IDS[:count]]))
        params = {"value": f"${{{{ steps.{read}.output }}}}"} if read else {}
        made.append(Step(id=step_id, tool="t.run", params=params, depends_on=deps))
    return made


@settings(max_examples=500, deadline=None)
@given(steps())
def test_is_acyclic_agrees_with_networkx(plan_steps: list[Step]) -> None:
    """Self-references, references to steps outside the section and repeats included."""
    assert is_acyclic(plan_steps) == nx.is_directed_acyclic_graph(build_graph(plan_steps))


def test_a_step_reading_itself_is_a_cycle() -> None:
    step = Step(id="a", tool="t.run", params={"x": "${{ steps.a.output }}"})
    assert not is_acyclic([step])
    assert is_acyclic([Step(id="a", tool="t.run", depends_on=["elsewhere"])])
