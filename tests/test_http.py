"""Unit tests of the http capability's pure parts: host canonicalisation, allow-list
matching, the address classifier, URL parsing, and the grant and params models."""

from __future__ import annotations

import ipaddress

import pytest
from pydantic import ValidationError

from capabilities import Registry
from capabilities import http as http_cap
from capabilities.net import (
    authority_of,
    canonical_host,
    canonical_pattern,
    embedded_ipv4,
    host_matches,
    not_public_reason,
    parse_url,
    permitted_by,
)


def test_public_names() -> None:
    assert set(http_cap.__all__) == {
        "FetchParams",
        "FetchResult",
        "HttpGrant",
        "RequestParams",
        "RequestResult",
        "Resolver",
        "register",
        "system_resolver",
    }
    for name in http_cap.__all__:
        assert getattr(http_cap, name) is not None


def test_register_adds_family_and_action() -> None:
    registry = Registry()
    http_cap.register(registry)
    assert registry.families["http"].grant_model is http_cap.HttpGrant
    action = registry.actions["http.request"]
    assert action.result_model is http_cap.RequestResult
    assert "not errors" in action.description
    fetch = registry.actions["http.fetch"]
    assert fetch.params_model is http_cap.FetchParams
    assert fetch.result_model is http_cap.FetchResult
    assert fetch.side_effects is False  # a GET: ungated, run in a --dry-run


# -- host names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("allowed.example", "allowed.example"),
        ("Allowed.Example.", "allowed.example"),
        ("LOCALHOST.", "localhost"),
        ("ｌｏｃａｌｈｏｓｔ", "localhost"),  # fullwidth letters map to ASCII (UTS #46)
        ("bücher.example", "xn--bcher-kva.example"),
        ("XN--BCHER-KVA.example", "xn--bcher-kva.example"),
        ("_dmarc.allowed.example", "_dmarc.allowed.example"),
        ("0x7f000001", "0x7f000001"),  # a name to us; the resolved address decides
        ("127.1", "127.1"),
        ("127.0.0.1", "127.0.0.1"),
        ("[::1]", "::1"),
        ("::ffff:127.0.0.1", "::ffff:7f00:1"),
        ("[FD00:EC2::254]", "fd00:ec2::254"),
    ],
)
def test_canonical_host(raw: str, canonical: str) -> None:
    assert canonical_host(raw) == canonical


