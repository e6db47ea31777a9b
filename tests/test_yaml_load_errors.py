"""A YAML file that does not load, through the real `planloom` command: a byte that is not
UTF-8 at its own line and column, UTF-16 text said to be UTF-16, and syntax errors shown
like every other located error (the source line, a caret under the column, a hint), for
recipes, `--policy` files, `--capabilities` files and cassettes alike."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _procs import planloom

# `é` saved as Latin-1 (one byte, 0xE9) on line 7, column 12.
LATIN1_RECIPE = (
    "version: 1\n"
    "name: enc\n"
    "description: a recipe saved by an editor set to Latin-1\n"
    "capabilities:\n"
    "  fs: {root: .}\n"
    "steps:\n"
    "  - id: café\n"
    "    tool: fs.read\n"
    "    params: {path: notes.txt}\n"
).encode("latin-1")
LATIN1_HINT = "save the file as UTF-8: it is probably Latin-1 or Windows-1252, where 0xE9 is 'é'"
VALID_RECIPE = (
    "version: 1\nname: ok\ncapabilities:\n  fs: {root: .}\n"
    "steps:\n  - id: read\n    tool: fs.read\n    params: {path: notes.txt}\n"
)


def _no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


def _shown(stderr: str, headline: str) -> tuple[str, str, str]:
    """The source line, the caret line (both without the gutter) and the hint line that
    follow `headline` in `stderr`, after checking the gutter names the headline's line."""
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.endswith(headline)]
    assert starts, f"{headline!r} not in:\n{stderr}"
    at = starts[0]
    line_no = int(headline.split(":")[1])
    gutter = f"{line_no:>5} | "
    assert lines[at + 1].startswith(gutter), stderr
    assert lines[at + 2].startswith(" " * len(gutter)), stderr
    assert lines[at + 3].startswith("  hint: "), stderr
    return lines[at + 1][len(gutter) :], lines[at + 2][len(gutter) :], lines[at + 3][8:]


def _json(proc: subprocess.CompletedProcess[str]) -> Any:
    _no_traceback(proc)
    return json.loads(proc.stdout)


# -- a byte that is not UTF-8 --------------------------------------------------------------


