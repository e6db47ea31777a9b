"""An action: one callable thing a family grants (`fs.read`), with typed params, what a
call is given besides them, and whether it changes the world.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

__all__ = ["Action", "Asker", "CallContext", "EmptyGrant", "ParamPath"]

P = TypeVar("P", bound=BaseModel)

Asker = Callable[[str, BaseModel], Awaitable[Any]]
"""`ask(step_id, question)`: the person's answer to a `human.ask` question."""

ParamPath = tuple[str | int, ...]
"""A path into a call's params: keys and list indexes, e.g. `("argv", 2)`."""


class EmptyGrant(BaseModel):
    """A grant with no settings: `name: {}` turns the family on."""

    model_config = ConfigDict(extra="forbid")


@dataclass(slots=True)
class CallContext:
    """What an action is given besides its params.

    Attributes:
        grant: the family's validated grant from the recipe.
        base_dir: the recipe file's folder; relative grant paths resolve against it.
        timeout: seconds this call may take; the sandbox also enforces it from outside.
        step_id: the calling step, for messages.
        ask: puts a typed question to the person (`human.ask`); None when nobody can answer.
        llm: the run's model client (`engine.llm.LLMClient`), when one is configured.
        data_paths: paths into the params (`("argv", 2)`) whose raw recipe text begins with
            a template (`"${{ item }}"`): their values are data (file names, outputs), not
            text the recipe's author wrote. A path covers everything beneath it (`("argv",)`
            when the whole list is one template). Empty for model-written calls.
        data_literals: the string literals the author wrote inside those templates (`'-l'`
            in `${{ ['wc', '-l'] + files }}`): a value under a data path that equals one of
            them is the author's text, not data.
        scope: what the family's `Family.scope` yielded for this run (the `mcp` family:
            its connections to the servers), or None.
        unrendered: the params are the recipe's, checked at validation (`Action.admit`):
            the values at `data_paths` are template text, known only at run time.
    """

    grant: BaseModel
    base_dir: Path
    timeout: float
    step_id: str | None = None
    ask: Asker | None = None
    llm: Any = None
    data_paths: frozenset[ParamPath] = frozenset()
    data_literals: frozenset[str] = frozenset()
    scope: Any = None
    unrendered: bool = False

    def templated(self, path: ParamPath) -> bool:
        """Whether the param at `path` came from a template (see `data_paths`)."""
        return any(path[: len(p)] == p for p in self.data_paths)


@dataclass(frozen=True)
class Action(Generic[P]):
    """One callable action, e.g. `fs.read`.

    Attributes:
        name: `family.action`.
        description: one line for `planloom tools` and LLM tool catalogues.
        params_model: validates the call's params (extra keys forbidden).
        result_model: the shape of the result, for documentation and schemas.
        run: the implementation; returns a JSON-able value or a pydantic model.
        side_effects: whether a call changes the world; a callable decides per call
            (e.g. HTTP GET vs POST).
        interruptible: whether the sandbox's timeout can stop a call (false for quick
            synchronous functions run inline, which cannot be interrupted).
        recorded: whether a cassette records the call's result. False for actions whose own
            inputs are recorded instead (a model's answers, a person's), so that on replay
            the action runs again over the replayed inputs.
        idempotent: making a call twice has the effect of making it once, so a resumed
            run may make again a call that was in flight when the run stopped (read-only
            actions are, whatever this says).
        gate_note: a line the confirmation gate shows besides "has side effects" (an MCP
            tool its server marks destructive).
        confirm_always: every call goes to the confirmation gate, whatever a step's
            `confirm` says and whoever chose the call (a step or an agent): a grant's
            `confirm: always` for an MCP tool.
        details: facts for catalogues (`planloom tools`), e.g. an MCP tool's server.
        admit: the grant's own rules for one call (the program is in `allow`, the path in
            the root), raising `CapabilityDenied`: the sandbox checks them before the
            confirmation gate, so nobody is asked about a call that would be refused, and
            validation checks them on a recipe's literal params (`CallContext.unrendered`).
            Quick and synchronous: no network. `run` must not rely on it (a backend's
            worker runs an action without the sandbox in front).
        param_docs: a description of each param, for editors (`planloom schema`), where
            the params model has none of its own. Kept out of the model's schema, which
            models are shown: a recorded run's requests stay the same.
        truncated_note: which limit cut an output that says `truncated: true`, and what to
            do about it, for the warning a person sees (`engine._support.truncation`).
    """

    name: str
    description: str
    params_model: type[P]
    run: Callable[[P, CallContext], Awaitable[Any]]
    result_model: type[BaseModel] | None = None
    side_effects: bool | Callable[[P], bool] = True
    interruptible: bool = True
    recorded: bool = True
    idempotent: bool = False
    gate_note: str | None = None
    confirm_always: bool = False
    details: Mapping[str, Any] = field(default_factory=dict)
    admit: Callable[[P, CallContext], None] | None = None
    param_docs: Mapping[str, str] = field(default_factory=dict)
    truncated_note: str | None = None
    family: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "family", self.name.split(".", 1)[0])

    def has_side_effects(self, params: P) -> bool:
        if callable(self.side_effects):
            return self.side_effects(params)
        return self.side_effects
