"""What `http.fetch` makes of a body: an HTML page's main content as Markdown, a text type's
text as it is; anything else is not read.

The main content is found by trafilatura (`extract(..., output_format="markdown")`): it
scores the page's blocks and leaves out navigation, sidebars, ads, comments and footers,
and writes headings, paragraphs, lists, tables and links as Markdown. It is pure Python
over lxml and runs in a worker thread (`to_page` is blocking), which the call's deadline
ends but cannot stop. Its time grows faster than the page (measured on 2 cores: pages of
25,000 elements took 1.4 to 3.4 s, of 50,000 up to 10 s, of 160,000 six minutes), so the
grant's `max_response_bytes` alone does not bound it: a page of more than
`MAX_ELEMENTS` elements is not searched for its main content, and all of its text comes
back instead, which takes linear time (0.2 s for 50,000).
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Literal

__all__ = ["MAX_ELEMENTS", "Kind", "Page", "kind_of", "media_type", "sniff", "to_page"]

Kind = Literal["html", "text"]

_HTML = frozenset({"text/html", "application/xhtml+xml"})
# Application types that are text a person (or a model) reads as it is.
_TEXT = frozenset(
    {
        "application/json",
        "application/x-ndjson",
        "application/xml",
        "application/javascript",
        "application/ecmascript",
        "application/x-javascript",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/sql",
        "application/x-sh",
    }
)
_TEXT_SUFFIXES = ("+json", "+xml", "+yaml")
_SNIFF_BYTES = 4096
MAX_ELEMENTS = 25_000
"""The most elements a page may have to be searched for its main content."""


@dataclass(frozen=True)
class Page:
    """A body made readable: its title (HTML only), its content and how it is written."""

    title: str | None
    content: str
    format: Literal["markdown", "text"]


def media_type(header: str | None) -> str:
    """`text/html` from `Text/HTML; charset=utf-8`; empty when there is none."""
    return (header or "").split(";", 1)[0].strip().lower()


def kind_of(media: str) -> Kind | None:
    """Whether a declared media type is HTML, text, or neither (None: not read)."""
    if media in _HTML:
        return "html"
    if media.startswith("text/") or media in _TEXT or media.endswith(_TEXT_SUFFIXES):
        return "text"
    return None


def sniff(body: bytes) -> Kind | None:
    """What a body sent without a `Content-Type` is: HTML if it begins like a page, text
    if it is UTF-8 without NUL bytes, else None (binary)."""
    head = body[:_SNIFF_BYTES]
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if start.startswith((b"<!doctype html", b"<html", b"<head", b"<body")):
        return "html"
    if b"\0" in head:
        return None
    try:
        # a multi-byte character cut at the sniffed length is not a sign of binary
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return None
    return "text"


def to_page(body: bytes, kind: Kind, charset: str | None, url: str) -> Page:
    """The body as a `Page`; `charset` is the one the server declared, if any (an HTML
    page without one says its own, in a `<meta>` tag, or is guessed)."""
    if kind == "text":
        return Page(None, _decode(body, charset or "utf-8"), "text")
    return _html(body, charset, url)


def _html(body: bytes, charset: str | None, url: str) -> Page:
    # Imported here: trafilatura (with lxml, justext, htmldate) is loaded only when a page
    # is converted, not for every command that loads the `http` family.
    import trafilatura

    document = _decode(body, charset) if charset else body
    tree = trafilatura.load_html(document)
    if tree is None:  # nothing lxml could read as HTML
        return Page(None, _decode(body, charset or "utf-8"), "text")
    title = _title(tree.findtext(".//title"))
    if sum(1 for _ in tree.iter()) > MAX_ELEMENTS:
        return Page(title, trafilatura.html2txt(tree), "text")
    markdown = trafilatura.extract(
        tree,
        url=url,
        output_format="markdown",
        include_comments=False,  # readers' comments are not the page's content
        include_tables=True,
        include_links=True,
        include_formatting=True,
        include_images=False,
    )
    if markdown:
        return Page(title, markdown, "markdown")
    # No main content told apart (a page of links, a form): all of its text, not nothing.
    return Page(title, trafilatura.html2txt(document), "text")


def _title(text: str | None) -> str | None:
    title = " ".join((text or "").split())
    return title or None


def _decode(body: bytes, charset: str) -> str:
    try:
        return body.decode(charset, errors="replace")
    except LookupError:  # a charset Python does not know
        return body.decode("utf-8", errors="replace")
