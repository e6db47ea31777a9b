"""The `mcp` grant: the servers a recipe names, how each is reached, and which tools it allows.

A server is a stdio program (`command`, run confined like `shell.run`) or a streamable-HTTP
endpoint (`url`); its `tools` globs are the only tools a recipe or a model may call.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    WithJsonSchema,
    create_model,
    field_validator,
)

from capabilities.net import canonical_host, literal_address, parse_url

__all__ = [
    "FAMILY",
    "MAX_NESTING",
    "HttpServer",
    "McpGrant",
    "McpResult",
    "Server",
    "StdioServer",
    "is_loopback_host",
    "nesting",
    "result_model",
]

FAMILY = "mcp"
SERVER_NAME = r"^[a-z0-9][a-z0-9_-]*$"
MAX_NESTING = 64
"""Deepest a tool's schema or result may nest: a cassette holding it stays within the
100 levels every YAML file planloom reads is held to."""


class ToolRules(BaseModel):
    """What a grant says of some of a server's tools, over what the server says of them."""

    model_config = ConfigDict(extra="forbid")

    read_only: bool | None = Field(
        None,
        description="false: the tools have side effects (gated under `confirm: auto`), "
        "whatever the server's readOnlyHint says.",
    )
    confirm: Literal["always"] | None = Field(
        None,
        description="always: every call is confirmed, chosen by a step or by an agent, "
        "whatever a step's `confirm` says.",
    )

    @field_validator("read_only")
    @classmethod
    def _only_more_gates(cls, value: bool | None) -> bool | None:
        if value is True:
            raise ValueError(
                "a grant can say a tool has side effects (read_only: false), not that it has "
                "none: only the server's own readOnlyHint makes a tool read-only"
            )
        return value


class _Server(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tools: list[str] = Field(
        min_length=1,
        description="Tool-name globs (`search`, `list_*`, `*`); the only tools that may be "
        "called. Required: a server's tools are not granted by default.",
    )
    tool_rules: dict[str, ToolRules] = Field(
        default_factory=dict,
        description="Tool-name glob → what the grant says of those tools over the server's "
        "annotations: `{read_only: false}` (they have side effects), `{confirm: always}`.",
    )
    startup_timeout: float = Field(
        20.0, gt=0, le=600, description="Seconds to start (or reach) the server and list tools."
    )


class StdioServer(_Server):
    """A server run as a confined program that speaks MCP on its stdin and stdout."""

    kind: Literal["stdio"] = Field(
        "stdio", exclude=True, description="Known from `command`: need not be written."
    )
    command: list[str] = Field(
        min_length=1,
        description="argv, no shell. The program is a name looked up in planloom's own bin "
        "folder and then /usr/local/bin:/usr/bin:/bin, or a path relative to the recipe folder.",
    )
    cwd: str = Field(
        ".", description="The server's folder, relative to the recipe's; its only writable one."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Variables added to its scrubbed environment."
    )
    network: bool = Field(False, description="Whether the server may use the network.")
    read_paths: list[str] = Field(
        default_factory=list,
        description="More folders it may read, relative to the recipe folder.",
    )
    protected: list[str] = Field(
        default_factory=list,
        description="Protected entries under cwd (.git, .env*) it may write, as globs.",
    )
    max_memory: int = Field(
        default=2 << 30,
        ge=64 << 20,
        description="Bytes of memory the server's processes may use together (a memory "
        "cgroup; each process's address space where there is none).",
    )
    max_file_size: int = Field(
        default=1 << 30, ge=0, description="Largest file, in bytes, the server may write."
    )
    max_processes: int = Field(
        default=256, ge=2, description="Processes the server may have at once."
    )

    @field_validator("command")
    @classmethod
    def _no_empty_program(cls, command: list[str]) -> list[str]:
        if not command[0].strip() or any("\0" in arg for arg in command):
            raise ValueError("the program (command[0]) is empty or an argument holds a NUL")
        return command


class HttpServer(_Server):
    """A server reached over streamable HTTP; plain http only on loopback."""

    kind: Literal["http"] = Field(
        "http", exclude=True, description="Known from `url`: need not be written."
    )
    url: str = Field(description="The MCP endpoint; https, or http on 127.0.0.1/::1/localhost.")
    headers_from_env: dict[str, str] = Field(
        default_factory=dict,
        description="Header name → environment variable holding its value (a secret).",
    )

    @field_validator("url")
    @classmethod
    def _checked_url(cls, text: str) -> str:
        try:
            url = parse_url(text)
        except ValueError as exc:
            raise ValueError(f"invalid URL: {exc}") from None
        if url.userinfo:
            raise ValueError("credentials in the URL are refused; use headers_from_env")
        host = url.raw_host.decode("ascii")
        if url.scheme == "http" and not is_loopback_host(host):
            raise ValueError(
                "plain http is allowed only on loopback (127.0.0.1, ::1, localhost); "
                "use https for any other host"
            )
        if url.scheme not in ("http", "https"):
            raise ValueError(f"scheme {url.scheme!r} is not allowed; use https")
        return text

    @field_validator("headers_from_env")
    @classmethod
    def _declared_secret(cls, headers: dict[str, str]) -> dict[str, str]:
        # here, not at the top: loading the family (every command does) needs no redaction
        from engine.redaction import declare_secret_env_names

        declare_secret_env_names(headers.values())
        return headers


def _kind(value: Any) -> str | None:
    if isinstance(value, BaseModel):
        return getattr(value, "kind", None)
    if not isinstance(value, dict):
        return None
    has_command, has_url = "command" in value, "url" in value
    if has_command == has_url:
        return None
    return "stdio" if has_command else "http"


Server = Annotated[
    Annotated[StdioServer, Tag("stdio")] | Annotated[HttpServer, Tag("http")],
    Discriminator(
        _kind,
        custom_error_type="mcp_server_kind",
        custom_error_message="a server has exactly one of 'command' (a stdio program) or "
        "'url' (a streamable-HTTP endpoint)",
    ),
]


class McpGrant(BaseModel):
    """`capabilities: mcp: {servers: {NAME: {...}}}`."""

    model_config = ConfigDict(extra="forbid")

    servers: dict[Annotated[str, Field(pattern=SERVER_NAME, max_length=64)], Server] = Field(
        min_length=1,
        description="The servers, by name (their tools are `mcp.NAME.TOOL`): each a `command` "
        "(a stdio program) or a `url` (streamable HTTP).",
    )


class McpResult(BaseModel):
    """A tool call's result: its content blocks, its structured output, whether it failed."""

    content: list[dict[str, Any]]
    structured: dict[str, Any] | None = None
    is_error: bool = False


def is_loopback_host(host: str) -> bool:
    """Whether a URL's host names this machine: `localhost`, or a loopback address."""
    try:
        name = canonical_host(host)
    except ValueError:
        return False
    address = literal_address(name.strip("[]"))
    return name == "localhost" or (address is not None and address.is_loopback)


def nesting(value: Any) -> int:
    """How deep lists and mappings nest in `value` (0 for a scalar), counted without
    recursion, and no further than `MAX_NESTING + 1`."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth > MAX_NESTING:
                return depth
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def result_model(output_schema: dict[str, Any] | None) -> type[McpResult]:
    """The result model of a tool: `McpResult`, its `structured` part described by the
    tool's `outputSchema` when it has one (validation checks references against it)."""
    if not output_schema:
        return McpResult
    structured = Annotated[dict[str, Any] | None, WithJsonSchema(output_schema)]
    model: type[McpResult] = create_model(
        "McpToolResult", __base__=McpResult, structured=(structured, None)
    )
    return model
