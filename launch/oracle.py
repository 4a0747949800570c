"""The oracle client: the suite, asked once, in order, cold, of a running server.

This module owns how a suite becomes `OracleRow`s: each prompt
is one streamed request (chat or completion API, the suite's max_tokens, seed and temperature,
the manifest's chat template kwargs) with `"return_token_ids": true` and
`"stream_options": {"include_usage": true}`; the token ids, the text, the usage (prompt tokens,
`prompt_tokens_details.cached_tokens`) and the arrival of every token id are taken from the
stream as it comes. A token arrives with the socket read that brought its event: its offset is
when that read returned (monotonic clock, from the request's start), and the row numbers each
token's read and event, so a read that brought several tokens (the client was late and read a
backlog, or the server sent them at once) can be told from one read as it came. The row also
keeps when the read before the first token's returned, after which the first token arrived
(where `launch.throughput` opens a window whose first token came with later ones). There is
no retry and no warm-up generation: the first answer is the answer. It also reads `/metrics`
as raw text, kept as evidence and diffed by `launch.metrics`.

A request that fails (the server gone, an HTTP error, a stream without token ids or usage)
raises `OracleFailed` naming the prompt and what was found; the rows answered before it are
the caller's, since `answer_suite` yields each row as soon as it is complete.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
from pydantic import JsonValue

from repro_serving.builder.documents.evidence import OracleRow
from repro_serving.builder.documents.manifest import ENDPOINTS, Load, Prompt, Suite
from repro_serving.builder.errors import NotObservable
from repro_serving.launch.timedpost import BodyPiece, PostFailed, TimedPost

METRICS_PATH: Final = "/metrics"
MODELS_PATH: Final = "/v1/models"
DATA_PREFIX: Final = "data: "
DONE: Final = "[DONE]"
REQUEST_TIMEOUT_S: Final = 600.0


class OracleFailed(NotObservable):
    """A request of the suite, or a read of `/metrics`, did not give what the oracle needs."""


@dataclass(frozen=True)
class OracleRequest:
    """What is asked of the server, the same for every prompt of the suite."""

    suite: Suite
    model: str
    """The served model name the requests address."""
    chat_template_kwargs: Mapping[str, JsonValue] = field(default_factory=dict)


def request_body(request: OracleRequest, prompt: Prompt) -> dict[str, Any]:
    """The JSON body of one streamed request for `prompt`."""
    suite = request.suite
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": suite.max_tokens,
        "seed": suite.seed,
        "temperature": suite.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
    }
    if suite.api == "chat":
        body["messages"] = [message.model_dump() for message in prompt.messages or ()]
        if request.chat_template_kwargs:
            body["chat_template_kwargs"] = dict(request.chat_template_kwargs)
    else:
        body["prompt"] = prompt.prompt
    return body


def client_for(base_url: str) -> httpx.Client:
    """A client of the server at `base_url`: no proxy from the environment, a generous bound."""
    return httpx.Client(base_url=base_url, trust_env=False, timeout=REQUEST_TIMEOUT_S)


def served_model(client: httpx.Client) -> str:
    """The one model the server serves, from `/v1/models` (a read, not a generation)."""
    document = _get_json(client, MODELS_PATH)
    ids = [entry.get("id") for entry in document.get("data", []) if isinstance(entry, dict)]
    if len(ids) != 1 or not isinstance(ids[0], str):
        raise OracleFailed(
            "cannot tell which model the server serves",
            where=f"{client.base_url}{MODELS_PATH}",
            expected="exactly one model id",
            found=", ".join(map(str, ids)) or "none",
        )
    return ids[0]


def read_metrics(client: httpx.Client) -> str:
    """The raw Prometheus text of `/metrics`, kept verbatim as evidence."""
    try:
        response = client.get(METRICS_PATH)
    except httpx.HTTPError as error:
        raise _unreachable(client, METRICS_PATH, error) from error
    _require_ok(response, METRICS_PATH)
    return response.text


def answer_suite(client: httpx.Client, request: OracleRequest) -> Iterator[OracleRow]:
    """Each prompt of the suite, in order, asked once; each row yielded when it is complete."""
    for index, prompt in enumerate(request.suite.prompts):
        yield answer_prompt(client, request, index, prompt)


def answer_prompt(
    client: httpx.Client,
    request: OracleRequest,
    index: int,
    prompt: Prompt,
    *,
    load_zero: float | None = None,
) -> OracleRow:
    """One streamed request; the row of what it answered. The request goes on a socket of its
    own (`launch.timedpost`) to the client's server, so that each token is timed by the read
    that brought it. Asked under a load, the row's `sent_at_s` is when it was sent after
    `load_zero` (`time.perf_counter`, the clock of its token offsets)."""
    path = ENDPOINTS[request.suite.api]
    where = f"prompt {index} ({prompt.id}), POST {client.base_url}{path}"
    url = client.base_url
    if url.scheme != "http":
        raise OracleFailed(
            "the oracle streams from a plain HTTP server (the one repro started)",
            where=where,
            expected="http://HOST[:PORT]",
            found=str(url),
        )
    stream = _Stream(where)
    body = json.dumps(request_body(request, prompt)).encode()
    with _collector_off():
        started = _stream_answer(url, path, body, stream, where)
    row = stream.row(prompt.id, index)
    if load_zero is None:
        return row
    return row.model_copy(update={"sent_at_s": max(started - load_zero, 0.0)})


def answer_load(client: httpx.Client, request: OracleRequest, load: Load) -> list[OracleRow]:
    """Every prompt of the suite asked once under `load`, its rows in suite order, each with
    when it was sent. Under `concurrency` N, N senders take the prompts in suite order, each
    the next one as its answer ends; under `request_rate`, prompt i is sent i/rate s after the
    first, on a sender of its own. Each request is timed as `answer_prompt` times it, the
    collector held off for the whole load. The first request that fails stops further sends
    and is raised, naming the load, once those in flight have ended."""
    prompts = list(enumerate(request.suite.prompts))
    rows: dict[int, OracleRow] = {}
    failures: list[OracleFailed] = []
    taken = iter(prompts)
    lock = threading.Lock()
    zero = 0.0  # set as the first request is sent

    def ask(index: int, prompt: Prompt) -> None:
        try:
            row = answer_prompt(client, request, index, prompt, load_zero=zero)
        except OracleFailed as error:
            with lock:
                failures.append(error)
            return
        with lock:
            rows[index] = row

    def sender() -> None:
        go.wait()
        while True:
            with lock:
                if failures:
                    return
                step = next(taken, None)
            if step is None:
                return
            ask(*step)

    def scheduled(index: int, prompt: Prompt) -> None:
        go.wait()
        assert load.request_rate is not None  # the manifest asks for one shape
        time.sleep(max(zero + index / load.request_rate - time.perf_counter(), 0.0))
        if not failures:
            ask(index, prompt)

    go = threading.Event()
    name = f"load-{load.name}"
    threads = (
        [
            threading.Thread(target=sender, name=f"{name}-{n}", daemon=True)
            for n in range(min(load.concurrency, len(prompts)))
        ]
        if load.concurrency is not None
        else [
            threading.Thread(target=scheduled, args=step, name=f"{name}-{step[0]}", daemon=True)
            for step in prompts
        ]
    )
    with _collector_off():
        # Every sender runs before the first send: a thread started while another streams can
        # wait tens of milliseconds for the interpreter's lock, and its send with it.
        for thread in threads:
            thread.start()
        zero = time.perf_counter()
        go.set()
        for thread in threads:
            thread.join()
    if failures:
        first = failures[0]
        raise OracleFailed(
            f"load {load.name!r} ({load.shape}): {first.what}",
            where=first.where,
            expected=first.expected,
            found=first.found,
            hint=first.hint,
        )
    return [rows[index] for index, _ in prompts]


@contextlib.contextmanager
def _collector_off() -> Iterator[None]:
    """The garbage collector held off while an answer streams, as `timeit` holds it off while
    it times: a full collection of a large process is a pause of the client, and the events
    that pile up during it would be read as a backlog."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _stream_answer(url: httpx.URL, path: str, body: bytes, stream: _Stream, where: str) -> float:
    """Stream the answer into `stream`; when the request was sent (`time.perf_counter`)."""
    target = url.raw_path.decode("ascii").rstrip("/") + path
    try:
        port = url.port or 80
        post = TimedPost(url.host, port, target, body, timeout_s=REQUEST_TIMEOUT_S)
        with post as answer:
            if answer.status != httpx.codes.OK:
                raise _refused(answer.status, answer.text(500), path, where)
            stream.feed(answer.head)
            for piece in answer.body():
                stream.feed(piece)
        return post.started
    except PostFailed as error:
        raise OracleFailed(
            "the server stopped answering",
            where=where,
            expected="a complete answer",
            found=f"{error} after {stream.tokens} streamed token(s)",
            hint="the server's log tells why it went away",
        ) from error


