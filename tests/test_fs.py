"""The fs capability: happy paths of its six actions and the ATTACKS.md A-rows it must refuse.

Layout of every test: `tmp/J` is the jail (the recipe folder, grant root "."), holding
`ok.txt` and `sub/`; `tmp/J2` is a sibling sharing J's prefix; `tmp/secret` is outside.
"""

from __future__ import annotations

import asyncio
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from capabilities.fs import FsGrant, ListResult, ReadResult, SearchResult, _jail, register
from engine.capability import CallContext, Registry
from engine.errors import CapabilityDenied, StepFailed

SECRET = b"TOP-SECRET-CANARY"


@dataclass
class Env:
    tmp: Path
    j: Path
    j2: Path
    secret: Path

    def snapshot(self) -> dict[str, bytes | None]:
        """Every file outside J, with its bytes, to prove nothing changed there."""
        files: dict[str, bytes | None] = {}
        for path in sorted(self.tmp.rglob("*")):
            if self.j in path.parents or path == self.j:
                continue
            files[str(path)] = path.read_bytes() if path.is_file() else None
        return files


@pytest.fixture
def env(tmp_path: Path) -> Env:
    j = tmp_path / "J"
    (j / "sub").mkdir(parents=True)
    (j / "ok.txt").write_text("hello\n")
    (j / "sub" / "inner.txt").write_text("inner line\nneedle here\n")
    j2 = tmp_path / "J2"
    j2.mkdir()
    (j2 / "x").write_bytes(SECRET)
    (tmp_path / "secret").write_bytes(SECRET)
    outside = tmp_path / "outdir"
    outside.mkdir()
    (outside / "secret").write_bytes(SECRET)
    return Env(tmp_path, j, j2, tmp_path / "secret")


_REGISTRY = Registry()
register(_REGISTRY)


async def acall(env: Env, action: str, params: dict[str, Any], **grant: Any) -> Any:
    spec = _REGISTRY.get(action)
    assert spec is not None
    ctx = CallContext(grant=FsGrant(**grant), base_dir=env.j, timeout=10)
    return await spec.run(spec.params_model.model_validate(params), ctx)


def call(env: Env, action: str, params: dict[str, Any], **grant: Any) -> Any:
    return asyncio.run(acall(env, action, params, **grant))


def denied(env: Env, rule: str, action: str, params: dict[str, Any], **grant: Any) -> str:
    """Assert the call is refused by `rule` and returns no secret; gives the message."""
    before = env.snapshot()
    with pytest.raises(CapabilityDenied) as info:
        call(env, action, params, **grant)
    assert info.value.rule == rule
    assert SECRET.decode() not in str(info.value)
    assert env.snapshot() == before
    return str(info.value)


def failed(env: Env, action: str, params: dict[str, Any], **grant: Any) -> str:
    with pytest.raises(StepFailed) as info:
        call(env, action, params, **grant)
    assert not isinstance(info.value, CapabilityDenied)
    return str(info.value)


def no_temp_files(root: Path) -> bool:
    return not [p for p in root.rglob("*") if "planloom-tmp" in p.name]


# -- registration -------------------------------------------------------------------------


def test_register_adds_family_and_six_actions() -> None:
    registry = Registry()
    register(registry)
    assert registry.families["fs"].grant_model is FsGrant
    effects = {name: action.side_effects for name, action in registry.actions.items()}
    assert effects == {
        "fs.read": False,
        "fs.write": True,
        "fs.append": True,
        "fs.list": False,
        "fs.search": False,
        "fs.delete": True,
    }
    for action in registry.actions.values():
        assert isinstance(action.result_model, type)
        assert issubclass(action.result_model, BaseModel)


def test_openat2_detection_runs() -> None:
    # Informational: both branches are exercised below by monkeypatching.
    assert isinstance(_jail.openat2_available(), bool)


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the kernel's openat2 and again with the component-wise fallback."""
    if request.param == "walk":
        monkeypatch.setattr(_jail, "openat2_available", lambda: False)
    elif not _jail.openat2_available():
        pytest.skip("openat2 is not available on this kernel")
    return str(request.param)


