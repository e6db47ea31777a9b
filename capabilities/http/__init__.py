"""The `http` capability: one HTTPS request to a granted host, with SSRF defences.

A recipe grants it with, for example:

```yaml
capabilities:
  http: {allow: [api.github.com, "*.githubusercontent.com"]}
```

Each call, and each redirect hop again from scratch, goes through the same checks, each
refusal a `CapabilityDenied` whose `rule` names the check:

- `http.invalid-url`: a URL httpx2's parser rejects, or a backslash in its host part;
- `http.scheme`: anything but `https` (`http` only with `allow_http`);
- `http.userinfo`: `user:password@` in the URL (credentials belong in `headers`);
- `http.host-not-allowed`: a host missing from `allow` (compared after IDNA, lower case,
  one trailing dot stripped);
- `http.port-not-allowed`: a port missing from `ports`;
- `http.address-not-public`: a host with any resolved address that is not public, unless
  the address lies in `private_networks` (an IP literal, and `localhost`, are judged
  before any lookup, so `planloom validate` reports a URL the recipe writes out);
- `http.downgrade`: a redirect from `https` to `http`;
- `http.too-many-redirects`: more than `max_redirects` redirects.

The URL is parsed once and the checked components are the ones used: the host is resolved
once (by an injectable resolver), every address is checked, and the connection goes to the
checked address itself, with the `Host` header, TLS SNI and certificate check still naming
the host, so a second DNS answer (rebinding) is never consulted. Redirects are followed by
hand. Proxies, `.netrc` and `SSL_CERT_*` from the environment are ignored. The body is
streamed and cut at `max_response_bytes` (counting both the bytes received and the
decompressed bytes), and the whole exchange has one deadline.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

from capabilities.http._models import HttpGrant, RequestParams, RequestResult
from capabilities.http._models import Method as Method
from capabilities.net import Resolver, system_resolver
from engine.capability import Action, CallContext, Family, Registry
from engine.errors import CapabilityDenied, StepTimeout

__all__ = [
    "HttpGrant",
    "RequestParams",
    "RequestResult",
    "Resolver",
    "register",
    "system_resolver",
]

_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_USER_AGENT = "planloom-http"
# Caller headers still sent after a redirect to another host; everything else might be a
# credential under a custom name, so it stays with the host it was meant for.
_PORTABLE_HEADERS = frozenset({"accept", "accept-language", "user-agent", "content-type"})


def _confinement_report() -> dict[str, str]:
    return {
        "host allow-list (IDNA, label-exact)": "active",
        "every resolved address public": "active",
        "connect to the checked address (no rebinding)": "active",
        "redirects re-checked by hand, no downgrade": "active",
        "no proxy or netrc from the environment": "active",
        "body, decompressed size and total time capped": "active",
    }


def _facts(grant: HttpGrant) -> str:
    """`hosts: api.example.com; https only`."""
    scheme = "http or https" if grant.allow_http else "https only"
    return f"hosts {', '.join(grant.allow)} only; {scheme}"


def register(registry: Registry, *, resolver: Resolver | None = None) -> None:
    """Add the `http` family and its `http.request` action to `registry`.

    Args:
        registry: where to add them.
        resolver: resolves host names to addresses; the operating system's by default.
            Tests pass a fake so no real DNS is used.
    """
    registry.add_family(
        Family(
            "http",
            "HTTPS requests to granted hosts with public addresses",
            HttpGrant,
            _confinement_report,
            facts=_facts,
        )
    )
    registry.add(
        Action(
            "http.request",
            "Send an HTTPS request to a granted host and return status, headers and text "
            "body; 4xx/5xx responses are returned as results (check `status`), not errors.",
            RequestParams,
            _Requester(resolver or system_resolver).run,
            RequestResult,
            side_effects=_has_side_effects,
            admit=_admit,
            truncated_note="the body passed the grant's max_response_bytes and was cut there",
            param_docs={
                "url": "The URL: https (http only if the grant allows it), a granted host.",
                "method": "The HTTP method; any but GET and HEAD has side effects (gated).",
                "headers": "Request headers, over the grant's `headers`.",
                "body": "A text body (a body makes the request gated); not with `json`.",
                "json": "A JSON body, sent as application/json; not with `body`.",
            },
        )
    )


def _admit(params: RequestParams, ctx: CallContext) -> None:
    """The URL's scheme, host and port against the grant, and the address of an IP
    literal or `localhost`, before any gate (at validation, a URL the recipe wrote).
    Where a host name resolves to is checked when the call runs."""
    if ctx.unrendered and ctx.templated(("url",)):
        return
    from capabilities.http._checks import check_url, parse  # see `_exchange`

    try:
        check_url(parse(params.url), _grant(ctx))
    except CapabilityDenied as exc:
        exc.param = ("url",)
        raise


def _has_side_effects(params: RequestParams) -> bool:
    """Every method but GET and HEAD, and any request that sends a body, whatever its
    method: a server may act on a GET with a body as on a POST (the gate cannot know)."""
    content, _ = _content(params)
    return params.method not in ("GET", "HEAD") or content is not None


@dataclass(frozen=True)
class _Requester:
    resolver: Resolver

    async def run(self, params: RequestParams, ctx: CallContext) -> RequestResult:
        grant = _grant(ctx)
        limit = ctx.timeout if grant.timeout is None else min(ctx.timeout, grant.timeout)
        deadline = asyncio.timeout(limit)
        try:
            async with deadline:
                return await self._exchange(params, grant, ctx.base_dir, limit)
        except TimeoutError:
            if deadline.expired():
                raise StepTimeout(
                    f"http.request: no complete response within {limit:g} s"
                ) from None
            raise

    async def _exchange(
        self, params: RequestParams, grant: HttpGrant, base_dir: Path, limit: float
    ) -> RequestResult:
        # Imported here, not at the top: the registry loads this family for every command
        # (`planloom validate` too), and httpx2 and the wire code matter only for a request.
        import httpx2

        from capabilities.http._checks import (
            check_hop,
            deny,
            parse,
            redirect_target,
            same_origin,
        )
        from capabilities.http._wire import read_result, send, ssl_context

        url = parse(params.url)
        # Checked before anything else, so denials are cheap.
        hop = await check_hop(url, grant, self.resolver)
        verify = await asyncio.to_thread(ssl_context, grant.ca_bundle, base_dir)
        method: str = params.method
        content, content_type = _content(params)
        defaults = {name: secret.get_secret_value() for name, secret in grant.headers.items()}
        private = _merge(defaults, params.headers)  # the call's headers win over the grant's
        portable = {k: v for k, v in params.headers.items() if k.lower() in _PORTABLE_HEADERS}
        if content_type is not None:
            private = _merge({"Content-Type": content_type}, private)
            portable = _merge({"Content-Type": content_type}, portable)
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
                        return await read_result(response, hop, redirects, grant, method)
                    status = response.status_code
                finally:
                    await response.aclose()
                if redirects >= grant.max_redirects:
                    raise deny(
                        f"more than {grant.max_redirects} redirects (last from "
                        f"{hop.origin}); raise capabilities: http: {{max_redirects: ...}}",
                        "too-many-redirects",
                    )
                redirects += 1
                target = redirect_target(hop.url, location)
                if hop.url.scheme == "https" and target.scheme == "http":
                    raise deny(
                        f"redirect from {hop.origin} to plain http refused (downgrade)",
                        "downgrade",
                    )
                next_hop = await check_hop(target, grant, self.resolver)
                if not same_origin(hop, next_hop):
                    left_origin = True
                if (status == 303 and method != "HEAD") or (
                    status in (301, 302) and method == "POST"
                ):
                    method, content = "GET", None
                    private = _without_content_type(private)
                    portable = _without_content_type(portable)
                hop = next_hop


def _grant(ctx: CallContext) -> HttpGrant:
    if isinstance(ctx.grant, HttpGrant):
        return ctx.grant
    return HttpGrant.model_validate(ctx.grant.model_dump())


def _content(params: RequestParams) -> tuple[bytes | None, str | None]:
    if params.json_ is not None:
        return json.dumps(params.json_).encode("utf-8"), "application/json"
    if params.body is not None:
        return params.body.encode("utf-8"), None
    return None, None


def _merge(base: dict[str, str], override: dict[str, str]) -> dict[str, str]:
    """`base` updated by `override`, header names compared case-insensitively."""
    names = {name.lower() for name in override}
    return {k: v for k, v in base.items() if k.lower() not in names} | override


def _without_content_type(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() != "content-type"}
