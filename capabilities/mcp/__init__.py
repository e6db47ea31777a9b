"""The `mcp` family: the tools of MCP servers, as actions `mcp.<server>.<tool>`.

A recipe grants servers (`capabilities: mcp: {servers: {...}}`, see `_models`). When it
is validated, each server is started (or reached) and asked `tools/list`: the tools its
`tools` globs allow become actions, with params checked against their `inputSchema`
(`_schema`); the others are withheld, and naming one is refused as not granted. A tool
marked `readOnlyHint: true` is read-only; any other has side effects, so `confirm: auto`
gates it, and `destructiveHint: true` is said in the gate. `idempotentHint: true` makes it
idempotent: a resumed run makes such a call again when it was in flight at a crash.

During a run the family's scope (`_servers.Servers`) connects to a server on its first
call and stops it, with its whole process tree, when the run ends; under a hold
(`Registry.keep_discovered`, which the `planloom` command holds) the server its listing
started is kept for the run instead of being started again (`_home`). Stdio servers run
confined as `shell.run` children are (namespaces, Landlock: writes only under the server's
`cwd`, no TCP unless `network: true`; pids cgroup, rlimits); HTTP servers pass the address
checks of `http.request`. A call's output is `{content, structured, is_error}`; a result
with `isError` fails the step. The listing is plain JSON, so a cassette records it and a
replay validates and runs without starting any server.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from capabilities.mcp._home import holding
from capabilities.mcp._models import (
    FAMILY,
    MAX_NESTING,
    HttpServer,
    McpGrant,
    McpResult,
    StdioServer,
    nesting,
    result_model,
)
from capabilities.shell import confinement_report
from engine.capability import Action, CallContext, Family, Registry
from engine.discovery import Bound, Discovery, DiscoveryFailed, Listing
from engine.errors import ConfigurationError, StepFailed
from engine.sanitize import cap, neutralize

if TYPE_CHECKING:
    from capabilities.mcp._schema import SchemaParams
    from capabilities.mcp._servers import Servers

__all__ = ["HttpServer", "McpGrant", "McpResult", "StdioServer", "register"]

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_MAX_TEXT = 1 << 20  # characters kept of one text block
_MAX_DESCRIPTION = 300


def register(registry: Registry) -> None:
    """Add the `mcp` family to `registry`; its actions come from each recipe's servers."""
    registry.add_family(
        Family(
            FAMILY,
            "tools of MCP servers (stdio programs, confined; streamable HTTP)",
            McpGrant,
            confinement_report,
            discovery=Discovery(_listing, _bind, hold=holding),
            scope=_scope,
            portable=False,  # calls go through this run's sessions with its servers
        )
    )


def _grant(grant: BaseModel) -> McpGrant:
    if isinstance(grant, McpGrant):
        return grant
    return McpGrant.model_validate(grant.model_dump())


# The SDK is imported where a server is first needed (`_servers`): importing it costs
# half a second, which every command (`validate` of a recipe without MCP, `schema`) would
# otherwise pay.


def _scope(grant: BaseModel, base_dir: Path) -> Servers:
    from capabilities.mcp._servers import Servers

    return Servers(_grant(grant), base_dir)


async def _listing(grant: BaseModel, base_dir: Path) -> Listing:
    """Every granted server's tools, listed at once; each server that fails is a problem."""
    # Imported here, not at the top: the registry loads this family for every command, and
    # httpx2 (under _http) and asyncio (with ssl, which loads OpenSSL) are needed only once a
    # recipe's servers are asked.
    import asyncio

    from capabilities.mcp._http import MissingVariable
    from capabilities.mcp._servers import list_tools

    servers = _grant(grant).servers
    found = await asyncio.gather(
        *(list_tools(name, spec, base_dir) for name, spec in servers.items()),
        return_exceptions=True,
    )
    listing: dict[str, Any] = {}
    problems: list[tuple[tuple[str | int, ...], str, str]] = []
    for (name, spec), tools in zip(servers.items(), found, strict=True):
        if isinstance(tools, MissingVariable):
            problems.append((("servers", name, "headers_from_env"), str(tools), ""))
        elif isinstance(tools, ConfigurationError):
            hint = getattr(tools, "hint", None) or _start_hint(spec)
            problems.append((("servers", name), str(tools), hint))
        elif isinstance(tools, BaseException):
            raise tools
        else:
            listing[name] = {"tools": tools}
    if problems:
        failed = tuple(name for name in servers if name not in listing)
        raise DiscoveryFailed(
            FAMILY,
            problems,
            code="mcp-server",
            partial={"servers": listing, "unavailable": list(failed)},
            unavailable=tuple(f"{FAMILY}.{name}." for name in failed),
        )
    return {"servers": listing}


