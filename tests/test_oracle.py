"""The oracle client: one streamed request per prompt, folded into an OracleRow, no retries.

Quick tests replay server-sent event streams in vLLM's format from a small HTTP server (the
client under test is real; only the server is a recording), including every way a stream can
fail; tests marked `server` ask the real vLLM CPU server of the embedded default.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import REPO_ROOT, TinyServer
from localhttp import serving

from repro_serving.builder.documents.evidence import OracleRow
from repro_serving.builder.documents.manifest import Suite
from repro_serving.launch import oracle
from repro_serving.launch.throughput import row_rate, row_window

SUITE = Suite.from_path(REPO_ROOT / "manifests" / "suites" / "tiny-cpu.json")
COMPLETION_SUITE = Suite.from_path(REPO_ROOT / "tests" / "manifests" / "suites" / "completion.json")


def chunk(**fields: Any) -> bytes:
    return f"data: {json.dumps(fields)}\n\n".encode()


def chat_choice(content: str, ids: list[int], finish: str | None = None) -> dict[str, Any]:
    return {"index": 0, "delta": {"content": content}, "token_ids": ids, "finish_reason": finish}


USAGE = {
    "prompt_tokens": 26,
    "completion_tokens": 3,
    "total_tokens": 29,
    "prompt_tokens_details": {"cached_tokens": 0},
}
ROLE_CHUNK = chunk(choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}}])
TEXT_WITHOUT_IDS = chunk(choices=[{"index": 0, "delta": {"content": "x"}}])
GOOD_STREAM = [
    ROLE_CHUNK,
    chunk(choices=[chat_choice("Hé", [133])]),
    chunk(choices=[chat_choice("llo", [125, 27], "length")]),
    chunk(choices=[], usage=USAGE),
    b"data: [DONE]\n\n",
]


class Replay(BaseHTTPRequestHandler):
    """Answers every POST with the class's `stream`, then closes; records each request body.
    Each bytes part is one write; a number in the stream is a pause of that many seconds."""

    stream: ClassVar[list[bytes | float]] = []
    status: ClassVar[int] = 200
    bodies: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        type(self).bodies.append(json.loads(self.rfile.read(length)))
        self.send_response(self.status)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for part in self.stream:
            if isinstance(part, float):
                time.sleep(part)
                continue
            self.wfile.write(part)
            self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def replay() -> Iterator[tuple[str, type[Replay]]]:
    handler = type("ReplayOnce", (Replay,), {"stream": list(GOOD_STREAM), "bodies": []})
    with serving(handler) as port:
        yield f"http://127.0.0.1:{port}", handler


def ask_first(base_url: str, suite: Suite = SUITE) -> OracleRow:
    request = oracle.OracleRequest(suite, "tiny")
    with oracle.client_for(base_url) as client:
        return oracle.answer_prompt(client, request, 0, suite.prompts[0])


def test_a_chat_request_streams_token_ids_and_usage_with_the_suites_sampling() -> None:
    request = oracle.OracleRequest(SUITE, "tiny", {"enable_thinking": False})
    body = oracle.request_body(request, SUITE.prompts[1])
    assert body == {
        "model": "tiny",
        "messages": [{"role": "user", "content": "What is 17 times 23?"}],
        "max_tokens": 32,
        "seed": 0,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
        "chat_template_kwargs": {"enable_thinking": False},
    }


def test_a_completion_request_sends_the_prompt_and_no_chat_template() -> None:
    body = oracle.request_body(
        oracle.OracleRequest(COMPLETION_SUITE, "m"), COMPLETION_SUITE.prompts[0]
    )
    assert body["prompt"] == COMPLETION_SUITE.prompts[0].prompt
    assert "messages" not in body
    assert "chat_template_kwargs" not in body
    assert oracle.ENDPOINTS[COMPLETION_SUITE.api] == "/v1/completions"


def test_a_stream_folds_into_a_row_with_an_offset_per_token_id(
    replay: tuple[str, type[Replay]],
) -> None:
    base_url, handler = replay
    row = ask_first(base_url)
    assert row.token_ids == (133, 125, 27)
    assert row.text_sha256 == hashlib.sha256("Héllo".encode()).hexdigest()
    assert (row.prompt_tokens, row.completion_tokens, row.cached_tokens) == (26, 3, 0)
    assert row.finish_reason == "length"
    assert len(row.token_offsets_s) == 3
    assert row.token_offsets_s[1] == row.token_offsets_s[2], "two ids of one chunk arrive together"
    assert 0 < row.ttft_s == row.token_offsets_s[0] <= row.token_offsets_s[1]
    assert handler.bodies[0]["return_token_ids"] is True


@pytest.mark.parametrize(
    ("stream", "expected", "found"),
    [
        (
            GOOD_STREAM[:3] + GOOD_STREAM[4:],
            "a final usage chunk ('include_usage': true)",
            "no usage",
        ),
        (
            [
                ROLE_CHUNK,
                chunk(choices=[{"index": 0, "delta": {"content": "x"}}]),
                *GOOD_STREAM[3:],
            ],
            "token_ids in the streamed chunks ('return_token_ids': true)",
            "no token ids",
        ),
        (GOOD_STREAM[:2], "a stream ending with [DONE]", "the stream ended without it"),
        ([b"data: {not json\n\n"], "a JSON chunk", "'{not json' (Expecting property name"),
        (
            [chunk(error={"message": "boom", "code": 500})],
            "a completion chunk",
            'an error: {"error": {"message": "boom"',
        ),
    ],
    ids=["no-usage", "no-token-ids", "cut-short", "not-json", "error-chunk"],
)
def test_a_stream_without_what_the_oracle_records_is_refused_by_prompt(
    replay: tuple[str, type[Replay]], stream: list[bytes], expected: str, found: str
) -> None:
    base_url, handler = replay
    handler.stream = list(stream)
    with pytest.raises(oracle.OracleFailed) as failed:
        ask_first(base_url)
    assert failed.value.where == f"prompt 0 (greeting), POST {base_url}/v1/chat/completions"
    assert failed.value.expected == expected
    assert str(failed.value.found).startswith(found)


def test_an_http_error_is_refused_with_its_status_and_body(
    replay: tuple[str, type[Replay]],
) -> None:
    base_url, handler = replay
    handler.status = 400
    handler.stream = [b'{"error": "bad request"}']
    with pytest.raises(oracle.OracleFailed) as failed:
        ask_first(base_url)
    assert failed.value.what == "the server answered HTTP 400"
    assert failed.value.found == 'HTTP 400: {"error": "bad request"}'


def test_no_server_is_refused_as_not_answering_and_nothing_is_retried(tmp_path: Path) -> None:
    from repro_serving.launch.server import free_port

    base_url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(oracle.OracleFailed) as failed:
        ask_first(base_url)
    assert failed.value.what == "the server stopped answering"
    assert str(failed.value.found).startswith("ConnectionRefusedError")
    assert failed.value.exit_code == 3


@pytest.mark.parametrize("end", [b"\r\n", b"\r"], ids=["crlf", "cr"])
def test_every_line_end_server_sent_events_allow_gives_the_same_row(
    replay: tuple[str, type[Replay]], end: bytes
) -> None:
    """SSE ends a line with CRLF, LF or CR; a CRLF cut between two writes is one line end."""
    base_url, handler = replay
    expected = ask_first(base_url)
    parts = [part.replace(b"\n", end) for part in GOOD_STREAM if isinstance(part, bytes)]
    if end == b"\r\n":
        parts = [piece for part in parts for piece in (part[:-1], 0.05, part[-1:])]
    handler.stream = parts
    row = ask_first(base_url)
    assert (row.token_ids, row.text, row.completion_tokens, row.finish_reason) == (
        expected.token_ids,
        expected.text,
        expected.completion_tokens,
        expected.finish_reason,
    )


PAUSE = 0.1
"""Long enough for the client to be waiting in its read when the next write comes."""


def test_each_token_is_timed_by_the_read_that_brought_it_and_a_backlog_is_counted(
    replay: tuple[str, type[Replay]],
) -> None:
    """Events written apart arrive in reads of their own; three written at once arrive in one
    read; an event cut across two writes is timed by the read that completed it, and the ids
    of one event are numbered as one."""
    base_url, handler = replay
    first, second, third, fourth = (
        chunk(choices=[chat_choice(t, [i])]) for i, t in enumerate("abcd")
    )
    handler.stream = [
        ROLE_CHUNK, PAUSE, first, PAUSE, second + third + fourth, PAUSE,
        GOOD_STREAM[2][:20], PAUSE, GOOD_STREAM[2][20:], chunk(choices=[], usage=USAGE),
        b"data: [DONE]\n\n",
    ]  # fmt: skip
    row = ask_first(base_url)
    assert row.token_ids == (0, 1, 2, 3, 125, 27)
    assert row.token_events == (0, 1, 2, 3, 4, 4), "125 and 27 came in one event"
    reads = row.token_reads or ()
    assert reads[1] == reads[2] == reads[3] and len({reads[0], reads[1], reads[4]}) == 3
    assert reads[5] == reads[4]
    offsets = row.token_offsets_s
    assert offsets[1] == offsets[2] == offsets[3], "one read, one time"
    # A read returns a little after its write, by however late the client was scheduled: the
    # pause between two writes bounds the gap between their reads only up to that lateness
    # (a run saw 0.09998 s for a 0.1 s pause), so half a pause tells two reads from one.
    late = PAUSE / 2
    assert offsets[1] - offsets[0] >= PAUSE - late and offsets[4] - offsets[3] >= 2 * PAUSE - late
    assert row.text == "abcdllo"
    assert 0 <= (row.first_token_after_s or 0) <= offsets[0] - PAUSE + late, "the role chunk's read"
    assert row_window(row, 2).opens_s == offsets[0], "token 0 came alone in its read"


def test_a_first_token_read_with_later_ones_opens_the_window_at_the_read_before(
    replay: tuple[str, type[Replay]],
) -> None:
    base_url, handler = replay
    first, second, third = (chunk(choices=[chat_choice(t, [i])]) for i, t in enumerate("abc"))
    handler.stream = [
        ROLE_CHUNK, PAUSE, first + second, PAUSE, third, chunk(choices=[], usage=USAGE),
        b"data: [DONE]\n\n",
    ]  # fmt: skip
    row = ask_first(base_url)
    after, offsets = row.first_token_after_s, row.token_offsets_s
    assert after is not None and offsets[1] - after >= PAUSE, "the role chunk's read, apart"
    window = row_window(row, 3)
    assert (window.opens_s, window.closes_s) == (after, offsets[2])
    assert window.bound is not None and window.bound.startswith("token 0 came in a read of 2")


@pytest.mark.server
def test_a_client_stalled_while_the_real_server_streams_reads_a_backlog_and_says_so(
    tiny_server: TinyServer,
) -> None:
    """The client process is stopped for half a second while the server streams a long answer
    (prompt 0 runs to 400 tokens on the tiny model): the tokens that piled up come in one read,
    counted as such, and a window ending among them has only a lower bound of a rate."""
    long = SUITE.model_copy(update={"max_tokens": 400})
    with oracle.client_for(tiny_server.base_url) as client:
        request = oracle.OracleRequest(long, oracle.served_model(client))
        stopper = subprocess.Popen(
            [
                "sh",
                "-c",
                f"sleep 0.3; kill -STOP {os.getpid()}; sleep 0.5; kill -CONT {os.getpid()}",
            ]
        )
        try:
            row = oracle.answer_prompt(client, request, 0, long.prompts[0])
        finally:
            stopper.wait()
    reads, events = row.token_reads, row.token_events
    assert reads is not None and events is not None and len(reads) == len(row.token_ids) > 100
    assert events == tuple(range(len(events))), "the tiny model streams one token an event"
    backlog = max(reads.count(read) for read in set(reads))
    assert backlog > 10, "half a second of tokens cannot have come one read each"
    first = reads.index(next(read for read in reads if reads.count(read) == backlog))
    assert row.token_offsets_s[first : first + backlog] == (row.token_offsets_s[first],) * backlog
    ending = row_rate(row, first + 1)
    assert ending.bound == f"token {first} came in a read of {backlog} events"
    assert ending.conventional < row_rate(row, first).conventional, "the stall is in its span"


@pytest.mark.server
def test_the_suite_on_the_real_server_gives_one_complete_row_per_prompt(
    tiny_server: TinyServer,
) -> None:
    with oracle.client_for(tiny_server.base_url) as client:
        model = oracle.served_model(client)
        before = oracle.read_metrics(client)
        rows = list(oracle.answer_suite(client, oracle.OracleRequest(SUITE, model)))
        after = oracle.read_metrics(client)
    assert model == tiny_server.model_name
    assert [row.prompt_id for row in rows] == [prompt.id for prompt in SUITE.prompts]
    assert [row.prompt_index for row in rows] == list(range(len(SUITE.prompts)))
    for row in rows:
        assert len(row.token_ids) == row.completion_tokens == SUITE.max_tokens
        assert len(row.token_offsets_s) == len(row.token_ids)
        assert list(row.token_offsets_s) == sorted(row.token_offsets_s)
        assert 0 < row.ttft_s == row.token_offsets_s[0]
        assert row.cached_tokens == 0, "prompts under one 128-token block are never cached"
        assert row.prompt_tokens > 0
        assert row.finish_reason == "length"
    assert "vllm:generation_tokens_total" in before
    assert "vllm:generation_tokens_total" in after
    assert before != after
