"""`http.fetch`: a web page's main content as Markdown, under `http.request`'s checks.

Through the real `planloom` command where a user meets it: the README's recipe, `validate`
and `tools`, an agent step whose scripted model calls it (behind `FakeOpenAIServer`), and a
recorded run replayed with the server gone. At the capability level (a `Sandbox` with a
fake resolver, so names never reach DNS) for the edge cases: the grant's checks on the
first hop and on a redirect, the size cap, text and binary types, charsets, error pages and
the deadline that covers the conversion. Real HTTP servers on 127.0.0.1 serve the pages.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import lxml.html
import pytest
from _procs import planloom

from capabilities import Registry, Sandbox
from capabilities import http as http_cap
from capabilities.http._page import MAX_ELEMENTS
from engine.errors import CapabilityDenied, StepFailed, StepTimeout
from engine.testing import ChatReply, ChatRequest, FakeOpenAIServer, ScriptedModel, ToolCall

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

ARTICLE = b"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Barn owls at night | Field Notes</title></head>
<body>
<header><nav><a href="/">Home</a> <a href="/birds/">All birds</a>
<a href="/shop/">Shop: binoculars and feeders</a></nav></header>
<div class="layout">
<aside class="sidebar">
<div class="ad">Sponsored: premium bird seed today, 20% off with code OWL20</div>
<ul class="related"><li><a href="/crows/">Crows of the city</a></li>
<li><a href="/gulls/">Gulls on the shore</a></li></ul>
</aside>
<main><article>
<h1>Barn owls at night</h1>
<p>Barn owls hunt over open fields after dusk. Their hearing is so sharp that they catch
voles under snow, and their soft-edged feathers make their flight almost silent.</p>
<h2>What they eat</h2>
<p>A barn owl eats three or four small mammals a night. Researchers learn the diet from the
pellets the birds cough up, which keep the bones and fur of their prey, as the
<a href="/surveys/pellets">pellet survey</a> explains in detail.</p>
<ul><li>Field voles</li><li>Wood mice</li><li>Common shrews</li></ul>
<h2>Where they nest</h2>
<p>They nest in old barns, hollow trees and church towers, and they use the same site for
years when it stays quiet and dry through the winter.</p>
</article></main></div>
<footer><p>Copyright 2024 Field Notes. Privacy policy. Contact the editors.</p></footer>
</body></html>
"""
# Text of the page that is not its article: none of it may come back.
CHROME = ("Home", "All birds", "Shop", "Sponsored", "OWL20", "Crows", "Gulls", "Copyright")
LIST_ITEMS = ["Field voles", "Wood mice", "Common shrews"]

NOTES = "owl survey\n- 12 pellets\n- 3 nests\n<b>not HTML</b>\n"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
LATIN1 = (
    "<html><head><title>Café des chouettes</title></head><body><article><p>Au café on "
    "parle des chouettes effraies, de leurs nids dans les granges et de la crème des "
    "observations faites à la tombée de la nuit, près des champs où elles chassent.</p>"
    "</article></body></html>"
).encode("latin-1")
MISSING = b"<html><head><title>Not found</title></head><body><p>No such page.</p></body></html>"


def _long_page(paragraphs: int) -> bytes:
    """A page of four elements a paragraph, the shape its main content is slowest to find
    in; it has a navigation bar."""
    para = '<p>Owl {0} hunts <b>voles</b>, <i>mice</i> and <a href="/owls/{0}">shrews</a>.</p>'
    article = "".join(para.format(i) for i in range(paragraphs))
    return (
        "<html><head><title>Many owls</title></head><body><nav><a href='/'>Home</a></nav>"
        f"<article>{article}</article></body></html>"
    ).encode()


def _elements(page: bytes) -> int:
    return sum(1 for _ in lxml.html.document_fromstring(page).iter())


