"""A Node MCP server installed into the project folder runs confined, as the README shows.

The README's `files.yaml` is run through `planloom` against
`@modelcontextprotocol/server-filesystem` installed from the npm registry (once, cached
under the pytest cache folder), or, where npm or the registry cannot be reached, against
a tiny Node server of our own with the same layout (`tests/_node_mcp.py`). Without
`read_paths` to its install, the server cannot read its own files, and planloom says so,
naming `read_paths` and the folder. A call that fails while the server lives on shows the
end of the server's stderr.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from _node_mcp import install, tiny
from _procs import planloom

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None, reason="node is not installed (apt-get install nodejs npm)"
)


def _readme_recipe() -> str:
    found = re.search(r"```yaml\n(\s*# files\.yaml.*?)```", README, re.S)
    assert found, "the README's Node MCP server example is missing"
    lines = found.group(1).splitlines()
    indent = len(lines[0]) - len(lines[0].lstrip())
    return "\n".join(line[indent:] for line in lines) + "\n"


@pytest.fixture(scope="module")
def npm_cache(request: pytest.FixtureRequest) -> Path:
    """Where the package is installed once: the pytest cache, or a stable /tmp folder when
    the cache is off (`-p no:cacheprovider`)."""
    cache = getattr(request.config, "cache", None)
    if cache is None:
        folder = Path(tempfile.gettempdir()) / "planloom-tests-npm-server-filesystem"
        folder.mkdir(exist_ok=True)
        return folder
    return Path(cache.mkdir("npm-server-filesystem"))


def _project(tmp_path: Path, recipe: str) -> Path:
    root = tmp_path / "project"
    (root / "data").mkdir(parents=True)
    (root / "data" / "notes.txt").write_text("release on Monday\n")
    (root / "files.yaml").write_text(recipe)
    return root


@pytest.mark.slow
def test_the_readme_node_server_lists_its_tools_and_serves_a_call(
    tmp_path: Path, npm_cache: Path
) -> None:
    root = _project(tmp_path, _readme_recipe())
    which = install(root / "tools", npm_cache)
    listed = planloom("tools", "files.yaml", "--json", cwd=root)
    assert listed.returncode == 0, (which, listed.stderr)
    names = {tool["action"] for tool in json.loads(listed.stdout) if "action" in tool}
    names |= set(re.findall(r"mcp\.files\.\w+", listed.stdout))
    assert {"mcp.files.read_text_file", "mcp.files.list_directory"} <= names, listed.stdout
    proc = planloom("run", "files.yaml", "--json", cwd=root)
    assert proc.returncode == 0, (which, proc.stderr)
    assert json.loads(proc.stdout)["outputs"]["text"] == "release on Monday\n"


@pytest.mark.slow
def test_without_read_paths_the_error_names_read_paths_and_the_folder(
    tmp_path: Path, npm_cache: Path
) -> None:
    recipe = _readme_recipe().replace("read_paths: [tools/node_modules]", "read_paths: []")
    root = _project(tmp_path, recipe)
    which = install(root / "tools", npm_cache)
    proc = planloom("validate", "files.yaml", cwd=root)
    assert proc.returncode == 2, (which, proc.stdout, proc.stderr)
    out = proc.stdout + proc.stderr
    assert "run the command by hand" not in out
    assert "add it to the server's read_paths (`read_paths: [tools/node_modules]`" in out, out
    assert f"{root / 'tools' / 'node_modules'} is outside the folders it may read" in out, out


def test_a_failed_call_shows_the_end_of_the_servers_stderr(tmp_path: Path) -> None:
    recipe = _readme_recipe().replace("[read_text_file, list_directory]", "[fail_loudly]")
    recipe = recipe.split("steps:")[0] + (
        "steps:\n"
        "  - id: read\n"
        "    tool: mcp.files.fail_loudly\n"
        "    params: {why: the index is gone}\n"
    )
    root = _project(tmp_path, recipe)
    tiny(root / "tools")
    proc = planloom("run", "files.yaml", "--json", cwd=root)
    assert proc.returncode == 1, proc.stderr
    error = json.loads(proc.stdout)["steps"]["read"]["error"]
    assert "the tool reported an error: it failed" in error
    assert "last lines of its stderr:" in error
    assert "tiny-files: cannot go on: the index is gone" in error
