"""Network policy helpers for `capabilities.http`: host names, URLs and addresses.

Nothing here does I/O except `system_resolver`. The rules, in the order `http` applies them:

- A URL is parsed once, by httpx2's parser; the components it produced are the ones checked
  and the ones connected to. A backslash in the authority or any userinfo is refused, because
  other parsers (browsers, urllib) read such URLs differently.
- Host names are canonicalised (IDNA with UTS #46 mapping, lower case, one trailing dot
  stripped) and matched label-exactly against the allow-list; `*.example.com` matches
  subdomains of `example.com` at any depth, never `example.com` itself or `evilexample.com`.
- Every resolved address must be public: `is_global`, not shared (100.64.0.0/10), multicast,
  reserved, link-local or otherwise special. IPv6 addresses that embed an IPv4 address
  (IPv4-mapped, NAT64, 6to4, Teredo) are judged by the embedded address as well.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Imported in `parse_url`: the grant models import this module whenever the registry
    # is built (`planloom validate` too), and httpx2 is needed only to parse a URL.
    import httpx2

__all__ = [
    "IPAddress",
    "IPNetwork",
    "Resolver",
    "authority_of",
    "canonical_host",
    "canonical_pattern",
    "embedded_ipv4",
    "host_matches",
    "literal_address",
    "not_public_reason",
    "parse_url",
    "permitted_by",
    "system_resolver",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""`resolver(host, port)`: the host's addresses as strings; raises `OSError` when it can't."""