def _start_hint(spec: StdioServer | HttpServer) -> str:
    if isinstance(spec, StdioServer):
        return (
            "run the command by hand in its cwd to see it start; it must speak MCP on "
            "stdin/stdout (its stderr is shown above)"
        )
    return "check that the server is running and that the URL ends in its MCP path (e.g. /mcp)"


def _bind(grant: BaseModel, base_dir: Path, listing: Listing) -> Bound:
    """The allowed tools as actions; the rest withheld, with why."""
    servers = _grant(grant).servers
    actions: list[Action[Any]] = []
    withheld: dict[str, str] = {}
    problems: list[tuple[tuple[str | int, ...], str, str]] = []
    listed = listing.get("servers", {})
    failed = set(listing.get("unavailable", []))
    for server, spec in servers.items():
        if server in failed:
            continue  # it could not be listed (reported); its tools are unknown
        tools = listed.get(server, {}).get("tools")
        if not isinstance(tools, list):
            problems.append((("servers", server), f"no tool listing for MCP server '{server}'", ""))
            continue
        names = [
            name
            for tool in tools
            if isinstance(tool, dict) and _TOOL_NAME.match(name := str(tool.get("name")))
        ]
        patterns: list[tuple[tuple[str | int, ...], str]] = [
            (("tools", index), pattern) for index, pattern in enumerate(spec.tools)
        ]
        patterns += [(("tool_rules", pattern), pattern) for pattern in spec.tool_rules]
        for where, pattern in patterns:
            if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
                problems.append(
                    (
                        ("servers", server, *where),
                        f"'{pattern}' matches none of the tools of MCP server '{server}'",
                        f"it has: {', '.join(sorted(names)) or '(no tools)'}",
                    )
                )
        for tool in tools:
            _add_tool(server, spec, tool, actions, withheld)
    if problems:
        raise DiscoveryFailed(FAMILY, problems, code="bad-grant")
    return Bound(_distinct_for_models(actions, withheld), withheld)


def _distinct_for_models(actions: list[Action[Any]], withheld: dict[str, str]) -> list[Action[Any]]:
    """The actions whose function names for models (`mcp.a.b` → `mcp__a__b`) are unique;
    the others are withheld, all of each clashing group, since no name says which one."""
    from engine.agent import tool_name_for  # agents' names: not what loading the family needs

    by_function: dict[str, list[str]] = {}
    for action in actions:
        by_function.setdefault(tool_name_for(action.name), []).append(action.name)
    clashing = {name for names in by_function.values() if len(names) > 1 for name in names}
    for function, names in by_function.items():
        for name in names if len(names) > 1 else ():
            others = ", ".join(n for n in names if n != name)
            withheld[name] = (
                f"'{name}' cannot be used: a model would call it {function}, as it would "
                f"call {others}; rename the tool on its server"
            )
    return [action for action in actions if action.name not in clashing]


