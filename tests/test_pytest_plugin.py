"""The planloom pytest plugin, from the outside: inner pytest runs in a fresh folder with no
`-p` option, so the plugin they use is the one the `pytest11` entry point registers (shown
in a subprocess, where `-p no:planloom` takes the fixture away again).

Shown: where the `planloom_cassette` fixture puts a cassette (by default, and with the
marker's `cassette=`), how the record mode is chosen (`--planloom-record-mode`, overridden
by the marker), that bad marker arguments are clear errors, that a replay without its
cassette says which file is missing and how to record it, that `once` records a missing
cassette which later runs replay without touching the disk, that recordings a replay never
used are reported as an `UnusedRecordingWarning`, and that `pytest --markers` lists the marker.
Runs that record, replay or warn are separate processes (`runpytest_subprocess`, with a
timeout), as a user's successive `pytest` runs are; the fixture's values are checked in
process, which is faster.
"""

from __future__ import annotations

import pytest

import engine.pytest_plugin
import engine.recording

TIMEOUT = 60  # seconds per inner pytest run; generous for a loaded machine

READ_STEP = """\
version: 1
name: read
capabilities:
  fs: {root: ., read: true}
steps:
  - id: read
    tool: fs.read
    params: {path: data.txt}
"""
OUTPUTS = "outputs:\n  text: ${{ steps.read.output.content }}\n"
READ_RECIPE = READ_STEP + OUTPUTS

READ_TEST = """
from pathlib import Path

import pytest

from engine.testing import replay


@pytest.mark.planloom
def test_reads_data(planloom_cassette):
    result = replay(planloom_cassette, Path(__file__).parent / "read.yaml")
    assert result.steps["read"].status == "succeeded", result.steps["read"].error
    assert result.outputs == {"text": "hello from disk"}
"""


