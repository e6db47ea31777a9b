"""Policy rules, and how a rule matches a gated call (the patterns: see `engine.policy`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from engine.globs import compile_glob

__all__ = ["ParamPattern", "Policy", "PolicyRule", "Scalar", "Verdict"]

Verdict = Literal["allow", "ask", "deny"]
Scalar = str | int | float | bool | None
ParamPattern = Scalar | list[Scalar]


class PolicyRule(BaseModel):
    """One rule: which calls it matches and what it decides."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str = Field(min_length=1, description="A glob over action names: `fs.*`, `*`.")
    params: dict[str, ParamPattern] = Field(default_factory=dict)
    decision: Verdict
    reason: str | None = None
    _where: str = PrivateAttr(default="")

    def matches(self, action: str, params: Any) -> bool:
        """Whether this rule applies to a call of `action` with `params`."""
        if not compile_glob(self.tool).fullmatch(action):
            return False
        if not self.params:
            return True
        if not isinstance(params, Mapping):
            return False
        # Loose for allow, strict for ask/deny: see "dot segments" in `engine.policy`.
        every = self.decision == "allow"
        return all(
            name in params and _matches(pattern, params[name], every=every)
            for name, pattern in self.params.items()
        )

    def label(self, number: int) -> str:
        """`policy rule 2 (tool pattern 'fs.*', policy.yaml:7)`."""
        where = f", {self._where}" if self._where else ""
        return f"policy rule {number} (tool pattern {self.tool!r}{where})"


class Policy(BaseModel):
    """An ordered list of rules and what to do when none matches."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    default: Literal["deny", "ask"] = "deny"
    rules: list[PolicyRule] = Field(default_factory=list)
    _origin: str = PrivateAttr(default="the policy file")

    @property
    def origin(self) -> str:
        """The file the policy was loaded from (for messages)."""
        return self._origin

    def match(self, action: str, params: Any) -> tuple[int, PolicyRule] | None:
        """The first rule that matches, with its 1-based number; None if none does."""
        for number, rule in enumerate(self.rules, start=1):
            if rule.matches(action, params):
                return number, rule
        return None


def _matches(pattern: ParamPattern, value: Any, *, every: bool) -> bool:
    if isinstance(pattern, list):
        if not isinstance(value, list | tuple) or len(value) < len(pattern):
            return False
        return all(_matches(p, v, every=every) for p, v in zip(pattern, value, strict=False))
    if isinstance(pattern, str):
        if not isinstance(value, str):
            return False
        regex = compile_glob(pattern)
        forms = _forms(value)
        test = all if every else any
        return test(regex.fullmatch(form) is not None for form in forms)
    if isinstance(pattern, bool) or isinstance(value, bool):
        return type(pattern) is type(value) and pattern == value
    if pattern is None:
        return value is None
    return isinstance(value, int | float) and value == pattern


def _forms(value: str) -> tuple[str, ...]:
    """The value as written and, when it has dot segments, without them."""
    parts = value.split("/")
    if "." not in parts and ".." not in parts:
        return (value,)
    kept: list[str] = []
    for part in parts:
        if part == ".":
            continue
        if part == ".." and kept and kept[-1] not in ("", ".."):
            kept.pop()
            continue
        kept.append(part)
    return (value, "/".join(kept))