# -- happy paths ----------------------------------------------------------------------------


def test_read_returns_content_and_size(env: Env, resolver: str) -> None:
    result = call(env, "fs.read", {"path": "ok.txt"})
    assert result == ReadResult(content="hello\n", size=6, truncated=False)
    assert call(env, "fs.read", {"path": "sub/inner.txt"}).content.startswith("inner")


def test_read_caps_and_reports_truncation(env: Env) -> None:
    result = call(env, "fs.read", {"path": "ok.txt"}, max_read_bytes=3)
    assert (result.content, result.size, result.truncated) == ("hel", 6, True)


def test_read_replaces_invalid_utf8(env: Env) -> None:
    (env.j / "bin").write_bytes(b"a\xffb")
    assert call(env, "fs.read", {"path": "bin"}).content == "a\ufffdb"


def test_read_needs_read_grant(env: Env) -> None:
    message = denied(env, "fs.read-not-granted", "fs.read", {"path": "ok.txt"}, read=False)
    assert "read: true" in message
    denied(env, "fs.read-not-granted", "fs.list", {}, read=False)
    denied(env, "fs.read-not-granted", "fs.search", {"pattern": "x"}, read=False)


def test_read_missing_and_directory_fail_operationally(env: Env, resolver: str) -> None:
    message = failed(env, "fs.read", {"path": "nope.txt"})
    assert "no such file 'nope.txt' under root" in message
    assert str(env.j) in message
    assert "is a directory" in failed(env, "fs.read", {"path": "sub"})
    assert "not a directory" in failed(env, "fs.read", {"path": "ok.txt/x"})


def test_relative_root_resolves_against_base_dir(env: Env) -> None:
    assert call(env, "fs.read", {"path": "inner.txt"}, root="sub").size == 23
    denied(env, "fs.outside-root", "fs.read", {"path": "../ok.txt"}, root="sub")


def test_write_creates_file_and_folders(env: Env, resolver: str) -> None:
    result = call(env, "fs.write", {"path": "a/b/c.txt", "content": "héllo"}, write=True)
    assert (result.path, result.bytes_written) == ("a/b/c.txt", 6)
    assert (env.j / "a/b/c.txt").read_text() == "héllo"
    assert no_temp_files(env.j)


def test_write_replaces_existing_and_keeps_mode(env: Env) -> None:
    (env.j / "ok.txt").chmod(0o640)
    call(env, "fs.write", {"path": "ok.txt", "content": "new"}, write=True)
    assert (env.j / "ok.txt").read_text() == "new"
    assert (env.j / "ok.txt").stat().st_mode & 0o777 == 0o640
    assert no_temp_files(env.j)


def test_write_without_create_dirs_fails_on_missing_folder(env: Env) -> None:
    params = {"path": "new/x.txt", "content": "x", "create_dirs": False}
    assert "no such file" in failed(env, "fs.write", params, write=True)
    assert not (env.j / "new").exists()


def test_write_globs(env: Env) -> None:
    grant = {"write": ["notes/**", "**/*.md"]}
    call(env, "fs.write", {"path": "notes/a.txt", "content": "1"}, **grant)
    call(env, "fs.write", {"path": "notes/deep/er/b.txt", "content": "2"}, **grant)
    call(env, "fs.write", {"path": "x.md", "content": "3"}, **grant)
    call(env, "fs.write", {"path": "sub/y.md", "content": "4"}, **grant)
    message = denied(
        env, "fs.write-not-granted", "fs.write", {"path": "sub/z.txt", "content": ""}, **grant
    )
    assert "write: ['sub/**']" in message
    denied(env, "fs.write-not-granted", "fs.write", {"path": "notesX/a", "content": ""}, **grant)
    assert not (env.j / "sub/z.txt").exists()