@pytest.fixture(autouse=True)
def _autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner runs load plugins from entry points, whatever this environment says."""
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("PYTEST_PLUGINS", raising=False)


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """An inner pytest run in a process of its own."""
    return pytester.runpytest_subprocess(*args, timeout=TIMEOUT)


def run_here(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """An inner pytest run in this process (a new config and session, plugins autoloaded)."""
    return pytester.runpytest_inprocess(*args)


def test_record_modes_are_the_engines() -> None:
    assert engine.pytest_plugin.RECORD_MODES == engine.recording.RECORD_MODES


@pytest.mark.slow
def test_plugin_is_loaded_by_its_entry_point(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_fixture="""
        def test_has_a_cassette(planloom_cassette):
            assert planloom_cassette.mode == "none"
        """
    )
    result = run(pytester)
    result.assert_outcomes(passed=1)

    disabled = run(pytester, "-p", "no:planloom")
    disabled.assert_outcomes(errors=1)
    disabled.stdout.fnmatch_lines(["*fixture 'planloom_cassette' not found*"])


def test_default_cassette_path_is_per_module_and_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_paths="""
        from pathlib import Path

        import pytest

        HERE = Path(__file__).parent


        def test_unmarked(planloom_cassette):
            expected = HERE / "cassettes" / "test_paths" / "test_unmarked.yaml"
            assert planloom_cassette.path == expected
            assert planloom_cassette.mode == "none"
            assert planloom_cassette.live_tools is False


        @pytest.mark.planloom
        def test_marked(planloom_cassette):
            assert planloom_cassette.path == HERE / "cassettes" / "test_paths" / "test_marked.yaml"
            assert planloom_cassette.mode == "none"


        @pytest.mark.planloom
        @pytest.mark.parametrize("case", ["a b", "c/d"])
        def test_case(planloom_cassette, case):
            stem = {"a b": "test_case_a_b", "c/d": "test_case_c_d"}[case]
            assert planloom_cassette.path == HERE / "cassettes" / "test_paths" / f"{stem}.yaml"
        """
    )
    result = run_here(pytester, "-v")
    result.assert_outcomes(passed=4)
    assert not (pytester.path / "cassettes").exists()  # giving a path writes nothing


def test_cassette_argument_is_relative_to_the_test_file(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        **{
            "sub/test_relative": """
            from pathlib import Path

            import pytest


            @pytest.mark.planloom(cassette="../shared/run.yaml")
            def test_relative(planloom_cassette):
                shared = Path(__file__).parent.parent / "shared"
                assert planloom_cassette.path.resolve() == (shared / "run.yaml").resolve()
                assert planloom_cassette.mode == "none"
            """
        }
    )
    result = run_here(pytester, "sub")  # run from the parent folder: cwd must not matter
    result.assert_outcomes(passed=1)


def test_record_mode_option_sets_the_mode(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        test_mode="""
        import os


        def test_mode(planloom_cassette):
            assert planloom_cassette.mode == os.environ["EXPECTED_MODE"]
        """
    )
    for mode in ("once", "new_episodes", "all"):
        monkeypatch.setenv("EXPECTED_MODE", mode)
        run_here(pytester, f"--planloom-record-mode={mode}").assert_outcomes(passed=1)

    refused = run_here(pytester, "--planloom-record-mode=sometimes")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*--planloom-record-mode: invalid choice: 'sometimes'*"])


def test_marker_record_mode_wins_over_the_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_override="""
        import pytest


        @pytest.mark.planloom(record_mode="once", live_tools=True)
        def test_marker_wins(planloom_cassette):
            assert planloom_cassette.mode == "once"
            assert planloom_cassette.live_tools is True


        def test_option_applies_elsewhere(planloom_cassette):
            assert planloom_cassette.mode == "all"
        """
    )
    run_here(pytester, "--planloom-record-mode=all").assert_outcomes(passed=2)


def test_bad_marker_arguments_are_clear_errors(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_typos="""
        import pytest


        @pytest.mark.planloom(casette="run.yaml")
        def test_misspelt(planloom_cassette):
            pass


        @pytest.mark.planloom(record_mode="sometimes")
        def test_bad_mode(planloom_cassette):
            pass
        """
    )
    result = run_here(pytester)
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines_random(
        [
            "*UsageError: @pytest.mark.planloom: unknown argument(s) casette; "
            "use cassette=, record_mode=, live_tools=*",
            "*UsageError: @pytest.mark.planloom: record_mode 'sometimes' is not one of "
            "none, once, new_episodes, all*",
        ]
    )


def test_replay_without_its_cassette_names_the_file_and_how_to_record(
    pytester: pytest.Pytester,
) -> None:
    pytester.makefile(".yaml", read=READ_RECIPE)
    pytester.makefile(".txt", data="hello from disk")
    pytester.makepyfile(
        test_missing="""
        from pathlib import Path

        import pytest

        from engine.testing import replay


        @pytest.mark.planloom
        def test_with_recipe(planloom_cassette):
            replay(planloom_cassette, Path(__file__).parent / "read.yaml")


        @pytest.mark.planloom
        def test_without_recipe(planloom_cassette):
            replay(planloom_cassette)
        """
    )
    result = run_here(pytester)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines_random(
        [
            "E*ConfigurationError: cassette */cassettes/test_missing/test_with_recipe.yaml "
            "does not exist; record it with pytest --planloom-record-mode=once*",
            "E*ConfigurationError: cassette */cassettes/test_missing/test_without_recipe.yaml "
            "does not exist; record it with pytest --planloom-record-mode=once*",
        ]
    )
    assert not (pytester.path / "cassettes").exists()


@pytest.mark.slow
def test_once_records_a_missing_cassette_that_later_runs_replay(
    pytester: pytest.Pytester,
) -> None:
    pytester.makefile(".yaml", read=READ_RECIPE)
    data = pytester.makefile(".txt", data="hello from disk")
    pytester.makepyfile(test_read=READ_TEST)
    cassette = pytester.path / "cassettes" / "test_read" / "test_reads_data.yaml"

    run(pytester, "--planloom-record-mode=once").assert_outcomes(passed=1)
    assert "hello from disk" in cassette.read_text(encoding="utf-8")
    recorded = cassette.read_bytes()

    data.unlink()  # from now on only the cassette knows what the file said
    run(pytester).assert_outcomes(passed=1)
    assert cassette.read_bytes() == recorded  # a replay writes nothing

    live = run_here(pytester, "--planloom-record-mode=all")  # reads the disk again: fails
    live.assert_outcomes(failed=1)
    live.stdout.fnmatch_lines(["E*AssertionError: fs.read: no such file 'data.txt'*"])


@pytest.mark.slow
def test_unused_recordings_are_a_warning(pytester: pytest.Pytester) -> None:
    recipe = pytester.makefile(
        ".yaml",
        read=READ_STEP
        + "  - id: extra\n    tool: fs.read\n    params: {path: extra.txt}\n"
        + OUTPUTS,
    )
    pytester.makefile(".txt", data="hello from disk", extra="more")
    pytester.makepyfile(test_read=READ_TEST)
    run(pytester, "--planloom-record-mode=once").assert_outcomes(passed=1)

    recipe.write_text(READ_RECIPE)  # the workflow now does less than it did
    result = run(pytester)
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*= warnings summary =*",
            "test_read.py::test_reads_data",
            "*UnusedRecordingWarning: 1 recording(s) in */test_read/test_reads_data.yaml "
            "were not used: tool call of step 'extra' attempt 1: fs.read*",
        ]
    )


def test_marker_is_listed_by_pytest_markers(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--markers")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["@pytest.mark.planloom(cassette=None, record_mode=None, live_tools=False): *"]
    )


@pytest.mark.slow
def test_a_mismatch_says_how_to_record_again_with_the_pytest_option(
    pytester: pytest.Pytester,
) -> None:
    pytester.makefile(".yaml", read=READ_RECIPE)
    pytester.makefile(".txt", data="hello from disk")
    pytester.makepyfile(test_read=READ_TEST)
    run(pytester, "--planloom-record-mode=once").assert_outcomes(passed=1)
    pytester.makefile(".txt", other="hello from elsewhere")
    pytester.makefile(".yaml", read=READ_RECIPE.replace("data.txt", "other.txt"))

    result = run(pytester)

    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "ReplayMismatch: replay: step 'read' (attempt 1) called fs.read" in out
    assert "record again: run pytest with --planloom-record-mode=new_episodes" in out
    assert "--record-mode " not in out  # the CLI's flag means nothing to pytest


@pytest.mark.slow
def test_replay_paths_start_at_the_test_file(pytester: pytest.Pytester) -> None:
    (pytester.path / "sub").mkdir()
    (pytester.path / "sub" / "read.yaml").write_text(READ_RECIPE)
    (pytester.path / "sub" / "data.txt").write_text("hello from disk")
    (pytester.path / "read.yaml").write_text(READ_RECIPE.replace("data.txt", "nowhere.txt"))
    pytester.makepyfile(
        **{
            "sub/test_relative_paths": """
            from engine.testing import replay


            def test_relative():
                result = replay("cassettes/run.yaml", "read.yaml", mode="once")
                assert result.outputs == {"text": "hello from disk"}
            """
        }
    )

    run(pytester, "sub").assert_outcomes(passed=1)  # from the parent folder: cwd must not matter
    run(pytester, "sub").assert_outcomes(passed=1)  # and again, replayed

    assert (pytester.path / "sub" / "cassettes" / "run.yaml").is_file()
    assert not (pytester.path / "cassettes").exists()
