"""An allow-listed interpreter runs a script file from the granted folder (issue "what a new
user trips on", item 8), through the `planloom` command.

`shell: {allow: [python3]}` with `argv: [python3, tools/build.py]` runs the script, which
stays confined (no reads outside the folder and the system's files, no writes outside the
folder); inline code (`-c`, `-m`, standard input), a script outside the folder or a
symlink out of it, `/dev/stdin`, a FIFO and options not known to be harmless are still
refused, with a message that names the program as the recipe wrote it (`python3`, not the
file it resolves to, such as `python3.11`) and the grant that would lift the rule.

Layout per test: the recipe in `tmp_path`, the granted folder `tmp_path/J` (the shell
grant's `cwd`), and files outside it: `outside.py`, `secret.txt`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _procs import planloom, run_json

from capabilities.shell.programs import lookup

_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_CANARY = "canary-7d1f0c9e"  # in secret.txt, outside the granted folder
# A script that creates `pwned` in its working folder: had it run, the file would be there.
_PWN = "open('pwned', 'w').write('x')\n"


def _installed(name: str) -> str:
    """The real file `name` is on the shell's safe PATH; skips the test when it is absent."""
    found = shutil.which(name, path=_SAFE_PATH)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return os.path.realpath(found)


@pytest.fixture
def jail(tmp_path: Path) -> Path:
    root = tmp_path / "J"
    (root / "tools").mkdir(parents=True)
    (tmp_path / "secret.txt").write_text(_CANARY + "\n")
    (tmp_path / "outside.py").write_text(_PWN)
    return root


def _recipe(grant: str, steps: dict[str, list[str]]) -> str:
    """A recipe of independent `shell.run` steps, one per entry of `steps` (id -> argv),
    each three lines long, the first at line 6."""
    lines = [
        "version: 1",
        "name: scripts",
        "capabilities:",
        f"  shell: {grant}",
        "steps:",
    ]
    for step_id, argv in steps.items():
        lines += [
            f"  - id: {step_id}",
            "    tool: shell.run",
            f"    params: {{argv: {json.dumps(argv)}}}",
        ]
    return "\n".join(lines) + "\n"