def test_single_star_stays_in_one_folder(env: Env) -> None:
    call(env, "fs.write", {"path": "log-1.txt", "content": ""}, write=["log-*.txt"])
    params = {"path": "log-a/b.txt", "content": ""}
    denied(env, "fs.write-not-granted", "fs.write", params, write=["log-*"])


def test_write_not_granted_by_default(env: Env) -> None:
    denied(env, "fs.write-not-granted", "fs.write", {"path": "n.txt", "content": "x"})
    denied(env, "fs.write-not-granted", "fs.append", {"path": "ok.txt", "content": "x"})
    denied(env, "fs.write-not-granted", "fs.delete", {"path": "ok.txt"})
    assert (env.j / "ok.txt").read_text() == "hello\n"


def test_write_too_large_refused_before_touching_disk(env: Env) -> None:
    params = {"path": "big.txt", "content": "x" * 11}
    message = denied(env, "fs.too-large", "fs.write", params, write=True, max_write_bytes=10)
    assert "max_write_bytes" in message
    denied(env, "fs.too-large", "fs.append", params, write=True, max_write_bytes=10)
    assert not (env.j / "big.txt").exists()


def test_failed_write_leaves_no_temp_file(env: Env) -> None:
    # The target is a folder, so the final rename fails after the temp file was written.
    (env.j / "adir").mkdir()
    (env.j / "adir" / "keep").write_text("k")
    failed(env, "fs.write", {"path": "adir", "content": "x"}, write=True)
    assert (env.j / "adir" / "keep").read_text() == "k"
    assert no_temp_files(env.j)


def test_append_creates_then_appends(env: Env, resolver: str) -> None:
    call(env, "fs.append", {"path": "log/a.log", "content": "one\n"}, write=True)
    result = call(env, "fs.append", {"path": "log/a.log", "content": "two\n"}, write=True)
    assert result.bytes_written == 4
    assert (env.j / "log/a.log").read_text() == "one\ntwo\n"


def test_delete(env: Env, resolver: str) -> None:
    assert call(env, "fs.delete", {"path": "ok.txt"}, write=True).deleted is True
    assert not (env.j / "ok.txt").exists()
    assert "no such file" in failed(env, "fs.delete", {"path": "ok.txt"}, write=True)
    assert (
        call(env, "fs.delete", {"path": "ok.txt", "missing_ok": True}, write=True).deleted is False
    )
    assert (
        call(env, "fs.delete", {"path": "no/dir/x", "missing_ok": True}, write=True).deleted
        is False
    )
    assert "is a directory" in failed(env, "fs.delete", {"path": "sub"}, write=True)
    assert (env.j / "sub").is_dir()


def test_list_flat_and_recursive(env: Env, resolver: str) -> None:
    (env.j / "sub" / "deeper").mkdir()
    flat = call(env, "fs.list", {})
    assert [(e.path, e.type, e.size) for e in flat.entries] == [
        ("ok.txt", "file", 6),
        ("sub", "dir", None),
    ]
    assert (flat.paths, flat.truncated) == (["ok.txt"], False)
    deep = call(env, "fs.list", {"recursive": True})
    assert [e.path for e in deep.entries] == ["ok.txt", "sub", "sub/deeper", "sub/inner.txt"]
    assert deep.paths == ["ok.txt", "sub/inner.txt"]
    assert call(env, "fs.list", {"path": "sub"}).paths == ["sub/inner.txt"]
    assert "not a directory" in failed(env, "fs.list", {"path": "ok.txt"})


def test_list_entry_and_depth_caps(env: Env) -> None:
    assert call(env, "fs.list", {"max_entries": 1}) == ListResult(
        entries=[{"path": "ok.txt", "type": "file", "size": 6}], paths=["ok.txt"], truncated=True
    )
    deep = env.j / "d1" / "d2" / "d3"
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    result = call(env, "fs.list", {"path": "d1", "recursive": True, "max_depth": 2})
    assert [e.path for e in result.entries] == ["d1/d2", "d1/d2/d3"]
    assert result.truncated is True
    full = call(env, "fs.list", {"path": "d1", "recursive": True, "max_depth": 3})
    assert (full.paths, full.truncated) == (["d1/d2/d3/f"], False)


