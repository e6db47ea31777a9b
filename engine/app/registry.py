"""The registry a command uses: capability families found through the
`planloom.capabilities` entry-point group (built-in and third-party alike), then
`--plugin` modules (a module name, or a `.py` file's path)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

from engine.capability import Registry
from engine.errors import ConfigurationError

__all__ = ["GROUP", "build_registry", "load_plugin", "plugin_path"]

GROUP = "planloom.capabilities"
"""Each entry point names a `register(registry)` function that adds one family."""


def build_registry(plugins: Sequence[str] = ()) -> Registry:
    """Every installed family, then the `--plugin` modules' own.

    Raises:
        ConfigurationError: an entry point or plugin cannot be loaded or fails to register;
            the message names it and its package.
    """
    registry = Registry()
    for point in sorted(entry_points(group=GROUP), key=lambda p: p.name):
        where = f"capability family '{point.name}' ({_package(point)}: {point.value})"
        try:
            register = point.load()
        except Exception as exc:  # ImportError, or anything the module raises on import
            raise ConfigurationError(
                f"{where}: cannot load it ({type(exc).__name__}: {exc})"
            ) from exc
        _register(registry, register, where)
    if not registry.families:
        raise ConfigurationError(
            f"no capability families are installed (entry-point group {GROUP!r} is empty): "
            "install planloom with pip (pip install -e . in a checkout)"
        )
    for name in plugins:
        where = f"--plugin {name}"
        try:
            module = load_plugin(name)
        except ConfigurationError:
            raise
        except Exception as exc:  # ImportError, or anything the module raises on import
            raise ConfigurationError(
                f"{where}: cannot import it ({type(exc).__name__}: {exc})"
            ) from exc
        _register(registry, getattr(module, "register", None), where)
    return registry


def plugin_path(name: str) -> Path | None:
    """The file a `--plugin` value names, if it names one (`./tools.py`, `lib/tools.py`),
    made absolute; None for a module name (`team_tools.capability`)."""
    if name.endswith(".py") or "/" in name or os.sep in name:
        return Path(name).expanduser().resolve()
    return None


def load_plugin(name: str) -> ModuleType:
    """The module a `--plugin` value names: a `.py` file by its path, else a module on the
    import path, else `NAME.py` in the current folder (where `python -m` would look).

    Raises:
        ConfigurationError: a file that does not exist, or whose name is taken by another
            module already imported.
        Exception: whatever importing the module raises.
    """
    path = plugin_path(name)
    if path is None:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            here = Path.cwd() / f"{name}.py"
            if exc.name != name or "." in name or not here.is_file():
                raise
            path = here
    if not path.is_file():
        raise ConfigurationError(f"--plugin {name}: no such file: {path}")
    module_name = path.stem
    loaded = sys.modules.get(module_name)
    if loaded is not None:
        if Path(getattr(loaded, "__file__", "") or "").resolve() == path:
            return loaded
        raise ConfigurationError(
            f"--plugin {name}: a module named {module_name!r} is already imported "
            f"({getattr(loaded, '__file__', None) or 'built in'}); rename the file"
        )
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigurationError(f"--plugin {name}: {path} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _register(registry: Registry, register: Callable[..., Any] | Any, where: str) -> None:
    if not callable(register):
        raise ConfigurationError(f"{where}: the module has no register(registry) function")
    try:
        register(registry)
    except Exception as exc:  # a broken plugin is a configuration problem, not a crash
        raise ConfigurationError(
            f"{where}: register() failed: {type(exc).__name__}: {exc}"
        ) from exc


def _package(point: EntryPoint) -> str:
    dist = point.dist
    return f"{dist.name} {dist.version}" if dist is not None else "unknown package"