def _run(tmp_path: Path, grant: str, steps: dict[str, list[str]]) -> dict[str, Any]:
    """The steps' results by id, for a recipe of `steps` (see `_recipe`).

    A call the recipe writes out that the grant's rules refuse is refused before anything
    runs, by `planloom validate`: such a step's result is `{"status": "invalid", "error":
    "error[RULE]: MESSAGE"}`, from the problem validation reports at its argv. The other
    steps run, with `planloom run --yes --json`.
    """
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(_recipe(grant, steps))
    checked = planloom("validate", recipe, "--json", cwd=tmp_path)
    assert checked.returncode in (0, 2), checked.stderr
    ids = list(steps)
    result: dict[str, Any] = {}
    for problem in json.loads(checked.stdout) if checked.returncode else []:
        step_id = ids[(problem["line"] - 6) // 3]
        assert step_id not in result, (step_id, problem)
        result[step_id] = {
            "status": "invalid",
            "error": f"error[{problem['rule']}]: {problem['message']}",
        }
    left = {step_id: argv for step_id, argv in steps.items() if step_id not in result}
    if left:
        recipe.write_text(_recipe(grant, left))
        result.update(run_json(recipe, tmp_path)[1]["steps"])
    return result


def _refused(step: dict[str, Any], program: str, real: str) -> str:
    """The step's error, checked: refused by the argument rule (by validation, or by the
    run when only the run can tell), naming `program` as the recipe wrote it (never the
    file `real` it resolves to) and the grant that lifts it."""
    assert step["status"] in ("invalid", "denied", "failed"), step
    error: str = step["error"]
    invalid = step["status"] == "invalid"
    rule = "error[shell.argument]: " if invalid else "denied by rule shell.argument: "
    assert error.startswith(f"{rule}{program}"), error
    assert f"allow: [{program}], unsafe_args: [{program}]" in error, error
    resolved = os.path.basename(real)
    if resolved != program and lookup(resolved) is lookup(program):
        # `python3` is `python3.11` here: same rules, so the message has no cause to say it
        # (a name judged as another program, such as `sh` that is bash, shows its file)
        assert error.startswith(f"{rule}{program}: "), error
        assert resolved not in error, error
    return error


# --- python3 ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_python_script_in_the_folder_runs_and_stays_confined(tmp_path: Path, jail: Path) -> None:
    _installed("python3")
    (jail / "tools" / "build.py").write_text(
        textwrap.dedent(
            """\
            import sys
            print("built", sys.argv[1:])
            for path in ("/etc/shadow", "../secret.txt"):
                try:
                    with open(path) as f:
                        print("READ", path, f.read())
                except OSError as exc:
                    print("no read", path, exc.errno)
            try:
                open("../written.txt", "w").write("x")
                print("WROTE outside")
            except OSError as exc:
                print("no write", exc.errno)
            open("inside.txt", "w").write("made inside")
            """
        )
    )
    steps = _run(
        tmp_path,
        "{allow: [python3], cwd: J}",
        # what follows the script is the script's own, options or not
        {"build": ["python3", "tools/build.py", "-c", "--out=x"]},
    )
    build = steps["build"]
    assert build["status"] == "succeeded", build
    stdout = build["output"]["stdout"]
    assert "built ['-c', '--out=x']" in stdout
    assert (jail / "inside.txt").read_text() == "made inside"
    assert not (tmp_path / "written.txt").exists()
    assert "WROTE" not in stdout
    if not build["output"]["confinement"].get("landlock", "").startswith("active"):
        pytest.skip("Landlock is not available here: reads outside the folder are not held")
    assert "READ" not in stdout, stdout
    assert _CANARY not in stdout
    assert "no read ../secret.txt 13" in stdout  # EACCES from Landlock (the suite runs as root)
    assert "no read /etc/shadow" in stdout


def test_python_inline_code_and_scripts_outside_are_refused(tmp_path: Path, jail: Path) -> None:
    real = _installed("python3")
    (jail / "pwnmod.py").write_text(_PWN)
    (jail / "escape.py").symlink_to(tmp_path / "outside.py")
    os.mkfifo(jail / "fifo.py")
    cases = {
        "inline": ["python3", "-c", _PWN],
        "clustered": ["python3", "-Bc", _PWN],
        "module": ["python3", "-m", "pwnmod"],
        "stdin": ["python3", "-"],
        "stdin_after_ddash": ["python3", "--", "-"],
        "no_script": ["python3", "-B"],
        "outside": ["python3", "../outside.py"],
        "outside_absolute": ["python3", str(tmp_path / "outside.py")],
        "symlink_out": ["python3", "escape.py"],
        "dev_stdin": ["python3", "/dev/stdin"],
        "fifo": ["python3", "fifo.py"],
        "unknown_option": ["python3", "--frobnicate", "pwnmod.py"],
        "code_loading_value": ["python3", "-X", "pycache_prefix=/tmp", "pwnmod.py"],
        "imported_warning_category": ["python3", "-W", "error::pwnmod.Warn", "pwnmod.py"],
    }
    steps = _run(tmp_path, "{allow: [python3], cwd: J}", cases)
    errors = {step_id: _refused(steps[step_id], "python3", real) for step_id in cases}
    assert not (jail / "pwned").exists()
    assert not (tmp_path / "pwned").exists()
    assert "runs code given in the arguments" in errors["inline"]
    assert "(option -c)" in errors["clustered"]
    assert "runs a module" in errors["module"]
    assert "standard input" in errors["stdin"]
    assert "standard input" in errors["stdin_after_ddash"]
    assert "no script file is named" in errors["no_script"]
    for outside in ("outside", "outside_absolute", "symlink_out", "dev_stdin"):
        assert "outside the granted folder" in errors[outside], errors[outside]
        assert "move or copy the script there" in errors[outside]
    assert str(tmp_path / "outside.py") in errors["symlink_out"]  # where the link leads
    assert "not a regular file" in errors["fifo"]
    assert "option these rules do not know" in errors["unknown_option"]
    assert "'pycache_prefix=/tmp'" in errors["code_loading_value"]
    assert "'error::pwnmod.Warn'" in errors["imported_warning_category"]


@pytest.mark.slow
def test_the_grant_the_message_names_lifts_the_rule(tmp_path: Path, jail: Path) -> None:
    real = _installed("python3")
    inline = {"inline": ["python3", "-c", "print('inline ran')"]}
    error = _refused(
        _run(tmp_path, "{allow: [python3], cwd: J}", inline)["inline"], "python3", real
    )
    grant = re.search(r"`capabilities: shell: \{(.*)\}`", error)
    assert grant is not None, error
    steps = _run(tmp_path, f"{{{grant.group(1)}, cwd: J}}", inline)
    assert steps["inline"]["status"] == "succeeded", steps["inline"]
    assert steps["inline"]["output"]["stdout"] == "inline ran\n"


def test_templated_script_paths_are_checked_like_written_ones(tmp_path: Path, jail: Path) -> None:
    real = _installed("python3")
    (jail / "tools" / "gen.py").write_text("open('ran.txt', 'w').write('ran')\n")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        textwrap.dedent(
            """\
            version: 1
            name: templated
            capabilities:
              shell: {allow: [python3], cwd: J}
            steps:
              - id: gen
                tool: shell.run
                for_each: [tools/gen.py, "-c", ../outside.py]
                can_fail: true
                params: {argv: [python3, "${{ item }}"]}
            """
        )
    )
    error = run_json(recipe, tmp_path)[1]["steps"]["gen"]["error"]
    assert (jail / "ran.txt").read_text() == "ran"  # item 0 ran
    assert "item 1: denied by rule shell.option-from-data: python3: argv[1] '-c'" in error
    assert "item 2: denied by rule shell.argument: python3: argument '../outside.py'" in error
    assert os.path.basename(real) == "python3" or os.path.basename(real) not in error
    assert not (jail / "pwned").exists()


