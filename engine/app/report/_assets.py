"""The report page's look: status colours, its style sheet and script, and their CSP hashes."""

from __future__ import annotations

import base64
import hashlib

from engine.app.report._read import INTERRUPTED
from engine.results import STATUS_STYLE

__all__ = ["CSS", "JS", "STATUS_STYLE", "csp_hash", "status_class", "status_hue"]


_HUES = {
    "green": "#2e8b3e",
    "yellow": "#b58900",
    "red": "#c62828",
    "dim": "#8a8f98",
    "magenta": "#a3369e",
    "cyan": "#00838f",
}


def status_hue(status: str) -> str:
    """The colour the page draws `status` in: the hue of its terminal style."""
    style = STATUS_STYLE.get(status, "red" if status == INTERRUPTED else "dim")
    return _HUES[style.split()[-1]]


def status_class(status: str) -> str:
    """The CSS class suffix (`st-...`) of `status`; unknown ones share `other`."""
    known = {*STATUS_STYLE, INTERRUPTED, "rejected"}
    return status if status in known else "other"


def csp_hash(source: str) -> str:
    """The Content-Security-Policy source (`sha256-...`) letting `source` run inline."""
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")


# -- style and script (hashed into the page's Content-Security-Policy) ------------------

_STATUS_CSS = "".join(
    f".st-{status}{{background:{_HUES[style.split()[-1]]}}}"
    for status, style in {**STATUS_STYLE, INTERRUPTED: "red", "rejected": "red"}.items()
)

CSS = (
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;"
    "max-width:1200px;padding:16px 24px;color:#1f2328;background:#fff}"
    "h1{margin:0 0 8px;font-size:22px}h2{border-bottom:1px solid #d0d7de;padding-bottom:4px;"
    "margin-top:28px;font-size:18px}h3{font-size:15px}h4{margin:10px 0 4px;font-size:13px}"
    "dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0}"
    "dt{color:#57606a}dd{margin:0}"
    "table{border-collapse:collapse;width:100%;margin:6px 0}"
    "th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}"
    "th{background:#f6f8fa;font-weight:600}"
    "pre{margin:0;white-space:pre-wrap;word-break:break-word;max-height:360px;overflow:auto;"
    "font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;background:#f6f8fa;"
    "padding:4px 6px;border-radius:4px}"
    "code{font-family:ui-monospace,monospace;background:#f6f8fa;padding:0 3px}"
    ".badge{color:#fff;border-radius:10px;padding:1px 8px;font-size:12px;white-space:nowrap}"
    ".st-other{background:#57606a}" + _STATUS_CSS + ".banner{margin:12px 0;padding:10px 14px;"
    "border-left:5px solid #c62828;background:#fdecea}"
    ".banner.running{border-color:#00838f;background:#e0f2f1}"
    ".scroll{overflow-x:auto;border:1px solid #d0d7de;border-radius:6px;padding:4px}"
    "svg text{font:12px system-ui,sans-serif;fill:#1f2328}svg text.sub{font-size:11px}"
    "svg text.id{font-weight:600}svg text.tick{fill:#57606a;font-size:11px}"
    "svg .grid{stroke:#eaeef2}svg .segment{stroke:#6b7280;stroke-dasharray:3 3}"
    "svg .stop{stroke:#c62828;stroke-width:2}"
    ".node,.row{cursor:pointer}.node:hover rect,.node:focus rect{fill-opacity:.3}"
    ".row:hover .label{text-decoration:underline}"
    "details.step{border:1px solid #d0d7de;border-radius:6px;margin:6px 0;padding:4px 10px}"
    "details.step summary{cursor:pointer;font-weight:600}"
    "details.step.hit{outline:2px solid #0969da}"
    ".tag{font-size:11px;color:#57606a;border:1px solid #d0d7de;border-radius:8px;"
    "padding:0 5px}.nw{white-space:nowrap}.clip{display:block;max-height:6em;overflow:hidden}"
    ".none,.note{color:#57606a}footer{margin-top:32px;color:#8a8f98;font-size:12px}"
    ".msg{margin:2px 0 6px}.msg .role{display:block;font-size:11px;color:#57606a;"
    "font-weight:600}.msg.call pre{background:#eef4ff}.msg.error pre{background:#fdecea}"
    ".calls td:nth-child(2){width:52%}.calls td:nth-child(3){width:36%}"
)

JS = (
    "(function(){"
    "function open(id){var d=document.getElementById(id);if(!d)return;d.open=true;"
    "document.querySelectorAll('details.hit').forEach(function(e){e.classList.remove('hit')});"
    "d.classList.add('hit');d.scrollIntoView({block:'start'});}"
    "document.querySelectorAll('[data-step]').forEach(function(e){"
    "e.addEventListener('click',function(ev){ev.preventDefault();"
    "open(e.getAttribute('data-step'));});"
    "e.addEventListener('keydown',function(ev){if(ev.key==='Enter'){"
    "open(e.getAttribute('data-step'));}});});"
    "if(location.hash){open(location.hash.slice(1));}"
    "})();"
)