@pytest.mark.parametrize(
    "raw",
    ["", ".", "a..b", "x..", "a b", "a%2fb", "-a.example", "a-.example", "a/b", "a@b", "x" * 64],
)
def test_canonical_host_rejects(raw: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011  # the message varies by cause
        canonical_host(raw)


@pytest.mark.parametrize(
    ("host", "pattern", "allowed"),
    [
        ("allowed.example", "allowed.example", True),
        ("allowed.example.evil.com", "allowed.example", False),
        ("evilallowed.example", "allowed.example", False),
        ("api.allowed.example", "allowed.example", False),
        ("api.allowed.example", "*.allowed.example", True),
        ("a.b.allowed.example", "*.allowed.example", True),
        ("allowed.example", "*.allowed.example", False),
        ("evilallowed.example", "*.allowed.example", False),
        ("allowed.example.evil.com", "*.allowed.example", False),
    ],
)
def test_host_matches(host: str, pattern: str, allowed: bool) -> None:
    assert host_matches(host, canonical_pattern(pattern)) is allowed


@pytest.mark.parametrize(
    "pattern", ["*", "*.com", "a.*.example", "*example.com", "**.example.com", "*.127.0.0.1"]
)
def test_bad_allow_patterns(pattern: str) -> None:
    with pytest.raises(ValueError, match=r"\*|wildcard"):
        canonical_pattern(pattern)


# -- addresses -----------------------------------------------------------------------------------

NOT_PUBLIC = {
    # C2-C5: loopback and unspecified, however spelled once resolved
    "127.0.0.1": "loopback",
    "127.255.255.254": "loopback",
    "::1": "loopback",
    "::ffff:127.0.0.1": "loopback",
    "::ffff:7f00:1": "loopback",
    "0.0.0.0": "unspecified",
    "::": "unspecified",
    "::7f00:1": "",  # IPv4-compatible (deprecated)
    # C6: metadata endpoints
    "169.254.169.254": "link-local",
    "fd00:ec2::254": "private",
    "fe80::1": "link-local",
    # C7: private, shared, special
    "10.0.0.5": "private",
    "172.16.0.1": "private",
    "172.31.255.255": "private",
    "192.168.1.1": "private",
    "100.64.0.1": "shared",
    "100.127.255.255": "shared",
    "198.18.0.1": "",
    "192.0.0.8": "",
    "192.0.2.1": "",
    "192.88.99.1": "",
    "240.0.0.1": "",
    "255.255.255.255": "",
    "224.0.0.1": "multicast",
    "239.255.255.250": "multicast",
    "ff02::1": "multicast",
    "fec0::1": "site-local",
    "2001:db8::1": "",
    "3fff::1": "",
    # IPv6 forms that embed an IPv4 address
    "64:ff9b::7f00:1": "loopback",
    "64:ff9b::a00:5": "private",
    "64:ff9b:1::a00:5": "",
    "2002:7f00:1::": "loopback",
    "2002:a9fe:a9fe::": "link-local",
    "2001:0:4136:e378:8000:63bf:80ff:fffe": "",  # Teredo, client 127.0.0.1
}

PUBLIC = [
    "93.184.216.34",
    "8.8.8.8",
    "1.1.1.1",
    "2606:4700::1111",
    "2001:4860:4860::8888",
    "::ffff:93.184.216.34",
    "64:ff9b::5db8:d822",  # NAT64 of 93.184.216.34
    "2002:5db8:d822::1",  # 6to4 of 93.184.216.34
]


@pytest.mark.parametrize(("address", "why"), NOT_PUBLIC.items())
def test_not_public(address: str, why: str) -> None:
    reason = not_public_reason(ipaddress.ip_address(address))
    assert reason is not None
    assert why in reason


@pytest.mark.parametrize("address", PUBLIC)
def test_public(address: str) -> None:
    assert not_public_reason(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    ("address", "inner"),
    [
        ("::ffff:127.0.0.1", "127.0.0.1"),
        ("64:ff9b::7f00:1", "127.0.0.1"),
        ("2002:7f00:1::", "127.0.0.1"),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "127.0.0.1"),
        ("2606:4700::1111", None),
        ("10.0.0.1", None),
    ],
)
def test_embedded_ipv4(address: str, inner: str | None) -> None:
    found = embedded_ipv4(ipaddress.ip_address(address))
    assert (str(found) if found else None) == inner


@pytest.mark.parametrize(
    ("address", "networks", "granted"),
    [
        ("127.0.0.1", ["127.0.0.0/8"], True),
        ("::ffff:127.0.0.1", ["127.0.0.0/8"], True),  # the very same destination
        ("64:ff9b::7f00:1", ["127.0.0.0/8"], False),  # a NAT64 gateway's loopback
        ("2002:7f00:1::", ["127.0.0.0/8"], False),
        ("10.0.0.5", ["127.0.0.0/8"], False),
        ("10.0.0.5", ["10.0.0.0/24"], True),
        ("fd00::1", ["fd00::/8"], True),
        ("fd00::1", [], False),
    ],
)
def test_permitted_by(address: str, networks: list[str], granted: bool) -> None:
    nets = [ipaddress.ip_network(n) for n in networks]
    assert (permitted_by(ipaddress.ip_address(address), nets) is not None) is granted


