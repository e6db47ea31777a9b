"""A policy file (`--policy FILE`): ordered allow / ask / deny rules for gated calls.

```yaml
version: 1
default: deny            # deny | ask: what happens when no rule matches (default: deny)
rules:                   # ordered; the first rule that matches decides
  - {tool: fs.read, decision: allow}
  - {tool: "fs.*", params: {path: "notes/**"}, decision: allow, reason: notes are ours}
  - {tool: shell.run, params: {argv: ["git", "*"]}, decision: ask}
  - {tool: http.request, params: {method: GET}, decision: allow}
  - {tool: "*", decision: deny, reason: not on the list}
```

A rule matches a call when its `tool` glob matches the action name and every one of its
`params` patterns matches the call's param of that name:

- globs: `*` and `?` match within one `/`-separated segment, `**` spans segments, `[abc]`
  and `[!abc]` are character classes; there are no backslash escapes (write `[*]` for a
  literal `*`). Action names hold no `/`, so `fs.*` and `*` match across dots.
- a string pattern is a glob over a string param; it never matches a non-string value.
- a list pattern matches a list param element-wise as a prefix: `["git", "*"]` matches
  `argv` with at least two items whose first is exactly `git` and whose second is one
  segment (`*` stops at `/`; write `**` to allow paths). Further items are not looked at.
- any other scalar (number, bool, null) matches a value equal to it (`true` is not `1`).
- a param the call does not have never matches.

Dot segments cannot walk a value out of a pattern: a string with `.` or `..` segments
(`notes/../secret.txt`) is also compared in its normalized form (`secret.txt`); an
`allow` rule must match both forms, an `ask` or `deny` rule matches if either does.

The policy sees the params the approver is shown, with secrets already redacted to
`[REDACTED]`: a pattern cannot match (or be written against) a secret's value.

Only gated calls reach the policy (side effects, or `confirm: always`); read-only calls
run without asking, so a rule about them has no effect under `confirm: auto`.

A decision's `by` names the rule that made it: `policy:N` (rule N, 1-based), `policy:default`
(no rule matched), `policy:N→terminal` (rule N asked the person, who decided),
`policy:N→fail-closed` (it asked, and nobody could answer).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from engine._globs import compile_glob
from engine.approval import Approver, GateRequest, _unattended
from engine.diagnostics import Diagnostic, NodePath, SourceMap, did_you_mean, render_diagnostics
from engine.errors import ConfigurationError, RecipeSyntaxError
from engine.results import Decision

if TYPE_CHECKING:
    from engine.capability import Registry
    from engine.questions import Question

__all__ = ["Policy", "PolicyApprover", "PolicyRule", "load_policy", "parse_policy_text"]

Verdict = Literal["allow", "ask", "deny"]
Scalar = str | int | float | bool | None
ParamPattern = Scalar | list[Scalar]

_TOP_KEYS = ("version", "default", "rules")
_RULE_KEYS = ("tool", "params", "decision", "reason")
_VERDICTS = ("allow", "ask", "deny")
_DEFAULTS = ("deny", "ask")
_GLOB_CHARS = frozenset("*?[")


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
        # Loose for allow, strict for ask/deny: see "dot segments" in the module docstring.
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


class PolicyApprover:
    """An `Approver` that decides gated calls by a `Policy`.

    Args:
        policy: the rules.
        ask: who decides the calls a rule (or the default) marks `ask`, and answers
            `human.ask` questions: a `TerminalApprover` in a terminal, `ApproveAll` for
            `--yes`. Without one, those calls are denied with a reason saying how to
            approve them, and questions get their default (or the step fails).
    """

    def __init__(self, policy: Policy, *, ask: Approver | None = None) -> None:
        self.policy = policy
        self.ask = ask

    async def decide(self, request: GateRequest) -> Decision:
        # A re-ask after the person's edit failed the schema is a conversation with them;
        # the policy checks whatever they finally approve (see `_ask`).
        if request.problem is not None:
            return await self._ask(request, "asked again after a refused edit", _RE_ASK)
        found = self.policy.match(request.action, request.params)
        if found is None:
            if self.policy.default == "deny":
                return _decision(
                    request,
                    False,
                    f"denied by policy: no rule in {self.policy.origin} matches "
                    f"{request.action} and the default is deny; add a rule for it",
                    _DEFAULT,
                )
            return await self._ask(request, f"no policy rule matches {request.action}", _DEFAULT)
        number, rule = found
        label, source = rule.label(number), _source(number)
        if rule.decision == "allow":
            return _decision(request, True, f"{label} allows" + _colon(rule.reason), source)
        if rule.decision == "deny":
            return _decision(request, False, f"denied by {label}" + _colon(rule.reason), source)
        return await self._ask(request, f"{label} asks" + _colon(rule.reason), source)

    async def answer(self, step_id: str, question: Question) -> Any:
        if self.ask is not None:
            return await self.ask.answer(step_id, question)
        return _unattended(question, "policy file, no terminal")

    def _refusal(self, action: str, params: Any) -> tuple[str, str] | None:
        """Why the policy denies outright a call with these params, and the source of
        that denial (`policy:N`); None if it does not."""
        found = self.policy.match(action, params)
        if found is None:
            if self.policy.default == "deny":
                why = f"matched by no rule in {self.policy.origin} and the default is deny"
                return why, _DEFAULT
            return None
        number, rule = found
        if rule.decision == "deny":
            return f"denied by {rule.label(number)}" + _colon(rule.reason), _source(number)
        return None

    async def _ask(self, request: GateRequest, why: str, source: str) -> Decision:
        if self.ask is None:
            return _decision(
                request,
                False,
                f"{why}; it needs a person and there is no terminal to ask: run in a "
                f"terminal to answer, pass --yes to approve what the policy asks about, or "
                f"change the rule in {self.policy.origin}",
                f"{source}→fail-closed",
            )
        decision = await self.ask.decide(request)
        # The person may edit the params before approving: an edit must not walk a call
        # into what a deny rule (or the deny default) forbids.
        edited = decision.edited_params
        if decision.approved and edited is not None:
            refusal = self._refusal(request.action, edited)
            if refusal is not None:
                text, denier = refusal
                return _decision(request, False, f"{why}; the edited params are {text}", denier)
        verdict = "approved" if decision.approved else "denied"
        return decision.model_copy(
            update={
                "by": f"{source}→{decision.by}",
                "reason": f"{why}; {verdict} by {decision.by}" + _colon(decision.reason),
            }
        )


def load_policy(path: str | Path, *, registry: Registry | None = None) -> Policy:
    """Read and check a policy file.

    Args:
        path: the YAML file.
        registry: when given, tool names and globs that name no registered action are
            reported (a typo in a deny rule would otherwise quietly never match).

    Raises:
        ConfigurationError: the file is unreadable or invalid; the message has one
            `FILE:LINE:COL: error[rule]: ...` line per problem, with the line and a hint.
    """
    from engine._yaml import read_recipe

    try:
        data, source = read_recipe(path)
    except RecipeSyntaxError as exc:
        raise _unreadable(exc) from exc
    return _checked(data, source, registry)


def parse_policy_text(
    text: str, file: str = "<policy>", *, registry: Registry | None = None
) -> Policy:
    """Like `load_policy`, for policy text already in memory."""
    from engine._yaml import parse_recipe_text

    try:
        data, source = parse_recipe_text(text, file)
    except RecipeSyntaxError as exc:
        raise _unreadable(exc) from exc
    return _checked(data, source, registry)


# -- loading ----------------------------------------------------------------------------------


def _unreadable(exc: RecipeSyntaxError) -> ConfigurationError:
    # The recipe reader speaks of recipes; this file is a policy.
    diags = [
        d.model_copy(update={"message": d.message.replace("recipe", "policy file")})
        for d in exc.diagnostics
    ]
    return ConfigurationError(render_diagnostics(diags, None))


def _checked(data: Any, source: SourceMap, registry: Registry | None) -> Policy:
    problems = list(source.problems)
    numbered: list[tuple[int, PolicyRule]] = []
    if not isinstance(data, dict):
        problems.append(
            source.at((), "policy-shape", "a policy file is a mapping", "start with 'version: 1'")
        )
    else:
        problems += _unknown_keys(data, (), _TOP_KEYS, source)
        if "version" not in data:
            problems.append(
                source.at((), "missing-version", "no 'version'", "add 'version: 1' at the top")
            )
        elif data["version"] != 1 or isinstance(data["version"], bool):
            problems.append(
                source.at(
                    ("version",),
                    "bad-version",
                    f"unsupported version {data['version']!r}",
                    "this planloom reads policy files with 'version: 1'",
                )
            )
        default = data.get("default", "deny")
        if default not in _DEFAULTS:
            hint = (
                "a default of allow would approve every tool nobody listed; "
                'end the rules with {tool: "*", decision: allow} if you mean it'
                if default == "allow"
                else "write 'default: deny' or 'default: ask'"
            )
            problems.append(
                source.at(
                    ("default",),
                    "bad-default",
                    f"default must be deny or ask, not {default!r}",
                    hint,
                )
            )
        raw_rules = data.get("rules", [])
        if not isinstance(raw_rules, list):
            problems.append(
                source.at(
                    ("rules",),
                    "bad-rules",
                    "'rules' must be a list",
                    "write each rule as '- {tool: ..., decision: ...}'",
                )
            )
        else:
            for index, raw in enumerate(raw_rules):
                rule, found = _rule(raw, ("rules", index), source, registry)
                problems += found
                if rule is not None:
                    problems += _unreachable(rule, index, numbered, source)
                    numbered.append((index + 1, rule))
    if problems:
        problems.sort(key=lambda d: (d.line, d.column))
        raise ConfigurationError(render_diagnostics(problems, source))
    policy = Policy(
        version=1, default=data.get("default", "deny"), rules=[rule for _, rule in numbered]
    )
    policy._origin = source.file
    return policy


def _rule(
    raw: Any, path: NodePath, source: SourceMap, registry: Registry | None
) -> tuple[PolicyRule | None, list[Diagnostic]]:
    number = int(path[-1]) + 1
    if not isinstance(raw, dict):
        hint = "write it as '- {tool: fs.read, decision: allow}'"
        return None, [source.at(path, "bad-rule", f"rule {number} must be a mapping", hint)]
    problems = _unknown_keys(raw, path, _RULE_KEYS, source)
    tool = raw.get("tool")
    if "tool" not in raw:
        problems.append(
            source.at(
                path,
                "missing-tool",
                f"rule {number} has no 'tool'",
                "add 'tool: NAME' (an action name or a glob such as 'fs.*' or '*')",
            )
        )
    elif not isinstance(tool, str) or not tool:
        problems.append(source.at((*path, "tool"), "bad-tool", "'tool' must be a non-empty string"))
    else:
        problems += _glob_problems(tool, (*path, "tool"), source)
        if registry is not None and not problems:
            problems += _unknown_tool(tool, (*path, "tool"), source, registry)
    decision = raw.get("decision")
    if "decision" not in raw:
        problems.append(
            source.at(
                path,
                "missing-decision",
                f"rule {number} has no 'decision'",
                "add 'decision: allow', 'decision: ask' or 'decision: deny'",
            )
        )
    elif decision not in _VERDICTS or not isinstance(decision, str):
        close = did_you_mean(str(decision), _VERDICTS)
        problems.append(
            source.at(
                (*path, "decision"),
                "bad-decision",
                f"decision must be allow, ask or deny, not {decision!r}",
                close or "write 'allow', 'ask' or 'deny'",
            )
        )
    reason = raw.get("reason")
    if reason is not None and not isinstance(reason, str):
        problems.append(source.at((*path, "reason"), "bad-reason", "'reason' must be text"))
    params = raw.get("params", {})
    if not isinstance(params, dict):
        problems.append(
            source.at(
                (*path, "params"),
                "bad-params",
                "'params' must map param names to patterns",
                'e.g. params: {path: "notes/**"}',
            )
        )
    else:
        for name, pattern in params.items():
            problems += _pattern_problems(pattern, (*path, "params", name), source)
    if problems:
        return None, problems
    rule = PolicyRule(tool=tool, params=params, decision=decision, reason=reason)
    line, _ = source.locate(path)
    rule._where = f"{source.file}:{line}"
    return rule, []


def _pattern_problems(pattern: Any, path: NodePath, source: SourceMap) -> list[Diagnostic]:
    if isinstance(pattern, str):
        return _glob_problems(pattern, path, source)
    if isinstance(pattern, list):
        if not pattern:
            return [
                source.at(
                    path,
                    "bad-pattern",
                    "an empty list pattern would match every list",
                    'list the leading items to match, e.g. ["git", "*"]',
                )
            ]
        problems: list[Diagnostic] = []
        for index, item in enumerate(pattern):
            if isinstance(item, dict | list):
                problems.append(
                    source.at(
                        (*path, index),
                        "bad-pattern",
                        "items of a list pattern are globs or plain values, not collections",
                    )
                )
            elif isinstance(item, str):
                problems += _glob_problems(item, (*path, index), source)
        return problems
    if isinstance(pattern, dict):
        return [
            source.at(
                path,
                "bad-pattern",
                "a param pattern is a glob, a list or a plain value",
                "nested params cannot be matched; match a top-level param",
            )
        ]
    return []


def _glob_problems(pattern: str, path: NodePath, source: SourceMap) -> list[Diagnostic]:
    try:
        compile_glob(pattern)
    except ValueError as exc:
        return [source.at(path, "bad-glob", f"bad glob {pattern!r}: {exc}", _GLOB_HINT)]
    return []


_GLOB_HINT = "globs use * ? ** and [abc]; write [[] for a literal '[' and [*] for '*'"


def _unknown_tool(
    tool: str, path: NodePath, source: SourceMap, registry: Registry
) -> list[Diagnostic]:
    if _GLOB_CHARS.isdisjoint(tool):
        if registry.get(tool) is None:
            return [
                source.at(path, "unknown-tool", f"no action named {tool!r}", registry.suggest(tool))
            ]
        return []
    if not any(compile_glob(tool).fullmatch(name) for name in registry.actions):
        return [source.at(path, "unknown-tool", f"{tool!r} matches no known action")]
    return []


def _unreachable(
    rule: PolicyRule, index: int, earlier: list[tuple[int, PolicyRule]], source: SourceMap
) -> list[Diagnostic]:
    """A rule that an earlier, param-less rule always matches first is a mistake."""
    literal = _GLOB_CHARS.isdisjoint(rule.tool)
    for number, before in earlier:
        if before.params:
            continue
        # Sound only for a catch-all or a literal later tool: glob-vs-glob is not checked.
        if before.tool.strip("*") == "" or (
            literal and compile_glob(before.tool).fullmatch(rule.tool)
        ):
            return [
                source.at(
                    ("rules", index),
                    "unreachable-rule",
                    f"rule {index + 1} can never match: rule {number} (tool {before.tool!r}, "
                    "no params) matches its calls first",
                    "move the more specific rule above the general one",
                )
            ]
    return []


def _unknown_keys(
    data: dict[str, Any], path: NodePath, allowed: Sequence[str], source: SourceMap
) -> list[Diagnostic]:
    where = "a rule" if path else "a policy file"
    return [
        source.at(
            (*path, key),
            "unknown-key",
            f"unknown key {key!r} in {where}",
            did_you_mean(key, allowed) or f"allowed keys: {', '.join(allowed)}",
            key=True,
        )
        for key in data
        if key not in allowed
    ]


# -- matching ---------------------------------------------------------------------------------


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


def _colon(text: str | None) -> str:
    return f": {text}" if text else ""


_DEFAULT = "policy:default"
_RE_ASK = "policy:re-ask"  # the person's edit failed the schema: asked again


def _source(number: int) -> str:
    """The `by` of a decision made by rule `number`."""
    return f"policy:{number}"


def _decision(request: GateRequest, approved: bool, reason: str, source: str) -> Decision:
    return request.decision(approved, source, reason)
