"""Shell completion (`planloom completion bash|zsh|fish`, README "Shell completion") and the
environment variables `planloom --help` lists.

Completion is driven as a user's shell drives it: real bash (and zsh, where installed) in
a pseudo-terminal with the printed script loaded, TAB pressed; and argcomplete's protocol
itself (`_ARGCOMPLETE`, `COMP_LINE`, `COMP_POINT`, the candidates written to file
descriptor 8) for what a TAB offers from recipes and the run store, and what it does when
they are broken. Each test's folder is its own: the store is `.planloom/runs.db` in it and
the environment has no `PLANLOOM_*` variable (`tests/_procs.env`).
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest
from _procs import PLANLOOM, TIMEOUT, env, planloom

from engine.app.environment import PLANLOOM as BY_PLANLOOM
from engine.app.environment import VARIABLES
from engine.app.sqlite_store import open_store
from engine.store import RunRecord

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
BIN = str(Path(PLANLOOM).parent)

RECIPE = """\
version: 1
name: notes
inputs:
  mode: {type: string, enum: [fast, slow], default: fast, description: how hard to look}
  verbose: {type: boolean, default: false}
capabilities:
  fs: {root: ., read: true}
steps:
  - id: look
    tool: fs.list
    params: {path: .}
  - id: read_missing
    tool: fs.read
    params: {path: not-there.txt}
  - id: after
    tool: fs.list
    params: {path: .}
    depends_on: [read_missing]
finally:
  - id: tidy
    tool: fs.list
    params: {path: .}
"""
STEPS = ["look", "read_missing", "after", "tidy"]


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _failed_run(folder: Path, recipe: str = "notes.yaml") -> str:
    """Run the recipe in `folder` (its `read_missing` step fails); the run's id."""
    proc = planloom("run", recipe, "--yes", "--json", cwd=folder)
    assert proc.returncode == 1, proc.stderr
    run_id = json.loads(proc.stdout)["run_id"]
    assert isinstance(run_id, str)
    return run_id


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder with the recipe, its own HOME, and no store yet."""
    (tmp_path / "home").mkdir()
    _write(tmp_path, "notes.yaml", RECIPE)
    return tmp_path


def _environ(folder: Path, **extra: str) -> dict[str, str]:
    return env(HOME=str(folder / "home"), PATH=f"{BIN}:/usr/bin:/bin", **extra)


def complete(line: str, cwd: Path, *, shell: str = "bash", **extra: str) -> list[str]:
    """What argcomplete's protocol gives for `line` with the cursor at its end: the
    candidates `planloom` writes to file descriptor 8, as the completion script reads them
    (with no space after a whole word: the shell adds it).
    The process must end well and say nothing (no traceback, no message)."""
    environ = _environ(
        cwd,
        _ARGCOMPLETE="1",
        _ARGCOMPLETE_SHELL=shell,
        _ARGCOMPLETE_IFS="\n",
        _ARGCOMPLETE_SUPPRESS_SPACE="1",  # as the scripts of bash (4 on) and zsh set it
        COMP_LINE=line,
        COMP_POINT=str(len(line)),
        **extra,
    )
    with tempfile.NamedTemporaryFile("r", encoding="utf-8") as out:
        proc = subprocess.run(
            ["/bin/sh", "-c", 'exec "$1" 8>"$0"', out.name, PLANLOOM],
            cwd=cwd,
            env=environ,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", ""), proc
        text = out.read()
    return text.split("\n") if text else []


# -- a real shell, TAB pressed -------------------------------------------------------------


def _readme_line(shell: str) -> str:
    """The line the README's "Shell completion" says to put in `shell`'s start-up file."""
    block = re.search(r"### Shell completion.*?```bash\n(.*?)```", README, re.S)
    assert block, "the README's shell completion block is missing"
    (line,) = [
        line
        for line in block.group(1).splitlines()
        if not line.startswith("#") and f"planloom completion {shell}" in line
    ]
    return line


_SHELLS = {  # how each starts with no start-up file of the user's, and loads the script
    "bash": (["--norc", "--noprofile", "-i"], _readme_line("bash")),
    "zsh": (["-f", "-i"], f"autoload -U compinit; compinit -u; {_readme_line('zsh')}"),
}


@pytest.fixture(params=list(_SHELLS))
def shell(request: pytest.FixtureRequest, folder: Path) -> Iterator[pexpect.spawn]:
    """An interactive shell in `folder` with planloom's completion loaded."""
    name = request.param
    if shutil.which(name) is None:
        pytest.skip(f"{name} is not installed")
    args, load = _SHELLS[name]
    child = pexpect.spawn(
        name,
        args,
        cwd=str(folder),
        env=_environ(folder, TERM="dumb", INPUTRC="/dev/null"),
        encoding="utf-8",
        timeout=TIMEOUT,
        dimensions=(24, 200),
    )
    try:
        child.sendline(f"PS1='$ '; {load}; echo LOADED")
        child.expect("\nLOADED\r\n")
        yield child
    finally:
        child.close(force=True)


