"""A recorded `for_each` whose failing items fall back replays every time.

Items run at once and finish in whatever order their work takes; in a replay, served
results take no time, so they finish in another order. What a cassette files an item's
calls under (its scope `step[i]`, and the attempt, numbered within the item) must not
depend on that order. Everything goes through the real `planloom` command: a recipe of 8
items, 3 of which fail (`cat` of a file that is not there, after a `sleep` of the item's
own random length) and fall back to reading a spare file, recorded once and replayed 20
times.
"""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from _procs import planloom

from engine.app.sqlite_store import open_store
from engine.recording.cassette import Cassette

SEED = 27
"""Seeds which items fail and how long each item's work takes."""
ITEMS = 8
FAILING = 3
REPLAYS = 20
NAMES = "abcdefgh"

WORK = """\
[ "$1" = -- ] && shift
sleep "$1"
cat "$2"
"""


def fan_out(folder: Path, seed: int) -> tuple[list[int], list[float]]:
    """A project whose recipe reads 8 files, each after a sleep of its own random length;
    3 of the files are missing, and their items fall back to a spare. The failing items'
    sleeps are shorter the later the item, so they fail in the reverse of their order (a
    replay, with no sleeps, goes through them in order). Gives the failing items and the
    sleeps."""
    rng = random.Random(seed)
    failing = sorted(rng.sample(range(ITEMS), FAILING))
    delays = [round(rng.uniform(0.05, 0.8), 2) for _ in range(ITEMS)]
    for rank, index in enumerate(failing):
        delays[index] = round(0.7 - 0.3 * rank, 2)
    (folder / "work.sh").write_text(WORK, encoding="utf-8")
    items = []
    for index, name in enumerate(NAMES[:ITEMS]):
        if index not in failing:
            (folder / f"{name}.txt").write_text(f"text {name}\n", encoding="utf-8")
        (folder / f"spare-{name}.txt").write_text(f"spare {name}\n", encoding="utf-8")
        items.append(f'      - {{name: {name}, delay: "{delays[index]}"}}')
    (folder / "fan.yaml").write_text(
        "\n".join(
            [
                "version: 1",
                "name: fan-out",
                "capabilities:",
                "  shell: {allow: [sh]}",
                "  fs: {root: ., read: true}",
                "limits: {per_family: {shell: 8}}  # every item's work at once",
                "steps:",
                "  - id: read",
                "    for_each:",
                *items,
                "    tool: shell.run",
                '    params: {argv: [sh, work.sh, "${{ item.delay }}", "${{ item.name }}.txt"]}',
                '    fallback: {tool: fs.read, params: {path: "spare-${{ item.name }}.txt"}}',
                "outputs:",
                '  texts: "${{ steps.read.output }}"',
                "",
            ]
        ),
        encoding="utf-8",
    )
    return failing, delays


def texts(output: list[Any]) -> list[str]:
    """What each item read: its file (`shell.run`'s stdout) or its spare (`fs.read`)."""
    return [item.get("stdout", item.get("content")) for item in output]


def shown(result: dict[str, Any]) -> dict[str, Any]:
    """What a run and a replay of it must agree on: each step's status, output, error and
    attempts, and the outputs (a recording has times and a run id of its own)."""
    return {
        "steps": {
            step_id: {k: step[k] for k in ("status", "output", "error", "attempts")}
            for step_id, step in result["steps"].items()
        },
        "outputs": result["outputs"],
    }