_LINE_END: Final = re.compile(rb"\r\n|\r|\n")


class _Lines:
    """Bytes cut into lines as server-sent events end them (CRLF, LF or CR), each piece searched
    once, however the reads cut the stream."""

    def __init__(self) -> None:
        self._partial = bytearray()
        self._after_cr = False
        """The last piece ended in CR: a LF starting the next one is the rest of a CRLF."""

    def feed(self, data: bytes) -> list[bytes]:
        if not data:
            return []
        if self._after_cr and data.startswith(b"\n"):
            data = data[1:]
        self._after_cr = False
        lines = []
        start = 0
        for end in _LINE_END.finditer(data):
            self._partial += data[start : end.start()]
            lines.append(bytes(self._partial))
            self._partial.clear()
            start = end.end()
            self._after_cr = end.group() == b"\r" and start == len(data)
        self._partial += data[start:]
        return lines

    def rest(self) -> bytes | None:
        """What came after the last line end, unless it is blank."""
        return bytes(self._partial) if self._partial.strip() else None


class _Stream:
    """The server-sent events of one request, folded into a row as their reads bring them."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.token_ids: list[int] = []
        self.offsets: list[float] = []
        self.reads: list[int] = []
        """The number of the read that brought each token's event."""
        self.events: list[int] = []
        """The number of each token's event among the answer's token-bearing events."""
        self.text: list[str] = []
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.done = False
        self._lines = _Lines()
        self._last: BodyPiece | None = None
        self._before = 0.0
        """When the read before the latest one returned (the request's start before any)."""
        self.first_token_after_s = 0.0
        """`_before` as of the read that brought the first token."""

    @property
    def tokens(self) -> int:
        return len(self.token_ids)

    def feed(self, piece: BodyPiece) -> None:
        """Each line `piece` completes, taken as of the read that brought its last byte. The
        answer's head is fed first, as a piece of no bytes."""
        if self._last is not None and piece.read != self._last.read:
            self._before = self._last.offset_s
        self._last = piece
        for line in self._lines.feed(piece.data):
            self.take(line.decode("utf-8", errors="replace"), piece)

    def take(self, line: str, piece: BodyPiece) -> None:
        if not line.startswith(DATA_PREFIX):
            return
        data = line.removeprefix(DATA_PREFIX).strip()
        if data == DONE:
            self.done = True
            return
        chunk = self._parse(data)
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            self._take_choice(choice, piece)

    def _parse(self, data: str) -> dict[str, Any]:
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError as error:
            raise self._malformed("a JSON chunk", f"{data[:200]!r} ({error.msg})") from None
        if not isinstance(chunk, dict):
            raise self._malformed("a JSON object per chunk", f"{data[:200]!r}")
        if "error" in chunk:
            raise OracleFailed(
                "the server reported an error in the stream",
                where=self.where,
                expected="a completion chunk",
                found=f"an error: {data[:500]}",
                hint="the server's log tells what went wrong",
            )
        return chunk

    def _take_choice(self, choice: dict[str, Any], piece: BodyPiece) -> None:
        ids = choice.get("token_ids") or ()
        event = self.events[-1] + 1 if self.events else 0
        if ids and not self.token_ids:
            self.first_token_after_s = self._before
        self.token_ids.extend(int(token) for token in ids)
        self.offsets.extend(piece.offset_s for _ in ids)
        self.reads.extend(piece.read for _ in ids)
        self.events.extend(event for _ in ids)
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        if isinstance(text, str):
            self.text.append(text)
        if choice.get("finish_reason") is not None:
            self.finish_reason = str(choice["finish_reason"])

    def row(self, prompt_id: str, index: int) -> OracleRow:
        last = self._lines.rest()
        if last is not None and self._last is not None:  # a last line without its end
            self.take(last.decode("utf-8", errors="replace"), self._last)
        if not self.done:
            raise self._malformed("a stream ending with [DONE]", "the stream ended without it")
        if not self.token_ids:
            raise self._malformed(
                "token_ids in the streamed chunks ('return_token_ids': true)", "no token ids"
            )
        usage = self.usage
        if usage is None:
            raise self._malformed("a final usage chunk ('include_usage': true)", "no usage")
        text = "".join(self.text)
        return OracleRow(
            prompt_id=prompt_id,
            prompt_index=index,
            token_ids=tuple(self.token_ids),
            text=text,
            text_sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
            prompt_tokens=int(usage["prompt_tokens"]),
            completion_tokens=int(usage["completion_tokens"]),
            cached_tokens=_cached_tokens(usage),
            token_offsets_s=tuple(self.offsets),
            token_reads=tuple(self.reads),
            token_events=tuple(self.events),
            first_token_after_s=self.first_token_after_s,
            ttft_s=self.offsets[0],
            finish_reason=self.finish_reason,
        )

    def _malformed(self, expected: str, found: str) -> OracleFailed:
        return OracleFailed(
            "the server's stream lacks what the oracle records",
            where=self.where,
            expected=expected,
            found=found,
        )