def test_search(env: Env, resolver: str) -> None:
    (env.j / "sub" / "b.md").write_text("a needle\nno\nneedle again\n")
    result = call(env, "fs.search", {"pattern": r"needle"})
    assert [(m.path, m.line, m.text) for m in result.matches] == [
        ("sub/b.md", 1, "a needle"),
        ("sub/b.md", 3, "needle again"),
        ("sub/inner.txt", 2, "needle here"),
    ]
    assert result.truncated is False
    only_md = call(env, "fs.search", {"pattern": "needle", "glob": "**/*.md"})
    assert {m.path for m in only_md.matches} == {"sub/b.md"}
    in_sub = call(env, "fs.search", {"pattern": "needle", "path": "sub", "glob": "*.txt"})
    assert [m.path for m in in_sub.matches] == ["sub/inner.txt"]
    capped = call(env, "fs.search", {"pattern": "needle", "max_matches": 2})
    assert (len(capped.matches), capped.truncated) == (2, True)


def test_search_skips_binary_and_oversize_files(env: Env) -> None:
    (env.j / "bin.dat").write_bytes(b"needle\x00\x01")
    (env.j / "big.txt").write_text("needle\n" * 100)
    result = call(env, "fs.search", {"pattern": "needle", "glob": "*"}, max_read_bytes=50)
    # ok.txt, sub, bin.dat, big.txt: `*` matches nothing inside sub, so it is not entered
    assert result == SearchResult(matches=[], truncated=False, visited=4)


def test_params_are_validated(env: Env) -> None:
    with pytest.raises(ValidationError):
        call(env, "fs.read", {"path": "ok.txt", "extra": 1})
    with pytest.raises(ValidationError):
        call(env, "fs.search", {"pattern": "("})
    with pytest.raises(ValidationError):
        FsGrant.model_validate({"write": ["/etc/**"]})
    with pytest.raises(ValidationError):
        FsGrant.model_validate({"root": ".", "bogus": True})


# -- A1-A4: paths that leave the jail -----------------------------------------------------


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("../../etc/passwd", "fs.outside-root"),  # A1
        ("../secret", "fs.outside-root"),  # A1
        ("..", "fs.outside-root"),
        ("/etc/passwd", "fs.absolute-path"),  # A2
        ("sub/../../secret", "fs.outside-root"),  # A3
        ("../J2/x", "fs.outside-root"),  # A4: shares J's prefix
    ],
)
@pytest.mark.parametrize("action", ["fs.read", "fs.write", "fs.append", "fs.delete"])
def test_paths_outside_root_are_denied(env: Env, path: str, rule: str, action: str) -> None:
    params: dict[str, Any] = {"path": path}
    if action in ("fs.write", "fs.append"):
        params["content"] = "pwned"
    denied(env, rule, action, params, write=True)


def test_absolute_path_to_secret_is_not_joined_onto_root(env: Env) -> None:  # A2
    (env.j / str(env.secret).lstrip("/")).parent.mkdir(parents=True)
    (env.j / str(env.secret).lstrip("/")).write_text("inside copy")
    denied(env, "fs.absolute-path", "fs.read", {"path": str(env.secret)})


@pytest.mark.parametrize("action", ["fs.list", "fs.search"])
def test_list_and_search_outside_root_denied(env: Env, action: str) -> None:
    params: dict[str, Any] = {"path": "../J2"}
    if action == "fs.search":
        params["pattern"] = "."
    denied(env, "fs.outside-root", action, params)
    params["path"] = str(env.j2)
    denied(env, "fs.absolute-path", action, params)


def test_dotdot_that_stays_inside_is_allowed(env: Env) -> None:  # A3
    assert call(env, "fs.read", {"path": "sub/../ok.txt"}).content == "hello\n"
    assert call(env, "fs.read", {"path": "./sub/./inner.txt"}).size == 23


