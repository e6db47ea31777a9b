"""The registry a command uses: capability families found through the
`planloom.capabilities` entry-point group (built-in and third-party alike), then
`--plugin` modules."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from engine.capability import Registry
from engine.errors import ConfigurationError

__all__ = ["GROUP", "build_registry"]

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
            module = importlib.import_module(name)
        except Exception as exc:  # ImportError, or anything the module raises on import
            raise ConfigurationError(
                f"{where}: cannot import it ({type(exc).__name__}: {exc})"
            ) from exc
        _register(registry, getattr(module, "register", None), where)
    return registry


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
