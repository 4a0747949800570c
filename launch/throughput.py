"""Decode throughput of a suite, measured from the streamed token arrival offsets.

This module owns the one definition of a row's rate: over the
first N streamed tokens, starting at the first one (the end of TTFT), span = t[N-1] - t[0], and
the conventional rate is (N-1)/span: N-1 intervals between N arrivals. The suite's rate is the
median over rows. The historical convention N/span (a helper that divided N events by N-1
intervals) is computed beside it, labelled, and never gated.

A row that streamed fewer than N tokens, or whose N tokens came with no time between the first
and the last, has no rate: `measure` refuses it by name instead of dropping it.

A span is only as true as its two ends, and the client sees a token only when the socket read
that brought it returns. The oracle numbers, per token, that read and its event, and keeps when
the read before the first token's returned (`OracleRow.token_reads`, `token_events`,
`first_token_after_s`). A token's offset, its read's time, is never before it arrived, and the
first token arrived after the read before its own. So the window opens at token 0's offset when
that read brought it alone (token 1 was not there yet: within one interval of its arrival), and
at the read before when its read brought later tokens too (the client read a backlog, or the
server sent them together): the earliest it can have arrived. It closes at token N-1's offset,
never before that token arrived, and its arrival when that read brought one event (the tokens
of one event, a speculative step's, arrive together). A span so taken is never shorter than
the server's, less one interval, and a rate never higher than its pace; a row whose window
opens at the read before, or closes in a read of several events, is named as a lower bound.
The median of lower bounds is a lower bound of the median: a floor it passes, the server's pace
passes, and a teacher rate sealed from them asks of a replay no more than the teacher reached.
A row whose reads are not numbered (a historical record) has its offsets taken as arrivals.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from repro_serving.builder.documents.evidence import OracleRow
from repro_serving.builder.errors import ReproError

HISTORICAL_LABEL = "historical N/span (N events over N-1 intervals; recorded, never gated)"


class UnmeasurableRow(ReproError):
    """A row has no rate over N tokens: too few tokens streamed, or no time between them."""


@dataclass(frozen=True)
class Window:
    """When a row's window over N tokens opens and closes, and why that only bounds it."""

    opens_s: float
    closes_s: float
    bound: str | None
    """Why the span may be longer than the server's (token 0 came with later tokens, or token
    N-1 in a read of several events); None when both ends were read as they came."""

    @property
    def span_s(self) -> float:
        """Seconds from the window's opening to its close."""
        return self.closes_s - self.opens_s


@dataclass(frozen=True)
class RowRate:
    """One row's span over its first N tokens and both rates over it."""

    prompt_id: str
    span_s: float
    conventional: float
    """(N-1)/span, tokens per second."""
    historical: float
    """N/span, the historical convention."""
    bound: str | None = None
    """Why both rates are lower bounds; None when the window's ends were read as they came."""


@dataclass(frozen=True)
class Throughput:
    """The suite's rate over N tokens per row: each row's rates and the medians over rows."""

    tokens: int
    rows: tuple[RowRate, ...]
    conventional_median: float
    historical_median: float

    @property
    def lower_bounds(self) -> dict[str, str]:
        """Why each row whose rates are lower bounds is, by prompt id."""
        return {rate.prompt_id: rate.bound for rate in self.rows if rate.bound is not None}

    @property
    def summary_of_bounds(self) -> str:
        """`; 1 of 5 rows' rates are lower bounds (greeting: …)`, or nothing when none is."""
        bounded = self.lower_bounds
        if not bounded:
            return ""
        named = "; ".join(f"{prompt_id}: {bound}" for prompt_id, bound in bounded.items())
        return f"; {len(bounded)} of {len(self.rows)} rows' rates are lower bounds ({named})"


def row_window(row: OracleRow, tokens: int) -> Window:
    """The window over the row's first N tokens: it opens at token 0's arrival, or at the read
    before token 0's when its read brought later tokens too; it closes at token N-1's read."""
    offsets = row.token_offsets_s
    where = f"row {row.prompt_index} ({row.prompt_id})"
    if len(offsets) < tokens:
        raise UnmeasurableRow(
            f"row {row.prompt_id!r} streamed fewer tokens than the throughput window",
            where=where,
            expected=f"at least {tokens} token arrival offsets",
            found=f"{len(offsets)}",
        )
    opens, closes = offsets[0], offsets[tokens - 1]
    reads, events, after = row.token_reads, row.token_events, row.first_token_after_s
    bounds = []
    if reads is not None and events is not None and after is not None:
        first = reads.count(reads[0])
        if first > 1:
            opens = after
            bounds.append(
                f"token 0 came in a read of {first} tokens, so the window opens at "
                f"the read before ({after * 1000:.1f} ms)"
            )
        last = reads[tokens - 1]
        together = len({e for r, e in zip(reads, events, strict=True) if r == last})
        if together > 1:
            bounds.append(f"token {tokens - 1} came in a read of {together} events")
    window = Window(opens, closes, ", and ".join(bounds) or None)
    if window.span_s <= 0:
        raise UnmeasurableRow(
            f"row {row.prompt_id!r} has no time between its first and last measured token",
            where=where,
            expected=f"t[{tokens - 1}] - t[0] > 0",
            found=f"{window.span_s!r} s",
        )
    return window


def row_rate(row: OracleRow, tokens: int) -> RowRate:
    window = row_window(row, tokens)
    span = window.span_s
    return RowRate(row.prompt_id, span, (tokens - 1) / span, tokens / span, window.bound)


def measure(rows: Sequence[OracleRow], tokens: int) -> Throughput:
    """Both rates of every row over its first `tokens` tokens, and their medians."""
    if tokens < 2:
        raise ValueError(f"a rate needs at least 2 tokens, not {tokens}")
    if not rows:
        raise UnmeasurableRow("no rows to measure", expected="at least one row", found="none")
    rates = [row_rate(row, tokens) for row in rows]
    return Throughput(
        tokens=tokens,
        rows=tuple(rates),
        conventional_median=statistics.median(rate.conventional for rate in rates),
        historical_median=statistics.median(rate.historical for rate in rates),
    )
