"""Talking to a checked hop: connect to its addresses, read a capped body, translate errors.

The host name is never resolved again: the connection goes to a checked address, with the
`Host` header, TLS SNI and certificate check still naming the host. httpx2's errors become
`StepFailed` or `StepTimeout` here, naming the origin only.
"""

from __future__ import annotations

import codecs
import functools
import ssl
from pathlib import Path

import httpx2

from capabilities.http._checks import Hop
from capabilities.http._models import HttpGrant, RequestResult
from capabilities.net import IPAddress
from engine.errors import StepError, StepFailed, StepTimeout

__all__ = ["read_body", "read_result", "send", "ssl_context"]

_MAX_ADDRESS_TRIES = 3  # addresses tried in turn when a connection is refused
_HIDDEN_RESPONSE_HEADERS = frozenset({"set-cookie", "set-cookie2"})


@functools.lru_cache(maxsize=1)
def _system_ssl_context() -> ssl.SSLContext:
    return httpx2.create_ssl_context(verify=True, trust_env=False)


def ssl_context(ca_bundle: str | None, base_dir: Path, action: str) -> ssl.SSLContext:
    if ca_bundle is None:
        return _system_ssl_context()
    path = Path(ca_bundle)
    if not path.is_absolute():
        path = base_dir / path
    try:
        return ssl.create_default_context(cafile=str(path))
    except (OSError, ssl.SSLError) as exc:
        raise StepFailed(f"{action}: cannot load ca_bundle {ca_bundle!r}: {exc}") from None


async def send(
    client: httpx2.AsyncClient,
    hop: Hop,
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


async def read_result(
    response: httpx2.Response, hop: Hop, redirects: int, grant: HttpGrant, method: str
) -> RequestResult:
    headers: dict[str, str] = {}
    for name, value in response.headers.multi_items():
        key = name.lower()
        if key in _HIDDEN_RESPONSE_HEADERS:
            continue
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    data, truncated = (b"", False)
    if method != "HEAD":
        data, truncated = await read_body(response, hop, grant.max_response_bytes)
    return RequestResult(
        status=response.status_code,
        headers=headers,
        body=data.decode(_charset(response), errors="replace"),
        truncated=truncated,
        url=str(hop.url),
        redirects=redirects,
    )


async def read_body(response: httpx2.Response, hop: Hop, cap: int) -> tuple[bytes, bool]:
    """The body, cut at `cap` bytes, and whether it was cut."""
    data = bytearray()
    try:
        async for chunk in response.aiter_bytes():
            data += chunk
            # Decoded bytes bound memory (gzip bombs); received bytes bound the wire.
            if len(data) > cap or response.num_bytes_downloaded > cap:
                del data[cap:]
                return bytes(data), True
    except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
        raise _translate(exc, hop, None) from None
    return bytes(data), False


def _charset(response: httpx2.Response) -> str:
    """The response's charset if Python knows it, else UTF-8."""
    charset = response.charset_encoding or "utf-8"
    try:
        codecs.lookup(charset)
    except LookupError:
        return "utf-8"
    return charset


def _translate(exc: Exception, hop: Hop, address: IPAddress | None) -> StepError:
    """One clean error for an httpx2 failure; names the origin only (no path, no query)."""
    where = hop.origin + (
        f" ({address})" if address is not None and str(address) != hop.host else ""
    )
    detail = str(exc) or type(exc).__name__
    action = hop.action
    if isinstance(exc, httpx2.TimeoutException):
        return StepTimeout(f"{action}: {where} timed out ({type(exc).__name__})")
    if isinstance(exc, httpx2.ConnectError):
        return StepFailed(f"{action}: could not connect to {where}: {detail}")
    if isinstance(exc, httpx2.RemoteProtocolError):
        return StepFailed(
            f"{action}: {where} sent a malformed response (or headers over the "
            f"client's limit): {detail}"
        )
    if isinstance(exc, httpx2.DecodingError):
        return StepFailed(f"{action}: could not decode the body from {where}: {detail}")
    return StepFailed(f"{action}: request to {where} failed ({type(exc).__name__}): {detail}")