# -- the server ----------------------------------------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        with self.server.lock:
            self.server.hits.append(url.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        route = ROUTES.get(url.path, _missing)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            route(self, query)
            with self.server.lock:
                self.server.sent.append(url.path)  # the whole body left
        self.close_connection = True

    def reply(
        self, status: int, body: bytes, content_type: str | None, *extra: tuple[str, str]
    ) -> None:
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        for name, value in extra:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _streamed(h: _Handler, query: dict[str, str]) -> None:
    """The article in chunks, with no Content-Length to say its size first."""
    h.send_response(200)
    h.send_header("Content-Type", "text/html")
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    for start in range(0, len(ARTICLE), 256):
        chunk = ARTICLE[start : start + 256]
        h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    h.wfile.write(b"0\r\n\r\n")


def _missing(h: _Handler, query: dict[str, str]) -> None:
    h.reply(404, MISSING, "text/html; charset=utf-8")


HTML = "text/html; charset=utf-8"
SLOW = _long_page(MAX_ELEMENTS // 4 - 200)  # converted, in seconds (300 KB)
HUGE = _long_page(MAX_ELEMENTS // 4 + 200)  # past the bound: not searched for its content

ROUTES: dict[str, Callable[[_Handler, dict[str, str]], None]] = {
    "/article.html": lambda h, q: h.reply(200, ARTICLE, HTML),
    "/streamed.html": _streamed,
    "/notes.txt": lambda h, q: h.reply(200, NOTES.encode(), "text/plain; charset=utf-8"),
    "/logo.png": lambda h, q: h.reply(200, PNG, "image/png"),
    "/untyped-page": lambda h, q: h.reply(200, ARTICLE, None),
    "/untyped-blob": lambda h, q: h.reply(200, PNG, None),
    "/latin1.html": lambda h, q: h.reply(200, LATIN1, "text/html; charset=iso-8859-1"),
    "/redirect": lambda h, q: h.reply(302, b"", HTML, ("Location", q["to"])),
    "/slow.html": lambda h, q: h.reply(200, SLOW, HTML),
    "/huge.html": lambda h, q: h.reply(200, HUGE, HTML),
}


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.hits: list[str] = []
        self.sent: list[str] = []

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client hanging up on purpose (caps, deadlines)


@contextlib.contextmanager
def _serving() -> Iterator[_Server]:
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture(scope="module")
def site() -> Iterator[_Server]:
    with _serving() as server:
        yield server


@pytest.fixture
def server(site: _Server) -> _Server:
    with site.lock:
        site.hits.clear()
        site.sent.clear()
    return site


def grant_yaml(port: int) -> str:
    return (
        f"{{allow: [127.0.0.1], ports: [{port}], allow_http: true, "
        "private_networks: [127.0.0.1/32]}"
    )


def assert_is_the_article(markdown: str) -> None:
    """The article's text as Markdown, and nothing of the page around it."""
    lines = markdown.splitlines()
    assert lines[0] == "# Barn owls at night"
    assert "## What they eat" in lines
    assert "## Where they nest" in lines
    assert [line[2:] for line in lines if line.startswith("- ")] == LIST_ITEMS
    words = " ".join(markdown.split())  # a line break inside a paragraph is a space
    assert "Barn owls hunt over open fields after dusk." in words
    assert "as the [pellet survey](" in words
    for chrome in CHROME:
        assert chrome not in markdown, chrome


# -- through the command -------------------------------------------------------------------------


def readme_recipe(port: int) -> str:
    found = re.search(r"```yaml\n(# read-page\.yaml.*?)```", README, re.S)
    assert found, "the README's http.fetch example is missing"
    assert "8000" in found.group(1)
    return found.group(1).replace("8000", str(port))


def test_the_readme_example_gives_the_article_as_markdown(tmp_path: Path, server: _Server) -> None:
    (tmp_path / "read-page.yaml").write_text(readme_recipe(server.port))

    # no --yes and no terminal: a gated call would be denied, so this shows it is not gated
    done = planloom("run", "read-page.yaml", "--json", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["approvals"] == []
    assert result["outputs"]["title"] == "Barn owls at night | Field Notes"
    assert_is_the_article(result["outputs"]["text"])
    output = result["steps"]["page"]["output"]
    url = f"http://127.0.0.1:{server.port}/article.html"
    assert f"[pellet survey](http://127.0.0.1:{server.port}/surveys/pellets)" in output["content"]
    assert {k: v for k, v in output.items() if k not in ("content", "title")} == {
        "status": 200,
        "url": url,
        "format": "markdown",
        "content_type": "text/html",
        "redirects": 0,
    }
    assert server.hits == ["/article.html"]

    dry = planloom("run", "read-page.yaml", "--dry-run", "--json", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    dried = json.loads(dry.stdout)
    assert dried["dry_run"] == []  # nothing held back: a read-only call runs
    assert dried["steps"]["page"]["output"] == output


def test_tools_and_validate_know_the_action(tmp_path: Path) -> None:
    tools = planloom("tools", "--json", cwd=tmp_path)
    assert tools.returncode == 0, tools.stderr
    row = next(r for r in json.loads(tools.stdout) if r["name"] == "http.fetch")
    assert row["side_effects"] is False
    assert list(row["params"]["properties"]) == ["url", "headers"]
    assert row["params"]["required"] == ["url"]
    assert list(row["output"]["properties"]) == [
        "status", "url", "title", "content", "format", "content_type", "redirects",
    ]  # fmt: skip

    (tmp_path / "r.yaml").write_text(
        "version: 1\ncapabilities:\n  http: {allow: [docs.example]}\nsteps:\n"
        "  - {id: far, tool: http.fetch, params: {url: 'https://example.org/a'}}\n"
        "  - {id: post, tool: http.fetch, params: {url: 'https://docs.example/', method: POST}}\n"
    )
    checked = planloom("validate", "r.yaml", cwd=tmp_path)
    assert checked.returncode != 0
    said = checked.stdout + checked.stderr
    assert "error[http.host-not-allowed]: http.fetch: host 'example.org' is not granted" in said
    assert "r.yaml:5:" in said  # located at the step that wrote it
    assert "method" in said.split("r.yaml:6:", 1)[1]  # http.fetch has no method: a GET


def test_an_agent_reads_a_page_through_http_fetch(tmp_path: Path, server: _Server) -> None:
    url = f"http://127.0.0.1:{server.port}/article.html"
    requests: list[ChatRequest] = []

    def model(request: ChatRequest) -> ChatReply | str:
        requests.append(request)
        results = request.tool_results()
        if not results:
            return ChatReply(tool_calls=[ToolCall("http__fetch", {"url": url}, id="c1")])
        page = json.loads(results[-1][1])
        eats = [line[2:] for line in page["content"].splitlines() if line.startswith("- ")]
        return f"{page['title']}: they eat {', '.join(eats)}"

    (tmp_path / "ask.yaml").write_text(
        "version: 1\nname: ask\nllm: {model: scripted}\n"
        f"capabilities:\n  http: {grant_yaml(server.port)}\n"
        "steps:\n  - id: read\n"
        "    agent: {goal: 'What do barn owls eat?', tools: [http.fetch], max_iterations: 3}\n"
    )
    with FakeOpenAIServer(ScriptedModel(model)) as llm:
        done = planloom("run", "ask.yaml", "--base-url", llm.base_url, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr

    answer = json.loads(done.stdout)["steps"]["read"]["output"]
    assert answer == "Barn owls at night | Field Notes: they eat " + ", ".join(LIST_ITEMS)
    (tool,) = requests[0].tools or []
    assert tool["function"]["name"] == "http__fetch"
    assert set(tool["function"]["parameters"]["properties"]) == {"url", "headers"}
    seen = requests[-1].tool_results()[-1][1]
    assert "## What they eat" in seen
    assert not any(chrome in json.loads(seen)["content"] for chrome in CHROME)


@pytest.mark.slow
def test_a_recorded_fetch_replays_with_the_server_gone(tmp_path: Path) -> None:
    with _serving() as live:
        (tmp_path / "read-page.yaml").write_text(readme_recipe(live.port))
        recorded = planloom("run", "read-page.yaml", "--record", "c.yaml", "--json", cwd=tmp_path)
        assert recorded.returncode == 0, recorded.stderr
        assert live.hits == ["/article.html"]
    cassette = (tmp_path / "c.yaml").read_text()
    assert "http.fetch" in cassette
    assert "What they eat" in cassette

    replayed = planloom("run", "read-page.yaml", "--replay", "c.yaml", "--json", cwd=tmp_path)

    assert replayed.returncode == 0, replayed.stderr
    before, after = json.loads(recorded.stdout), json.loads(replayed.stdout)
    assert after["outputs"] == before["outputs"]
    assert after["steps"]["page"]["output"] == before["steps"]["page"]["output"]
    assert_is_the_article(after["outputs"]["text"])


# -- at the capability level ---------------------------------------------------------------------


@dataclass
class FakeResolver:
    table: dict[str, list[str]]
    calls: list[str] = field(default_factory=list)

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        if host not in self.table:
            raise OSError(f"no such host: {host}")
        return self.table[host]


@dataclass
class Env:
    server: _Server
    tmp: Path
    resolver: FakeResolver

    def url(self, path: str, host: str = "page.example") -> str:
        return f"http://{host}:{self.server.port}{path}"

    def fetch(self, url: str, *, step_timeout: float = 10.0, **grant: Any) -> dict[str, Any]:
        registry = Registry()
        http_cap.register(registry, resolver=self.resolver)
        grants = {
            "allow": ["page.example", "*.page.example"],
            "ports": [self.server.port],
            "allow_http": True,
            "private_networks": ["127.0.0.1/32"],
            **grant,
        }
        sandbox = Sandbox(registry, grants={"http": grants}, base_dir=self.tmp)
        result = asyncio.run(
            sandbox.call("http.fetch", {"url": url}, step_id="s", timeout=step_timeout)
        )
        assert isinstance(result, dict)
        return result


@pytest.fixture
def env(server: _Server, tmp_path: Path) -> Env:
    table = {
        "page.example": ["127.0.0.1"],
        "metadata.page.example": ["169.254.169.254"],
        "intranet.page.example": ["10.0.0.5"],
        "elsewhere.example": ["127.0.0.1"],
    }
    return Env(server, tmp_path, FakeResolver(table))


def test_a_granted_page_comes_back_as_markdown(env: Env) -> None:
    result = env.fetch(env.url("/article.html"))
    assert_is_the_article(result["content"])
    assert result["title"] == "Barn owls at night | Field Notes"
    assert env.resolver.calls == ["page.example"]


def test_a_host_not_granted_is_refused_before_any_connection(env: Env) -> None:
    with pytest.raises(CapabilityDenied) as info:
        env.fetch(env.url("/article.html", host="elsewhere.example"))
    assert info.value.rule == "http.host-not-allowed"
    assert "http.fetch: host 'elsewhere.example' is not granted" in info.value.message
    assert env.server.hits == []


def test_loopback_is_refused_unless_the_grant_opens_it(env: Env) -> None:
    with pytest.raises(CapabilityDenied) as info:
        env.fetch(env.url("/article.html"), private_networks=[])
    assert info.value.rule == "http.address-not-public"
    assert "resolved to 127.0.0.1" in info.value.message
    assert env.server.hits == []


@pytest.mark.parametrize(
    ("target", "rule", "named"),
    [
        ("metadata.page.example", "http.address-not-public", "169.254.169.254"),
        ("intranet.page.example", "http.address-not-public", "10.0.0.5"),
        ("elsewhere.example", "http.host-not-allowed", "elsewhere.example"),
    ],
)
def test_a_redirect_to_a_refused_address_is_refused(
    env: Env, target: str, rule: str, named: str
) -> None:
    location = env.url("/article.html", host=target)
    with pytest.raises(CapabilityDenied) as info:
        env.fetch(env.url("/redirect?" + urlencode({"to": location})))
    assert info.value.rule == rule
    assert f"{rule}: http.fetch: " in info.value.message
    assert named in info.value.message
    assert env.server.hits == ["/redirect"]  # the redirect's target was never connected to


def test_a_redirect_within_the_grant_is_followed(env: Env) -> None:
    result = env.fetch(env.url("/redirect?to=/article.html"))
    assert result["redirects"] == 1
    assert result["url"] == env.url("/article.html")
    assert_is_the_article(result["content"])


@pytest.mark.parametrize("path", ["/article.html", "/streamed.html"])
def test_a_page_over_the_size_limit_fails_naming_it(env: Env, path: str) -> None:
    with pytest.raises(StepFailed) as info:
        env.fetch(env.url(path), max_response_bytes=1000)
    message = info.value.message
    assert message.startswith(f"http.fetch: the page from http://page.example:{env.server.port} ")
    assert "the grant's max_response_bytes (1,000 bytes)" in message
    assert "capabilities: http: {max_response_bytes: N}" in message
    # the same page fits the default limit
    assert env.fetch(env.url(path))["format"] == "markdown"


def test_a_text_page_comes_back_as_text(env: Env) -> None:
    result = env.fetch(env.url("/notes.txt"))
    assert result == {
        "status": 200,
        "url": env.url("/notes.txt"),
        "title": None,
        "content": NOTES,  # as sent: its `<b>` is text, not markup
        "format": "text",
        "content_type": "text/plain",
        "redirects": 0,
    }


def test_an_image_fails_with_a_clear_error(env: Env) -> None:
    with pytest.raises(StepFailed) as info:
        # over the size limit too: the type is judged first, before any of the body is read
        env.fetch(env.url("/logo.png"), max_response_bytes=100)
    assert info.value.message == (
        f"http.fetch: http://page.example:{env.server.port} sent image/png, not a web page "
        "or text; http.fetch reads HTML (as Markdown) and text types only"
    )


def test_a_body_sent_without_a_type_is_judged_by_its_first_bytes(env: Env) -> None:
    page = env.fetch(env.url("/untyped-page"))
    assert (page["format"], page["content_type"]) == ("markdown", "text/html")
    assert_is_the_article(page["content"])
    with pytest.raises(StepFailed, match="sent no Content-Type and a body that looks binary"):
        env.fetch(env.url("/untyped-blob"))


def test_the_declared_charset_is_used(env: Env) -> None:
    result = env.fetch(env.url("/latin1.html"))
    assert result["title"] == "Café des chouettes"
    assert "Au café on parle des chouettes effraies" in result["content"]
    assert "crème" in result["content"]


def test_an_error_page_is_a_result(env: Env) -> None:
    result = env.fetch(env.url("/nowhere"))
    assert result["status"] == 404
    assert result["title"] == "Not found"
    assert "No such page." in result["content"]


def test_a_page_of_too_many_elements_comes_back_as_all_its_text(env: Env) -> None:
    assert _elements(SLOW) < MAX_ELEMENTS < _elements(HUGE)
    started = time.monotonic()
    result = env.fetch(env.url("/huge.html"))
    assert time.monotonic() - started < 10  # linear: a fraction of a second here
    assert (result["format"], result["title"]) == ("text", "Many owls")
    text = result["content"]
    assert text.startswith("Home Owl 0 hunts voles, mice and shrews. Owl 1 hunts")  # the nav too
    assert text.endswith(f"Owl {MAX_ELEMENTS // 4 + 199} hunts voles, mice and shrews.")


@pytest.mark.slow
def test_the_conversion_is_off_the_event_loop_and_within_the_deadline(env: Env) -> None:
    """The grant's timeout ends the call while the page converts (the exchange itself
    was over: the server sent the whole page), and the event loop kept running meanwhile."""
    gaps: list[float] = []
    ended: list[float] = []

    async def ticking(work: Any) -> Any:
        stop = asyncio.Event()

        async def tick() -> None:
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        ticker = asyncio.create_task(tick())
        try:
            return await work
        finally:
            ended.append(time.monotonic())
            stop.set()
            await ticker

    registry = Registry()
    http_cap.register(registry, resolver=env.resolver)
    grant = {
        "allow": ["page.example"],
        "ports": [env.server.port],
        "allow_http": True,
        "private_networks": ["127.0.0.1/32"],
        "timeout": 0.5,
    }
    sandbox = Sandbox(registry, grants={"http": grant}, base_dir=env.tmp)
    call = sandbox.call("http.fetch", {"url": env.url("/slow.html")}, step_id="s", timeout=30)
    started = time.monotonic()
    with pytest.raises(StepTimeout) as info:
        asyncio.run(ticking(call))  # then waits for the abandoned conversion to end
    assert info.value.message == "http.fetch: no page fetched and converted within 0.5 s"
    assert env.server.sent == ["/slow.html"]  # the page had come whole: it was converting
    assert ended[0] - started < 1.5  # the call ended at its deadline
    assert max(gaps) < 0.5, max(gaps)  # the loop ran on while the page converted
