"""The peer bench's LangGraph side: bench/overhead.py's DAG as a LangGraph `StateGraph`.

Run by bench/peer.py as a fresh process (`python bench/_langgraph_side.py`), which reads the
DAG from its standard input as JSON (`{"warm": DAG, "timed": DAG, "checkpointer": bool}`,
a DAG being `{"nodes": [[id, [parents...], literal], ...], "expected": {id: output}}`, what
overhead.py's `layered_dag` and `expected_outputs` made in the parent), runs the warm-up,
then the timed run, checks every output (and with a checkpointer, the last checkpoint's)
and prints its figures as one line of JSON (exit 1 on a wrong result). It imports no part
of planloom: a LangGraph program holds only LangGraph, and planloom's modules in its heap
would weigh on LangGraph's garbage collections.

A node per step, each running the floor's no-op (`overhead.noop`) on its first parent's
output (a root on its literal), and returning `{step: value}`; the state is one dict of
every step's output, with a reducer that merges each node's output into it. A node with
parents is joined to all of them (`add_edge([parents...], node)`: LangGraph's waiting
edge, a barrier channel that lets the node start only once every parent has written); a
root is joined to `START`. No checkpointer (LangGraph's fastest setup, compared with a run
without a journal), or LangGraph's `InMemorySaver` (compared with planloom's journal).

LangGraph is imported inside the functions, so that this module (and bench/peer.py)
imports without it.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.metadata
import importlib.util
import json
import resource
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

from _gc_clock import GcClock

if TYPE_CHECKING:
    from langgraph.graph import StateGraph

LANGGRAPH_FLOOR = (1, 0)  # pyproject.toml's `peer` extra: langgraph>=1.0
INSTALL_HINT = "pip install -e '.[peer]'"


@dataclass(frozen=True)
class Node:
    """One step, as overhead.py's `Node`: `parents[0]` is the one whose output it reads."""

    id: str
    parents: tuple[str, ...]
    literal: int | None = None


async def noop(value: Any) -> Any:
    """The tool every node calls: the floor's no-op (overhead.py's `noop`)."""
    return value