class Recorded(NamedTuple):
    """The project, recorded once into `c.yaml` and journaled in `s.db`."""

    folder: Path
    failing: list[int]
    delays: list[float]
    result: dict[str, Any]
    """What `planloom run --json` printed."""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    folder = tmp_path_factory.mktemp("fan-out")
    failing, delays = fan_out(folder, SEED)
    proc = planloom(
        "run", "fan.yaml", "--record", "c.yaml", "--yes", "--json", "--store", "s.db", cwd=folder
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    step = result["steps"]["read"]
    assert step["status"] == "fallback"
    assert step["attempts"] == ITEMS + FAILING
    assert texts(step["output"]) == [
        f"spare {name}\n" if index in failing else f"text {name}\n"
        for index, name in enumerate(NAMES[:ITEMS])
    ]
    return Recorded(folder, failing, delays, result)


def replays(folder: Path, count: int) -> tuple[list[str], list[str]]:
    """`count` replays of `c.yaml`, by `planloom replay` and `planloom run --replay` in
    turn, two at a time: the `--json` of each that succeeded, and why each other did not."""
    commands = [
        ("replay", "c.yaml", "--json"),
        ("run", "fan.yaml", "--replay", "c.yaml", "--json"),
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        procs = list(pool.map(lambda n: planloom(*commands[n % 2], cwd=folder), range(count)))
    good, bad = [], []
    for proc in procs:
        result = json.loads(proc.stdout) if proc.stdout.startswith("{") else {}
        replay = result.get("replay") or {}
        if proc.returncode == 0 and not replay.get("mismatches") and not replay.get("unused"):
            good.append(proc.stdout)
        else:
            bad.append(f"{' '.join(proc.args[1:])}: exit {proc.returncode}: {proc.stderr[-1500:]}")
    return good, bad


@pytest.mark.slow
def test_a_for_each_with_fallbacks_replays_every_time_with_the_same_json(
    recorded: Recorded,
) -> None:
    good, bad = replays(recorded.folder, REPLAYS)

    print(f"replays that succeeded: {len(good)}/{REPLAYS}")
    assert not bad, f"{len(good)}/{REPLAYS} replays succeeded; the first failure:\n{bad[0]}"
    assert len(set(good)) == 1, "two replays of one cassette printed different --json"
    replayed = json.loads(good[0])
    assert replayed["status"] == "succeeded"
    assert shown(replayed) == shown(recorded.result)


def test_a_cassette_numbering_item_attempts_across_the_step_still_replays(
    recorded: Recorded,
) -> None:
    """Cassettes recorded before items numbered their own attempts numbered them across
    the step: items' first attempts 1 to 8, then the fallbacks in the order items failed
    (here the reverse of theirs). They replay as they did when recorded."""
    folder, failing, _, recording = recorded
    cassette = Cassette.load(folder / "c.yaml")
    fallbacks = {index: ITEMS + 1 + rank for rank, index in enumerate(reversed(failing))}
    for entry in cassette.tools:
        index = int(entry.step.removeprefix("read[").removesuffix("]"))
        entry.attempt = fallbacks[index] if entry.action == "fs.read" else index + 1
    assert sorted(entry.attempt for entry in cassette.tools) == list(range(1, ITEMS + FAILING + 1))
    cassette.save(folder / "older.yaml")

    proc = planloom("replay", "older.yaml", "--json", cwd=folder)

    assert proc.returncode == 0, proc.stderr
    replayed = json.loads(proc.stdout)
    assert replayed["replay"]["mismatches"] == []
    assert replayed["replay"]["unused"] == []
    assert shown(replayed) == shown(recording)


def test_a_journaled_for_each_keeps_each_item_s_attempts_apart_in_its_timeline(
    recorded: Recorded,
) -> None:
    """Items' attempts are numbered within each item, and the journal's timeline (what
    `planloom report` draws) says whose each one is, each with its own outcome."""
    folder, failing, delays, recording = recorded
    store = open_store(folder / "s.db", create=False)
    try:
        entries = store.journal(recording["run_id"])
    finally:
        store.close()
    [step] = [e.data for e in entries if e.kind == "step" and e.scope == "read"]

    tried = sorted((a["item"], a["n"], a["action"], a["outcome"]) for a in step["attempts"])

    expected = [(i, 1, "shell.run", "StepFailed" if i in failing else "ok") for i in range(ITEMS)]
    expected += [(i, 2, "fs.read", "ok") for i in failing]
    assert tried == sorted(expected)
    for attempt in step["attempts"]:  # each attempt's end is its own item's
        took = attempt["finished"] - attempt["started"]
        assert took >= (delays[attempt["item"]] if attempt["n"] == 1 else 0), attempt
    tools = [e.data for e in entries if e.kind in ("intent", "tool")]
    assert {(t["step"], t["attempt"]) for t in tools} == {
        (f"read[{i}]", 1) for i in range(ITEMS)
    }  # (read-only calls, the fallbacks, are not journaled on their own)
