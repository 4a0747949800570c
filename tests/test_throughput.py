"""The rate of a row over its first N tokens, both conventions, the median, and each refusal."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

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
    events: Sequence[int] | None = None,
) -> OracleRow:
    """A row; with `events` (each token's event number) it numbers its reads as a stream
    does: tokens at one offset came in one read, a later offset is a later read."""
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
        ttft_s=offsets[0] if offsets else 0.0,
    )


EACH = [0, 1, 2, 3]
"""Four tokens, one event each."""
STEADY = [0.0, 0.5, 1.0, 1.5]
"""Four tokens 0.5 s apart, each read alone: 2 tok/s over 4 tokens."""
BACKLOG = [0.1, 0.1, 0.4, 0.4]
"""Four events out of two late reads of two each: 10 tok/s, the client's pace, not the
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
        row(STEADY, "a", 0, EACH),
        row(BACKLOG, "late", 1, EACH),
        row([0.0, 0.25, 0.5, 0.75], "b", 2, EACH),
    ]
    measured = measure(rows, 4)
    assert [r.prompt_id for r in measured.rows] == ["a", "b"]
    assert measured.conventional_median == 3.0, "the median of 2 and 4 tok/s; 10 left out"
    (left,) = measured.left_out
    assert left.prompt_id == "late"
    assert left.reason == (
        "token 0 in a read of 2 events (a backlog: the client was late); "
        "token 3 in a read of 2 events (a backlog: the client was late)"
    )
    assert measured.summary_of_left_out == f"; 1 of 3 rows left out (late: {left.reason})"


def test_only_the_ends_of_the_window_must_be_arrivals() -> None:
    """A backlog inside the window moves no end: the span is still first to N-th arrival;
    several tokens in one event are one arrival (speculative decoding), but not token 0."""
    inside = row([0.0, 0.9, 0.9, 0.9, 1.5], events=[0, 1, 2, 2, 3])
    assert measure([inside], 5).conventional_median == 4 / 1.5
    for offsets, events in (
        ([0.0, 0.0, 1.0, 1.5], [0, 1, 2, 3]),  # token 0 read with token 1's event
        ([0.0, 0.5, 1.5, 1.5], [0, 1, 2, 3]),  # token 3 read with token 2's event
        ([0.0, 0.0, 1.0, 1.5], [0, 0, 1, 2]),  # token 0 held back with token 1 in one event
    ):
        with pytest.raises(UnobservedWindow):
            row_span(row(offsets, "x", 5, events), 4)
    together = row([0.0, 0.5, 1.5, 1.5], events=[0, 1, 2, 2])
    assert row_span(together, 4) == 1.5, "the N-th token came with the one before it"
    after = row([*STEADY, 9.0, 9.0], events=[0, 1, 2, 3, 4, 5])
    assert row_span(after, 4) == 1.5, "a backlog after the window"


def test_a_late_end_is_named_before_the_zero_span_it_causes() -> None:
    """Events of one read share an offset: the backlog is why there is no time between them."""
    with pytest.raises(UnobservedWindow) as caught:
        row_span(row([0.2, 0.2, 0.2], "all-at-once", 3, [0, 1, 1]), 3)
    assert caught.value.diagnostics() == (
        "error: row 'all-at-once': an end of its window is not an arrival time\n"
        "  where:    row 3 (all-at-once)\n"
        "  expected: tokens 0 and 2 each in a read of one event, token 0 alone in its event\n"
        "  found:    token 0 in a read of 2 events (a backlog: the client was late); "
        "token 2 in a read of 2 events (a backlog: the client was late)"
    )
    with pytest.raises(UnobservedWindow, match="an end of its window") as held:
        row_span(row([0.2, 0.2, 0.5], "merged", 3, [0, 0, 1]), 3)
    assert held.value.found == "token 0 in one event with 1 later token(s) (held back)"


def test_a_suite_mostly_without_arrivals_at_its_ends_has_no_rate() -> None:
    rows = [
        row(STEADY, "a", 0, EACH),
        row(BACKLOG, "b", 1, EACH),
        row([0.1, 0.1, 0.2, 0.3], "c", 2, [0, 0, 1, 2]),
    ]
    with pytest.raises(UnmeasurableRow) as caught:
        measure(rows, 4)
    assert caught.value.what == (
        "most rows' windows do not start or end at an arrival: the suite has no rate"
    )
    assert caught.value.expected == "at least 2 of 3 rows read as they came"
    assert str(caught.value.found).startswith("1 of 3; b: token 0 in a read of 2 events")
    assert str(caught.value.found).endswith(
        "c: token 0 in one event with 1 later token(s) (held back)"
    )
    assert caught.value.hint and "not scheduled while the server streamed" in caught.value.hint
    assert measure(rows[:2], 4).conventional_median == 2.0, "half the rows is enough"


