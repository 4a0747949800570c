"""Load shapes (`oracle.gates.loads`): the suite asked at concurrency N or at a request rate by
the real timed client, what its rows measure, the verdict that holds them to their bounds, and
the send times judged against the shape.

The client is real; the server is a small HTTP server that streams a recorded answer slowly and
counts how many requests it holds at once (the server is outside the system under test). The
tiny bundle's sealed load is judged again in test_verify_rejudges."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import ClassVar, NamedTuple

import pytest
from conftest import REPO_ROOT
from localhttp import serving
from pydantic import ValidationError
from test_oracle import GOOD_STREAM, Replay

from repro_serving.builder.documents.evidence import OracleRow, RunEvidence
from repro_serving.builder.documents.manifest import Gates, Load, Suite
from repro_serving.launch import gatetext, oracle
from repro_serving.launch.consistency import load_problems
from repro_serving.launch.gates import judge, load_verdict
from repro_serving.launch.latency import LoadFigures, percentile

SUITE = Suite.from_path(REPO_ROOT / "manifests" / "suites" / "tiny-cpu.json")
PAUSE_S = 0.15


class Counting(Replay):
    """The recorded answer, paused before its last chunks; the most requests held at once."""

    stream: ClassVar[list[bytes | float]] = [*GOOD_STREAM[:2], PAUSE_S, *GOOD_STREAM[2:]]
    lock: ClassVar[threading.Lock] = threading.Lock()
    held: ClassVar[int] = 0
    most: ClassVar[int] = 0
    refuse: ClassVar[int | None] = None
    """The number of the request (from 0) answered HTTP 500 instead."""
    seen: ClassVar[int] = 0

    def do_POST(self) -> None:
        cls = type(self)
        with cls.lock:
            number = cls.seen
            cls.seen += 1
            cls.held += 1
            cls.most = max(cls.most, cls.held)
        try:
            if number == cls.refuse:
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(500)
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(b"engine gone")
                return
            super().do_POST()
        finally:
            with cls.lock:
                cls.held -= 1


class CountingServer(NamedTuple):
    """A server that counts what it is sent; its handler class holds the counts."""

    base_url: str
    handler: type[Counting]

    def ask(self, load: Load) -> list[OracleRow]:
        """The suite's rows, asked of this server under `load`."""
        request = oracle.OracleRequest(SUITE, "tiny")
        with oracle.client_for(self.base_url) as client:
            return oracle.answer_load(client, request, load)


@pytest.fixture
def counting() -> Iterator[CountingServer]:
    handler = type("CountingOnce", (Counting,), {"bodies": [], "lock": threading.Lock()})
    with serving(handler) as port:
        yield CountingServer(f"http://127.0.0.1:{port}", handler)


def test_a_load_shape_is_one_of_concurrency_or_rate() -> None:
    with pytest.raises(ValidationError, match=r"load shape.*'neither'"):
        Load(name="x")
    with pytest.raises(ValidationError, match=r"load shape.*'both'"):
        Load(name="x", concurrency=2, request_rate=1.0)
    with pytest.raises(ValidationError, match="duplicate load name"):
        Gates(loads=(Load(name="x", concurrency=2), Load(name="x", request_rate=2.0)))


def test_concurrency_n_holds_n_requests_at_once_and_rows_keep_suite_order(
    counting: CountingServer,
) -> None:
    load = Load(name="c2", concurrency=2)
    rows = counting.ask(load)
    assert [row.prompt_id for row in rows] == [prompt.id for prompt in SUITE.prompts]
    assert counting.handler.most == 2
    sent = [row.sent_at_s for row in rows]
    assert all(s is not None and s >= 0 for s in sent)
    assert max(s for s in sent if s is not None) >= 2 * PAUSE_S  # the fifth waited for two ends
    assert load_problems(load, rows, where="rows.json") == []
    assert "in flight" in load_problems(Load(name="c1", concurrency=1), rows, where="rows.json")[0]


def test_a_request_rate_sends_each_prompt_at_its_time(counting: CountingServer) -> None:
    load = Load(name="r20", request_rate=20.0)
    rows = counting.ask(load)
    for place, row in enumerate(rows):
        assert row.sent_at_s is not None
        assert row.sent_at_s >= place / 20.0
    assert counting.handler.most >= 2  # each answer takes longer than the spacing
    assert load_problems(load, rows, where="rows.json") == []
    faster = Load(name="r5", request_rate=5.0)
    problems = load_problems(faster, rows, where="rows.json")
    assert problems and "expected at least 0.2 (row 1 at 5 requests/s)" in problems[0]