def _tab(child: pexpect.spawn, typed: str) -> str:
    """Type `typed`, press TAB, and return the command line the shell then holds (read by
    turning it into `echo LINE=...` and running that)."""
    child.send(f"{typed}\t")
    child.send("\x01echo LINE=\r")  # to the line's start; the shell reads keys in order
    child.expect("\nLINE=([^\r\n]*)\r\n")
    return str(child.match.group(1)).rstrip()


@pytest.mark.slow
def test_tab_completes_a_command_a_flag_a_file_a_run_id_and_a_step_id(
    shell: pexpect.spawn, folder: Path
) -> None:
    run_id = _failed_run(folder)
    assert _tab(shell, "planloom valid") == "planloom validate"
    assert _tab(shell, "planloom run --dry") == "planloom run --dry-run"
    assert _tab(shell, "planloom graph no") == "planloom graph notes.yaml"
    assert (
        _tab(shell, "planloom run notes.yaml -i mode=s") == "planloom run notes.yaml -i mode=slow"
    )
    assert _tab(shell, "planloom resume ") == f"planloom resume {run_id}"
    redo = _tab(shell, f"planloom resume {run_id} --redo read")
    assert redo == f"planloom resume {run_id} --redo read_missing"


def test_the_printed_script_is_one_bash_reads() -> None:
    script = planloom("completion", "bash", cwd=ROOT)
    assert script.returncode == 0, script.stderr
    checked = subprocess.run(
        ["bash", "-n"], input=script.stdout, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr
    assert "complete -o nospace -o bashdefault -F _python_argcomplete planloom" in script.stdout


@pytest.mark.parametrize(
    ("name", "check"), [("zsh", ["zsh", "-n"]), ("fish", ["fish", "--no-execute"])]
)
def test_zsh_and_fish_accept_their_scripts(name: str, check: list[str], tmp_path: Path) -> None:
    if shutil.which(name) is None:
        pytest.skip(f"{name} is not installed")
    script = planloom("completion", name, cwd=tmp_path)
    assert script.returncode == 0, script.stderr
    path = tmp_path / f"planloom.{name}"
    path.write_text(script.stdout, encoding="utf-8")
    checked = subprocess.run([*check, str(path)], capture_output=True, text=True, check=False)
    assert (checked.returncode, checked.stderr) == (0, "")
    broken = tmp_path / f"broken.{name}"  # the check can fail: an unclosed block
    broken.write_text(script.stdout.replace("end\n", "", 1).replace("fi\n", "", 1))
    assert subprocess.run([*check, str(broken)], capture_output=True, check=False).returncode


def test_fish_completes_step_ids_with_their_tools(folder: Path) -> None:
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed")
    run_id = _failed_run(folder)
    asked = f'{_readme_line("fish")}; complete -C "planloom resume {run_id} --skip "'
    proc = subprocess.run(
        ["fish", "--no-config", "-c", asked],
        cwd=folder,
        env=_environ(folder),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    assert sorted(proc.stdout.splitlines()) == [  # fish sorts them
        "after\tfs.list",
        "look\tfs.list",
        "read_missing\tfs.read",
        "tidy\tfs.list",
    ]


def test_the_script_of_a_shell_there_is_none_for_is_refused_not_empty() -> None:
    from engine.app.completion import script

    with pytest.raises(ValueError, match="no completion script for 'tcsh': use one of bash"):
        script("tcsh")


def test_completion_with_no_shell_or_another_is_a_usage_error(tmp_path: Path) -> None:
    proc = planloom("completion", cwd=tmp_path)
    assert proc.returncode == 2
    assert "the following arguments are required: SHELL" in proc.stderr
    proc = planloom("completion", "tcsh", cwd=tmp_path)
    assert proc.returncode == 2
    assert "invalid choice: 'tcsh'" in proc.stderr
    assert all(shell in proc.stderr for shell in ("bash", "zsh", "fish"))
    assert proc.stdout == ""


# -- argcomplete's protocol: what a TAB offers -----------------------------------------------


def test_commands_and_flags_complete_and_free_text_completes_nothing(folder: Path) -> None:
    assert complete("planloom r", folder) == ["run", "resume", "replay", "runs", "report"]
    assert complete("planloom run --dry", folder) == ["--dry-run"]
    assert complete("planloom graph x --format ", folder) == ["mermaid", "dot", "ascii"]
    assert complete("planloom plan ", folder) == []  # a goal is words, not a file here
    assert complete("planloom run notes.yaml --model ", folder) == []


def test_files_complete_where_a_file_is_expected(folder: Path) -> None:
    (folder / "plugins").mkdir()
    _write(folder, "plugins/mine.py", "")
    _write(folder, "notes.txt", "")
    assert complete("planloom run ", folder) == ["home/", "notes.yaml", "plugins/"]
    assert complete("planloom validate no", folder) == ["notes.yaml"]
    assert complete("planloom run notes.yaml --policy pl", folder) == ["plugins/"]
    assert complete("planloom -p plugins/", folder) == ["plugins/mine.py"]
    assert complete("planloom run notes.yaml --log-file notes.", folder) == [
        "notes.txt",
        "notes.yaml",
    ]


def test_step_ids_complete_from_the_recipe_of_the_run_being_resumed(folder: Path) -> None:
    run_id = _failed_run(folder)
    assert complete(f"planloom resume {run_id} --redo ", folder) == STEPS
    assert complete(f"planloom resume {run_id} --skip re", folder) == ["read_missing"]
    described = complete(f"planloom resume {run_id} --redo ", folder, shell="zsh")
    assert described == [
        f"{step}:fs.{'read' if step == 'read_missing' else 'list'}" for step in STEPS
    ]


@pytest.mark.slow
def test_a_broken_recipe_completes_no_step_and_prints_no_traceback(folder: Path) -> None:
    run_id = _failed_run(folder)
    for broken in ("steps: [\n  - id: look\n", "\xff\xfe not text", "- a list\n", ""):
        (folder / "notes.yaml").write_bytes(broken.encode("latin-1"))
        # `complete` asserts the process ended well with nothing on stdout or stderr
        assert complete(f"planloom resume {run_id} --redo ", folder) == [], broken
        assert complete(f"planloom resume {run_id} -i ", folder) == []
        assert complete("planloom run notes.yaml -i ", folder) == []
    (folder / "notes.yaml").unlink()
    assert complete(f"planloom resume {run_id} --redo ", folder) == []


def test_an_anchor_bomb_completes_at_once_without_expanding(folder: Path) -> None:
    """Aliases stay unexpanded: a billion-laughs recipe is read in one pass of its text."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 30)]
    _write(folder, "bomb.yaml", "\n".join([*lines, "steps: [{id: only, tool: fs.list}]", ""]))
    run = "planloom run bomb.yaml -i "
    assert complete(run, folder) == []
    assert complete("planloom graph bomb", folder) == ["bomb.yaml"]


def test_inputs_complete_as_key_equals_then_their_values(folder: Path) -> None:
    assert complete("planloom run notes.yaml -i ", folder) == ["mode=", "verbose="]
    assert complete("planloom run notes.yaml -i mode=", folder) == ["mode=fast", "mode=slow"]
    assert complete("planloom run notes.yaml -i verbose=t", folder) == ["verbose=true"]
    assert complete("planloom run notes.yaml -i nothing=", folder) == []
    assert complete("planloom run notes.yaml -i ", folder, shell="zsh") == [
        "mode=:how hard to look",
        "verbose=:boolean",
    ]


def test_a_json_recipe_completes_as_a_recipe_with_its_inputs(folder: Path) -> None:
    recipe = {
        "version": 1,
        "name": "notes",
        "inputs": {"mode": {"type": "string", "enum": ["fast", "slow"]}, "n": {"enum": [1, 2]}},
        "steps": [{"id": "look", "tool": "fs.list", "params": {"path": "."}}],
    }
    _write(folder, "notes.json", json.dumps(recipe, indent="\t"))
    _write(folder, "data.csv", "")
    assert complete("planloom validate no", folder) == ["notes.json", "notes.yaml"]
    assert complete("planloom run notes.yaml --policy no", folder) == ["notes.json", "notes.yaml"]
    assert complete("planloom run notes.yaml --record no", folder) == ["notes.yaml"]  # YAML only
    assert complete("planloom run notes.json -i ", folder) == ["mode=", "n="]
    assert complete("planloom run notes.json -i mode=", folder) == ["mode=fast", "mode=slow"]
    assert complete("planloom run notes.json -i n=", folder) == ["n=1", "n=2"]  # as written


def test_run_ids_complete_from_this_folders_store(folder: Path) -> None:
    assert complete("planloom show ", folder) == []  # no store here yet
    failed = _failed_run(folder)
    _write(folder, "fine.yaml", RECIPE.replace("not-there.txt", "notes.yaml"))
    proc = planloom("run", "fine.yaml", "--yes", "--json", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    succeeded = json.loads(proc.stdout)["run_id"]
    assert complete("planloom show ", folder) == [succeeded, failed]  # newest first
    assert complete("planloom report ", folder) == [succeeded, failed]
    assert complete("planloom resume ", folder) == [failed]  # only what resume takes
    assert complete(f"planloom show {failed[:4]}", folder) == [failed]
    (described,) = complete("planloom resume ", folder, shell="zsh")
    assert re.fullmatch(rf"{failed}:notes, failed, \d{{4}}-\d\d-\d\d \d\d:\d\d", described)
    elsewhere = folder / "home"
    assert complete("planloom show ", elsewhere) == []  # another folder, another store
    store = str(folder / ".planloom" / "runs.db")
    assert complete(f"planloom show --store {store} ", elsewhere) == [succeeded, failed]
    home = complete("planloom show ", elsewhere, PLANLOOM_HOME=str(folder / ".planloom"))
    assert home == [succeeded, failed]


def test_a_goal_runs_steps_complete_from_its_journaled_plan(folder: Path) -> None:
    store = open_store(folder / ".planloom" / "runs.db")
    try:
        store.begin(RunRecord(id="goal1", name="goal", recipe=None, base_dir=str(folder)))
        plan = {"steps": [{"id": "find", "tool": "fs.search"}, {"id": "say", "agent": {}}]}
        store.append("goal1", "plan", None, {"plan": plan, "inputs": {}}, durable=True)
        store.update("goal1", status="failed", pid=None)
    finally:
        store.close()
    assert complete("planloom resume goal1 --redo ", folder, shell="zsh") == [
        "find:fs.search",
        "say:agent",
    ]


def _tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` and a digest of its bytes."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


_READING = [
    "planloom show ",
    "planloom resume ",
    "planloom resume {run} --redo ",
    "planloom resume {run} -i ",
    "planloom run notes.yaml -i ",
    "planloom run ",
]


def test_completing_writes_nothing_not_even_a_store(folder: Path) -> None:
    before = _tree(folder)
    for line in _READING:
        complete(line.format(run="0123abcd"), folder)
    assert _tree(folder) == before
    assert not (folder / ".planloom").exists()
    run_id = _failed_run(folder)
    before = _tree(folder)
    assert set(before) >= {".planloom/runs.db"}
    for line in _READING:
        assert complete(line.format(run=run_id), folder) != []
    assert _tree(folder) == before  # no -wal or -shm made beside the store, no byte changed


def test_a_run_going_on_is_offered_from_the_writers_wal_which_is_left_alone(
    folder: Path,
) -> None:
    """While a run's process holds the store, what it committed is in the `-wal` file:
    completion reads through it and makes or changes no file of the store but the shared
    index SQLite readers mark (`-shm`)."""
    store = open_store(folder / ".planloom" / "runs.db")
    try:
        store.begin(RunRecord(id="live1", name="live", recipe=None, base_dir=str(folder)))
        store.flush()
        wal = folder / ".planloom" / "runs.db-wal"
        assert wal.stat().st_size > 0
        before = {k: v for k, v in _tree(folder).items() if not k.endswith("-shm")}
        assert complete("planloom show ", folder) == ["live1"]
        after = {k: v for k, v in _tree(folder).items() if not k.endswith("-shm")}
        assert after == before
    finally:
        store.close()


def test_a_store_that_is_not_one_completes_nothing(folder: Path) -> None:
    (folder / ".planloom").mkdir()
    (folder / ".planloom" / "runs.db").write_bytes(b"not a database at all " * 100)
    assert complete("planloom show ", folder) == []
    assert complete("planloom resume abc --redo ", folder) == []
    (folder / ".planloom" / "runs.db").unlink()
    (folder / ".planloom" / "runs.db").mkdir()  # a folder where the file should be
    assert complete("planloom show ", folder) == []


# -- what completing costs -------------------------------------------------------------------

_HEAVY = ("pydantic", "openai", "rich", "jinja2", "networkx", "httpx", "mcp", "engine.capability")


def _imported(args: list[str], cwd: Path, **extra: str) -> set[str]:
    """The modules `python -m engine.app ARGS` imports (`-X importtime`) in `cwd`, with
    file descriptor 8 open, as a completion script runs it."""
    with tempfile.NamedTemporaryFile() as out:
        proc = subprocess.run(
            [
                *("/bin/sh", "-c", 'out=$1; shift; exec "$@" 8>"$out"', "sh", out.name),
                *(sys.executable, "-X", "importtime", "-m", "engine.app", *args),
            ],
            cwd=cwd,
            env=env(**extra),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr
    return {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "imported package" not in line
    }


def _completion_modules(modules: set[str]) -> set[str]:
    return {m for m in modules if m.startswith(("argcomplete", "engine.app.completion"))}


def test_a_command_that_is_not_completing_imports_nothing_of_completion(folder: Path) -> None:
    """A normal command (what `bench/startup.py` times) imports neither argcomplete nor
    the completers, nor the variables' list of the help."""
    for args in (["--version"], ["validate", "notes.yaml"], ["runs"]):
        modules = _imported(args, folder)
        assert "engine.app.parser" in modules, args
        assert _completion_modules(modules) == set(), args
        assert "engine.app.environment" not in modules
    assert "engine.app.environment" in _imported(["--help"], folder)


def test_printing_a_script_and_completing_import_no_part_of_the_engine(folder: Path) -> None:
    run_id = _failed_run(folder)
    printing = _imported(["completion", "zsh"], folder)
    assert [m for m in _HEAVY if m in printing] == []
    assert "engine.app.completion._completers" not in printing  # a shell's start: the script
    for line in ("planloom show ", f"planloom resume {run_id} --redo ", "planloom run x -i "):
        modules = _imported([], folder, _ARGCOMPLETE="1", COMP_LINE=line, COMP_POINT=str(len(line)))
        assert "argcomplete" in modules
        assert [m for m in _HEAVY if m in modules] == [], line


# -- the environment variables `planloom --help` lists --------------------------------------

SOURCES = ("engine", "planners", "capabilities")
# Reads of a variable a recipe names (`shell: pass_env`, MCP `headers_from_env`): its name
# is the user's, not planloom's.
NAMED_BY_A_GRANT = {
    ("capabilities/shell/_env.py", "name"),
    ("capabilities/mcp/_http.py", "variable"),
}


def _environ_like(node: ast.AST) -> bool:
    """`os.environ`, or a mapping of it passed on as `environ` or `env`."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and node.id in ("environ", "env")


def _literals(node: ast.AST) -> set[str] | None:
    """The strings `node` is written as: a string, or a tuple, list or set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        found = [_literals(item) for item in node.elts]
        if all(f is not None and len(f) == 1 for f in found):
            return {name for f in found if f for name in f}
    return None


class _Reads:
    """The variables one module reads by name: `os.environ.get(X)`, `os.getenv(X)`,
    `os.environ[X]`, `X in os.environ` (and the same on a mapping named `environ` or `env`),
    where X is a string, a module constant, a loop over a constant tuple, or a parameter of
    a function the module calls with strings. What cannot be resolved so is `unresolved`."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        self.constants: dict[str, set[str]] = {}
        for statement in tree.body:
            value = statement.value if isinstance(statement, ast.Assign | ast.AnnAssign) else None
            found = _literals(value) if value is not None else None
            targets = (
                statement.targets
                if isinstance(statement, ast.Assign)
                else [statement.target]
                if isinstance(statement, ast.AnnAssign)
                else []
            )
            for target in targets:
                if isinstance(target, ast.Name) and found is not None:
                    self.constants[target.id] = found
        self.names: set[str] = set()
        self.unresolved: set[str] = set()
        for node in ast.walk(tree):
            key = self._key(node)
            if key is not None:
                found = self._resolve(key)
                if found is None:
                    self.unresolved.add(ast.unparse(key))
                else:
                    self.names |= found

    @staticmethod
    def _key(node: ast.AST) -> ast.expr | None:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            on, name = node.func.value, node.func.attr
            if name == "get" and _environ_like(on):
                return node.args[0]
            if name == "getenv" and isinstance(on, ast.Name) and on.id == "os":
                return node.args[0]
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            return node.slice if _environ_like(node.value) else None
        if isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In | ast.NotIn):
            return node.left if _environ_like(node.comparators[0]) else None
        return None

    def _resolve(self, key: ast.expr) -> set[str] | None:
        found = _literals(key)
        if found is not None or not isinstance(key, ast.Name):
            return found
        if key.id in self.constants:
            return self.constants[key.id]
        node: ast.AST = key
        while node in self.parents:
            node = self.parents[node]
            loops = getattr(node, "generators", [node] if isinstance(node, ast.For) else [])
            for loop in loops:
                if isinstance(loop.target, ast.Name) and loop.target.id == key.id:
                    return self._resolve(loop.iter)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                return self._passed(node, key.id)
        return None

    def _passed(
        self, function: ast.FunctionDef | ast.AsyncFunctionDef, name: str
    ) -> set[str] | None:
        """The strings the module passes `function` for its parameter `name`."""
        arguments = function.args
        params = [a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)]
        if name not in params:
            return None
        index, passed = params.index(name), set()
        for call in ast.walk(self.tree):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
                continue
            if call.func.id != function.name:
                continue
            given = [k.value for k in call.keywords if k.arg == name] or call.args[
                index : index + 1
            ]
            for value in given:
                found = _literals(value)
                if found is None:
                    return None
                passed |= found
        return passed or None


def _read_by_planloom() -> tuple[set[str], set[tuple[str, str]]]:
    names: set[str] = set()
    unresolved: set[tuple[str, str]] = set()
    for package in SOURCES:
        for path in sorted((ROOT / package).rglob("*.py")):
            reads = _Reads(ast.parse(path.read_text(encoding="utf-8")))
            names |= reads.names
            where = str(path.relative_to(ROOT))
            unresolved |= {(where, key) for key in reads.unresolved}
    return names, unresolved


def test_the_scanner_finds_each_way_a_variable_is_read() -> None:
    module = textwrap.dedent(
        """
        import os
        NAMES = ("A_ONE", "A_TWO")
        ALONE = "B"
        def f(environ=os.environ, env=None):
            os.environ.get("C"), os.getenv("D"), environ["E"], "F" in os.environ
            any(environ.get(n) for n in NAMES)
            for n in NAMES:
                env.get(n)
            env.get(ALONE)
            def setting(flag, name):
                return env.get(name)
            setting(1, "G"), setting(2, name="H")
            other = {}
            other.get("NOT_READ"), os.environ.get(computed())
        """
    )
    reads = _Reads(ast.parse(module))
    assert reads.names == {"A_ONE", "A_TWO", "B", "C", "D", "E", "F", "G", "H"}
    assert reads.unresolved == {"computed()"}


def test_help_lists_every_variable_the_code_reads_and_no_other(tmp_path: Path) -> None:
    read, unresolved = _read_by_planloom()
    assert unresolved == NAMED_BY_A_GRANT, "a variable read by a name the scan cannot follow"
    listed_as_ours = {name for name, (reader, _) in VARIABLES.items() if reader == BY_PLANLOOM}
    assert sorted(read - listed_as_ours) == [], "read but not in engine/app/environment.py"
    assert sorted(listed_as_ours - read) == [], "listed as read by planloom, but no longer read"
    proc = planloom("--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    _, _, epilog = proc.stdout.partition("\nenvironment variables:\n")
    shown = re.findall(r"^  ([A-Z_][A-Z0-9_]*)(?:\s|$)", epilog, re.MULTILINE)
    assert shown == list(VARIABLES)
    for name, (_, what) in VARIABLES.items():
        assert re.search(rf"^  {name}\s+{re.escape(what)}$", epilog, re.MULTILINE), name
        assert "\n" not in what, name
        assert len(what) <= 56, name  # one line of an 80-column help


@pytest.mark.parametrize(
    ("name", "reader"),
    [(name, reader) for name, (reader, _) in VARIABLES.items() if reader != BY_PLANLOOM],
)
def test_a_variable_a_library_reads_is_in_that_librarys_source(name: str, reader: str) -> None:
    """Listed as read by a library planloom uses: that library (as installed) names it."""
    module = pytest.importorskip(reader)
    folder = Path(module.__file__ or "").parent
    sources = (path.read_text(encoding="utf-8", errors="replace") for path in folder.rglob("*.py"))
    assert any(f'"{name}"' in text or f"'{name}'" in text for text in sources)
