"""The rate of a row over its first N tokens, both conventions, the median, and each refusal."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from repro_serving.builder.documents.evidence import OracleRow
from repro_serving.launch.throughput import (
    UnmeasurableRow,
    measure,
    row_rate,
)


def row(
    offsets: Sequence[float],
    prompt_id: str = "p",
    index: int = 0,
    events: Sequence[int] | None = None,
    after: float = 0.0,
) -> OracleRow:
    """A row; with `events` (each token's event number) it numbers its reads as a stream
    does: tokens at one offset came in one read, a later offset is a later read; `after` is
    when the read before the first token's returned."""
    reads = None
    if events is not None:
        reads = [sorted(set(offsets)).index(offset) for offset in offsets]
    return OracleRow(
        prompt_id=prompt_id,
        prompt_index=index,
        token_ids=tuple(range(len(offsets))),
        text_sha256="0" * 64,
        prompt_tokens=7,
        completion_tokens=len(offsets),
        cached_tokens=0,
        token_offsets_s=tuple(offsets),
        token_reads=None if reads is None else tuple(reads),
        token_events=None if events is None else tuple(events),
        first_token_after_s=None if events is None else after,
        ttft_s=offsets[0] if offsets else 0.0,
    )


EACH = [0, 1, 2, 3]
"""Four tokens, one event each."""
STEADY = [0.1, 0.6, 1.1, 1.6]
"""Four tokens 0.5 s apart, each read alone: 2 tok/s over 4 tokens."""
BACKLOG = [0.1, 0.1, 0.4, 0.4]
"""Four events out of two late reads of two each."""


def test_span_starts_at_the_first_token_and_ends_at_the_nth() -> None:
    offsets = [2.0, 2.25, 2.5, 2.75, 3.0, 9.0]
    assert row_rate(row(offsets), 5).span_s == 1.0
    assert row_rate(row(offsets), 6).span_s == 7.0


def test_conventional_rate_counts_intervals_and_historical_counts_events() -> None:
    rate = row_rate(row([1.0, 1.25, 1.5, 1.75, 2.0]), 5)
    assert (rate.span_s, rate.conventional, rate.historical) == (1.0, 4.0, 5.0)


def test_median_over_rows_of_both_conventions() -> None:
    rows = [
        row([0.0, 0.5, 1.0], "a"),  # span 1.0: 2.0 and 3.0 tok/s
        row([0.0, 0.125, 0.25], "b"),  # span 0.25: 8.0 and 12.0 tok/s
        row([0.0, 1.0, 2.0], "c"),  # span 2.0: 1.0 and 1.5 tok/s
    ]
    measured = measure(rows, 3)
    assert [r.prompt_id for r in measured.rows] == ["a", "b", "c"]
    assert (measured.conventional_median, measured.historical_median) == (2.0, 3.0)


def test_median_of_an_even_number_of_rows_is_the_mean_of_the_middle_two() -> None:
    rows = [row([0.0, 1.0], "a"), row([0.0, 0.5], "b")]
    assert measure(rows, 2).conventional_median == 1.5


def test_tokens_after_the_window_do_not_count() -> None:
    assert measure([row([0.0, 1.0, 2.0, 500.0])], 3).conventional_median == 1.0


def test_a_row_with_fewer_tokens_than_the_window_is_refused_by_name() -> None:
    rows = [row([0.0, 1.0, 2.0], "long"), row([0.0, 1.0], "short", 4)]
    with pytest.raises(UnmeasurableRow) as caught:
        measure(rows, 3)
    assert caught.value.diagnostics() == (
        "error: row 'short' streamed fewer tokens than the throughput window\n"
        "  where:    row 4 (short)\n"
        "  expected: at least 3 token arrival offsets\n"
        "  found:    2"
    )


def test_a_row_whose_window_arrived_in_one_chunk_is_refused_by_name() -> None:
    with pytest.raises(UnmeasurableRow) as caught:
        measure([row([4.5, 4.5, 4.5, 6.0], "burst", 2)], 3)
    assert caught.value.diagnostics() == (
        "error: row 'burst' has no time between its first and last measured token\n"
        "  where:    row 2 (burst)\n"
        "  expected: t[2] - t[0] > 0\n"
        "  found:    0.0 s"
    )


def test_no_rows_is_refused() -> None:
    with pytest.raises(UnmeasurableRow, match="no rows to measure"):
        measure([], 2)


def test_a_window_of_one_token_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="at least 2 tokens, not 1"):
        measure([row([0.0, 1.0])], 1)


