"""The checks every hop of an `http` call passes, and how a redirect leads to the next.

Each hop is checked from scratch: scheme, credentials in the URL, host allow-list, port, and
every address the host resolves to (public, or in the grant's `private_networks`). The
checked addresses are the only ones connected to, so a second DNS answer is never used.
What needs no lookup is checked first, by `check_url`, which each action's `admit`
also runs (before the gate, and at validation on a URL the recipe writes): an IP literal
that is not public, and `localhost`, which names this machine (RFC 6761) whatever the
resolver says, are refused there.

Each function is given the action it checks for (`http.request`, `http.fetch`), which its
messages name.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

import httpx2

from capabilities.http._models import HttpGrant
from capabilities.net import (
    IPAddress,
    IPNetwork,
    Resolver,
    authority_of,
    canonical_host,
    host_matches,
    literal_address,
    not_public_reason,
    parse_url,
    permitted_by,
)
from engine.errors import CapabilityDenied, StepFailed

__all__ = ["Hop", "check_hop", "deny", "parse", "redirect_target", "same_origin"]

_DEFAULT_PORTS = {"https": 443, "http": 80}
_LOOPBACK: dict[int, IPNetwork] = {
    4: ipaddress.IPv4Network("127.0.0.0/8"),
    6: ipaddress.IPv6Network("::1/128"),
}


@dataclass(frozen=True)
class Hop:
    """A URL that passed every check, and the addresses it may be connected to."""

    url: httpx2.URL
    host: str
    port: int
    addresses: tuple[IPAddress, ...]
    action: str
    """The action the hop was checked for, named in messages."""

    @property
    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.url.scheme}://{host}:{self.port}"

    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == _DEFAULT_PORTS[self.url.scheme] else f"{host}:{self.port}"


def deny(action: str, message: str, rule: str) -> CapabilityDenied:
    return CapabilityDenied(f"{action}: {message}", rule=f"http.{rule}")


def parse(text: str, action: str) -> httpx2.URL:
    try:
        return parse_url(text)
    except ValueError as exc:
        raise deny(action, f"invalid URL: {exc}", "invalid-url") from None


async def check_hop(url: httpx2.URL, grant: HttpGrant, resolver: Resolver, action: str) -> Hop:
    """Every check of one hop, from scratch; returns where it may connect."""
    host, port = check_url(url, grant, action)
    addresses = await _resolve(host, port, resolver, action)
    networks = grant.networks()
    for address in addresses:
        _check_address(host, address, networks, action)
    return Hop(url.copy_with(fragment=None), host, port, addresses, action)


def _check_address(
    host: str, address: IPAddress, networks: Sequence[IPNetwork], action: str
) -> None:
    """Refuse `address` (what `host` is, or resolved to) unless it is public or granted."""
    reason = not_public_reason(address)
    if reason is not None and permitted_by(address, networks) is None:
        resolved = "is" if str(address) == host else f"resolved to {address}, which is"
        prefix = 32 if address.version == 4 else 128
        raise deny(
            action,
            f"{host!r} {resolved} not a public address ({reason}); to reach it "
            "deliberately, grant its network with capabilities: http: "
            f"{{private_networks: ['{address}/{prefix}']}}",
            "address-not-public",
        )


def _check_loopback_name(host: str, networks: Sequence[IPNetwork], action: str) -> None:
    """Refuse `localhost` unless the grant opens a loopback network: the name is this
    machine's, so where it resolves is never public (RFC 6761, section 6.3)."""
    if host != "localhost" or any(net.overlaps(_LOOPBACK[net.version]) for net in networks):
        return
    raise deny(
        action,
        "'localhost' is this machine, not a public address (loopback); to reach it "
        "deliberately, grant its networks with capabilities: http: "
        "{private_networks: ['127.0.0.1/32', '::1/128']}",
        "address-not-public",
    )


def check_url(url: httpx2.URL, grant: HttpGrant, action: str) -> tuple[str, int]:
    """The checks of one hop that need no lookup: scheme, credentials, host and port
    granted. Returns the canonical host and the port.

    An IP literal that is not public, and `localhost`, are refused here unless the
    grant's `private_networks` hold them: no resolver can make them public.

    Raises:
        CapabilityDenied: the grant does not allow the URL.
    """
    scheme = url.scheme
    if scheme != "https" and not (scheme == "http" and grant.allow_http):
        hint = (
            "grant plain HTTP with capabilities: http: {allow_http: true}"
            if scheme == "http"
            else "only https (and, when granted, http) URLs can be requested"
        )
        raise deny(action, f"scheme {scheme or '(none)'!r} is not allowed; {hint}", "scheme")
    if url.userinfo:
        raise deny(
            action,
            "URLs with credentials (user:password@host) are refused; send credentials in "
            "a header instead, e.g. capabilities: http: {headers: {Authorization: ...}}",
            "userinfo",
        )
    raw_host = url.raw_host.decode("ascii")
    try:
        host = canonical_host(raw_host)
    except ValueError as exc:
        raise deny(action, f"invalid host: {exc}", "invalid-url") from None
    if not any(host_matches(host, pattern) for pattern in grant.allow):
        raise deny(
            action,
            f"host {host!r} is not granted; add it with capabilities: http: {{allow: [{host!r}]}}",
            "host-not-allowed",
        )
    port = url.port if url.port is not None else _DEFAULT_PORTS[scheme]
    if port not in grant.allowed_ports():
        ports = sorted(grant.allowed_ports() | {port})
        raise deny(
            action,
            f"port {port} of {host!r} is not granted; add it with capabilities: http: "
            f"{{ports: {ports}}}",
            "port-not-allowed",
        )
    literal = literal_address(host)
    if literal is not None:
        _check_address(host, literal, grant.networks(), action)
    else:
        _check_loopback_name(host, grant.networks(), action)
    return host, port


async def _resolve(host: str, port: int, resolver: Resolver, action: str) -> tuple[IPAddress, ...]:
    literal = literal_address(host)
    if literal is not None:
        return (literal,)
    try:
        answers = await resolver(host, port)
    except OSError as exc:
        raise StepFailed(f"{action}: could not resolve {host!r}: {exc}") from None
    addresses: dict[IPAddress, None] = {}
    for answer in answers:
        try:
            addresses[ipaddress.ip_address(answer)] = None
        except ValueError:
            raise StepFailed(
                f"{action}: resolving {host!r} gave {answer!r}, not an IP address"
            ) from None
    if not addresses:
        raise StepFailed(f"{action}: {host!r} has no addresses")
    return tuple(addresses)


def redirect_target(base: httpx2.URL, location: str, action: str) -> httpx2.URL:
    if authority_of(location) is not None:
        # A Location with a host part passes the same checks as a URL from the caller.
        parse(location, action)
    try:
        return base.join(location)
    except httpx2.InvalidURL as exc:
        raise deny(action, f"invalid redirect Location: {exc}", "invalid-url") from None


def same_origin(old: Hop, new: Hop) -> bool:
    if old.host != new.host:
        return False
    if old.url.scheme == new.url.scheme:
        return old.port == new.port
    # http → https on the default ports is the same site upgrading itself
    return (old.url.scheme, old.port, new.url.scheme, new.port) == ("http", 80, "https", 443)
