"""Record the main job's cassette with a scripted model (no real LLM is involved).

    .venv/bin/python recipes/main-job/record.py [CASSETTE]

(any Python that has planloom installed: the README's first command installs it in .venv)

The "model" below is a Python function served by planloom's local OpenAI-compatible test
server (`engine.testing.FakeOpenAIServer`). It writes a fixed plan for the goal, then plays
the agent step: it reads `app.py` with the `fs.read` tool and answers with the risks it
finds there. Everything else is real: the planner, validation, the executor, the sandboxed
`fs` and `shell` calls, the gate on the report write (approved by `--yes`).

`planloom replay recipes/main-job/cassette.yaml` replays the recording offline.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

try:
    from engine.app import main
    from engine.recording import Cassette
    from engine.testing import ChatReply, ChatRequest, FakeOpenAIServer, ScriptedModel, ToolCall
except ImportError as exc:  # a Python without planloom: say which one to use
    sys.exit(
        f"{sys.executable} cannot import planloom ({exc}): run this with the Python it is "
        "installed in, e.g. .venv/bin/python recipes/main-job/record.py (after the README's "
        "first command)"
    )

HERE = Path(__file__).resolve().parent
GOAL = (
    "Review the sample project: list its files, count their lines, find the TODOs, have an "
    "agent rank the risks, and save a report to out/report.md"
)
NOTE = (
    "Recorded with a scripted model (recipes/main-job/record.py), not a real LLM: a Python "
    "function wrote the plan and played the agent. Tool results are real."
)

PLAN = {
    "goal": GOAL,
    "steps": [
        {"id": "files", "tool": "fs.list", "params": {"path": "."}},
        {
            "id": "lines",
            "tool": "shell.run",
            "params": {"argv": ["wc", "-l", "app.py", "NOTES.md"]},
        },
        {"id": "todos", "tool": "fs.search", "params": {"pattern": "TODO"}},
        {
            "id": "review",
            "agent": {
                "goal": "Rank the risks in this project, most serious first. "
                "Its TODOs: ${{ steps.todos.output.matches | map(attribute='text') | list }}",
                "tools": ["fs.read"],
                "max_iterations": 4,
            },
        },
        {
            "id": "save",
            "tool": "fs.write",
            "params": {
                "path": "out/report.md",
                "content": "# Review of the sample project\n\n"
                "Files: ${{ steps.files.output.paths | join(', ') }}\n\n"
                "Lines:\n${{ steps.lines.output.stdout }}\n"
                "## Risks\n${{ steps.review.output }}\n",
                "create_dirs": True,
            },
        },
    ],
    "outputs": {"risks": "${{ steps.review.output }}", "report": "${{ steps.save.output.path }}"},
}


def scripted_model(request: ChatRequest) -> ChatReply | str | dict[str, object]:
    """The planner's answer, then the agent: read app.py, then rank what it found."""
    if request.wants_json_schema() is not None or request.response_format is not None:
        return PLAN
    results = request.tool_results()
    if not results:
        return ChatReply(tool_calls=[ToolCall("fs__read", {"path": "app.py"}, id="read_app")])
    source = results[-1][1]
    risks = []
    if "not atomic" in source:
        risks.append("1. reserve() is not atomic: two clients can oversell stock.")
    if "missing stock file" in source:
        risks.append(f"{len(risks) + 1}. load_stock() crashes when the stock file is missing.")
    risks.append(f"{len(risks) + 1}. reserve() has no tests (NOTES.md).")
    return "\n".join(risks)


def record(cassette: Path) -> int:
    # The report a previous recording wrote would show in the listing: start without it.
    shutil.rmtree(HERE / "sample" / "out", ignore_errors=True)
    with FakeOpenAIServer(ScriptedModel(scripted_model)) as server:
        code = main(
            [
                "plan",
                GOAL,
                "--capabilities",
                str(HERE / "capabilities.yaml"),
                "--base-url",
                server.base_url,
                "--record",
                str(cassette),
                "--yes",
            ]
        )
    recorded = Cassette.load(cassette)
    if recorded.note != NOTE:
        recorded.model_copy(update={"note": NOTE}).save(cassette)
    return code


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "cassette.yaml"
    raise SystemExit(record(target))