# -- A5-A9: symlinks and hard links ---------------------------------------------------------


def test_symlinked_files_are_denied(env: Env, resolver: str) -> None:  # A5
    (env.j / "link").symlink_to("../secret")
    (env.j / "abs").symlink_to("/etc/passwd")
    (env.j / "inlink").symlink_to("ok.txt")  # even a link staying inside is refused
    for name in ("link", "abs", "inlink"):
        denied(env, "fs.symlink", "fs.read", {"path": name})


def test_hard_link_is_denied(env: Env, resolver: str) -> None:  # A6
    os.link(env.secret, env.j / "h")
    denied(env, "fs.hardlink", "fs.read", {"path": "h"})
    denied(env, "fs.hardlink", "fs.write", {"path": "h", "content": "pwned"}, write=True)
    denied(env, "fs.hardlink", "fs.append", {"path": "h", "content": "pwned"}, write=True)
    found = call(env, "fs.search", {"pattern": "SECRET"})
    assert found.matches == []
    # Unlinking the name inside the jail is harmless: the outside file keeps its data.
    assert call(env, "fs.delete", {"path": "h"}, write=True).deleted
    assert env.secret.read_bytes() == SECRET


def test_directory_symlink_is_denied(env: Env, resolver: str) -> None:  # A7
    (env.j / "dirlink").symlink_to(env.tmp / "outdir")
    denied(env, "fs.symlink", "fs.read", {"path": "dirlink/secret"})
    denied(env, "fs.symlink", "fs.list", {"path": "dirlink"})
    denied(env, "fs.symlink", "fs.search", {"pattern": ".", "path": "dirlink"})
    params = {"path": "dirlink/new.txt", "content": "pwned"}
    denied(env, "fs.symlink", "fs.write", params, write=True)
    denied(env, "fs.symlink", "fs.append", params, write=True)
    denied(env, "fs.symlink", "fs.delete", {"path": "dirlink/secret"}, write=True)
    denied(env, "fs.symlink", "fs.write", {"path": "dirlink/x/y", "content": "p"}, write=True)


def test_write_through_symlink_is_denied(env: Env, resolver: str) -> None:  # A8
    (env.j / "link").symlink_to(env.secret)
    params = {"path": "link", "content": "pwned"}
    denied(env, "fs.symlink", "fs.write", params, write=True)
    denied(env, "fs.symlink", "fs.append", params, write=True)
    denied(env, "fs.symlink", "fs.delete", {"path": "link"}, write=True)
    assert env.secret.read_bytes() == SECRET
    assert (env.j / "link").is_symlink()


def test_write_to_dangling_symlink_creates_nothing(env: Env, resolver: str) -> None:  # A9
    evil = env.tmp / "evil"
    (env.j / "new").symlink_to(evil)
    params = {"path": "new", "content": "pwned"}
    denied(env, "fs.symlink", "fs.write", params, write=True)
    denied(env, "fs.symlink", "fs.append", params, write=True)
    denied(env, "fs.symlink", "fs.read", {"path": "new"})
    assert not evil.exists()


def test_symlinks_are_reported_not_followed_by_list_and_search(env: Env) -> None:
    (env.j / "link").symlink_to(env.secret)
    (env.j / "dirlink").symlink_to(env.tmp / "outdir")
    listed = call(env, "fs.list", {"recursive": True})
    kinds = {e.path: e.type for e in listed.entries}
    assert kinds["link"] == kinds["dirlink"] == "symlink"
    assert not any(p.startswith("dirlink/") for p in kinds)
    assert call(env, "fs.search", {"pattern": "SECRET"}).matches == []


# -- A10: a folder swapped for a symlink while reading ------------------------------------