def _add_tool(
    server: str,
    spec: StdioServer | HttpServer,
    tool: dict[str, Any],
    actions: list[Action[Any]],
    withheld: dict[str, str],
) -> None:
    tool_name = str(tool.get("name", ""))
    name = f"{FAMILY}.{server}.{tool_name}"
    if not _TOOL_NAME.match(tool_name):
        return  # a name no recipe could write, nor a model be offered
    globs = spec.tools
    if not any(fnmatch.fnmatchcase(tool_name, pattern) for pattern in globs):
        withheld[name] = (
            f"'{name}' is a tool of MCP server '{server}' that its grant does not allow "
            f"(tools: {', '.join(globs)})"
        )
        return
    if tool.get("unusable"):
        withheld[name] = f"'{name}' cannot be used: {tool['unusable']}"
        return
    # Imported here, not at the top: jsonschema is needed only for a server's tools.
    from capabilities.mcp._schema import params_model

    try:
        model = params_model(name, dict(tool.get("input_schema") or {"type": "object"}))
    except ValueError as exc:
        withheld[name] = f"'{name}' cannot be used: {exc}"
        return
    rules = [r for pattern, r in spec.tool_rules.items() if fnmatch.fnmatchcase(tool_name, pattern)]
    # The grant overrules the server: never towards fewer gates (see `ToolRules`).
    read_only = tool.get("read_only") is True and not any(r.read_only is False for r in rules)
    confirm_always = any(r.confirm == "always" for r in rules)
    output = tool.get("output_schema")
    destructive = tool.get("destructive") is True
    idempotent = tool.get("idempotent") is True
    notes = ["the server marks this tool destructive"] if destructive else []
    if confirm_always:
        notes.append("its grant asks to confirm every call")
    actions.append(
        Action(
            name,
            _description(tool),
            model,
            functools.partial(_call, server, tool_name, read_only or idempotent),
            result_model=result_model(output if isinstance(output, dict) else None),
            side_effects=not read_only,
            idempotent=idempotent,
            gate_note="; ".join(notes) or None,
            confirm_always=confirm_always,
            details={
                "server": server,
                "tool": tool_name,
                "read_only": read_only,
                "destructive": destructive,
                "idempotent": idempotent,
                "confirm_always": confirm_always,
            },
        )
    )


def _description(tool: dict[str, Any]) -> str:
    text = str(tool.get("description") or tool.get("title") or tool.get("name"))
    line = neutralize(" ".join(text.split()))
    return line if len(line) <= _MAX_DESCRIPTION else line[: _MAX_DESCRIPTION - 1] + "…"


async def _call(
    server: str, tool: str, again: bool, params: SchemaParams, ctx: CallContext
) -> McpResult:
    """Call one tool; a result with `isError` fails the step. `again`: the call may be made
    twice (read-only or idempotent), so a server breaking off during it is no failure of its
    own: it is made once more on the server started again.

    Raises:
        StepFailed: the tool reported an error, or the server could not start or broke off.
    """
    from capabilities.mcp._servers import Servers

    servers = ctx.scope
    if not isinstance(servers, Servers):
        raise StepFailed(
            f"{FAMILY}.{server}.{tool}: MCP tools run within a run (Executor or Session), "
            "which connects to the servers",
            step_id=ctx.step_id,
        )
    answer = await servers.call(server, tool, params.arguments(), again=again)
    content = [
        _block(block.model_dump(mode="json", by_alias=True, exclude_none=True))
        for block in answer.content
    ]
    if nesting(answer.structured_content) > MAX_NESTING or any(
        nesting(block) > MAX_NESTING for block in content
    ):
        raise StepFailed(
            f"{FAMILY}.{server}.{tool}: the result nests deeper than {MAX_NESTING} levels",
            step_id=ctx.step_id,
        )
    result = McpResult(
        content=content,
        structured=answer.structured_content,
        is_error=bool(answer.is_error),
    )
    if result.is_error:
        text = "\n".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
        tail = servers.stderr_tail(server)
        stderr = "" if tail is None else f"\nlast lines of its stderr:\n{tail}"
        raise StepFailed(
            f"{FAMILY}.{server}.{tool}: the tool reported an error: "
            f"{text.strip() or '(no message)'}{stderr}",
            step_id=ctx.step_id,
        )
    return result


def _block(block: dict[str, Any]) -> dict[str, Any]:
    text = block.get("text")
    if isinstance(text, str) and len(text) > _MAX_TEXT:
        block["text"], _ = cap(text, _MAX_TEXT)
    return block
