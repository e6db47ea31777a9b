"""The cycle check validation makes without a graph library, against networkx's."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine._graph import Edges, build_graph, is_acyclic
from engine.executor._compiled import CompiledStep, _data_paths
from engine.model import Step

IDS = [f"s{i}" for i in range(8)]


@st.composite
def steps(draw: st.DrawFn) -> list[Step]:
    """Steps in any order, or (as plans mostly are) each after all it waits for."""
    count = draw(st.integers(1, len(IDS)))
    in_order = draw(st.booleans())
    made = []
    repeated = draw(st.lists(st.sampled_from(IDS[:count]), max_size=2))  # reported apart
    for index, step_id in enumerate(IDS[:count] + repeated):
        earlier = IDS[: min(index, count)] if in_order else [*IDS, "outside"]
        deps = draw(
            st.lists(st.sampled_from(earlier), max_size=3, unique=True) if earlier else st.just([])
        )
        read = draw(st.sampled_from([None, *(earlier if in_order else IDS[:count])]))
        params = {"value": f"${{{{ steps.{read}.output }}}}"} if read else {}
        made.append(Step(id=step_id, tool="t.run", params=params, depends_on=deps))
    return made


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(steps())
def test_is_acyclic_agrees_with_networkx(plan_steps: list[Step]) -> None:
    """Self-references, references to steps outside the section, repeated references and
    repeated ids (one node, as in the graph) included."""
    assert is_acyclic(plan_steps) == nx.is_directed_acyclic_graph(build_graph(plan_steps))


@settings(max_examples=300, deadline=None)
@given(steps())
def test_steps_in_order_are_found_so_and_give_the_edges_any_order_gives(
    plan_steps: list[Step],
) -> None:
    """The edges of steps each listed after all it waits for are found in one pass, with
    no set of every id; they are the edges the general pass finds, and only such steps are
    taken as in order (which spares the cycle check)."""
    ids = {step.id for step in plan_steps}  # (waiting for a step not among them: not at all)
    seen: set[str] = set()
    in_order = True
    for step in plan_steps:
        waits_for = ids & ({*step.depends_on} | {ref.split(".")[1] for ref in _reads(step)})
        in_order = in_order and step.id not in seen and waits_for <= seen
        seen.add(step.id)
    edges, general = Edges.of(plan_steps), Edges._any_order(plan_steps)
    assert edges.in_order is in_order
    assert edges.dependencies == general.dependencies
    assert {n: sorted(d) for n, d in edges.dependents.items()} == {
        n: sorted(d) for n, d in general.dependents.items()
    }
    if in_order:
        assert nx.is_directed_acyclic_graph(build_graph(plan_steps))


def _reads(step: Step) -> list[str]:
    value = step.params.get("value")
    return [value.removeprefix("${{ ").removesuffix(" }}")] if value else []


def test_a_step_reading_itself_is_a_cycle() -> None:
    step = Step(id="a", tool="t.run", params={"x": "${{ steps.a.output }}"})
    assert not is_acyclic([step])
    assert is_acyclic([Step(id="a", tool="t.run", depends_on=["elsewhere"])])


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(steps(), st.sets(st.sampled_from(IDS), max_size=4))
def test_edges_agree_with_the_networkx_graph(plan_steps: list[Step], ended: set[str]) -> None:
    """What the scheduler reads (dependents, descendants, what is left once some steps
    ended) is what the graph drawn from the same steps says."""
    edges, graph = Edges.of(plan_steps), build_graph(plan_steps)
    assert {n: sorted(edges.dependents.get(n, ())) for n in graph} == {
        n: sorted(graph.successors(n)) for n in graph
    }
    assert {n: len(d) for n, d in edges.dependencies.items()} == dict(graph.in_degree())
    for node in graph:
        assert edges.descendants(node) == nx.descendants(graph, node)
    left = edges.without(ended)
    rest = graph.subgraph([n for n in graph if n not in ended])
    assert {n: len(d) for n, d in left.dependencies.items()} == dict(rest.in_degree())
    assert {n: sorted(left.dependents.get(n, ())) for n in rest} == {
        n: sorted(rest.successors(n)) for n in rest
    }


def test_a_compiled_step_knows_its_data_paths_from_its_parsed_templates() -> None:
    """The paths whose text begins with a template (data, not the author's words), found
    from the templates the step keeps, are the ones a walk of the raw params finds."""
    step = Step(
        id="a",
        tool="t.run",
        params={
            "argv": ["wc", "-l", "${{ inputs.file }}", "x-${{ inputs.b }}"],
            "env": {"K": "  ${{ steps.b.output }}", "L": "plain"},
        },
        fallback={"tool": "t.run", "params": {"path": "${{ inputs.p }}", "n": 1}},
    )
    compiled = CompiledStep(step)
    assert compiled.primary.data_paths == _data_paths(step.params)
    assert compiled.primary.data_paths == {("argv", 2), ("env", "K")}
    assert compiled.fallback is not None
    assert compiled.fallback.data_paths == {("path",)}
