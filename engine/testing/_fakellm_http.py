"""A threading HTTP server that can end and join every connection it has open.

`http.server.ThreadingHTTPServer` forgets its connection threads; a test server must not
leave one behind, blocked reading an idle keep-alive connection, when it closes.
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
from typing import Any

__all__ = ["TrackingHTTPServer"]


class TrackingHTTPServer(http.server.ThreadingHTTPServer):
    """Tracks its connection threads so `end_connections` can end and join them all."""

    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], handler: type[http.server.BaseHTTPRequestHandler]
    ) -> None:
        super().__init__(address, handler)
        self._live: dict[threading.Thread, socket.socket] = {}
        self._live_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        # registered here, in the serving thread, so after `shutdown()` every thread is known
        thread = threading.Thread(
            target=self._serve_connection,
            args=(request, client_address),
            name=f"fake-openai-conn:{client_address[1]}",
            daemon=True,
        )
        with self._live_lock:
            self._live[thread] = request
        thread.start()

    def _serve_connection(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self._live_lock:
                self._live.pop(threading.current_thread(), None)

    def end_connections(self, timeout: float) -> None:
        """Shut down every open connection, then wait up to `timeout` for each thread."""
        with self._live_lock:
            live = dict(self._live)
        for sock in live.values():
            # wakes a handler blocked reading an idle keep-alive connection
            with contextlib.suppress(OSError):  # already closed by its handler
                sock.shutdown(socket.SHUT_RDWR)
        for thread in live:
            thread.join(timeout)