def test_a_latin1_recipe_is_reported_at_the_bad_byte(tmp_path: Path) -> None:
    (tmp_path / "recipe.yaml").write_bytes(LATIN1_RECIPE)

    proc = planloom("validate", "recipe.yaml", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    _no_traceback(proc)
    assert proc.stderr.splitlines() == [
        "recipe.yaml:7:12: error[encoding]: the file is not UTF-8 text: "
        "byte 0xE9 cannot be read as UTF-8",
        "    7 |   - id: caf\ufffd",  # the bad byte shown as U+FFFD, as editors show it
        "                   ^",
        f"  hint: {LATIN1_HINT}",
        "recipe.yaml: 1 problem",
    ]


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_latin1_recipe_with_json_gives_the_real_line_and_column(
    tmp_path: Path, command: str
) -> None:
    (tmp_path / "recipe.yaml").write_bytes(LATIN1_RECIPE)

    yes = ["--yes"] if command == "run" else []
    proc = planloom(command, "recipe.yaml", "--json", *yes, cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    result = _json(proc)
    problems = result if command == "validate" else result["errors"]
    assert problems == [
        {
            "file": "recipe.yaml",
            "line": 7,
            "column": 12,
            "rule": "encoding",
            "message": "the file is not UTF-8 text: byte 0xE9 cannot be read as UTF-8",
            "hint": LATIN1_HINT,
        }
    ]
    if command == "run":
        assert result["status"] == "invalid"


@pytest.mark.slow
def test_run_shows_the_bad_byte_with_its_line_and_caret(tmp_path: Path) -> None:
    # A bad byte after several multi-byte characters: the column counts characters.
    text = VALID_RECIPE.replace("name: ok", "name: ok\ndescription: naïve — résumé \x00")
    raw = text.encode().replace(b"\x00", b"\xff")
    (tmp_path / "recipe.yaml").write_bytes(raw)

    proc = planloom("run", "recipe.yaml", "--yes", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    _no_traceback(proc)
    headline = (
        "recipe.yaml:3:29: error[encoding]: the file is not UTF-8 text: "
        "byte 0xFF cannot be read as UTF-8"
    )
    source, caret, hint = _shown(proc.stderr, headline)
    assert source == "description: naïve — résumé \ufffd"
    assert caret == " " * 28 + "^"
    # 0xFF is 'ÿ' in Windows-1252: the hint says so
    assert hint.startswith("save the file as UTF-8")
    assert "'ÿ'" in hint


def test_a_byte_order_mark_does_not_shift_the_column(tmp_path: Path) -> None:
    (tmp_path / "recipe.yaml").write_bytes(b"\xef\xbb\xbfname: caf\xe9\nversion: 1\n")

    proc = planloom("validate", "recipe.yaml", "--json", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    [problem] = _json(proc)
    assert (problem["line"], problem["column"], problem["rule"]) == (1, 10, "encoding")


@pytest.mark.slow
def test_utf16_text_is_said_to_be_utf16(tmp_path: Path) -> None:
    (tmp_path / "bom.yaml").write_bytes(VALID_RECIPE.encode("utf-16"))  # with a BOM
    (tmp_path / "nobom.yaml").write_bytes(VALID_RECIPE.encode("utf-16-le"))

    with_bom = planloom("validate", "bom.yaml", cwd=tmp_path)
    without = planloom("validate", "nobom.yaml", "--json", cwd=tmp_path)

    assert with_bom.returncode == 2, with_bom.stderr
    _no_traceback(with_bom)
    assert with_bom.stderr.splitlines()[:2] == [
        "bom.yaml:1:1: error[encoding]: the file is UTF-16 text "
        "(it starts with a byte order mark); planloom reads UTF-8",
        "  hint: save the file as UTF-8 (in most editors: Save As, Encoding: UTF-8)",
    ]
    assert without.returncode == 2, without.stderr
    [problem] = _json(without)
    assert problem["rule"] == "encoding"  # not "binary-file"
    assert "UTF-16" in problem["message"]
    assert "every other byte is zero" in problem["message"]


def test_a_latin1_policy_file_is_reported_at_the_bad_byte(tmp_path: Path) -> None:
    (tmp_path / "recipe.yaml").write_text(VALID_RECIPE, encoding="utf-8")
    (tmp_path / "notes.txt").write_text("hi\n", encoding="utf-8")
    policy = "default: ask\nrules:\n  - tool: fs.read\n    reason: déjà vu\n    decision: allow\n"
    (tmp_path / "policy.yaml").write_bytes(policy.encode("latin-1"))

    proc = planloom("run", "recipe.yaml", "--policy", "policy.yaml", "--yes", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    _no_traceback(proc)
    source, caret, hint = _shown(
        proc.stderr,
        "policy.yaml:4:14: error[encoding]: the file is not UTF-8 text: "
        "byte 0xE9 cannot be read as UTF-8",
    )
    assert source == "    reason: d\ufffdj\ufffd vu"
    assert caret == " " * 13 + "^"
    assert hint == LATIN1_HINT


def test_a_latin1_capabilities_file_is_reported_at_the_bad_byte(tmp_path: Path) -> None:
    (tmp_path / "caps.yaml").write_bytes(b"capabilities:\n  fs: {root: caf\xe9}\n")

    # The file is read before any model is asked: no model settings are needed.
    proc = planloom("plan", "summarise notes", "--capabilities", "caps.yaml", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    _no_traceback(proc)
    source, caret, hint = _shown(
        proc.stderr,
        "caps.yaml:2:17: error[encoding]: the file is not UTF-8 text: "
        "byte 0xE9 cannot be read as UTF-8",
    )
    assert source == "  fs: {root: caf\ufffd}"
    assert caret == " " * 16 + "^"
    assert hint == LATIN1_HINT


@pytest.mark.slow
def test_a_latin1_cassette_is_reported_at_the_bad_byte(tmp_path: Path) -> None:
    (tmp_path / "recipe.yaml").write_text(VALID_RECIPE, encoding="utf-8")
    (tmp_path / "notes.txt").write_text("café\n", encoding="utf-8")
    recorded = planloom("run", "recipe.yaml", "--record", "tape.yaml", "--yes", cwd=tmp_path)
    assert recorded.returncode == 0, recorded.stderr
    tape = (tmp_path / "tape.yaml").read_bytes()
    assert tape.count("café".encode()) == 1
    (tmp_path / "tape.yaml").write_bytes(tape.replace("café".encode(), b"caf\xe9"))
    line_no = tape[: tape.index("café".encode())].count(b"\n") + 1
    line = tape.split(b"\n")[line_no - 1].decode()
    column = line.index("é") + 1

    proc = planloom("replay", "tape.yaml", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    _no_traceback(proc)
    source, caret, _ = _shown(
        proc.stderr,
        f"tape.yaml:{line_no}:{column}: error[encoding]: the file is not UTF-8 text: "
        "byte 0xE9 cannot be read as UTF-8",
    )
    assert source == line.replace("é", "\ufffd")
    assert caret == " " * (column - 1) + "^"


# -- YAML syntax errors --------------------------------------------------------------------

SYNTAX = {
    "bad indentation": (
        "version: 1\nname: t\nsteps:\n  - id: a\n     tool: fs.read\n",
        "r.yaml:5:10: error[yaml-syntax]: mapping values are not allowed in this context",
        "     tool: fs.read",
        "check indentation and quoting on this line or the one before",
    ),
    "unclosed quote": (
        'version: 1\nname: "release\nsteps:\n  - id: a\n    tool: fs.read\n',
        "r.yaml:2:7: error[yaml-syntax]: found unexpected end of stream while scanning "
        "a quoted scalar",
        'name: "release',
        "this quote is never closed: add the closing quote",
    ),
    "tab indentation": (
        "version: 1\nname: t\nsteps:\n  - id: a\n\ttool: fs.read\n",
        "r.yaml:5:1: error[yaml-syntax]: found a tab character that violates indentation",
        "\ttool: fs.read",
        "YAML does not allow tabs for indentation; use spaces",
    ),
    "control character": (
        "version: 1\nname: a\x0cb\n",
        "r.yaml:2:8: error[yaml-syntax]: character U+000C is not allowed in YAML",
        "name: a⟨FF⟩b",  # made visible, as every line shown on a terminal
        'remove it, or write it as the escape "\\x0c" inside a double-quoted string',
    ),
}


@pytest.mark.parametrize("case", SYNTAX, ids=list(SYNTAX))
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_yaml_syntax_error_shows_its_line_and_a_caret(
    tmp_path: Path, case: str, command: str
) -> None:
    text, headline, line, hint = SYNTAX[case]
    (tmp_path / "r.yaml").write_text(text, encoding="utf-8", newline="")

    proc = planloom(command, "r.yaml", *(["--yes"] if command == "run" else []), cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    _no_traceback(proc)
    source, caret, shown_hint = _shown(proc.stderr, headline)
    column = int(headline.split(":")[2])
    assert source == line
    # The caret line repeats the line's tabs, so a terminal puts it under the column.
    assert caret == "".join("\t" if c == "\t" else " " for c in line[: column - 1]) + "^"
    assert shown_hint == hint


@pytest.mark.parametrize("case", SYNTAX, ids=list(SYNTAX))
def test_a_yaml_syntax_error_with_json_is_located(tmp_path: Path, case: str) -> None:
    text, headline, _, hint = SYNTAX[case]
    (tmp_path / "r.yaml").write_text(text, encoding="utf-8", newline="")

    proc = planloom("validate", "r.yaml", "--json", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    [problem] = _json(proc)
    where = f"r.yaml:{problem['line']}:{problem['column']}"
    assert f"{where}: error[{problem['rule']}]: {problem['message']}" == headline
    assert problem["hint"] == hint


def test_the_caret_counts_columns_as_a_terminal_shows_them(tmp_path: Path) -> None:
    # A tab inside a quoted value (allowed) and two wide characters before the column.
    line = 'description: "日本\tx" junk: y'
    (tmp_path / "r.yaml").write_text(f"version: 1\nname: t\n{line}\n", encoding="utf-8")

    proc = planloom("validate", "r.yaml", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    source, caret, hint = _shown(
        proc.stderr, "r.yaml:3:21: error[yaml-syntax]: did not find expected key"
    )
    assert source == line
    assert caret == " " * 14 + "    " + "\t" + "   " + "^"  # 日本: two columns each
    assert "tab" not in hint  # the tab is inside quotes: not what went wrong


def test_a_long_line_is_shown_around_the_column(tmp_path: Path) -> None:
    line = "description: " + "x" * 3000 + ' "q" junk: ' + "y" * 3000
    (tmp_path / "r.yaml").write_text(f"version: 1\nname: t\n{line}\n", encoding="utf-8")

    proc = planloom("validate", "r.yaml", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    column = line.index(": y") + 1
    source, caret, _ = _shown(
        proc.stderr,
        f"r.yaml:3:{column}: error[yaml-syntax]: mapping values are not allowed in this context",
    )
    assert len(source) < 200
    assert source.startswith("…x")
    assert source.endswith("y…")
    assert source[caret.index("^")] == ":"  # still under the column


def test_a_yaml_syntax_error_in_a_policy_file_shows_its_line(tmp_path: Path) -> None:
    (tmp_path / "recipe.yaml").write_text(VALID_RECIPE, encoding="utf-8")
    (tmp_path / "policy.yaml").write_text(
        'default: ask\nrules:\n  - tool: fs.read\n    decision: "allow\n', encoding="utf-8"
    )

    proc = planloom("run", "recipe.yaml", "--policy", "policy.yaml", "--yes", cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr
    _no_traceback(proc)
    source, caret, hint = _shown(
        proc.stderr,
        "policy.yaml:4:15: error[yaml-syntax]: found unexpected end of stream while "
        "scanning a quoted scalar",
    )
    assert source == '    decision: "allow'
    assert caret == " " * 14 + "^"
    assert hint == "this quote is never closed: add the closing quote"
