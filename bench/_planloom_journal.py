"""The peer bench's planloom side with a run journal, as `planloom run` keeps one.

bench/scale.py's pipeline (recipe text → `parse_recipe_text` → `validate_plan` → the
executor, with one counting `EventBus` subscriber, inside `engine._support.gc.heap_frozen`),
with the run journaled to a SQLite run store as bench/overhead.py's `run_journaled` wires it
(`engine/app/launch.py` and `engine/session/_run.py` wire `planloom run` the same way): the
store's opening, the plan entry, every step's entry, the end entry and the close are all in
the execute phase. One store holds the warm-up's run and the timed one, as a recipe's
store holds every run of it; the timed run's journal is checked whole (`check_journal`).
"""

from __future__ import annotations

import gc
import tempfile
import time
from pathlib import Path
from typing import Any

from overhead import (
    BASE_DIR,
    GcClock,
    check_journal,
    clear_template_caches,
    expected_outputs,
    layered_dag,
    make_registry,
    recipe_text,
    run_journaled,
)
from scale import WARM_UP_STEPS, check_result, peak_mib

from engine._support.gc import heap_frozen
from engine.capability import Registry
from engine.events import Event, EventBus
from engine.results import RunResult
from engine.validation import validate_plan
from planners.recipe import parse_recipe_text


def journaled_pipeline(
    text: str, registry: Registry, store: Path
) -> tuple[dict[str, float], RunResult]:
    """Parse, validate and run `text` with a journal in `store`; each phase's seconds."""
    events = 0

    def count(event: Event) -> None:
        nonlocal events
        events += 1

    with heap_frozen(), GcClock() as gc_clock:
        clear_template_caches()
        started = time.perf_counter()
        data, source = parse_recipe_text(text, "<bench>")
        parsed = time.perf_counter()
        plan = validate_plan(data, source, registry, base_dir=BASE_DIR, owned=True)
        del data, source
        validated = time.perf_counter()
        bus = EventBus("bench")
        bus.subscribe(count)
        result = run_journaled(plan, registry, bus, store)
        finished = time.perf_counter()
    seconds = {
        "parse": parsed - started,
        "validate": validated - parsed,
        "execute": finished - validated,
        "gc": gc_clock.seconds,
        "events": float(events),
    }
    return seconds, result


def child_journal(size: int, width: int, seed: int) -> dict[str, Any]:
    """A warm-up, then one timed journaled run of `size` steps, checked."""
    registry = make_registry()
    with tempfile.TemporaryDirectory(prefix="planloom-peer-") as folder:
        store = Path(folder) / "runs.db"
        warm = layered_dag(WARM_UP_STEPS, width, seed)
        _, result = journaled_pipeline(recipe_text(warm, width), registry, store)
        if problem := check_result(result, expected_outputs(warm)):
            raise SystemExit(f"warm-up: {problem}")
        del result
        text = recipe_text(layered_dag(size, width, seed), width)
        gc.collect()
        before = peak_mib()
        seconds, result = journaled_pipeline(text, registry, store)
        peak = peak_mib()
        if problem := check_result(result, expected_outputs(layered_dag(size, width, seed))):
            raise SystemExit(f"{size} steps, journaled: {problem}")
        check_journal(store, size)
    return {"seconds": seconds, "rss_before_mib": before, "rss_peak_mib": peak}
