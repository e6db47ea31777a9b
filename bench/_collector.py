"""An OTLP/HTTP collector stand-in for the benchmarks, in a process of its own: it reads
each traces payload, counts its spans (decoded with `opentelemetry-proto`) and answers 200.

    with Collector() as collector:
        ...  # export to collector.url
        collector.spans()  # spans received so far
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from types import TracebackType

__all__ = ["Collector"]

_SERVER = r"""
import http.server, sys
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

spans = 0

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        global spans
        request = ExportTraceServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
        spans += sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        body = str(spans).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


class Collector:
    """The stand-in's process: `url` to export to, `spans()` to count what arrived."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", _SERVER], stdout=subprocess.PIPE, text=True
        )
        assert self._process.stdout is not None
        port = self._process.stdout.readline().strip()
        if not port.isdigit():
            self._process.kill()
            raise SystemExit(f"the collector stand-in did not start: {port!r}")
        self.url = f"http://127.0.0.1:{port}"

    def spans(self) -> int:
        with urllib.request.urlopen(self.url + "/count", timeout=10) as answer:
            return int(answer.read())

    def __enter__(self) -> Collector:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._process.kill()
        self._process.wait()
