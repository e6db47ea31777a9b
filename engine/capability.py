"""What a capability is: families with grants, and the registry of their actions
(`engine.action`: typed params and results).

A *family* (`fs`, `shell`, ...) is what a recipe grants in its `capabilities:` block; its
grant model validates that block. An *action* (`fs.read`, `shell.run`) belongs to one family
and declares its params model, its result model and whether a call has side effects.
"""

from __future__ import annotations

import contextlib
import inspect
import typing
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model

from engine.action import Action, Asker, CallContext, EmptyGrant, ParamPath
from engine.diagnostics import did_you_mean
from engine.discovery import (
    Bound,
    Discovery,
    DiscoveryFailed,
    Listings,
    LiveListings,
    grant_key,
    run_blocking,
)
from engine.errors import UsageError

__all__ = [
    "Action",
    "Asker",
    "CallContext",
    "EmptyGrant",
    "Family",
    "ParamPath",
    "Registry",
    "ToolEntry",
]


RunScope = Callable[[BaseModel, Path], AbstractAsyncContextManager[Any]]
"""`scope(grant, base_dir)`: state a family keeps for one run, entered when the run starts
and left when it ends, whatever happens (the `mcp` family's server connections)."""


@dataclass(frozen=True)
class Family:
    """A group of actions granted together, e.g. `fs`.

    `confinement`, when given, reports the confinement layers this machine supports for
    the family's calls, layer → "active" or "unavailable: why" (`planloom tools`).
    `for_agents` is false for families that stand for the model or the person themselves
    (`llm`, `human`): a model is not handed their tools unless a recipe lists them.
    `discovery`, when given, finds the family's actions from its grant at validation time
    (`engine.discovery`); `scope` is per-run state its actions get as `CallContext.scope`.
    `max_parallel`, when given, bounds the family's calls running at once in one run (a
    resource that does not scale with steps: processes for `shell`); a recipe's
    `limits.per_family` overrides it. `portable` is false for families whose calls need
    this process (the person for `human`, the run's model client for `llm`, the run's
    server connections for `mcp`): a remote backend (`engine.backend`) never takes them.
    `facts`, when given, says in one line what a grant allows (the programs, the writable
    paths, the hosts), for a model planning with it: what it would otherwise learn only
    from a refusal.
    """

    name: str
    description: str
    grant_model: type[BaseModel] = EmptyGrant
    confinement: Callable[[], dict[str, str]] | None = None
    for_agents: bool = True
    discovery: Discovery | None = None
    scope: RunScope | None = None
    max_parallel: int | None = None
    portable: bool = True
    facts: Callable[[Any], str] | None = None


@dataclass(frozen=True)
class ToolEntry:
    """One action as catalogues show it (`planloom tools`, the planner's prompt, agents).

    `side_effects` is None when the action decides per call (e.g. HTTP GET vs POST).
    `details` are the action's `Action.details` (an MCP tool's server and name).
    """

    name: str
    family: str
    description: str
    side_effects: bool | None
    params: dict[str, Any]
    details: Mapping[str, Any] = field(default_factory=dict)
    output: dict[str, Any] | None = None
    """The JSON schema of what a call gives (`steps.X.output`), when the action says."""


