"""The models of the `http` family: its grant (`capabilities: http:`), and the params and
result of `http.request` and `http.fetch`."""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from capabilities.net import IPNetwork, canonical_pattern
from engine.capability import CallContext

__all__ = [
    "FetchParams",
    "FetchResult",
    "HttpGrant",
    "Method",
    "RequestParams",
    "RequestResult",
    "grant_of",
]

Method = Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]

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


def grant_of(ctx: CallContext) -> HttpGrant:
    """The call's grant as an `HttpGrant` (a worker's registry may hand over another
    model of the same data)."""
    if isinstance(ctx.grant, HttpGrant):
        return ctx.grant
    return HttpGrant.model_validate(ctx.grant.model_dump())


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


class FetchParams(BaseModel):
    """Params of `http.fetch`: a GET of `url`, with `headers` over the grant's."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(max_length=16_384)
    headers: dict[str, str] = {}

    @field_validator("headers")
    @classmethod
    def _valid_headers(cls, value: dict[str, str]) -> dict[str, str]:
        _check_headers(value)
        return value


class FetchResult(BaseModel):
    """Result of `http.fetch`.

    Attributes:
        status: the final response's status code; 4xx and 5xx are results, not errors.
        url: the final URL, after redirects.
        title: the HTML page's `<title>`, or None (a text type, or a page without one).
        content: an HTML page's main content as Markdown (navigation, sidebars, ads and
            footers left out), or a text type's text as sent.
        format: `markdown`, or `text` for a text type, and for a page whose main content
            could not be told apart or that has too many elements to search for it (then
            `content` is all of its text).
        content_type: the media type the server sent (`text/html`), without parameters.
        redirects: how many redirects were followed.
    """

    status: int
    url: str
    title: str | None
    content: str
    format: Literal["markdown", "text"]
    content_type: str
    redirects: int