def test_a_record_that_did_not_number_reads_is_taken_as_arrivals() -> None:
    assert measure([row(BACKLOG)], 4).conventional_median == pytest.approx(10.0)


def numbered(
    offsets: Sequence[float], reads: Sequence[int] | None, events: Sequence[int] | None
) -> OracleRow:
    return row(offsets).model_copy(
        update={
            "token_reads": None if reads is None else tuple(reads),
            "token_events": None if events is None else tuple(events),
        }
    )


@pytest.mark.parametrize(
    ("offsets", "reads", "events", "message"),
    [
        (STEADY, [0, 1, 2], EACH, r"token_reads \(3\) and token_events \(4\) must both"),
        (STEADY, [0, 1, 2, 3], None, r"token_reads \(4\) and token_events \(none\)"),
        (STEADY, [0, 1, 2, 3], [1, 2, 3, 4], "the first token's event is numbered 1, not 0"),
        (STEADY, [0, 1, 2, 3], [0, 2, 3, 4], "token 1's event 2 follows event 0"),
        (STEADY, [0, 1, 0, 2], EACH, "token 2 came in read 0 after read 1"),
        (STEADY, [0, 1, 2, 3], [0, 0, 1, 2], "token 1 came in read 1 after read 0, in event 0"),
        (STEADY, [0, 0, 1, 2], EACH, "one read has one time"),
        (BACKLOG, [0, 1, 2, 2], EACH, "one read has one time"),
        ([0.5, 0.1, 0.6, 0.7], None, None, "token offsets go back in time"),
    ],
    ids=[
        "short", "half", "from-one", "skips", "reads-back", "event-split",
        "one-read-two-times", "two-reads-one-time", "offsets-back",
    ],
)  # fmt: skip
def test_numbers_no_stream_could_give_are_refused(
    offsets: list[float], reads: list[int] | None, events: list[int] | None, message: str
) -> None:
    """A read has one time and a later read a later one; events count up, each in one read."""
    with pytest.raises(ValueError, match=message):
        OracleRow.model_validate(numbered(offsets, reads, events).model_dump())


def test_an_offset_per_token_id_and_the_first_is_the_ttft() -> None:
    """The oracle's TTFT is its first token's offset; another producer's may be its own."""
    good = row(STEADY, events=EACH).model_dump()
    with pytest.raises(ValueError, match="3 token offsets for 4 token ids"):
        OracleRow.model_validate({**good, "token_offsets_s": STEADY[:3]})
    with pytest.raises(
        ValueError, match=re.escape("ttft_s 0.25 is not the first token's offset 0.0")
    ):
        OracleRow.model_validate({**good, "ttft_s": 0.25})
    other = row(STEADY).model_dump()
    assert OracleRow.model_validate({**other, "ttft_s": 0.25}).ttft_s == 0.25


def test_a_run_without_a_rate_seals_no_throughput_claim() -> None:
    """A replay whose rows have no rate fails its throughput gate; the lock of the sealed run
    then states no throughput (rather than its sealing breaking on the missing number)."""
    from repro_serving.builder.claims import oracle_claim
    from repro_serving.builder.manifest import Manifest, Suite

    root = Path(__file__).resolve().parents[1]
    manifest = Manifest.from_path(root / "manifests" / "tiny-cpu.toml")
    suite = Suite.from_path(root / "manifests" / "suites" / "tiny-cpu.json")
    gate = manifest.oracle.gates.throughput
    assert gate is not None
    steady = [0.1 * i for i in range(gate.tokens)]
    late = [0.1] * 2 + steady[2:]
    rows = [
        row(late, prompt.id, index, [0, 1, *range(2, gate.tokens)])
        for index, prompt in enumerate(suite.prompts)
    ]
    assert oracle_claim(manifest, suite, rows, "0" * 64, "0" * 64).throughput is None
    kept = [row(steady, p.id, i, list(range(gate.tokens))) for i, p in enumerate(suite.prompts)]
    claim = oracle_claim(manifest, suite, kept, "0" * 64, "0" * 64).throughput
    assert claim is not None and claim.conventional_median == pytest.approx(10.0)
