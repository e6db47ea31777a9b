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
  the address lies in `private_networks`;
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
import codecs
import functools
import ipaddress
import json
import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx2
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from capabilities._net import (
    IPAddress,
    IPNetwork,
    Resolver,
    authority_of,
    canonical_host,
    canonical_pattern,
    host_matches,
    literal_address,
    not_public_reason,
    parse_url,
    permitted_by,
    system_resolver,
)
from engine.capability import Action, CallContext, Family, Registry
from engine.errors import CapabilityDenied, StepError, StepFailed, StepTimeout

__all__ = [
    "HttpGrant",
    "RequestParams",
    "RequestResult",
    "Resolver",
    "register",
    "system_resolver",
]

Method = Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]

_DEFAULT_PORTS = {"https": 443, "http": 80}
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_MAX_ADDRESS_TRIES = 3  # addresses tried in turn when a connection is refused
_USER_AGENT = "planloom-http"
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Framing and routing headers are the client's business; `Host` would defeat the allow-list.
_RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "proxy-authorization",
        "proxy-connection",
        "expect",
    }
)
# Caller headers still sent after a redirect to another host; everything else might be a
# credential under a custom name, so it stays with the host it was meant for.
_PORTABLE_HEADERS = frozenset({"accept", "accept-language", "user-agent", "content-type"})
_HIDDEN_RESPONSE_HEADERS = frozenset({"set-cookie", "set-cookie2"})


def _check_headers(headers: dict[str, str]) -> None:
    for name, value in headers.items():
        if not _TOKEN.fullmatch(name):
            raise ValueError(f"header name {name!r} is not a valid HTTP token")
        if name.lower() in _RESERVED_HEADERS:
            raise ValueError(f"header {name!r} is set by the client and cannot be given")
        if any(ch in value for ch in "\r\n\x00"):
            raise ValueError(f"header {name!r} contains a line break or NUL")


