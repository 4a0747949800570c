"""A streamed HTTP/1.1 POST on a plain socket, every read of the answer numbered and timed.

The oracle times a token by the socket read that delivered it (`launch.oracle`). An HTTP client
library hides its reads: when the client process is not scheduled while the server streams, the
events pile up in the socket and are then parsed one after another within microseconds, and a
timestamp taken per parsed event makes 32 tokens that took 200 ms look like 2 ms. Here each
read is numbered and timed as it returns, and every body byte knows the read that brought it,
so a reader can tell an event read as it came (alone in its read) from one read out of a
backlog. A `recv` that fills its whole buffer left more behind, so the reads after it, until
one that does not fill it, count as the same read (timed by the last): a backlog larger than
the buffer is still one read. HTTP/1.1 framing (chunked, sized or close-delimited) is h11's;
plain HTTP only (the oracle asks the server `repro` started); the connection is closed after
the answer.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import h11

READ_BYTES: Final = 1 << 20
ERROR_BODY_BYTES: Final = 64 * 1024
"""How much of an error answer's body is read, at most."""


class PostFailed(Exception):
    """The exchange broke: no connection, a malformed answer, a timeout, a reset."""


@dataclass(frozen=True)
class BodyPiece:
    """Body bytes of the answer and the socket read that brought them."""

    data: bytes
    read: int
    """The read's number, from 0, counted over the whole answer (head included)."""
    offset_s: float
    """When that read returned, seconds after the request started (perf_counter)."""


class TimedAnswer:
    """The answer's status and its body, piece by piece, as the reads bring it."""

    def __init__(self, sock: socket.socket, connection: h11.Connection, started: float) -> None:
        self._sock = sock
        self._connection = connection
        self._started = started
        self._read = -1
        self._offset_s = 0.0
        self._received = 0
        self._closed = False
        self.status = self._head()
        self.head = BodyPiece(b"", self._read, self._offset_s)
        """The read that completed the head, as a piece of no body bytes."""

    def body(self) -> Iterator[BodyPiece]:
        """The body's pieces until the answer ends."""
        while True:
            event = self._next()
            if isinstance(event, h11.Data):
                yield BodyPiece(bytes(event.data), self._read, self._offset_s)
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return

    def text(self, limit: int) -> str:
        """The start of the body, decoded (an error answer's): at most `limit` characters, read
        no further than `ERROR_BODY_BYTES`; an answer that breaks off gives what came."""
        data = b""
        try:
            for piece in self.body():
                data += piece.data
                if len(data) >= ERROR_BODY_BYTES:
                    break
        except PostFailed as broke:
            data += f" [{broke}]".encode()
        return data.decode(errors="replace")[:limit]

    def _head(self) -> int:
        while True:
            event = self._next()
            if isinstance(event, h11.Response):
                return event.status_code
            if isinstance(event, h11.ConnectionClosed):
                raise PostFailed("the server closed the connection before its status line")

    def _next(self) -> h11.Event:
        try:
            event = self._connection.next_event()
            while event is h11.NEED_DATA:
                self._receive()
                event = self._connection.next_event()
        except h11.RemoteProtocolError as error:
            raise PostFailed(self._malformed(error)) from error
        except OSError as error:
            raise PostFailed(_described(error)) from error
        if not isinstance(event, h11.Event):  # PAUSED: only ever after a complete answer
            return h11.ConnectionClosed()
        return event

    def _receive(self) -> None:
        """One read, numbered and timed: `recv` again while it fills the whole buffer."""
        chunk = self._sock.recv(READ_BYTES)
        data = chunk
        while len(chunk) == READ_BYTES:
            chunk = self._sock.recv(READ_BYTES)
            data += chunk
        self._read += 1
        self._offset_s = time.perf_counter() - self._started
        self._received += len(data)
        if data:
            self._connection.receive_data(data)
        if not chunk:  # the server closed its side: h11 learns it from an empty read
            self._closed = True
            self._connection.receive_data(b"")

    def _malformed(self, error: h11.RemoteProtocolError) -> str:
        if self._closed and self._received == 0:
            return "the server closed the connection before its status line"
        if self._closed:
            return f"the server closed the connection after {self._received} bytes of its answer"
        return f"a malformed answer: {error}"


class TimedPost:
    """`with TimedPost(host, port, target, body, timeout_s=…) as answer:` sends the request and
    gives the answer; the socket is closed on leaving. `started` is the request's time zero."""

    def __init__(self, host: str, port: int, target: str, body: bytes, *, timeout_s: float):
        self._address = (host, port)
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._request = h11.Request(
            method="POST",
            target=target,
            headers=[
                ("Host", authority),
                ("Content-Type", "application/json"),
                ("Accept", "text/event-stream"),
                ("Content-Length", str(len(body))),
                ("Connection", "close"),
            ],
        )
        self._body = body
        self._timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self.started = 0.0

    def __enter__(self) -> TimedAnswer:
        connection = h11.Connection(h11.CLIENT)
        self.started = time.perf_counter()
        try:
            self._sock = socket.create_connection(self._address, timeout=self._timeout_s)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock.sendall(
                connection.send(self._request)
                + (connection.send(h11.Data(data=self._body)) or b"")
                + (connection.send(h11.EndOfMessage()) or b"")
            )
        except OSError as error:
            self._close()
            raise PostFailed(_described(error)) from error
        try:
            return TimedAnswer(self._sock, connection, self.started)
        except BaseException:
            self._close()
            raise

    def __exit__(self, *_: object) -> None:
        self._close()

    def _close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _described(error: OSError) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