def test_toggle_race_never_returns_outside_content(env: Env, resolver: str) -> None:
    real, link = env.j / "d_real", env.j / "d_link"
    real.mkdir()
    (real / "f").write_text("inside")
    (env.tmp / "outdir" / "f").write_bytes(SECRET)
    link.symlink_to(env.tmp / "outdir")
    target = env.j / "d"
    stop = threading.Event()

    def toggle() -> None:
        for _ in range(200_000):  # bounded even if the reads below hang
            if stop.is_set():
                return
            os.rename(real, target)
            os.rename(target, real)
            os.rename(link, target)
            os.rename(target, link)

    async def hammer() -> tuple[set[str], int]:
        seen: set[str] = set()
        refusals = 0
        for i in range(1000):
            try:
                seen.add((await acall(env, "fs.read", {"path": "d/f"})).content)
            except (CapabilityDenied, StepFailed):
                refusals += 1
            if i % 5 == 0:
                try:
                    params = {"path": "d/w", "content": "x", "create_dirs": False}
                    await acall(env, "fs.write", params, write=True)
                except (CapabilityDenied, StepFailed):
                    pass
        return seen, refusals

    thread = threading.Thread(target=toggle, daemon=True)
    thread.start()
    try:
        seen, _ = asyncio.run(hammer())
    finally:
        stop.set()
        thread.join(timeout=10)
    assert seen <= {"inside"}
    assert (env.tmp / "outdir" / "f").read_bytes() == SECRET
    assert not (env.tmp / "outdir" / "w").exists()


# -- A11, A12: odd names ----------------------------------------------------------------------


@pytest.mark.parametrize("action", ["fs.read", "fs.write", "fs.list", "fs.delete"])
def test_nul_byte_is_denied(env: Env, action: str) -> None:  # A11
    params: dict[str, Any] = {"path": "ok.txt\x00../../etc/passwd"}
    if action == "fs.write":
        params["content"] = "x"
    denied(env, "fs.nul-byte", action, params, write=True)
    assert (env.j / "ok.txt").read_text() == "hello\n"


@pytest.mark.parametrize("path", ["．．／．．／etc/passwd", "‥/etc", "‥/‥/secret"])
def test_unicode_lookalikes_are_literal(env: Env, path: str) -> None:  # A12
    message = failed(env, "fs.read", {"path": path})
    assert "no such file" in message


def test_unicode_lookalike_names_are_used_literally(env: Env) -> None:  # A12
    call(env, "fs.write", {"path": "‥/f", "content": "literal"}, write=True)
    assert (env.j / "‥" / "f").read_text() == "literal"
    assert call(env, "fs.read", {"path": "‥/f"}).content == "literal"


# -- A13, A14: special and huge files -------------------------------------------------------


def _in_thread(fn: Any, timeout: float = 10) -> BaseException | None:
    """Run fn in a daemon thread, failing (not hanging) the test if it blocks."""
    box: list[BaseException | None] = [None]

    def target() -> None:
        try:
            fn()
        except BaseException as exc:  # handed back to the test thread to inspect
            box[0] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "the call hung"
    return box[0]


def test_fifo_is_refused_without_hanging(env: Env, resolver: str) -> None:  # A13
    os.mkfifo(env.j / "fifo")
    for action, params in [
        ("fs.read", {"path": "fifo"}),
        ("fs.write", {"path": "fifo", "content": "x"}),
        ("fs.append", {"path": "fifo", "content": "x"}),
        ("fs.delete", {"path": "fifo"}),
    ]:
        exc = _in_thread(lambda a=action, p=params: call(env, a, p, write=True))
        assert isinstance(exc, CapabilityDenied), exc
        assert exc.rule == "fs.not-regular"
    assert (env.j / "fifo").exists()
    assert _in_thread(lambda: call(env, "fs.search", {"pattern": "x"})) is None


@pytest.mark.parametrize("target", ["/proc/self/environ", "/dev/zero"])
def test_links_to_special_files_are_denied(env: Env, target: str) -> None:  # A13
    (env.j / "f").symlink_to(target)
    exc = _in_thread(lambda: call(env, "fs.read", {"path": "f"}))
    assert isinstance(exc, CapabilityDenied)
    assert exc.rule == "fs.symlink"


