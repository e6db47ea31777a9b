"""`http.fetch`: a GET through the same exchange as `http.request` (every hop checked, the
connection pinned to the checked address, redirects re-checked, size and time capped), and
the body made readable (`_page`): an HTML page's main content as Markdown, text as text.

Unlike `http.request`, a body over `max_response_bytes` fails the call: half a page
converts to a misleading half of its content. A type that is neither HTML nor text fails
before its body is read. The whole call, the conversion included, has one deadline; the
conversion runs in a worker thread (a run's threads never hold up its end, see
`engine._support.threads`), so it never stalls the event loop.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx2

from capabilities.http._checks import Hop
from capabilities.http._exchange import Outgoing, call_limit, exchange, merge_headers, within
from capabilities.http._models import FetchParams, FetchResult, HttpGrant, grant_of
from capabilities.http._page import Kind, kind_of, media_type, sniff, to_page
from capabilities.http._wire import read_body
from capabilities.net import Resolver
from engine.capability import CallContext
from engine.errors import StepFailed

__all__ = ["fetch"]

ACTION = "http.fetch"
_ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9,text/*;q=0.8,*/*;q=0.1"


@dataclass(frozen=True)
class _Body:
    status: int
    url: str
    media: str
    kind: Kind
    charset: str | None
    data: bytes
    redirects: int


async def fetch(params: FetchParams, ctx: CallContext, resolver: Resolver) -> FetchResult:
    grant = grant_of(ctx)
    limit = call_limit(grant, ctx)
    work = _fetch(params, grant, ctx, resolver, limit)
    return await within(limit, f"{ACTION}: no page fetched and converted", work)


async def _fetch(
    params: FetchParams, grant: HttpGrant, ctx: CallContext, resolver: Resolver, limit: float
) -> FetchResult:
    headers = merge_headers({"Accept": _ACCEPT}, params.headers)
    out = Outgoing(ACTION, params.url, "GET", headers)

    async def read(response: httpx2.Response, hop: Hop, redirects: int) -> _Body:
        return await _read(response, hop, redirects, grant.max_response_bytes)

    body = await exchange(out, grant, resolver, ctx.base_dir, limit, read)
    page = await asyncio.to_thread(to_page, body.data, body.kind, body.charset, body.url)
    return FetchResult(
        status=body.status,
        url=body.url,
        title=page.title,
        content=page.content,
        format=page.format,
        content_type=body.media,
        redirects=body.redirects,
    )


async def _read(response: httpx2.Response, hop: Hop, redirects: int, cap: int) -> _Body:
    media = media_type(response.headers.get("content-type"))
    declared = kind_of(media) if media else None
    if media and declared is None:
        raise _not_readable(hop, media)
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > cap:
        raise _too_big(hop, cap, f"is {int(length):,} bytes, over")
    data, cut = await read_body(response, hop, cap)
    if cut:
        raise _too_big(hop, cap, "is over")
    kind = declared or sniff(data)
    if kind is None:
        raise _not_readable(hop, "no Content-Type and a body that looks binary")
    return _Body(
        response.status_code,
        str(hop.url),
        media or ("text/html" if kind == "html" else "text/plain"),
        kind,
        response.charset_encoding,
        data,
        redirects,
    )


def _not_readable(hop: Hop, what: str) -> StepFailed:
    return StepFailed(
        f"{ACTION}: {hop.origin} sent {what}, not a web page or text; {ACTION} reads "
        "HTML (as Markdown) and text types only"
    )


def _too_big(hop: Hop, cap: int, size: str) -> StepFailed:
    return StepFailed(
        f"{ACTION}: the page from {hop.origin} {size} the grant's max_response_bytes "
        f"({cap:,} bytes); a page is converted whole or not at all: raise the limit with "
        "capabilities: http: {max_response_bytes: N}"
    )