def test_a_failed_request_under_load_names_the_load_and_stops_further_sends(
    counting: CountingServer,
) -> None:
    counting.handler.refuse = 0
    with pytest.raises(oracle.OracleFailed, match=r"load 'c1' \(concurrency 1\)") as raised:
        counting.ask(Load(name="c1", concurrency=1))
    assert "HTTP 500" in raised.value.found
    assert counting.handler.seen == 1


def row(
    prompt: str, sent: float | None, offsets: tuple[float, ...], prompt_tokens: int = 7
) -> OracleRow:
    return OracleRow(
        prompt_id=prompt,
        prompt_index=0,
        token_ids=tuple(range(len(offsets))),
        text_sha256="0" * 64,
        prompt_tokens=prompt_tokens,
        completion_tokens=len(offsets),
        cached_tokens=0,
        token_offsets_s=offsets,
        ttft_s=offsets[0],
        sent_at_s=sent,
    )


def test_what_a_load_measures_is_computed_from_send_and_token_times() -> None:
    rows = [row("a", 0.0, (0.1, 0.2, 0.3)), row("b", 0.05, (0.1, 0.3), prompt_tokens=9)]
    figures = LoadFigures.of(rows)
    assert (figures.requests, figures.input_tokens, figures.output_tokens) == (2, 16, 5)
    assert figures.duration_s == pytest.approx(0.35)  # b's last token at 0.05 + 0.3
    assert figures.aggregate_tok_s == pytest.approx(5 / 0.35)
    assert figures.request_tok_s is not None
    assert figures.request_tok_s.p50 == pytest.approx((3 / 0.3 + 2 / 0.3) / 2)
    assert figures.latency.itl is not None
    gaps = [0.1, 0.1, 0.2]
    assert figures.latency.itl.p99 == pytest.approx(percentile(gaps, 99))
    details = figures.as_details()
    assert details["aggregate_tok_s"] == pytest.approx(5 / 0.35)
    assert isinstance(details["ttft"], dict) and details["ttft"]["p50_s"] == pytest.approx(0.1)


def test_a_load_verdict_holds_every_start_to_its_bounds_and_its_spread() -> None:
    fast = [row("a", 0.0, (0.01, 0.02, 0.03, 0.04))]
    slow = [row("a", 0.0, (0.01, 0.03, 0.05, 0.06))]  # 4 tokens in 0.06 s: 2/3 of the rate
    load = Load(name="c4", concurrency=4, floor_tok_s=80, spread_max=0.2)
    passed = load_verdict(load, [(1, fast), (2, fast)])
    assert passed.passed, passed.summary
    assert passed.details["spread"] == {"start-2": 0.0}
    failed = load_verdict(load, [(1, fast), (2, slow)])
    assert not failed.passed
    assert "start 2 aggregate 66.7 tok/s < floor 80 tok/s" in failed.summary
    assert "start 2 aggregate rate differs from start 1's by 33.3%" in failed.summary
    bounded = Load(name="c4", concurrency=4, itl_p99_max_ms=15)
    assert (
        "start 2 ITL p99 20.0 ms > 15 ms" in load_verdict(bounded, [(1, fast), (2, slow)]).summary
    )
    one_read = [row("a", 0.0, (0.01, 0.01))]
    assert "start 1 ITL p99: no ITL measured (expected <= 15 ms)" in (
        load_verdict(bounded, [(1, one_read)]).summary
    )


def test_every_declared_load_gets_a_verdict_a_plan_line_and_a_report_cell() -> None:
    gates = Gates(
        loads=(Load(name="c4", concurrency=4, floor_tok_s=10), Load(name="r2", request_rate=2))
    )
    rows = (row("a", 0.0, (0.01, 0.02)),)
    evidence = RunEvidence(rows=rows, loads={"c4": (rows,)})
    verdicts = {v.gate: v for v in judge(gates, evidence)}
    assert verdicts["load:c4"].passed
    assert not verdicts["load:r2"].passed  # declared, its rows missing
    assert verdicts["load:r2"].summary == "no rows of load r2 in start 1 in the run's evidence"
    plan = dict(gatetext.load_plan(gates))
    assert plan["load:c4"] == "the suite at concurrency 4: aggregate >= 10 tok/s, in every start"
    assert plan["load:r2"] == "the suite at 2 requests/s: measured, no bound"
    shown = gatetext.load_shown(verdicts["load:c4"].details, gates, "load:c4")
    assert shown.bound == ">= 10 tok/s"
    assert shown.measured.startswith("start 1 ") and shown.measured.endswith(" tok/s aggregate")


def test_a_suite_row_with_a_send_time_and_a_load_row_without_are_refused() -> None:
    assert "expected none" in load_problems(None, [row("a", 0.5, (0.1,))], where="r")[0]
    assert (
        "expected sent_at_s"
        in load_problems(Load(name="c2", concurrency=2), [row("a", None, (0.1,))], where="r")[0]
    )
