"""Reaching an MCP server over streamable HTTP: the address checks, and a client pinned to them.

The URL's host is resolved once and every address checked as `http.request` checks them: a
public address, or loopback when the URL itself names this machine (`127.0.0.1`, `::1`,
`localhost`). The HTTP client then connects only to that checked address, with the `Host`
header and TLS SNI still naming the host, and refuses any request for another origin, so
neither a second DNS answer nor a redirect can take the session elsewhere.
"""

from __future__ import annotations

import ipaddress
import os

import httpx2

from capabilities.mcp._models import HttpServer, is_loopback_host
from capabilities.net import (
    IPAddress,
    canonical_host,
    literal_address,
    not_public_reason,
    parse_url,
    system_resolver,
)
from engine.errors import ConfigurationError

__all__ = ["MissingVariable", "checked_client", "server_headers"]

_DEFAULT_PORTS = {"https": 443, "http": 80}


class MissingVariable(ConfigurationError):
    """A variable `headers_from_env` names is not set."""


def server_headers(spec: HttpServer, server: str) -> dict[str, str]:
    """The headers `headers_from_env` names, read from the environment.

    Raises:
        MissingVariable: a variable is not set.
    """
    headers: dict[str, str] = {}
    for header, variable in spec.headers_from_env.items():
        value = os.environ.get(variable)
        if value is None:
            raise MissingVariable(
                f"MCP server '{server}': header {header!r} reads ${variable}, which is not "
                f"set; export {variable}=... before the run"
            )
        headers[header] = value
    return headers


async def checked_client(spec: HttpServer, server: str, connect: float) -> httpx2.AsyncClient:
    """An HTTP client for the server's URL, pinned to its checked address.

    Raises:
        ConfigurationError: the host cannot be resolved or resolves to an address that is
            neither public nor (for a loopback URL) loopback.
    """
    url = parse_url(spec.url)
    host = canonical_host(url.raw_host.decode("ascii"))
    port = url.port if url.port is not None else _DEFAULT_PORTS[url.scheme]
    address = await _checked_address(host, port, server)
    transport = _Pinned(url.scheme, host, port, address)
    return httpx2.AsyncClient(
        transport=transport,
        headers=server_headers(spec, server),
        timeout=httpx2.Timeout(connect, read=None),
        trust_env=False,
        follow_redirects=False,
    )


async def _checked_address(host: str, port: int, server: str) -> IPAddress:
    literal = literal_address(host)
    if literal is not None:
        answers = [literal]
    else:
        try:
            found = await system_resolver(host, port)
        except OSError as exc:
            raise ConfigurationError(
                f"MCP server '{server}': cannot resolve {host!r}: {exc}"
            ) from None
        answers = [ipaddress.ip_address(answer) for answer in found]
    if not answers:
        raise ConfigurationError(f"MCP server '{server}': {host!r} has no addresses")
    loopback_url = is_loopback_host(host)
    for address in answers:
        if loopback_url and address.is_loopback:
            continue
        reason = not_public_reason(address)
        if reason is not None:
            raise ConfigurationError(
                f"MCP server '{server}': {host!r} resolves to {address}, which is not a public "
                f"address ({reason}); only public hosts, or loopback named as such in the URL "
                "(http://127.0.0.1:PORT/...), can be reached"
            )
    return answers[0]


class _Pinned(httpx2.AsyncBaseTransport):
    """Sends each request to the checked address; refuses every other origin."""

    def __init__(self, scheme: str, host: str, port: int, address: IPAddress) -> None:
        self.origin = (scheme, host, port)
        self.address = address
        self.inner = httpx2.AsyncHTTPTransport(trust_env=False)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        try:
            host = canonical_host(url.raw_host.decode("ascii"))
        except ValueError:
            host = ""
        port = url.port if url.port is not None else _DEFAULT_PORTS.get(url.scheme, 0)
        if (url.scheme, host, port) != self.origin:
            raise httpx2.ConnectError(
                f"refused: {url.scheme}://{host}:{port} is not the granted MCP server",
                request=request,
            )
        request.url = url.copy_with(host=str(self.address))
        if url.scheme == "https":
            request.extensions = {**request.extensions, "sni_hostname": host}
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __repr__(self) -> str:  # never the headers
        return f"_Pinned({self.origin!r} -> {self.address})"