@dataclass
class Registry:
    """The families and actions a run can use.

    `bind(grants, base_dir)` adds the actions that discovering families find for a plan's
    grants (see `engine.discovery`); `listings` says where their listings come from, and
    `withheld` names actions a grant leaves out, with why.
    """

    families: dict[str, Family] = field(default_factory=dict)
    actions: dict[str, Action[Any]] = field(default_factory=dict)
    listings: Listings = field(default_factory=LiveListings)
    withheld: dict[str, str] = field(default_factory=dict)
    _bound: dict[tuple[str, str, str], Bound] = field(default_factory=dict, repr=False)

    def add_family(self, family: Family) -> None:
        self.families[family.name] = family

    def add(self, action: Action[Any]) -> None:
        if action.family not in self.families:
            raise UsageError(
                f"action {action.name!r} belongs to unknown family {action.family!r}; "
                "register the family first with add_family()"
            )
        if action.name in self.actions:
            raise UsageError(f"action {action.name!r} is already registered")
        self.actions[action.name] = action

    def get(self, name: str) -> Action[Any] | None:
        return self.actions.get(name)

    @contextlib.contextmanager
    def keep_discovered(self) -> Iterator[None]:
        """While open, what discovering families start to list their actions (the `mcp`
        family: its servers) is kept for the run that follows, which takes it over instead
        of starting it again; what no run took is stopped when this closes. For code that
        validates and then runs, as the `planloom` command does (`Discovery.hold`)."""
        with contextlib.ExitStack() as holds:
            for family in self.families.values():
                if family.discovery is not None and family.discovery.hold is not None:
                    holds.enter_context(family.discovery.hold())
            yield

    def with_listings(self, listings: Listings) -> Registry:
        """This registry with listings from `listings` (a cassette's), nothing bound yet."""
        return Registry(dict(self.families), dict(self.actions), listings)

    def bind(self, grants: Mapping[str, Any], base_dir: Path) -> Registry:
        """This registry plus the actions the granted families discover for `grants`.

        Raises:
            DiscoveryFailed: a family could not list what its grant names.
        """
        bound, failures = self.bind_all(grants, base_dir)
        if failures:
            raise failures[0]
        return bound

    def bind_all(
        self, grants: Mapping[str, Any], base_dir: Path
    ) -> tuple[Registry, list[DiscoveryFailed]]:
        """`bind`, going on past families that fail: the registry and the failures.

        Grants that do not validate are left out (validation reports them).
        """
        wanted: dict[tuple[str, str, str], tuple[Family, BaseModel]] = {}
        for name, family, grant in self._valid_grants(grants):
            if family.discovery is not None:
                wanted[(name, grant_key(grant), str(base_dir))] = (family, grant)
        if not wanted:
            return self, []
        missing = {key: value for key, value in wanted.items() if key not in self._bound}
        partial: dict[tuple[str, str, str], Bound] = {}
        failures = run_blocking(self._discover(missing, base_dir, partial)) if missing else []
        bound = Registry(
            self.families, dict(self.actions), self.listings, dict(self.withheld), self._bound
        )
        for key in wanted:
            found = self._bound.get(key) or partial.get(key)
            if found is not None:
                bound.actions.update((action.name, action) for action in found.actions)
                bound.withheld.update(found.withheld)
        return bound, failures

    async def _discover(
        self,
        wanted: dict[tuple[str, str, str], tuple[Family, BaseModel]],
        base_dir: Path,
        partial: dict[tuple[str, str, str], Bound],
    ) -> list[DiscoveryFailed]:
        """List and bind what `wanted` names; what only partly failed goes to `partial`
        (not cached: the next bind asks again)."""

        # asyncio is imported where it is used: `planloom validate` imports this module
        # without running it, and asyncio (with ssl, which loads OpenSSL) is much of its start-up.
        import asyncio

        async def one(
            key: tuple[str, str, str], family: Family, grant: BaseModel
        ) -> list[DiscoveryFailed]:
            discovery = family.discovery
            assert discovery is not None

            def live() -> Awaitable[dict[str, Any]]:
                return discovery.listing(grant, base_dir)

            try:
                listing = await self.listings.listing(family.name, key[1], live)
            except DiscoveryFailed as failure:
                if failure.partial is None:
                    return [failure]
                listing, failures = failure.partial, [failure]
            else:
                failures = []
            try:
                bound = discovery.bind(grant, base_dir, listing)
            except DiscoveryFailed as failure:
                return [*failures, failure]
            if failures:
                partial[key] = bound
            else:
                self._bound[key] = bound
            return failures

        found = await asyncio.gather(
            *(one(key, family, grant) for key, (family, grant) in wanted.items())
        )
        return [failure for failures in found for failure in failures]

    def catalogue(self, granted: Iterable[str] | None = None) -> list[ToolEntry]:
        """The actions (of the `granted` families, or all), by name, with params schemas."""
        families = set(self.families if granted is None else granted)
        return [
            ToolEntry(
                name,
                action.family,
                action.description,
                action.side_effects if isinstance(action.side_effects, bool) else None,
                action.params_model.model_json_schema(),
                action.details,
                None if action.result_model is None else action.result_model.model_json_schema(),
            )
            for name, action in sorted(self.actions.items())
            if action.family in families
        ]

    def agent_tools(self, granted: Iterable[str]) -> list[str]:
        """The granted actions a model may be handed without a recipe naming them: not
        those of families that stand for the model or the person (`Family.for_agents`)."""
        families = set(granted)
        return sorted(
            name
            for name, action in self.actions.items()
            if action.family in families and self.families[action.family].for_agents
        )

    def grant_facts(self, grants: Mapping[str, Any]) -> list[str]:
        """What each grant allows, a line a family (`Family.facts`); grants that do not
        validate say nothing (validation reports them)."""
        return [
            f"{name}: {family.facts(grant)}"
            for name, family, grant in self._valid_grants(dict(sorted(grants.items())))
            if family.facts is not None
        ]

    def _valid_grants(self, grants: Mapping[str, Any]) -> Iterator[tuple[str, Family, BaseModel]]:
        """Each grant of a known family, validated; the others left out (validation reports
        them)."""
        for name, raw in grants.items():
            family = self.families.get(name)
            if family is None:
                continue
            try:
                grant = family.grant_model.model_validate(raw or {})
            except ValueError:
                continue
            yield name, family, grant

    def suggest(self, name: str) -> str | None:
        return did_you_mean(name, self.actions)

    def function(
        self,
        name: str,
        *,
        side_effects: bool = True,
        description: str | None = None,
        blocking: bool = True,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a plain Python function as an action, its params taken from its signature.

        The family (the part before the dot) is created if needed, with an empty grant, so a
        recipe turns it on with `capabilities: {family: {}}`. Side effects are assumed unless
        declared otherwise, so such calls are gated by default.

        `async def` functions run on the event loop. Synchronous functions run in a worker
        thread, so they cannot stall other steps and the step's timeout still ends the step
        (the thread itself cannot be killed and finishes in the background); pass
        `blocking=False` for a quick, non-blocking function to run it inline instead.

        Example:
            ```python
            @registry.function("team.lookup", side_effects=False)
            def lookup(user: str) -> dict[str, str]: ...
            ```
        """
        import asyncio

        if "." not in name:
            raise UsageError(f"capability name {name!r} must be 'family.action'")

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            family = name.split(".", 1)[0]
            if family not in self.families:
                self.add_family(Family(family, f"user functions ({fn.__module__})"))
            params_model = _params_model_from_signature(name, fn)
            is_async = inspect.iscoroutinefunction(fn)

            async def run(params: BaseModel, ctx: CallContext) -> Any:
                kwargs = params.__dict__  # (the fields, by name: the model allows no extra)
                if is_async:
                    return await fn(**kwargs)
                if blocking:
                    return await asyncio.to_thread(fn, **kwargs)
                return fn(**kwargs)

            doc = description or (inspect.getdoc(fn) or name).splitlines()[0]
            inline = not is_async and not blocking
            self.add(
                Action(
                    name,
                    doc,
                    params_model,
                    run,
                    side_effects=side_effects,
                    interruptible=not inline,
                )
            )
            return fn

        return register


def _params_model_from_signature(name: str, fn: Callable[..., Any]) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    hints = typing.get_type_hints(fn)
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise UsageError(f"capability {name!r}: *args/**kwargs cannot be described")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    model_name = "".join(part.title() for part in name.replace("_", ".").split(".")) + "Params"
    model: type[BaseModel] = create_model(
        model_name, __config__=ConfigDict(extra="forbid"), **fields
    )
    return model