def merge_outputs(left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    """The state's reducer: a node's `{step: output}` merged into the dict of all outputs.

    In place: a pure reducer (`{**left, **right}`) copies the whole dict for every node
    that writes, a cost that grows with the plan (quadratic in all) and that the bench's
    choice of reducer would add, not LangGraph. In place is safe here: LangGraph applies a
    superstep's writes after all its nodes have ended, and nothing else holds the dict
    (with a checkpointer, each superstep's checkpoint is serialized before the next
    starts: `durability="sync"`).
    """
    left.update(right)
    return left


class PeerState(TypedDict):
    """The graph's state: every step's output by step id."""

    outputs: Annotated[dict[str, Any], merge_outputs]


Update = dict[str, dict[str, Any]]


def node_function(node: Node) -> Callable[[PeerState], Awaitable[Update]]:
    """What LangGraph runs for `node`: the no-op on its first parent's output."""
    step = node.id
    if not node.parents:
        literal = node.literal

        async def root(state: PeerState) -> Update:
            return {"outputs": {step: await noop(literal)}}

        return root
    first = node.parents[0]

    async def child(state: PeerState) -> Update:
        return {"outputs": {step: await noop(state["outputs"][first])}}

    return child


def build_graph(nodes: Sequence[Node]) -> StateGraph[PeerState]:
    """The DAG as a `StateGraph`, not yet compiled."""
    from langgraph.graph import START, StateGraph

    graph = StateGraph(PeerState)
    for node in nodes:
        graph.add_node(node.id, node_function(node))
    for node in nodes:
        if not node.parents:
            graph.add_edge(START, node.id)
        elif len(node.parents) == 1:
            graph.add_edge(node.parents[0], node.id)
        else:  # a join: the node waits for every parent, as a planloom step does
            graph.add_edge(list(node.parents), node.id)
    return graph


def depth(nodes: Sequence[Node]) -> int:
    """Steps on the DAG's longest path: the supersteps LangGraph needs for it."""
    levels: dict[str, int] = {}
    for node in nodes:  # parents come first
        levels[node.id] = 1 + max((levels[parent] for parent in node.parents), default=0)
    return max(levels.values(), default=0)


def recursion_limit(nodes: Sequence[Node]) -> int:
    """LangGraph's `recursion_limit` (its cap on supersteps) for this DAG: one superstep a
    layer, and one for the input (a DAG of 10 layers runs at 11 and stops at 10 with
    `GraphRecursionError`). Set whatever the installed version's default is: older ones
    stop at 25."""
    return depth(nodes) + 1


def run_langgraph(
    nodes: Sequence[Node], *, checkpointer: bool = False
) -> tuple[dict[str, float], dict[str, Any], dict[str, Any] | None]:
    """Build, compile and run the graph (`ainvoke` under `asyncio.run`, as the planloom
    side runs its executor); the seconds of each phase, every step's output, and with
    `checkpointer` what its last checkpoint holds (read after the timed part).

    `checkpointer`: compiled with LangGraph's `InMemorySaver`, run on one thread with
    `durability="sync"`: each superstep's checkpoint is saved before the next starts, as
    planloom's journal writes a step's entry when it ends (the default, "async", saves it
    while the next runs, and would save the in-place reducer's dict as a later superstep
    left it).
    """
    config: dict[str, Any] = {"recursion_limit": recursion_limit(nodes)}
    if checkpointer:
        config["configurable"] = {"thread_id": "bench"}
    with GcClock() as gc_clock:
        cpu_started = time.process_time()
        started = time.perf_counter()
        graph = build_graph(nodes)
        built = time.perf_counter()
        if checkpointer:
            from langgraph.checkpoint.memory import InMemorySaver

            app = graph.compile(checkpointer=InMemorySaver())
            run = app.ainvoke({"outputs": {}}, config, durability="sync")
        else:
            app = graph.compile()
            run = app.ainvoke({"outputs": {}}, config)
        compiled = time.perf_counter()
        final = asyncio.run(run)
        finished = time.perf_counter()
        cpu_finished = time.process_time()
    seconds = {
        "build": built - started,
        "compile": compiled - built,
        "invoke": finished - compiled,
        "cpu_whole": cpu_finished - cpu_started,
        "gc": gc_clock.seconds,
    }
    outputs: dict[str, Any] = final["outputs"]
    saved = app.get_state(config).values["outputs"] if checkpointer else None
    return seconds, outputs, saved


def langgraph_problem() -> str | None:
    """Why LangGraph cannot run here (not installed, or older than the floor), if so.

    Found without importing it: the bench's processes inherit the parent's peak memory
    (`ru_maxrss` counts the process before its `exec`), and LangGraph's modules are 40 MiB.
    """
    try:
        found = importlib.util.find_spec("langgraph.graph")
    except ImportError as exc:  # a parent package that fails to import
        return f"LangGraph is not installed ({exc})"
    if found is None:
        return "LangGraph is not installed (no module named 'langgraph.graph')"
    version = langgraph_version()
    if version is None:
        return None  # importable without its distribution's metadata: let it run
    try:
        major_minor = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        return None  # a development build: let it run
    if major_minor < LANGGRAPH_FLOOR:
        floor = ".".join(map(str, LANGGRAPH_FLOOR))
        return f"LangGraph {version} is installed; this bench needs {floor} or later"
    return None


def langgraph_version() -> str | None:
    try:
        return importlib.metadata.version("langgraph")
    except importlib.metadata.PackageNotFoundError:
        return None


# -- the child process -----------------------------------------------------------------------


def peak_mib() -> float:
    """This process's peak resident set so far, in MiB (`ru_maxrss` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def read_dag(data: dict[str, Any]) -> tuple[list[Node], dict[str, Any]]:
    nodes = [Node(step, tuple(parents), literal) for step, parents, literal in data["nodes"]]
    return nodes, data["expected"]


def check(outputs: dict[str, Any], expected: dict[str, Any], what: str) -> None:
    if outputs == expected:
        return
    wrong = sorted(set(expected) ^ set(outputs)) or [
        step for step, value in expected.items() if outputs[step] != value
    ]
    raise SystemExit(
        f"{what}: LangGraph's outputs differ from the expected outputs "
        f"({len(wrong)} of {len(expected)} steps, e.g. {wrong[0]!r})"
    )


def main() -> int:
    dags = json.load(sys.stdin)
    checkpointer = bool(dags.get("checkpointer"))
    warm, warm_expected = read_dag(dags["warm"])
    _, outputs, saved = run_langgraph(warm, checkpointer=checkpointer)
    check(outputs, warm_expected, "warm-up")
    nodes, expected = read_dag(dags["timed"])
    del dags, warm, warm_expected
    gc.collect()
    before = peak_mib()
    seconds, outputs, saved = run_langgraph(nodes, checkpointer=checkpointer)
    peak = peak_mib()
    check(outputs, expected, f"{len(nodes)} steps")
    if checkpointer:  # the last checkpoint holds the whole run
        check(saved or {}, expected, f"{len(nodes)} steps, the last checkpoint")
    figures = {
        "seconds": seconds,
        "rss_before_mib": before,
        "rss_peak_mib": peak,
        "recursion_limit": recursion_limit(nodes),
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