class HttpGrant(BaseModel):
    """What a recipe's `capabilities: http:` block grants.

    Attributes:
        allow: host names that may be requested. Compared after IDNA encoding, lower-casing
            and stripping one trailing dot, label by label; `*.example.com` allows every
            subdomain of `example.com` (not `example.com` itself).
        ports: ports that may be requested; 80 is added when `allow_http` is true.
        allow_http: whether plain `http://` URLs may be requested. A redirect from `https`
            to `http` is refused regardless.
        private_networks: CIDRs that may be reached although they are not public (an
            internal service, a test server on 127.0.0.1). Everything else non-public
            (loopback, private, link-local, metadata, CGNAT, ...) is refused.
        ca_bundle: a PEM file of CA certificates, relative to the recipe's folder, trusted
            instead of the system's (for a private CA).
        max_response_bytes: the most body bytes returned; the rest is cut (`truncated`).
        max_redirects: redirects followed before refusing.
        timeout: seconds for the whole exchange, all redirects included; the step's timeout
            applies too, and the smaller one wins.
        headers: headers sent with every request (e.g. `Authorization`); never logged or
            returned, and not sent after a redirect to another host.
    """

    model_config = ConfigDict(extra="forbid")

    allow: list[str]
    ports: list[int] = [443]
    allow_http: bool = False
    private_networks: list[str] = []
    ca_bundle: str | None = None
    max_response_bytes: int = Field(default=10_000_000, ge=0)
    max_redirects: int = Field(default=5, ge=0, le=50)
    timeout: float | None = Field(default=None, gt=0)
    headers: dict[str, SecretStr] = Field(default_factory=dict, repr=False)

    @field_validator("allow")
    @classmethod
    def _canonical_allow(cls, value: list[str]) -> list[str]:
        return [canonical_pattern(entry) for entry in value]

    @field_validator("ports")
    @classmethod
    def _valid_ports(cls, value: list[int]) -> list[int]:
        for port in value:
            if not 1 <= port <= 65535:
                raise ValueError(f"port {port} is not between 1 and 65535")
        return value

    @field_validator("private_networks")
    @classmethod
    def _valid_networks(cls, value: list[str]) -> list[str]:
        return [str(ipaddress.ip_network(cidr, strict=False)) for cidr in value]

    @field_validator("headers")
    @classmethod
    def _valid_headers(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        _check_headers({name: secret.get_secret_value() for name, secret in value.items()})
        return value

    def allowed_ports(self) -> set[int]:
        return set(self.ports) | ({80} if self.allow_http else set())

    def networks(self) -> list[IPNetwork]:
        return [ipaddress.ip_network(cidr) for cidr in self.private_networks]


class RequestParams(BaseModel):
    """Params of `http.request`. Give at most one of `body` (text) and `json`."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(max_length=16_384)
    method: Method = "GET"
    headers: dict[str, str] = {}
    body: str | None = None
    json_: Any = Field(default=None, alias="json")

    @field_validator("headers")
    @classmethod
    def _valid_headers(cls, value: dict[str, str]) -> dict[str, str]:
        _check_headers(value)
        return value

    @model_validator(mode="after")
    def _one_body(self) -> RequestParams:
        if self.body is not None and self.json_ is not None:
            raise ValueError("give either body or json, not both")
        return self


class RequestResult(BaseModel):
    """Result of `http.request`.

    Attributes:
        status: the final response's status code; 4xx and 5xx are results, not errors.
        headers: response headers, names lower-cased, repeated ones joined with ", ",
            `set-cookie` left out.
        body: the body decoded as text (its charset, else UTF-8; bad bytes replaced).
        truncated: whether the body was cut at `max_response_bytes`.
        url: the final URL, after redirects.
        redirects: how many redirects were followed.
    """

    status: int
    headers: dict[str, str]
    body: str
    truncated: bool
    url: str
    redirects: int


def _confinement_report() -> dict[str, str]:
    return {
        "host allow-list (IDNA, label-exact)": "active",
        "every resolved address public": "active",
        "connect to the checked address (no rebinding)": "active",
        "redirects re-checked by hand, no downgrade": "active",
        "no proxy or netrc from the environment": "active",
        "body, decompressed size and total time capped": "active",
    }


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
        )
    )


def _has_side_effects(params: RequestParams) -> bool:
    """Every method but GET and HEAD, and any request that sends a body, whatever its
    method: a server may act on a GET with a body as on a POST (the gate cannot know)."""
    content, _ = _content(params)
    return params.method not in ("GET", "HEAD") or content is not None


# -- one hop ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Hop:
    """A URL that passed every check, and the addresses it may be connected to."""

    url: httpx2.URL
    host: str
    port: int
    addresses: tuple[IPAddress, ...]

    @property
    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.url.scheme}://{host}:{self.port}"

    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == _DEFAULT_PORTS[self.url.scheme] else f"{host}:{self.port}"


def _deny(message: str, rule: str) -> CapabilityDenied:
    return CapabilityDenied(f"http.request: {message}", rule=f"http.{rule}")


def _parse(text: str) -> httpx2.URL:
    try:
        return parse_url(text)
    except ValueError as exc:
        raise _deny(f"invalid URL: {exc}", "invalid-url") from None


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

    async def check(self, url: httpx2.URL, grant: HttpGrant) -> _Hop:
        """Every check of one hop, from scratch; returns where it may connect."""
        scheme = url.scheme
        if scheme != "https" and not (scheme == "http" and grant.allow_http):
            hint = (
                "grant plain HTTP with capabilities: http: {allow_http: true}"
                if scheme == "http"
                else "only https (and, when granted, http) URLs can be requested"
            )
            raise _deny(f"scheme {scheme or '(none)'!r} is not allowed; {hint}", "scheme")
        if url.userinfo:
            raise _deny(
                "URLs with credentials (user:password@host) are refused; send credentials in "
                "a header instead, e.g. capabilities: http: {headers: {Authorization: ...}}",
                "userinfo",
            )
        raw_host = url.raw_host.decode("ascii")
        try:
            host = canonical_host(raw_host)
        except ValueError as exc:
            raise _deny(f"invalid host: {exc}", "invalid-url") from None
        if not any(host_matches(host, pattern) for pattern in grant.allow):
            raise _deny(
                f"host {host!r} is not granted; add it with capabilities: http: "
                f"{{allow: [{host!r}]}}",
                "host-not-allowed",
            )
        port = url.port if url.port is not None else _DEFAULT_PORTS[scheme]
        if port not in grant.allowed_ports():
            ports = sorted(grant.allowed_ports() | {port})
            raise _deny(
                f"port {port} of {host!r} is not granted; add it with capabilities: http: "
                f"{{ports: {ports}}}",
                "port-not-allowed",
            )
        addresses = await self._resolve(host, port)
        networks = grant.networks()
        for address in addresses:
            reason = not_public_reason(address)
            if reason is not None and permitted_by(address, networks) is None:
                resolved = "is" if str(address) == host else f"resolved to {address}, which is"
                prefix = 32 if address.version == 4 else 128
                raise _deny(
                    f"{host!r} {resolved} not a public address ({reason}); to reach it "
                    "deliberately, grant its network with capabilities: http: "
                    f"{{private_networks: ['{address}/{prefix}']}}",
                    "address-not-public",
                )
        return _Hop(url.copy_with(fragment=None), host, port, addresses)

    async def _resolve(self, host: str, port: int) -> tuple[IPAddress, ...]:
        literal = literal_address(host)
        if literal is not None:
            return (literal,)
        try:
            answers = await self.resolver(host, port)
        except OSError as exc:
            raise StepFailed(f"http.request: could not resolve {host!r}: {exc}") from None
        addresses: dict[IPAddress, None] = {}
        for answer in answers:
            try:
                addresses[ipaddress.ip_address(answer)] = None
            except ValueError:
                raise StepFailed(
                    f"http.request: resolving {host!r} gave {answer!r}, not an IP address"
                ) from None
        if not addresses:
            raise StepFailed(f"http.request: {host!r} has no addresses")
        return tuple(addresses)

    async def _exchange(
        self, params: RequestParams, grant: HttpGrant, base_dir: Path, limit: float
    ) -> RequestResult:
        url = _parse(params.url)
        hop = await self.check(url, grant)  # before anything else, so denials are cheap
        verify = await asyncio.to_thread(_ssl_context, grant.ca_bundle, base_dir)
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
                response = await _send(client, hop, method, headers, content)
                try:
                    location = response.headers.get("location")
                    if response.status_code not in _REDIRECT_STATUSES or location is None:
                        return await _result(response, hop, redirects, grant, method)
                    status = response.status_code
                finally:
                    await response.aclose()
                if redirects >= grant.max_redirects:
                    raise _deny(
                        f"more than {grant.max_redirects} redirects (last from "
                        f"{hop.origin}); raise capabilities: http: {{max_redirects: ...}}",
                        "too-many-redirects",
                    )
                redirects += 1
                target = _redirect_target(hop.url, location)
                if hop.url.scheme == "https" and target.scheme == "http":
                    raise _deny(
                        f"redirect from {hop.origin} to plain http refused (downgrade)",
                        "downgrade",
                    )
                next_hop = await self.check(target, grant)
                if not _same_origin(hop, next_hop):
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


def _redirect_target(base: httpx2.URL, location: str) -> httpx2.URL:
    if authority_of(location) is not None:
        # A Location with a host part passes the same checks as a URL from the caller.
        _parse(location)
    try:
        return base.join(location)
    except httpx2.InvalidURL as exc:
        raise _deny(f"invalid redirect Location: {exc}", "invalid-url") from None


def _same_origin(old: _Hop, new: _Hop) -> bool:
    if old.host != new.host:
        return False
    if old.url.scheme == new.url.scheme:
        return old.port == new.port
    # http → https on the default ports is the same site upgrading itself
    return (old.url.scheme, old.port, new.url.scheme, new.port) == ("http", 80, "https", 443)


@functools.lru_cache(maxsize=1)
def _system_ssl_context() -> ssl.SSLContext:
    return httpx2.create_ssl_context(verify=True, trust_env=False)


def _ssl_context(ca_bundle: str | None, base_dir: Path) -> ssl.SSLContext:
    if ca_bundle is None:
        return _system_ssl_context()
    path = Path(ca_bundle)
    if not path.is_absolute():
        path = base_dir / path
    try:
        return ssl.create_default_context(cafile=str(path))
    except (OSError, ssl.SSLError) as exc:
        raise StepFailed(f"http.request: cannot load ca_bundle {ca_bundle!r}: {exc}") from None


# -- the wire --------------------------------------------------------------------------------


async def _send(
    client: httpx2.AsyncClient,
    hop: _Hop,
    method: str,
    headers: dict[str, str],
    content: bytes | None,
) -> httpx2.Response:
    """Send to the hop's checked addresses in turn; the host name is never resolved again."""
    failure: StepError | None = None
    for address in hop.addresses[:_MAX_ADDRESS_TRIES]:
        client.cookies.clear()  # a cookie set by one host must not reach the next
        try:
            request = client.build_request(
                method,
                hop.url.copy_with(host=str(address)),
                headers={**headers, "Host": hop.host_header()},
                content=content,
                # TLS: SNI and certificate verification name the host, not the address.
                extensions={"sni_hostname": hop.host} if hop.url.scheme == "https" else None,
            )
            return await client.send(request, stream=True)
        except httpx2.ConnectError as exc:
            failure = _translate(exc, hop, address)
        except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
            raise _translate(exc, hop, address) from None
    assert failure is not None
    raise failure


async def _result(
    response: httpx2.Response, hop: _Hop, redirects: int, grant: HttpGrant, method: str
) -> RequestResult:
    headers: dict[str, str] = {}
    for name, value in response.headers.multi_items():
        key = name.lower()
        if key in _HIDDEN_RESPONSE_HEADERS:
            continue
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    cap = grant.max_response_bytes
    data = bytearray()
    truncated = False
    if method != "HEAD":
        try:
            async for chunk in response.aiter_bytes():
                data += chunk
                # Decoded bytes bound memory (gzip bombs); received bytes bound the wire.
                if len(data) > cap or response.num_bytes_downloaded > cap:
                    truncated = True
                    del data[cap:]
                    break
        except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
            raise _translate(exc, hop, None) from None
    return RequestResult(
        status=response.status_code,
        headers=headers,
        body=bytes(data).decode(_charset(response), errors="replace"),
        truncated=truncated,
        url=str(hop.url),
        redirects=redirects,
    )


def _charset(response: httpx2.Response) -> str:
    charset = response.charset_encoding or "utf-8"
    try:
        codecs.lookup(charset)
    except LookupError:
        return "utf-8"
    return charset


def _translate(exc: Exception, hop: _Hop, address: IPAddress | None) -> StepError:
    """One clean error for an httpx2 failure; names the origin only (no path, no query)."""
    where = hop.origin + (
        f" ({address})" if address is not None and str(address) != hop.host else ""
    )
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, httpx2.TimeoutException):
        return StepTimeout(f"http.request: {where} timed out ({type(exc).__name__})")
    if isinstance(exc, httpx2.ConnectError):
        return StepFailed(f"http.request: could not connect to {where}: {detail}")
    if isinstance(exc, httpx2.RemoteProtocolError):
        return StepFailed(
            f"http.request: {where} sent a malformed response (or headers over the "
            f"client's limit): {detail}"
        )
    if isinstance(exc, httpx2.DecodingError):
        return StepFailed(f"http.request: could not decode the body from {where}: {detail}")
    return StepFailed(f"http.request: request to {where} failed ({type(exc).__name__}): {detail}")
