"""What the planner says to the model: a system prompt small models can use, and repair
messages that point at the step to fix.

The prompt is compact: a tool is one line (`fs.write(path, content, create_dirs?: boolean)
-> path, bytes_written: Write a file, replacing it.`), its params' full schemas going as
the structured-output schema instead (`planners._plan_schema`), where a server that honours
it turns them into a grammar. It says what the grants allow (`Registry.grant_facts`: the
programs, the writable paths, the hosts), which a model would otherwise learn only from a
refusal, what each tool gives (its output fields, read by `${{ steps.ID.output.FIELD }}`),
and shows one example plan made of granted tools.

A repair message is the problems as short lines naming the step (`step 2 (id "save"):
unknown tool 'fs.wirte'; did you mean 'fs.write'?`), not the plan as YAML and the problems
as JSON: a small model copied those objects into its steps.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from engine.capability import Registry, ToolEntry
from engine.diagnostics import Diagnostic

__all__ = ["example", "problem_lines", "system_prompt", "tool_line"]

SYSTEM = """You are the planner of planloom. Write a plan that reaches the goal using ONLY the
tools below. Answer with one JSON object and nothing else: {{"steps": [...]}}.
A step is {{"id": ..., "tool": ..., "params": {{...}}}}, or {{"id": ..., "agent": {{"goal": ...,
"tools": [...]}}}} for an open-ended sub-task. Optional step fields: depends_on, when, can_fail,
retry, timeout, for_each. id: letters, digits and _, unique.
Read an earlier step's result with "${{{{ steps.ID.output.FIELD }}}}" (the step then waits
for ID). Steps that do not need each other run in parallel. Keep the plan short.

Tools (params, ? = optional; -> output fields):
{tools}
{facts}
Templates take Jinja filters: "${{{{ steps.ID.output.FIELD | upper }}}}", | lower, | join(", ").

