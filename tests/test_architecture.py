"""The layers point one way (ARCHITECTURE.md).

The core (`engine/`, less the composition root) imports neither `capabilities` nor
`planners`; `capabilities` and `planners` import only the core and their own package, never
the composition root. A private module (`engine.yaml._tree`) is imported only from inside
the package it belongs to, and no modules import each other round a circle. Modules are
small (none over 450 lines, the median at most 150) and a folder holds at most 25. Every import
statement counts, at module level, inside a function or under `TYPE_CHECKING` (a lazy
import is still an arrow).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
# The composition root: the only modules that know all three packages.
COMPOSITION_ROOT = frozenset({"engine.app", "engine.testing", "engine.pytest_plugin"})
PACKAGES = ("engine", "capabilities", "planners")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(package: str) -> list[tuple[str, Path]]:
    return sorted((_module_name(p), p) for p in (ROOT / package).rglob("*.py"))


def imports_of(path: Path) -> set[str]:
    """Every absolute module an import statement in `path` names, anywhere in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _core_violations() -> list[str]:
    bad = []
    for name, path in _modules("engine"):
        if any(_in(name, root) for root in COMPOSITION_ROOT):
            continue
        for target in sorted(imports_of(path)):
            if _in(target, "capabilities") or _in(target, "planners"):
                bad.append(f"{name} imports {target}")
    return bad


def _plugin_violations(package: str) -> list[str]:
    bad = []
    for name, path in _modules(package):
        for target in sorted(imports_of(path)):
            if any(_in(target, root) for root in COMPOSITION_ROOT):
                bad.append(f"{name} imports the composition root ({target})")
            other = "planners" if package == "capabilities" else "capabilities"
            if _in(target, other):
                bad.append(f"{name} imports {target}")
    return bad


def test_the_core_imports_neither_capabilities_nor_planners() -> None:
    assert _core_violations() == []


@pytest.mark.parametrize("package", ["capabilities", "planners"])
def test_plugins_import_only_the_core(package: str) -> None:
    assert _plugin_violations(package) == []


def test_the_checker_sees_lazy_imports(tmp_path: Path) -> None:
    # The rule is only as good as its parser: an import inside a function counts.
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os\n"
        "def f():\n"
        "    from capabilities import shell\n"
        "    import planners.recipe\n"
        "from . import sibling\n"
    )
    found = imports_of(sample)
    assert {"capabilities", "capabilities.shell", "planners.recipe", "os"} <= found
    assert not any(name.startswith(".") or name == "sibling" for name in found)


def test_every_package_is_checked() -> None:
    for package in PACKAGES:
        assert len(_modules(package)) >= 3, package


# -- private modules and circles -------------------------------------------------------------


def _graph() -> tuple[nx.DiGraph, dict[str, str]]:
    """Module -> module, for every import in the three packages (`from pkg import sub`
    points at `pkg.sub` when that is a module, else at `pkg`); and each module's package."""
    modules = {name: path for package in PACKAGES for name, path in _modules(package)}
    graph = nx.DiGraph()
    packages: dict[str, str] = {}
    for name, path in modules.items():
        graph.add_node(name)
        packages[name] = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for target in _targets(path, modules):
            if target != name:
                graph.add_edge(name, target)
    return graph, packages


def _targets(path: Path, modules: dict[str, Path]) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(_nearest(alias.name, modules) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                whole = f"{node.module}.{alias.name}"
                found.add(whole if whole in modules else _nearest(node.module, modules))
    found.discard("")
    return found


def _nearest(name: str, modules: dict[str, Path]) -> str:
    """The module `name` is, or the package it is inside of ("" when outside ours)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def private_imports(graph: nx.DiGraph, packages: dict[str, str]) -> list[str]:
    """Imports of a `_private` module from outside the package that holds it."""
    bad = []
    for source, target in graph.edges:
        parts = target.split(".")
        for i, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__"):
                owner = ".".join(parts[:i])
                if not _in(packages[source], owner):
                    bad.append(f"{source} imports {target}, private to {owner}")
                break
    return sorted(bad)


def test_no_module_imports_another_packages_private_module() -> None:
    assert private_imports(*_graph()) == []


def test_no_modules_import_each_other_round_a_circle() -> None:
    graph, _ = _graph()
    circles = [sorted(group) for group in nx.strongly_connected_components(graph) if len(group) > 1]
    assert circles == []


def test_the_graph_sees_private_imports_and_circles(tmp_path: Path) -> None:
    # The checks are only as good as the graph: a circle through a lazy import and a
    # private module imported from a sibling package are both found.
    graph = nx.DiGraph([("engine.a", "engine.b"), ("engine.b", "engine.a")])
    graph.add_edge("capabilities.fs", "engine._regex")
    graph.add_edge("engine.templating", "engine._regex")
    graph.add_edge("engine.app.main", "engine._regex")  # inside the package `engine`: fine
    graph.add_edge("engine.validation", "engine.templating._budget")
    packages = {name: name.rpartition(".")[0] for name in graph.nodes}
    assert private_imports(graph, packages) == [
        "capabilities.fs imports engine._regex, private to engine",
        "engine.validation imports engine.templating._budget, private to engine.templating",
    ]
    assert [sorted(g) for g in nx.strongly_connected_components(graph) if len(g) > 1] == [
        ["engine.a", "engine.b"]
    ]
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from engine.session import Session\n"
        "def f():\n"
        "    from engine import yaml\n"
    )
    modules = {"engine.session": sample, "engine.yaml": sample, "engine": sample}
    assert _targets(sample, modules) == {"engine.session", "engine.yaml"}


# -- sizes ---------------------------------------------------------------------------------

MAX_LINES = 450
MAX_MEDIAN = 150
MAX_PER_FOLDER = 25


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def oversized(modules: list[tuple[str, Path]], root: Path = ROOT) -> tuple[list[str], list[str]]:
    """The modules over `MAX_LINES`, and the folders holding more than `MAX_PER_FOLDER`."""
    big = [f"{name}: {_lines(path)} lines" for name, path in modules if _lines(path) > MAX_LINES]
    folders: dict[Path, int] = {}
    for _, path in modules:
        folders[path.parent] = folders.get(path.parent, 0) + 1
    crowded = [
        f"{folder.relative_to(root)}: {count} modules"
        for folder, count in sorted(folders.items())
        if count > MAX_PER_FOLDER
    ]
    return big, crowded


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_are_small_and_folders_hold_few(package: str) -> None:
    assert oversized(_modules(package)) == ([], [])


def test_the_median_module_is_small() -> None:
    sizes = sorted(_lines(path) for package in PACKAGES for _, path in _modules(package))
    middle = len(sizes) // 2
    median = sizes[middle] if len(sizes) % 2 else (sizes[middle - 1] + sizes[middle]) / 2
    assert median <= MAX_MEDIAN


def test_the_size_check_sees_a_large_module_and_a_crowded_folder(tmp_path: Path) -> None:
    folder = tmp_path / "pkg"
    folder.mkdir()
    modules = []
    for i in range(MAX_PER_FOLDER + 1):
        path = folder / f"m{i}.py"
        path.write_text("x = 1\n" * (MAX_LINES + 1 if i == 0 else 3))
        modules.append((f"pkg.m{i}", path))
    big, crowded = oversized(modules, tmp_path)
    assert big == [f"pkg.m0: {MAX_LINES + 1} lines"]
    assert crowded == [f"pkg: {MAX_PER_FOLDER + 1} modules"]