@pytest.mark.slow
def test_harmless_python_options_are_allowed(tmp_path: Path, jail: Path) -> None:
    _installed("python3")
    (jail / "tools" / "build.py").write_text("import sys; print(sys.flags.dont_write_bytecode)\n")
    steps = _run(
        tmp_path,
        "{allow: [python3], cwd: J}",
        {"opts": ["python3", "-Bu", "-W", "default", "-X", "utf8", "--", "tools/build.py"]},
    )
    assert steps["opts"]["status"] == "succeeded", steps["opts"]
    assert steps["opts"]["output"]["stdout"] == "1\n"


# --- shells ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_shell_scripts_run_and_inline_code_is_refused(tmp_path: Path, jail: Path) -> None:
    bash = _installed("bash")
    sh = _installed("sh")
    (jail / "build.sh").write_text('echo "built $0 $1"; touch made-by-script\n')
    steps = _run(
        tmp_path,
        "{allow: [bash, sh], cwd: J}",
        {
            "bash_script": ["bash", "-eo", "pipefail", "build.sh", "-c"],
            "sh_script": ["sh", "-eu", "build.sh", "x"],
            "bash_inline": ["bash", "-c", "touch pwned"],
            "sh_inline": ["sh", "-c", "touch pwned"],
            "bash_rcfile": ["bash", "--rcfile", "build.sh", "build.sh"],
            "bash_stdin": ["bash", "-s"],
            "bash_debugger_shopt": ["bash", "-O", "extdebug", "build.sh"],
        },
    )
    assert steps["bash_script"]["status"] == "succeeded", steps["bash_script"]
    assert steps["bash_script"]["output"]["stdout"] == "built build.sh -c\n"
    assert steps["sh_script"]["status"] == "succeeded", steps["sh_script"]
    assert steps["sh_script"]["output"]["stdout"] == "built build.sh x\n"
    assert (jail / "made-by-script").exists()
    for step_id in ("bash_inline", "bash_rcfile", "bash_stdin", "bash_debugger_shopt"):
        _refused(steps[step_id], "bash", bash)
    # `sh` is dash here (or bash elsewhere): the message says `sh`, as the recipe does
    assert "runs code given in the arguments" in _refused(steps["sh_inline"], "sh", sh)
    assert not (jail / "pwned").exists()


# --- node and perl -----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("program", "script", "inline"),
    [
        ("node", "console.log('built')\n", ["-e", "require('fs').writeFileSync('pwned', '')"]),
        ("perl", 'print "built\\n";\n', ["-e", "open(F, '>pwned')"]),
    ],
)
def test_other_interpreters_run_scripts_but_not_inline_code(
    tmp_path: Path, jail: Path, program: str, script: str, inline: list[str]
) -> None:
    real = _installed(program)
    (jail / "build.src").write_text(script)
    steps = _run(
        tmp_path,
        f"{{allow: [{program}], cwd: J}}",
        {"script": [program, "build.src"], "inline": [program, *inline]},
    )
    assert steps["script"]["status"] == "succeeded", steps["script"]
    assert steps["script"]["output"]["stdout"] == "built\n"
    _refused(steps["inline"], program, real)
    assert not (jail / "pwned").exists()


@pytest.mark.slow
def test_end_of_options_makes_the_first_argument_the_script(tmp_path: Path, jail: Path) -> None:
    # `end_of_options: true` runs `python3 -- ARGS`: python3 then reads ARGS[0] as the
    # script, so that argument is checked as one (`-c` names no file inside the folder).
    real = _installed("python3")
    (jail / "tools" / "build.py").write_text("print('built')\n")
    steps = _run(
        tmp_path,
        "{allow: [python3], end_of_options: true, cwd: J}",
        {"script": ["python3", "tools/build.py"], "inline": ["python3", "-c", _PWN]},
    )
    assert steps["script"]["status"] == "succeeded", steps["script"]
    assert steps["script"]["output"]["stdout"] == "built\n"
    assert "argument '-c' is the script" in _refused(steps["inline"], "python3", real)
    assert not (jail / "pwned").exists()
