"""The oracle's streamed POST: every read numbered and timed, a backlog larger than the read
buffer one read, each way the exchange breaks named (real sockets, a real HTTP server)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import h11
import pytest
from localhttp import serving

from repro_serving.launch import timedpost
from repro_serving.launch.timedpost import PostFailed, TimedAnswer, TimedPost


def answer_on(sock: socket.socket) -> TimedAnswer:
    """The answer read from `sock`, for a request h11 has seen sent."""
    connection = h11.Connection(h11.CLIENT)
    connection.send(h11.Request(method="POST", target="/", headers=[("Host", "x")]))
    connection.send(h11.EndOfMessage())
    return TimedAnswer(sock, connection, started=0.0)


def test_a_backlog_larger_than_the_read_buffer_is_one_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A recv that fills its buffer left more behind: the reads until one that does not are
    one read, so the events of a large backlog are never taken as read alone."""
    monkeypatch.setattr(timedpost, "READ_BYTES", 16)
    ours, theirs = socket.socketpair()
    body = b"data: 1\n\n" * 10
    theirs.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    answer = answer_on(ours)
    pieces = list(answer.body())
    assert answer.status == 200
    assert b"".join(piece.data for piece in pieces) == body
    assert {piece.read for piece in pieces} == {0}, "head and body came in one backlog"


@pytest.mark.parametrize(
    ("sent", "found"),
    [
        (b"", "the server closed the connection before its status line"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\ndata: 1\n",
            "the server closed the connection after 48 bytes of its answer",
        ),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "a malformed answer: "),
    ],
    ids=["before-the-status-line", "mid-body", "bad-chunk"],
)
def test_each_way_the_answer_breaks_is_named(sent: bytes, found: str) -> None:
    ours, theirs = socket.socketpair()
    theirs.sendall(sent)
    if b"zz" not in sent:
        theirs.close()
    with pytest.raises(PostFailed) as broke:
        list(answer_on(ours).body())
    assert str(broke.value).startswith(found)


def test_an_error_answer_gives_the_start_of_its_body_and_what_broke_it() -> None:
    ours, theirs = socket.socketpair()
    theirs.sendall(b"HTTP/1.1 503 Unavailable\r\nContent-Length: 50\r\n\r\noverloaded")
    theirs.close()
    answer = answer_on(ours)
    assert answer.status == 503
    assert answer.text(200) == (
        "overloaded [the server closed the connection after 58 bytes of its answer]"
    )


class Echo(BaseHTTPRequestHandler):
    """Answers a POST with what it was sent: its target and body; keeps its headers."""

    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        answer = self.path.encode() + b" " + body
        type(self).seen.append(dict(self.headers))
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def echo() -> Iterator[int]:
    with serving(Echo) as port:
        yield port


def test_the_request_is_one_post_with_its_body_and_the_answer_ends_with_it(echo: int) -> None:
    with TimedPost("127.0.0.1", echo, "/v1/x", b'{"a": 1}', timeout_s=10) as answer:
        pieces = list(answer.body())
    assert answer.status == 200
    assert b"".join(piece.data for piece in pieces) == b'/v1/x {"a": 1}'
    assert all(piece.offset_s > 0 for piece in pieces)
    assert Echo.seen[-1]["Host"] == f"127.0.0.1:{echo}"
    assert Echo.seen[-1]["Content-Type"] == "application/json"


def test_no_server_is_named_with_the_error_the_connect_gave() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(PostFailed, match=r"^ConnectionRefusedError: "):
        TimedPost("127.0.0.1", port, "/", b"", timeout_s=5).__enter__()