def test_sparse_10gb_file_read_is_capped(env: Env) -> None:  # A14
    with open(env.j / "huge", "wb") as f:
        f.truncate(10 * 2**30)
    result = call(env, "fs.read", {"path": "huge"}, max_read_bytes=4096)
    assert result.truncated is True
    assert result.size == 10 * 2**30
    assert len(result.content) == 4096
    # search skips it instead of reading 10 GB
    assert call(env, "fs.search", {"pattern": "x"}).truncated is False


# -- A15: loops and floods ------------------------------------------------------------------


def test_symlink_loop_terminates(env: Env, resolver: str) -> None:  # A15
    (env.j / "a").symlink_to(".")
    (env.j / "sub" / "up").symlink_to("..")
    listed = call(env, "fs.list", {"recursive": True})
    assert {e.path: e.type for e in listed.entries}["a"] == "symlink"
    assert len(listed.entries) == 5
    found = call(env, "fs.search", {"pattern": "needle"})
    assert [m.path for m in found.matches] == ["sub/inner.txt"]
    denied(env, "fs.symlink", "fs.read", {"path": "a/a/a/ok.txt"})


def test_many_files_hit_the_entry_cap(env: Env) -> None:  # A15
    flood = env.j / "flood"
    flood.mkdir()
    for i in range(10_050):
        (flood / f"f{i:05}").touch()
    listed = call(env, "fs.list", {"path": "flood"})
    assert (len(listed.entries), listed.truncated) == (10_000, True)
    assert call(env, "fs.search", {"pattern": "x", "path": "flood"}).truncated is True


def test_deep_nesting_hits_the_depth_cap(env: Env) -> None:  # A15
    deep = env.j.joinpath(*["n"] * 30)
    deep.mkdir(parents=True)
    (deep / "bottom.txt").write_text("needle")
    listed = call(env, "fs.list", {"path": "n", "recursive": True})
    assert listed.truncated is True
    assert max(e.path.count("/") for e in listed.entries) == 8
    found = call(env, "fs.search", {"pattern": "needle", "path": "n"})
    assert (found.matches, found.truncated) == ([], True)


# -- A16: protected paths inside the jail ---------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [".git/hooks/pre-commit", ".git/config", ".env", ".ENV", ".GIT/config", "sub/.Env.local"],
)
def test_protected_paths_are_refused_even_with_write_true(env: Env, path: str) -> None:  # A16
    (env.j / ".git").mkdir()
    (env.j / ".git" / "config").write_text("[core]\n")
    params = {"path": path, "content": "pwned"}
    message = denied(env, "fs.protected", "fs.write", params, write=True)
    assert "protected:" in message
    denied(env, "fs.protected", "fs.append", params, write=True)
    denied(env, "fs.protected", "fs.delete", {"path": path}, write=True)
    assert (env.j / ".git" / "config").read_text() == "[core]\n"
    assert not (env.j / ".git" / "hooks").exists()
    assert not (env.j / ".env").exists()


def test_protected_paths_can_be_granted_and_read(env: Env) -> None:  # A16
    call(env, "fs.write", {"path": ".env", "content": "A=1"}, write=True, protected=[".env"])
    assert call(env, "fs.read", {"path": ".env"}).content == "A=1"
    denied(env, "fs.read-not-granted", "fs.read", {"path": ".env"}, read=False)
    params = {"path": ".env.prod", "content": ""}
    denied(env, "fs.protected", "fs.write", params, write=True, protected=[".env"])


def test_missing_root_fails_operationally(env: Env) -> None:
    message = failed(env, "fs.read", {"path": "ok.txt"}, root="nowhere")
    assert "cannot open fs root" in message


def test_a_glob_with_an_unclosed_class_is_a_grant_error_not_a_literal() -> None:
    from pydantic import ValidationError

    from capabilities.fs import FsGrant, SearchParams

    with pytest.raises(ValidationError, match="never closed"):
        FsGrant(root=".", write=["notes/[abc"])
    with pytest.raises(ValidationError, match="never closed"):
        SearchParams(pattern="x", glob="src/[x")