# -- URLs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "authority"),
    [
        ("https://a.example/x", "a.example"),
        ("https://127.0.0.1:443\\@allowed.example/", "127.0.0.1:443\\@allowed.example"),
        ("https://127.0.0.1#@allowed.example/", "127.0.0.1"),
        ("//a.example?x", "a.example"),
        ("/just/a/path", None),
        ("mailto:x@y", None),
    ],
)
def test_authority_of(url: str, authority: str | None) -> None:
    assert authority_of(url) == authority


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1:443\\@allowed.example/",
        "https://allowed.example\\@127.0.0.1/",
        "https:\\\\127.0.0.1/",
        "https://0177.0.0.1/",
        "https://ｌｏｃａｌｈｏｓｔ/",
        "https://allowed.example\t/",
    ],
)
def test_parse_url_rejects(url: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011  # the message varies by cause
        parse_url(url)


def test_parse_url_components_are_what_gets_checked() -> None:
    url = parse_url("https://allowed.example@127.0.0.1/")
    assert (url.userinfo, url.raw_host) == (b"allowed.example", b"127.0.0.1")
    url = parse_url("https://127.0.0.1#@allowed.example/")
    assert url.raw_host == b"127.0.0.1"


# -- models --------------------------------------------------------------------------------------


def test_grant_defaults_and_canonical_allow() -> None:
    grant = http_cap.HttpGrant(allow=["API.GitHub.com.", "*.Example.ORG", "ｌｏｃａｌｈｏｓｔ"])
    assert grant.allow == ["api.github.com", "*.example.org", "localhost"]
    assert grant.allowed_ports() == {443}
    assert (grant.allow_http, grant.max_redirects, grant.max_response_bytes) == (
        False,
        5,
        10_000_000,
    )
    assert http_cap.HttpGrant(allow=[], allow_http=True).allowed_ports() == {80, 443}


@pytest.mark.parametrize(
    "raw",
    [
        {},  # allow is required
        {"allow": ["a.example"], "ports": [0]},
        {"allow": ["a.example"], "ports": [70000]},
        {"allow": ["a.example"], "private_networks": ["10.0.0.0/33"]},
        {"allow": ["a.example"], "private_networks": ["not-a-net"]},
        {"allow": ["*"]},
        {"allow": ["a.example"], "headers": {"Host": "evil"}},
        {"allow": ["a.example"], "headers": {"X": "a\r\nInjected: 1"}},
        {"allow": ["a.example"], "proxy": "http://p"},
        {"allow": ["a.example"], "max_response_bytes": -1},
    ],
)
def test_grant_rejects(raw: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        http_cap.HttpGrant.model_validate(raw)


def test_grant_private_networks_are_normalised() -> None:
    grant = http_cap.HttpGrant(allow=[], private_networks=["10.1.2.3/8", "fd00::/8"])
    assert grant.private_networks == ["10.0.0.0/8", "fd00::/8"]


def test_grant_headers_are_secret() -> None:
    grant = http_cap.HttpGrant.model_validate(
        {"allow": ["a.example"], "headers": {"Authorization": "Bearer s3cr3t"}}
    )
    assert "s3cr3t" not in repr(grant)
    assert "s3cr3t" not in grant.model_dump_json()
    assert grant.headers["Authorization"].get_secret_value() == "Bearer s3cr3t"


@pytest.mark.parametrize(
    "raw",
    [
        {"url": "https://a.example", "body": "x", "json": {"a": 1}},
        {"url": "https://a.example", "method": "TRACE"},
        {"url": "https://a.example", "headers": {"Content-Length": "5"}},
        {"url": "https://a.example", "headers": {"Transfer-Encoding": "chunked"}},
        {"url": "https://a.example", "headers": {"bad name": "x"}},
        {"url": "https://a.example", "headers": {"X-A": "1\nX-B: 2"}},
        {"url": "https://a.example", "extra": 1},
        {"url": "x" * 20_000},
    ],
)
def test_params_reject(raw: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        http_cap.RequestParams.model_validate(raw)


def test_params_json_alias() -> None:
    params = http_cap.RequestParams.model_validate({"url": "https://a.example", "json": [1]})
    assert params.json_ == [1]
    schema = http_cap.RequestParams.model_json_schema()
    assert "json" in schema["properties"]