Example goal: {goal}
Its plan: {example}
(an example only: a plan uses its own goal's paths and text)"""


def system_prompt(registry: Registry, grants: dict[str, Any], *, compact: bool = False) -> str:
    """The planner's system prompt for `grants` in `registry` (bound to them); `compact`:
    each tool its name and params only, for a context window the whole prompt overflows."""
    entries = registry.catalogue(grants)
    facts = registry.grant_facts(grants)
    goal, steps = example(entries, grants)
    return SYSTEM.format(
        tools="\n".join(tool_line(entry, compact=compact) for entry in entries) or "(none granted)",
        facts=("Granted:\n" + "\n".join(facts) + "\n") if facts else "",
        goal=goal,
        example=json.dumps({"steps": steps}),
    )


def tool_line(entry: ToolEntry, *, compact: bool = False) -> str:
    """`name(param, opt?: integer) -> field, field: description` (side effects said);
    `compact`: `name(param, opt?: integer)`."""
    schema = entry.params
    required = set(schema.get("required") or [])
    params = [
        f"{name}{'' if name in required else '?'}{_type(prop)}"
        for name, prop in (schema.get("properties") or {}).items()
    ]
    if compact:
        return f"{entry.name}({', '.join(params)})"
    output = entry.output or {}
    fields = list((output.get("properties") or {}).keys())
    gives = f" -> {', '.join(fields)}" if fields else " -> text" if output else ""
    effects = {True: " [changes things]", None: " [may change things]"}.get(entry.side_effects, "")
    description = entry.description.split("\n", 1)[0].strip()
    return f"{entry.name}({', '.join(params)}){gives}{effects}: {description}"


def _type(schema: Any) -> str:
    """`: integer`, `: a|b`, nothing for text (the common case)."""
    if not isinstance(schema, dict):
        return ""
    if isinstance(schema.get("enum"), list):
        return ": " + "|".join(str(value) for value in schema["enum"])
    kinds = [schema.get("type")] + [
        choice.get("type") for choice in schema.get("anyOf") or [] if isinstance(choice, dict)
    ]
    named = [k for k in kinds if isinstance(k, str) and k not in ("string", "null")]
    return f": {named[0]}" if named else ""


EXAMPLE_IN = "example/in.txt"
"""The example's paths: ones no goal names, so a plan copying them is seen as copied."""
EXAMPLE_OUT = "example-out.txt"


def example(entries: Sequence[ToolEntry], grants: dict[str, Any]) -> tuple[str, list[Any]]:
    """An example goal and its plan's steps, of two granted tools: one that reads, then one
    that uses what it read (a write when one is granted)."""
    reads = [e for e in entries if e.side_effects is False and _required(e)]
    # A write that replaces rather than appends, when there is one: what goals mostly ask.
    writes = sorted(
        (e for e in entries if e.side_effects is not False and _required(e)),
        key=lambda e: "write" not in e.name,
    )
    first = reads[0] if reads else (writes[0] if writes else None)
    if first is None:
        return "", []
    params = _values(first, grants, None)
    steps: list[Any] = [{"id": "first", "tool": first.name, "params": params}]
    goal = f"{_verb(first)} ({_shown(params)})"
    second = next((e for e in writes if e is not first), None)
    if second is not None:
        fields = list(((first.output or {}).get("properties") or {}).keys())
        source = f"${{{{ steps.first.output.{fields[0]} }}}}" if fields else None
        params = _values(second, grants, source)
        steps.append({"id": "second", "tool": second.name, "params": params})
        gives = fields[0] if fields else "result"
        goal += f", then {_verb(second)} ({_shown(params)}) with its {gives}"
    return goal, steps


def _verb(entry: ToolEntry) -> str:
    """`read a text file` from "Read a text file."."""
    sentence = entry.description.split("\n", 1)[0].strip().rstrip(".")
    return sentence[:1].lower() + sentence[1:]


def _shown(params: dict[str, Any]) -> str:
    """The example's own values (not the template) as the goal would name them."""
    return " ".join(
        " ".join(map(str, value)) if isinstance(value, list) else str(value)
        for value in params.values()
        if not (isinstance(value, str) and value.startswith("${{"))
    )


def _required(entry: ToolEntry) -> list[str]:
    return list(entry.params.get("required") or [])


def _values(entry: ToolEntry, grants: dict[str, Any], source: str | None) -> dict[str, Any]:
    """Example values for `entry`'s required params: `source` (a template) in the first
    text param after a path, a path the grant lets it write."""
    values: dict[str, Any] = {}
    props = entry.params.get("properties") or {}
    for name in _required(entry):
        kind = _type(props.get(name))
        if name == "path":
            values[name] = _path(grants, writes=entry.side_effects is not False)
        elif name == "argv":
            programs = (grants.get("shell") or {}).get("allow") or ["echo"]
            values[name] = [programs[0], EXAMPLE_IN]
        elif name == "url":
            hosts = (grants.get("http") or {}).get("allow") or ["example.com"]
            values[name] = f"https://{str(hosts[0]).lstrip('*.')}/"
        elif source is not None and not kind:
            values[name], source = source, None
        else:
            values[name] = {": integer": 1, ": number": 1, ": boolean": True}.get(kind, "example")
    return values


def _path(grants: dict[str, Any], *, writes: bool) -> str:
    """EXAMPLE_IN, or for a write, EXAMPLE_OUT in the first folder the grant lets it write."""
    if not writes:
        return EXAMPLE_IN
    allowed = (grants.get("fs") or {}).get("write")
    if isinstance(allowed, list) and allowed:
        folder = str(allowed[0]).split("*", 1)[0].rstrip("/")
        return f"{folder}/{EXAMPLE_OUT}" if folder else EXAMPLE_OUT
    return "example/out.txt"


def problem_lines(
    diagnostics: Sequence[Diagnostic], text: str | None, granted: Sequence[str] = ()
) -> str:
    """The problems, a line each, named by the step they are in (`text`: the plan as the
    YAML recipe they were found in), with their rule: `- step 2 (id "b"): unknown tool
    'fs.wirte' (unknown-tool); did you mean 'fs.write'?`. A tool not granted is told the
    `granted` ones (a model cannot grant itself one)."""
    starts, end = _step_starts(text)
    lines = []
    for diagnostic in diagnostics:
        where = "the plan"
        for index, (line, step_id) in enumerate(starts):
            if line <= diagnostic.line < end:
                where = f"step {index + 1}" + (f" (id {json.dumps(step_id)})" if step_id else "")
        hint = diagnostic.hint
        if diagnostic.rule == "not-granted":
            hint = f"the granted tools are {', '.join(granted) or 'none'}"
        more = f"; {hint}" if hint else ""
        lines.append(f"- {where}: {diagnostic.message} ({diagnostic.rule}){more}")
    return "\n".join(lines)


def _step_starts(text: str | None) -> tuple[list[tuple[int, str | None]], float]:
    """The 1-based line each step of `steps` starts on, with its id, and the line its
    section ends before (`outputs` follows it); none when `text` does not read (the answer
    was not a plan)."""
    none: tuple[list[tuple[int, str | None]], float] = ([], 0)
    if text is None:
        return none
    try:
        data = YAML(typ="rt").load(text)
    except YAMLError:
        return none
    steps: Any = data.get("steps") if hasattr(data, "get") else None
    if steps is None or not hasattr(steps, "lc"):
        return none
    starts = []
    for index, step in enumerate(steps):
        step_id = step.get("id") if hasattr(step, "get") else None
        line = steps.lc.item(index)[0] + 1
        starts.append((line, step_id if isinstance(step_id, str) else None))
    end = data.lc.key("outputs")[0] + 1 if "outputs" in data else float("inf")
    return starts, end
