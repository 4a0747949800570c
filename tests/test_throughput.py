"""The rate of a row over its first N tokens, both conventions, the median, and each refusal."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from repro_serving.launch.evidence import OracleRow
from repro_serving.launch.throughput import (
    UnmeasurableRow,
    UnobservedWindow,
    measure,
    row_rate,
    row_span,
)


def row(
    offsets: Sequence[float],
    prompt_id: str = "p",
    index: int = 0,
    reads: Sequence[int] | None = None,
) -> OracleRow:
    return OracleRow(
        prompt_id=prompt_id,
        prompt_index=index,
        token_ids=tuple(range(len(offsets))),
        text_sha256="0" * 64,
        prompt_tokens=7,
        completion_tokens=len(offsets),
        cached_tokens=0,
        token_offsets_s=tuple(offsets),
        token_read_events=None if reads is None else tuple(reads),
        ttft_s=offsets[0] if offsets else 0.0,
    )


STEADY = [0.0, 0.5, 1.0, 1.5]
"""Four tokens 0.5 s apart: 2 tok/s over 4 tokens when read as they came."""
BACKLOG = [0.1, 0.1, 0.4, 0.4]
"""Four tokens out of two late reads of two events each: 10 tok/s, the client's pace, not the
server's."""


def test_span_starts_at_the_first_token_and_ends_at_the_nth() -> None:
    offsets = [2.0, 2.25, 2.5, 2.75, 3.0, 9.0]
    assert row_span(row(offsets), 5) == 1.0
    assert row_span(row(offsets), 6) == 7.0


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


def test_a_row_whose_window_was_read_out_of_a_backlog_is_left_out_by_name() -> None:
    rows = [
        row(STEADY, "a", 0, reads=[1, 1, 1, 1]),
        row(BACKLOG, "late", 1, reads=[2, 2, 2, 2]),
        row([0.0, 0.25, 0.5, 0.75], "b", 2, reads=[1, 1, 1, 1]),
    ]
    measured = measure(rows, 4)
    assert [r.prompt_id for r in measured.rows] == ["a", "b"]
    assert measured.conventional_median == 3.0, "the median of 2 and 4 tok/s; 10 left out"
    (left,) = measured.left_out
    assert left.prompt_id == "late"
    assert left.reason == "token 0 in a read of 2 events; token 3 in a read of 2 events"
    assert measured.summary_of_left_out == f"; 1 of 3 rows left out (late: {left.reason})"


def test_only_the_ends_of_the_window_must_be_read_alone() -> None:
    """A backlog inside the window moves no end: the span is still first to N-th arrival."""
    inside = row([0.0, 0.9, 0.9, 0.9, 1.5], reads=[1, 3, 3, 3, 1])
    assert measure([inside], 5).conventional_median == 4 / 1.5
    for offsets, late_end in (
        ([0.0, 0.0, 1.0, 1.5], [2, 2, 1, 1]),
        ([0, 0.5, 1.5, 1.5], [1, 1, 2, 2]),
    ):
        with pytest.raises(UnobservedWindow):
            row_span(row(offsets, "x", 5, reads=late_end), 4)
    after = row([*STEADY, 9.0, 9.0], reads=[1, 1, 1, 1, 2, 2])
    assert row_span(after, 4) == 1.5, "a backlog after the window"


def test_a_backlog_is_named_before_the_zero_span_it_causes() -> None:
    """Events of one read can share an offset: the backlog is why, not the server's burst."""
    with pytest.raises(UnobservedWindow) as caught:
        row_span(row([0.2, 0.2, 0.2], "all-at-once", 3, reads=[3, 3, 3]), 3)
    assert caught.value.diagnostics() == (
        "error: row 'all-at-once' was read out of a backlog: the client was late\n"
        "  where:    row 3 (all-at-once)\n"
        "  expected: tokens 0 and 2 each read alone, as they came\n"
        "  found:    token 0 in a read of 3 events; token 2 in a read of 3 events"
    )


def test_a_suite_read_mostly_out_of_a_backlog_has_no_rate() -> None:
    rows = [
        row(STEADY, "a", 0, reads=[1, 1, 1, 1]),
        row(BACKLOG, "b", 1, reads=[2, 2, 2, 2]),
        row([0.1, 0.1, 0.2, 0.3], "c", 2, reads=[2, 2, 1, 1]),
    ]
    with pytest.raises(UnmeasurableRow) as caught:
        measure(rows, 4)
    assert caught.value.what == "the client read most rows out of a backlog: the suite has no rate"
    assert caught.value.expected == "at least 2 rows read as they came"
    assert caught.value.found == (
        "1; b: token 0 in a read of 2 events; token 3 in a read of 2 events; "
        "c: token 0 in a read of 2 events"
    )
    assert measure(rows[:2], 4).conventional_median == 2.0, "half the rows is enough"


def test_a_record_that_did_not_count_reads_is_taken_as_read_as_it_came() -> None:
    assert measure([row(BACKLOG, reads=None)], 4).conventional_median == pytest.approx(10.0)


@pytest.mark.parametrize(
    ("offsets", "reads", "message"),
    [
        (STEADY, [1, 1, 1], "token_read_events must count at least 1 event"),
        (STEADY, [1, 0, 1, 1], "token_read_events must count at least 1 event"),
        (STEADY, [1, 2, 1, 1], r"the 1 token\(s\) at offset 0.5 count \[2\] events"),
        (BACKLOG, [2, 1, 2, 2], r"the 2 token\(s\) at offset 0.1 count \[1, 2\] events"),
        ([0.1, 0.1, 0.1, 0.4], [4, 4, 4, 1], r"the 3 token\(s\) at offset 0.1 count \[4\]"),
    ],
    ids=["short", "zero", "alone-in-a-read-of-two", "one-read-two-counts", "fewer-than-events"],
)
def test_a_count_of_reads_that_does_not_fit_the_offsets_is_refused(
    offsets: list[float], reads: list[int], message: str
) -> None:
    """A read's events share its time: a count that no read could give is not evidence."""
    with pytest.raises(ValueError, match=message):
        row(offsets, reads=reads)
