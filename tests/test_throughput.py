"""The rate of a row over its first N tokens, both conventions, the median, and each refusal."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from repro_serving.launch.evidence import OracleRow
from repro_serving.launch.throughput import UnmeasurableRow, measure, row_rate, row_span


def row(offsets: Sequence[float], prompt_id: str = "p", index: int = 0) -> OracleRow:
    return OracleRow(
        prompt_id=prompt_id,
        prompt_index=index,
        token_ids=tuple(range(len(offsets))),
        text_sha256="0" * 64,
        prompt_tokens=7,
        completion_tokens=len(offsets),
        cached_tokens=0,
        token_offsets_s=tuple(offsets),
        ttft_s=offsets[0] if offsets else 0.0,
    )


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