_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_AUTHORITY = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:)?[/\\]{2}([^/?#]*)")

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
_SHARED = ipaddress.IPv4Network("100.64.0.0/10")
# Special-purpose ranges that this Python's `is_global` may still call global.
_NOT_ROUTABLE: tuple[IPNetwork, ...] = (
    ipaddress.IPv4Network("192.0.0.0/24"),  # IETF protocol assignments
    ipaddress.IPv4Network("192.88.99.0/24"),  # deprecated 6to4 relay anycast (RFC 7526)
    ipaddress.IPv4Network("198.18.0.0/15"),  # benchmarking
    ipaddress.IPv4Network("240.0.0.0/4"),  # reserved, includes 255.255.255.255
    ipaddress.IPv6Network("2001::/23"),  # IETF protocol assignments, includes Teredo
    ipaddress.IPv6Network("2001:db8::/32"),  # documentation
    ipaddress.IPv6Network("3fff::/20"),  # documentation (RFC 9637)
)


def canonical_host(name: str) -> str:
    """The form a host is compared in: IDNA A-label, lower case, no trailing dot.

    IP literals come back in their compressed form (`[::1]` and `::1` both give `::1`).

    Raises:
        ValueError: not a valid host name or IP literal.
    """
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    literal = literal_address(name)
    if literal is not None:
        return literal.compressed
    if name.endswith("."):
        name = name[:-1]
    if not name:
        raise ValueError("empty host name")
    if not name.isascii():
        import idna  # only for a non-ASCII name: most never need it (nor does start-up)

        try:
            name = idna.encode(name, uts46=True).decode("ascii")
        except idna.IDNAError as exc:
            raise ValueError(f"{name!r} is not a valid international host name: {exc}") from None
    name = name.lower()
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise ValueError(f"{name!r} is not a valid host name")
    return name


def canonical_pattern(pattern: str) -> str:
    """Canonicalise an allow-list entry: a host, or `*.` followed by a host.

    Raises:
        ValueError: a malformed entry, a `*` anywhere but a whole leading label, or a
            wildcard over a single label (`*.com`), which would allow a whole top-level domain.
    """
    if pattern.startswith("*."):
        suffix = canonical_host(pattern[2:])
        if "*" in suffix or "." not in suffix or literal_address(suffix) is not None:
            raise ValueError(
                f"wildcard {pattern!r} must be '*.' followed by a domain of two or more labels"
            )
        return "*." + suffix
    if "*" in pattern:
        raise ValueError(f"{pattern!r}: '*' is only allowed as a whole leading label ('*.')")
    return canonical_host(pattern)


def host_matches(host: str, pattern: str) -> bool:
    """Whether canonical `host` is allowed by canonical `pattern` (label-exact)."""
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return host == pattern


def literal_address(host: str) -> IPAddress | None:
    """`host` as an IP address when it is a standard literal (never `127.1` or `0x7f000001`)."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def authority_of(url: str) -> str | None:
    """The text between `//` and the next `/`, `?` or `#`, read as leniently as browsers do
    (a backslash counts as a slash); `None` for a URL without an authority."""
    match = _AUTHORITY.match(url.strip())
    return match.group(1) if match else None


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address inside an IPv4-mapped, NAT64, 6to4 or Teredo IPv6 address."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


def not_public_reason(address: IPAddress) -> str | None:
    """Why `address` is not a public unicast address, or `None` when it is."""
    if isinstance(address, ipaddress.IPv6Address) and (
        address.ipv4_mapped is not None or address in _NAT64
    ):
        # Only another spelling of an IPv4 address: that address decides.
        inner = embedded_ipv4(address)
        assert inner is not None
        reason = not_public_reason(inner)
        return f"{reason} ({inner} inside)" if reason else None
    reason = _own_reason(address)
    if reason is not None:
        return reason
    inner = embedded_ipv4(address)
    if inner is not None:
        inner_reason = not_public_reason(inner)
        if inner_reason is not None:
            return f"{inner_reason} ({inner} inside)"
    return None


def _own_reason(address: IPAddress) -> str | None:
    checks: tuple[tuple[bool, str], ...] = (
        (address.is_unspecified, "unspecified"),
        (address.is_loopback, "loopback"),
        (address.is_link_local, "link-local"),
        (address.is_multicast, "multicast"),
        (isinstance(address, ipaddress.IPv4Address) and address in _SHARED, "shared (CGNAT)"),
        (isinstance(address, ipaddress.IPv6Address) and address.is_site_local, "site-local"),
        (address.is_private, "private"),
        (address.is_reserved, "reserved"),
        (any(address in net for net in _NOT_ROUTABLE), "special-purpose"),
        (
            isinstance(address, ipaddress.IPv6Address) and address not in _GLOBAL_UNICAST,
            "not global unicast",
        ),
        (not address.is_global, "not global"),
    )
    return next((reason for failed, reason in checks if failed), None)


def permitted_by(address: IPAddress, networks: Sequence[IPNetwork]) -> IPNetwork | None:
    """The granted network holding `address`, if any.

    An IPv4-mapped address also matches through its IPv4 address (the kernel connects to
    that very address). NAT64, 6to4 and Teredo addresses do not: they reach a gateway, whose
    127.0.0.1 is not this machine's.
    """
    candidates: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        candidates.append(address.ipv4_mapped)
    for network in networks:
        if any(candidate in network for candidate in candidates):
            return network
    return None


async def system_resolver(host: str, port: int) -> list[str]:
    """Resolve `host` with the operating system's resolver, off the event loop."""
    # asyncio is imported where it is used: `planloom validate` imports this module
    # without running it, and asyncio (with ssl, which loads OpenSSL) is much of its start-up.
    import asyncio

    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


def parse_url(text: str) -> httpx2.URL:
    """Parse `text` with the one parser whose result is also used to connect.

    Raises:
        ValueError: unparseable, or a backslash in the authority.
    """
    import httpx2  # not at the top: see there

    match = _AUTHORITY.match(text.strip())
    if match is not None and "\\" in match.group(0):
        raise ValueError("a backslash in the host part is read differently by other parsers")
    try:
        return httpx2.URL(text)
    except httpx2.InvalidURL as exc:
        raise ValueError(str(exc)) from None
