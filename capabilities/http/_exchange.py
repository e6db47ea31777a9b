"""One exchange of the `http` family, whichever action makes it: the first hop checked,
redirects followed by hand with every hop checked again, headers that might be credentials
kept to their origin, and the final response handed to the action's reader while it is
open (`http.request` reads it as text, `http.fetch` as a page).

The deadline of a whole call (`within`) is the action's: `http.fetch` also converts the
page within it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx2

from capabilities.http._checks import Hop, check_hop, deny, parse, redirect_target, same_origin
from capabilities.http._models import HttpGrant
from capabilities.http._wire import send, ssl_context
from capabilities.net import Resolver
from engine.capability import CallContext
from engine.errors import StepTimeout

__all__ = ["Outgoing", "Reader", "call_limit", "exchange", "merge_headers", "within"]

T = TypeVar("T")

Reader = Callable[[httpx2.Response, Hop, int], Awaitable[T]]
"""`read(response, hop, redirects)`: what the action makes of the final response."""

_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_USER_AGENT = "planloom-http"
# Caller headers still sent after a redirect to another host; everything else might be a
# credential under a custom name, so it stays with the host it was meant for.
_PORTABLE_HEADERS = frozenset({"accept", "accept-language", "user-agent", "content-type"})


@dataclass(frozen=True)
class Outgoing:
    """What an action sends: `action` names it in messages."""

    action: str
    url: str
    method: str
    headers: dict[str, str]
    content: bytes | None = None
    content_type: str | None = None


def call_limit(grant: HttpGrant, ctx: CallContext) -> float:
    """Seconds a call may take: the step's timeout, or the grant's when that is smaller."""
    return ctx.timeout if grant.timeout is None else min(ctx.timeout, grant.timeout)


async def within(limit: float, what: str, work: Coroutine[Any, Any, T]) -> T:
    """`work` within `limit` seconds, else `StepTimeout` saying `what` did not come."""
    deadline = asyncio.timeout(limit)
    try:
        async with deadline:
            return await work
    except TimeoutError:
        if deadline.expired():
            raise StepTimeout(f"{what} within {limit:g} s") from None
        raise


async def exchange(
    out: Outgoing,
    grant: HttpGrant,
    resolver: Resolver,
    base_dir: Path,
    limit: float,
    read: Reader[T],
) -> T:
    """Send `out`, follow its redirects, and return what `read` makes of the last response.

    Raises:
        CapabilityDenied: a hop the grant does not allow (`http.*` rules).
        StepFailed: the exchange failed (no connection, a malformed response).
        StepTimeout: the server did not answer within `limit`.
    """
    action = out.action
    url = parse(out.url, action)
    # Checked before anything else, so denials are cheap.
    hop = await check_hop(url, grant, resolver, action)
    verify = await asyncio.to_thread(ssl_context, grant.ca_bundle, base_dir, action)
    method, content = out.method, out.content
    defaults = {name: secret.get_secret_value() for name, secret in grant.headers.items()}
    private = merge_headers(defaults, out.headers)  # the call's headers win over the grant's
    portable = {k: v for k, v in out.headers.items() if k.lower() in _PORTABLE_HEADERS}
    if out.content_type is not None:
        private = merge_headers({"Content-Type": out.content_type}, private)
        portable = merge_headers({"Content-Type": out.content_type}, portable)
    left_origin = False
    redirects = 0
    async with httpx2.AsyncClient(
        trust_env=False,  # no proxies, .netrc or SSL_CERT_* from the environment
        follow_redirects=False,
        verify=verify,
        timeout=httpx2.Timeout(limit),
        headers={"User-Agent": _USER_AGENT},
    ) as client:
        while True:
            headers = portable if left_origin else private
            response = await send(client, hop, method, headers, content)
            try:
                location = response.headers.get("location")
                if response.status_code not in _REDIRECT_STATUSES or location is None:
                    return await read(response, hop, redirects)
                status = response.status_code
            finally:
                await response.aclose()
            if redirects >= grant.max_redirects:
                raise deny(
                    action,
                    f"more than {grant.max_redirects} redirects (last from "
                    f"{hop.origin}); raise capabilities: http: {{max_redirects: ...}}",
                    "too-many-redirects",
                )
            redirects += 1
            target = redirect_target(hop.url, location, action)
            if hop.url.scheme == "https" and target.scheme == "http":
                raise deny(
                    action,
                    f"redirect from {hop.origin} to plain http refused (downgrade)",
                    "downgrade",
                )
            next_hop = await check_hop(target, grant, resolver, action)
            if not same_origin(hop, next_hop):
                left_origin = True
            if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
                method, content = "GET", None
                private = _without_content_type(private)
                portable = _without_content_type(portable)
            hop = next_hop


def merge_headers(base: dict[str, str], override: dict[str, str]) -> dict[str, str]:
    """`base` updated by `override`, header names compared case-insensitively."""
    names = {name.lower() for name in override}
    return {k: v for k, v in base.items() if k.lower() not in names} | override


def _without_content_type(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() != "content-type"}
