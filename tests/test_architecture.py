"""The layers point one way (PRODUCT.md, "Architecture: arrows point one way").

The core (`engine/`, less the composition root) imports neither `capabilities` nor
`planners`; `capabilities` and `planners` import only the core and their own package, never
the composition root. Every import statement counts, at module level or inside a function
(a lazy import is still an arrow).
"""

from __future__ import annotations

import ast
from pathlib import Path

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
