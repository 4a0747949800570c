"""A small HTTP server on this host's loopback, for the tests of the clients that talk to one:
the client is what is under test, the server only answers as its handler class says."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """A server on a free port of 127.0.0.1, one thread per request, answering with `handler`;
    its port. Shut down and closed on exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