@given(
    gaps=st.lists(st.floats(min_value=1e-3, max_value=10.0), min_size=1, max_size=60),
    start=st.floats(min_value=0.0, max_value=100.0),
)
def test_the_two_conventions_differ_by_exactly_n_over_n_minus_one(
    gaps: list[float], start: float
) -> None:
    offsets = [start]
    for gap in gaps:
        offsets.append(offsets[-1] + gap)
    tokens = len(offsets)
    rate = row_rate(row(offsets), tokens)
    assert rate.historical == pytest.approx(rate.conventional * tokens / (tokens - 1), rel=1e-12)
    assert rate.conventional == (tokens - 1) / (offsets[-1] - offsets[0])


# --- what the client did not see as it came -----------------------------------------------------


def test_a_window_opening_in_a_read_of_several_tokens_opens_at_the_read_before() -> None:
    """Tokens sent at 0.06, 0.16, 0.26 and 0.36 s (10 tok/s) and read at 0.1 and 0.4 s, the
    read before them at 0.05 s: token 0 arrived after 0.05 s, token 3 by 0.4 s, so the span is
    at least 0.35 s and the rate at most 3/0.35 tok/s, a lower bound of the server's 10."""
    rate = row_rate(row(BACKLOG, "late", 1, EACH, after=0.05), 4)
    assert rate.span_s == pytest.approx(0.35)
    assert rate.conventional == pytest.approx(3 / 0.35)
    assert rate.bound == (
        "token 0 came in a read of 2 tokens, so the window opens at the read before (50.0 ms), "
        "and token 3 came in a read of 2 events"
    )
    assert row_rate(row(STEADY, events=EACH), 4).bound is None, "each token read alone"


def test_only_the_ends_of_the_window_make_a_rate_a_bound() -> None:
    """A backlog inside the window or after it moves no end; several tokens in one event are
    one arrival (speculative decoding), bounded only at an end, token 0 held back with token 1
    as much as token 0 read with it."""
    inside = row([0.1, 0.9, 0.9, 0.9, 1.6], events=[0, 1, 2, 2, 3])
    assert row_rate(inside, 5) == row_rate(row([0.1, 0.9, 0.9, 0.9, 1.6]), 5)
    after = row([*STEADY, 9.0, 9.0], events=[0, 1, 2, 3, 4, 5])
    assert row_rate(after, 4).bound is None and row_rate(after, 4).span_s == 1.5
    step = row([0.1, 0.6, 1.6, 1.6], events=[0, 1, 2, 2])
    assert row_rate(step, 4).bound is None, "the N-th token came in one event with the one before"
    for offsets, events, span in (
        ([0.1, 0.1, 1.1, 1.6], [0, 1, 2, 3], 1.6 - 0.05),  # token 0 read with token 1's event
        ([0.1, 0.1, 1.1, 1.6], [0, 0, 1, 2], 1.6 - 0.05),  # token 0 held back with token 1
        ([0.1, 0.6, 1.6, 1.6], [0, 1, 2, 3], 1.5),  # token 3 read with token 2's event
    ):
        rate = row_rate(row(offsets, "x", 5, events, after=0.05), 4)
        assert rate.span_s == pytest.approx(span) and rate.bound is not None


