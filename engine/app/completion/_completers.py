"""Which values each argument of the command line completes to.

Files where a file is expected (recipes, cassettes, policies and `--capabilities` files as
YAML, plugins as Python), run ids where a run id is (`resume` offers only the runs it can
resume), the run's step ids for `resume --redo/--skip`, a recipe's inputs for `-i` (and
their `enum` values after `KEY=`); nothing for free text (a goal, a model's name).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from argcomplete.completers import BaseCompleter

from engine.app.completion._files import paths
from engine.app.completion._recipes import Recipe, read_recipe
from engine.app.completion._runs import run_ids, run_recipe, store_of

__all__ = ["Completer", "attach", "nothing"]

Completer = Callable[..., Iterable[str] | Mapping[str, str]]
"""argcomplete's completer: called with `prefix` (the word so far), `parsed_args` (the line
before it), `action` and `parser`; the candidates, or a mapping of them to descriptions."""

_YAML = (".yaml", ".yml")
_READ = (*_YAML, ".json")  # a recipe, policy or capabilities file: YAML, or JSON


def attach(parser: argparse.ArgumentParser) -> None:
    """Give each argument of `parser` and of its commands' parsers its completer (the
    attribute argcomplete reads); the others complete to `nothing`."""
    arguments = [("", action) for action in parser._actions]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            commands: dict[str, argparse.ArgumentParser] = action.choices
            arguments += [(name, a) for name, command in commands.items() for a in command._actions]
    for command, action in arguments:
        completer = _completer(command, action.dest)
        if completer is not None:
            # argcomplete reads this attribute; argparse declares no such field
            action.completer = _quiet(completer)  # type: ignore[attr-defined]


class _Nothing(BaseCompleter):
    """What free text completes to (a goal, a model's name, a number): nothing."""

    def __call__(self, **_: Any) -> tuple[str, ...]:
        return ()


nothing = _Nothing()


def _completer(command: str, dest: str) -> Completer | None:
    if dest == "run_id":
        return _runs(resumable=command == "resume")
    if dest == "input":
        return {"run": _recipe_inputs, "resume": _run_inputs}.get(command, _no_inputs)
    if dest == "output":
        return _yaml if command == "plan" else _any_file
    return _BY_DEST.get(dest)


def _quiet(completer: Completer) -> Completer:
    """`completer`, completing nothing where it fails: whatever a TAB reads (a recipe being
    written, a store locked or damaged, a folder gone) is no reason to print a traceback
    into the person's command line."""

    def complete(**kwargs: Any) -> Iterable[str] | Mapping[str, str]:
        try:
            found = completer(**kwargs)
            return dict(found) if isinstance(found, Mapping) else list(found)
        except Exception:  # see above: any failure completes nothing
            return ()

    return complete


def _no_inputs(**_: Any) -> tuple[str, ...]:
    return ()  # `plan` runs a goal: it has no recipe whose inputs to offer


def _yaml(prefix: str, **_: Any) -> list[str]:
    return paths(prefix, _YAML)


def _recipes(prefix: str, **_: Any) -> list[str]:
    return paths(prefix, _READ)


def _python(prefix: str, **_: Any) -> list[str]:
    return paths(prefix, (".py",))


def _any_file(prefix: str, **_: Any) -> list[str]:
    return paths(prefix)


def _runs(*, resumable: bool) -> Completer:
    def complete(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> dict[str, str]:
        return run_ids(store_of(getattr(parsed_args, "store", None)), prefix, resumable=resumable)

    return complete


def _the_run(parsed_args: argparse.Namespace) -> Recipe:
    """The steps and inputs of the run named before the cursor (none if none is)."""
    run_id = getattr(parsed_args, "run_id", None)
    if not isinstance(run_id, str):
        return Recipe()
    return run_recipe(store_of(getattr(parsed_args, "store", None)), run_id)


def _run_steps(parsed_args: argparse.Namespace, **_: Any) -> dict[str, str]:
    return _the_run(parsed_args).steps


def _recipe_inputs(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> dict[str, str]:
    recipe = getattr(parsed_args, "recipe", None)
    return _inputs(prefix, read_recipe(Path(recipe)) if isinstance(recipe, str) else Recipe())


def _run_inputs(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> dict[str, str]:
    return _inputs(prefix, _the_run(parsed_args))


def _inputs(prefix: str, recipe: Recipe) -> dict[str, str]:
    """`KEY=` for each input; after `KEY=`, `KEY=VALUE` for each value it takes."""
    key, given, _ = prefix.partition("=")
    if not given:
        return {f"{name}=": spec.description for name, spec in recipe.inputs.items()}
    spec = recipe.inputs.get(key)
    return {f"{key}={value}": "" for value in spec.values} if spec is not None else {}


def _executors(**_: Any) -> dict[str, str]:
    return {
        "local": "tool calls in this process (the default)",
        "dask-local": "a local Dask cluster (dask-local:N for N workers)",
        "dask://": "a Dask cluster's scheduler: dask://HOST:PORT",
    }


_BY_DEST: dict[str, Completer] = {
    "recipe": _recipes,
    "cassette": _yaml,
    "record": _yaml,
    "replay": _yaml,
    "capabilities": _recipes,
    "policy": _recipes,
    "log_file": _any_file,
    "store": _any_file,
    "plugin": _python,
    "plugin_after": _python,
    "redo": _run_steps,
    "skip": _run_steps,
    "executor": _executors,
}
"""Completers by the argument's name, in every command that has it."""
