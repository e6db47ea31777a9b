"""The `http` capability: HTTPS requests to granted hosts, with SSRF defences.

`http.request` returns a response's status, headers and body as text; `http.fetch` GETs a
page and returns its main content as Markdown (`_page`), for a model to read: the same
exchange (`_exchange`), so the same checks.

A recipe grants it with, for example:

```yaml
capabilities:
  http: {allow: [api.github.com, "*.githubusercontent.com"]}
```

Each call of either action, and each redirect hop again from scratch, goes through the same
checks, each refusal a `CapabilityDenied` whose `rule` names the check:

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
decompressed bytes), and the whole exchange has one deadline (for `http.fetch`, a body
over the cap fails the call, and the conversion is within the deadline too).
"""

from __future__ import annotations

from dataclasses import dataclass

from capabilities.http._models import (
    FetchParams,
    FetchResult,
    HttpGrant,
    RequestParams,
    RequestResult,
    grant_of,
)
from capabilities.http._models import Method as Method
from capabilities.net import Resolver, system_resolver
from engine.capability import Action, CallContext, Family, Registry
from engine.errors import CapabilityDenied

__all__ = [
    "FetchParams",
    "FetchResult",
    "HttpGrant",
    "RequestParams",
    "RequestResult",
    "Resolver",
    "register",
    "system_resolver",
]


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
    """Add the `http` family and its `http.request` and `http.fetch` actions to `registry`.

    Args:
        registry: where to add them.
        resolver: resolves host names to addresses; the operating system's by default.
            Tests pass a fake so no real DNS is used.
    """
    resolver = resolver or system_resolver
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
            _Requester(resolver).run,
            RequestResult,
            side_effects=_has_side_effects,
            admit=_Admit("http.request"),
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
    registry.add(
        Action(
            "http.fetch",
            "Fetch a web page from a granted host and return its main content as Markdown "
            "(navigation, ads and footers left out), with its title and final URL; text "
            "types come back as text, other types are refused.",
            FetchParams,
            _Fetcher(resolver).run,
            FetchResult,
            side_effects=False,
            admit=_Admit("http.fetch"),
            param_docs={
                "url": "The page's URL: https (http only if the grant allows it), a granted host.",
                "headers": "Request headers, over the grant's `headers`.",
            },
        )
    )


@dataclass(frozen=True)
class _Admit:
    """The URL's scheme, host and port against the grant, and the address of an IP
    literal or `localhost`, before any gate (at validation, a URL the recipe wrote).
    Where a host name resolves to is checked when the call runs."""

    action: str

    def __call__(self, params: RequestParams | FetchParams, ctx: CallContext) -> None:
        if ctx.unrendered and ctx.templated(("url",)):
            return
        from capabilities.http._checks import check_url, parse  # see `_Requester.run`

        try:
            check_url(parse(params.url, self.action), grant_of(ctx), self.action)
        except CapabilityDenied as exc:
            exc.param = ("url",)
            raise


def _has_side_effects(params: RequestParams) -> bool:
    """Every method but GET and HEAD, and any request that sends a body, whatever its
    method: a server may act on a GET with a body as on a POST (the gate cannot know)."""
    sends_body = params.body is not None or params.json_ is not None
    return params.method not in ("GET", "HEAD") or sends_body


@dataclass(frozen=True)
class _Requester:
    resolver: Resolver

    async def run(self, params: RequestParams, ctx: CallContext) -> RequestResult:
        # Imported here, not at the top: the registry loads this family for every command
        # (`planloom validate` too), and httpx2 and the wire code matter only for a call.
        from capabilities.http._request import request

        return await request(params, ctx, self.resolver)


@dataclass(frozen=True)
class _Fetcher:
    resolver: Resolver

    async def run(self, params: FetchParams, ctx: CallContext) -> FetchResult:
        from capabilities.http._fetch import fetch  # see `_Requester.run`

        return await fetch(params, ctx, self.resolver)