@given(
    gaps=st.lists(st.floats(min_value=0.0, max_value=0.05), min_size=2, max_size=40),
    lags=st.lists(st.floats(min_value=0.0, max_value=0.2), min_size=1, max_size=40),
    first=st.floats(min_value=1e-3, max_value=1.0),
)
def test_a_rate_is_never_above_the_servers_pace_however_late_the_client_reads(
    gaps: list[float], lags: list[float], first: float
) -> None:
    """The server sends token i at a[i]; the client's reads return at times of its own (each
    some lag after it was woken), and a read brings every token that arrived since the one
    before. Whatever the reads, the span measured is at least the true a[N-1] - a[0] when
    token 0 came with later tokens, and at least a[N-1] - a[1] when alone (its read came
    before token 1 did): a rate is never higher than the server's, less one interval."""
    arrivals = [first]
    for gap in gaps:
        arrivals.append(arrivals[-1] + gap)
    reads: list[float] = []  # each read returns after the data it brings and after the last
    pending = 0
    lag_of = iter(lags * (len(arrivals) // len(lags) + 1))
    while pending < len(arrivals):
        at = max(arrivals[pending], reads[-1] if reads else 0.0) + next(lag_of) + 1e-9
        reads.append(at)
        while pending < len(arrivals) and arrivals[pending] <= at:
            pending += 1
    read_of = [next(j for j, at in enumerate(reads) if at >= a) for a in arrivals]
    before = reads[read_of[0] - 1] if read_of[0] > 0 else 0.0
    measured = OracleRow(
        prompt_id="p",
        prompt_index=0,
        token_ids=tuple(range(len(arrivals))),
        text_sha256="0" * 64,
        prompt_tokens=7,
        completion_tokens=len(arrivals),
        cached_tokens=0,
        token_offsets_s=tuple(reads[j] for j in read_of),
        token_reads=tuple(read_of),
        token_events=tuple(range(len(arrivals))),
        first_token_after_s=before,
        ttft_s=reads[read_of[0]],
    )
    tokens = len(arrivals)
    try:
        rate = row_rate(measured, tokens)
    except UnmeasurableRow:
        assert arrivals[-1] == arrivals[0], "only a window sent at one instant has no span"
        return
    alone = read_of.count(read_of[0]) == 1
    truth = arrivals[-1] - (arrivals[1] if alone else arrivals[0])
    assert rate.span_s >= truth
    assert (rate.bound is None) == (alone and read_of.count(read_of[-1]) == 1)


def test_a_suite_read_late_still_has_a_rate_and_names_its_bounds() -> None:
    rows = [
        row(STEADY, "a", 0, EACH),
        row(BACKLOG, "b", 1, EACH, after=0.05),
        row([0.1, 0.1, 0.2, 0.3], "c", 2, [0, 0, 1, 2], after=0.0),
    ]
    measured = measure(rows, 4)
    assert [r.prompt_id for r in measured.rows] == ["a", "b", "c"]
    assert measured.conventional_median == pytest.approx(3 / 0.35), "2, 3/0.35 and 10 tok/s"
    assert set(measured.lower_bounds) == {"b", "c"}
    assert measured.summary_of_bounds == (
        "; 2 of 3 rows' rates are lower bounds (b: token 0 came in a read of 2 tokens, so the "
        "window opens at the read before (50.0 ms), and token 3 came in a read of 2 events; c: "
        "token 0 came in a read of 2 tokens, so the window opens at the read before (0.0 ms))"
    )
    assert measure(rows[:1], 4).summary_of_bounds == ""


def test_a_record_that_did_not_number_reads_is_taken_as_arrivals() -> None:
    assert measure([row(BACKLOG)], 4).conventional_median == pytest.approx(10.0)


def numbered(
    offsets: Sequence[float],
    reads: Sequence[int] | None,
    events: Sequence[int] | None,
    after: float | None = 0.0,
) -> OracleRow:
    return row(offsets).model_copy(
        update={
            "token_reads": None if reads is None else tuple(reads),
            "token_events": None if events is None else tuple(events),
            "first_token_after_s": after,
        }
    )


@pytest.mark.parametrize(
    ("offsets", "reads", "events", "after", "message"),
    [
        (STEADY, [0, 1, 2], EACH, 0.0, r"token_reads \(3\) and token_events \(4\) must both"),
        (STEADY, [0, 1, 2, 3], None, 0.0, r"token_reads \(4\) and token_events \(none\)"),
        (STEADY, None, None, 0.0, r"token_reads \(none\) and token_events \(none\)"),
        (STEADY, [0, 1, 2, 3], EACH, None, "first_token_after_s is missing beside token_reads"),
        (STEADY, [0, 1, 2, 3], EACH, 0.1, r"first_token_after_s 0.1 is not an earlier read's"),
        (STEADY, [0, 1, 2, 3], EACH, -0.5, r"first_token_after_s -0.5 is not an earlier read"),
        (STEADY, [0, 1, 2, 3], [1, 2, 3, 4], 0.0, "the first token's event is numbered 1, not 0"),
        (STEADY, [0, 1, 2, 3], [0, 2, 3, 4], 0.0, "token 1's event 2 follows event 0"),
        (STEADY, [0, 1, 0, 2], EACH, 0.0, "token 2 came in read 0 after read 1"),
        (STEADY, [0, 1, 2, 3], [0, 0, 1, 2], 0.0, "token 1 came in read 1 after read 0, in event"),
        (STEADY, [0, 0, 1, 2], EACH, 0.0, "one read has one time"),
        (BACKLOG, [0, 1, 2, 2], EACH, 0.0, "one read has one time"),
        ([0.5, 0.1, 0.6, 0.7], None, None, None, "token offsets go back in time"),
    ],
    ids=[
        "short", "half", "after-alone", "no-after", "after-not-before", "after-negative",
        "from-one", "skips", "reads-back", "event-split", "one-read-two-times",
        "two-reads-one-time", "offsets-back",
    ],
)  # fmt: skip
def test_numbers_no_stream_could_give_are_refused(
    offsets: list[float],
    reads: list[int] | None,
    events: list[int] | None,
    after: float | None,
    message: str,
) -> None:
    """A read has one time and a later read a later one; events count up, each in one read;
    the first token came after the read before its own."""
    with pytest.raises(ValueError, match=message):
        OracleRow.model_validate(numbered(offsets, reads, events, after).model_dump())


def test_an_offset_per_token_id_and_the_first_is_the_ttft() -> None:
    """The oracle's TTFT is its first token's offset; another producer's may be its own."""
    good = row(STEADY, events=EACH).model_dump()
    with pytest.raises(ValueError, match="3 token offsets for 4 token ids"):
        OracleRow.model_validate({**good, "token_offsets_s": STEADY[:3]})
    with pytest.raises(
        ValueError, match=re.escape("ttft_s 0.25 is not the first token's offset 0.1")
    ):
        OracleRow.model_validate({**good, "ttft_s": 0.25})
    other = row(STEADY).model_dump()
    assert OracleRow.model_validate({**other, "ttft_s": 0.25}).ttft_s == 0.25


def test_a_run_without_a_rate_seals_no_throughput_claim() -> None:
    """A replay whose rows have no rate (they streamed fewer tokens than the window) fails its
    throughput gate; the lock of the sealed run then states no throughput (rather than its
    sealing breaking on the missing number)."""
    from repro_serving.builder.claims import oracle_claim
    from repro_serving.builder.documents.manifest import Manifest, Suite

    root = Path(__file__).resolve().parents[1]
    manifest = Manifest.from_path(root / "manifests" / "tiny-cpu.toml")
    suite = Suite.from_path(root / "manifests" / "suites" / "tiny-cpu.json")
    gate = manifest.oracle.gates.throughput
    assert gate is not None
    steady = [0.1 * (i + 1) for i in range(gate.tokens)]
    short = [
        row(steady[:-1], p.id, i, list(range(gate.tokens - 1))) for i, p in enumerate(suite.prompts)
    ]
    assert oracle_claim(manifest, suite, short, "0" * 64, "0" * 64).throughput is None
    whole = [row(steady, p.id, i, list(range(gate.tokens))) for i, p in enumerate(suite.prompts)]
    claim = oracle_claim(manifest, suite, whole, "0" * 64, "0" * 64).throughput
    assert claim is not None and claim.conventional_median == pytest.approx(10.0)
