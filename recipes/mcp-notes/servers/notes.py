"""A small MCP server over stdio: notes kept as lines of text files in its folder.

Notes are read from `seed.txt` (shipped) and `notes.txt` (written by `add_note`).

Run by `recipes/mcp-notes/notes.yaml` as `python3 servers/notes.py`; planloom starts it
confined (it may write only under its `cwd`, `data/`, and has no network) and stops it when
the run ends. Try it by hand with `python3 servers/notes.py` and an MCP client.
"""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations
from pydantic import BaseModel

NOTES = Path(os.environ.get("NOTES_FILE", "notes.txt"))
SEED = Path("seed.txt")

app = MCPServer("notes", instructions="Notes kept one per line in a text file.")


class Hits(BaseModel):
    query: str
    hits: list[str]


def _notes() -> list[str]:
    files = [path for path in (SEED, NOTES) if path.exists()]
    return [line for path in files for line in path.read_text(encoding="utf-8").splitlines()]


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def search(query: str, limit: int = 10) -> Hits:
    """Notes containing the query (case-insensitive), at most `limit`."""
    found = [note for note in _notes() if query.lower() in note.lower()]
    return Hits(query=query, hits=found[:limit])


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def list_notes() -> list[str]:
    """Every note, oldest first."""
    return _notes()


@app.tool()
def add_note(text: str) -> str:
    """Append a note; returns how many notes there are now."""
    if not text.strip() or "\n" in text:
        raise ValueError("a note is one non-empty line")
    with NOTES.open("a", encoding="utf-8") as file:
        file.write(text.strip() + "\n")
    return f"{len(_notes())} notes"


@app.tool(annotations=ToolAnnotations(destructiveHint=True))
def clear() -> str:
    """Remove every added note (the seed stays)."""
    NOTES.unlink(missing_ok=True)
    return "cleared"


if __name__ == "__main__":
    app.run()
