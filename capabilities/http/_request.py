"""`http.request`: one request through the family's exchange (`_exchange`), its final
response returned as status, headers and text body (cut at `max_response_bytes`)."""

from __future__ import annotations

import json

import httpx2

from capabilities.http._checks import Hop
from capabilities.http._exchange import Outgoing, call_limit, exchange, within
from capabilities.http._models import RequestParams, RequestResult, grant_of
from capabilities.http._wire import read_result
from capabilities.net import Resolver
from engine.capability import CallContext

__all__ = ["content_of", "request"]

ACTION = "http.request"


async def request(params: RequestParams, ctx: CallContext, resolver: Resolver) -> RequestResult:
    grant = grant_of(ctx)
    limit = call_limit(grant, ctx)
    content, content_type = content_of(params)
    out = Outgoing(ACTION, params.url, params.method, params.headers, content, content_type)

    async def read(response: httpx2.Response, hop: Hop, redirects: int) -> RequestResult:
        # The method as sent: a redirect may make a POST a GET, but a HEAD stays a HEAD,
        # and HEAD is all `read_result` asks (a HEAD's response has no body to read).
        return await read_result(response, hop, redirects, grant, params.method)

    work = exchange(out, grant, resolver, ctx.base_dir, limit, read)
    return await within(limit, f"{ACTION}: no complete response", work)


def content_of(params: RequestParams) -> tuple[bytes | None, str | None]:
    """The body to send and its content type, if any."""
    if params.json_ is not None:
        return json.dumps(params.json_).encode("utf-8"), "application/json"
    if params.body is not None:
        return params.body.encode("utf-8"), None
    return None, None