def _cached_tokens(usage: Mapping[str, Any]) -> int | None:
    details = usage.get("prompt_tokens_details")
    if not isinstance(details, dict) or details.get("cached_tokens") is None:
        return None
    return int(details["cached_tokens"])


def _get_json(client: httpx.Client, path: str) -> dict[str, Any]:
    try:
        response = client.get(path)
    except httpx.HTTPError as error:
        raise _unreachable(client, path, error) from error
    _require_ok(response, path)
    document = response.json()
    if not isinstance(document, dict):
        raise OracleFailed(
            "unexpected answer",
            where=f"{client.base_url}{path}",
            expected="a JSON object",
            found=response.text[:200],
        )
    return document


def _require_ok(response: httpx.Response, path: str) -> None:
    if response.status_code != httpx.codes.OK:
        body = response.read().decode(errors="replace")[:500]
        raise _refused(response.status_code, body, path, str(response.request.url))


def _refused(status: int, body: str, path: str, where: str) -> OracleFailed:
    return OracleFailed(
        f"the server answered HTTP {status}",
        where=where,
        expected=f"HTTP 200 from {path}",
        found=f"HTTP {status}: {body}",
    )


def _unreachable(client: httpx.Client, path: str, error: httpx.HTTPError) -> OracleFailed:
    found = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return OracleFailed(
        "the server stopped answering",
        where=f"{client.base_url}{path}",
        expected="a complete answer",
        found=found,
        hint="the server's log tells why it went away",
    )
