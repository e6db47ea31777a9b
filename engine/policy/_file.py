"""Reading and checking a policy file: every problem located, with a hint."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.diagnostics import Diagnostic, NodePath, SourceMap, did_you_mean, render_diagnostics
from engine.errors import ConfigurationError, RecipeSyntaxError
from engine.globs import compile_glob
from engine.policy._rules import Policy, PolicyRule

if TYPE_CHECKING:
    from engine.capability import Registry

__all__ = ["load_policy", "parse_policy_text"]

_TOP_KEYS = ("version", "default", "rules")
_RULE_KEYS = ("tool", "params", "decision", "reason")
_VERDICTS = ("allow", "ask", "deny")
_DEFAULTS = ("deny", "ask")
_GLOB_CHARS = frozenset("*?[")


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
    from engine.yaml import read_recipe

    try:
        data, source = read_recipe(path)
    except RecipeSyntaxError as exc:
        raise _unreadable(exc) from exc
    return _checked(data, source, registry)


def parse_policy_text(
    text: str, file: str = "<policy>", *, registry: Registry | None = None
) -> Policy:
    """Like `load_policy`, for policy text already in memory."""
    from engine.yaml import parse_recipe_text

    try:
        data, source = parse_recipe_text(text, file)
    except RecipeSyntaxError as exc:
        raise _unreadable(exc) from exc
    return _checked(data, source, registry)


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
