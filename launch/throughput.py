"""Decode throughput of a suite, measured from the streamed token arrival offsets.

This module owns the one definition of a row's rate (DESIGN.md, "Oracle and gates"): over the
first N streamed tokens, starting at the first one (the end of TTFT), span = t[N-1] - t[0], and
the conventional rate is (N-1)/span: N-1 intervals between N arrivals. The suite's rate is the
median over rows. The historical convention N/span (a helper that divided N events by N-1
intervals) is computed beside it, labelled, and never gated.

A row that streamed fewer than N tokens, or whose N tokens arrived with no time between the
first and the last, has no rate: `measure` refuses it by name instead of dropping it.

A span is only as true as its two ends. The oracle numbers, per token, the socket read that
brought it and its event (`OracleRow.token_reads`, `token_events`): a window whose first or
N-th token came in a read of several events was read out of a backlog (the client was not
scheduled while the server streamed: 32 tokens that took 200 ms then parse within 2 ms), and
a first token that came in one event with later ones was held back by the server; either way
the span is a delay, not the server's pace. Such a row is left out of the medians and named; a
suite whose rows were mostly so has no rate (fewer than half the rows measured refuses it),
since the median of a biased few is no measurement either.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from repro_serving.builder.errors import ReproError
from repro_serving.launch.evidence import OracleRow

HISTORICAL_LABEL = "historical N/span (N events over N-1 intervals; recorded, never gated)"


class UnmeasurableRow(ReproError):
    """A row has no rate over N tokens: too few tokens streamed, or no time between them."""


class UnobservedWindow(UnmeasurableRow):
    """An end of the row's window is not an arrival: it came in a read of a backlog, or token 0
    came in one event with later tokens."""


@dataclass(frozen=True)
class LeftOut:
    """A row left out of the medians and why."""

    prompt_id: str
    reason: str


@dataclass(frozen=True)
class RowRate:
    """One row's span over its first N tokens and both rates over it."""

    prompt_id: str
    span_s: float
    conventional: float
    """(N-1)/span, tokens per second."""
    historical: float
    """N/span, the historical convention."""


@dataclass(frozen=True)
class Throughput:
    """The suite's rate over N tokens per row: each row's rates and the medians over rows."""

    tokens: int
    rows: tuple[RowRate, ...]
    """The rows the medians are over: those whose window the client read as it came."""
    conventional_median: float
    historical_median: float
    left_out: tuple[LeftOut, ...] = ()

    @property
    def summary_of_left_out(self) -> str:
        """`; 1 of 5 rows left out (greeting: …)`, or nothing when none was."""
        if not self.left_out:
            return ""
        total = len(self.rows) + len(self.left_out)
        return f"; {len(self.left_out)} of {total} rows left out ({_named(self.left_out)})"


def _named(left_out: Sequence[LeftOut]) -> str:
    return "; ".join(f"{row.prompt_id}: {row.reason}" for row in left_out)


def row_span(row: OracleRow, tokens: int) -> float:
    """t[N-1] - t[0] over the row's first N token arrival offsets, in seconds, when both ends
    were read as they came."""
    offsets = row.token_offsets_s
    where = f"row {row.prompt_index} ({row.prompt_id})"
    if len(offsets) < tokens:
        raise UnmeasurableRow(
            f"row {row.prompt_id!r} streamed fewer tokens than the throughput window",
            where=where,
            expected=f"at least {tokens} token arrival offsets",
            found=f"{len(offsets)}",
        )
    late = late_ends(row, tokens)
    if late:
        raise UnobservedWindow(
            f"row {row.prompt_id!r}: an end of its window is not an arrival time",
            where=where,
            expected=f"tokens 0 and {tokens - 1} each in a read of one event, token 0 alone "
            "in its event",
            found="; ".join(late),
        )
    span = offsets[tokens - 1] - offsets[0]
    if span <= 0:
        raise UnmeasurableRow(
            f"row {row.prompt_id!r} has no time between its first and last measured token",
            where=where,
            expected=f"t[{tokens - 1}] - t[0] > 0",
            found=f"{span!r} s",
        )
    return span


def late_ends(row: OracleRow, tokens: int) -> list[str]:
    """Why an end of the row's window over `tokens` tokens is not when that token arrived: its
    read brought several events (a backlog), or token 0 came in one event with later tokens
    (the server held it back, e.g. an API process that lagged and merged its outputs). Empty
    when both ends are arrivals, or when the row did not number its reads and events."""
    reads, events = row.token_reads, row.token_events
    if reads is None or events is None:
        return []
    events_of_read: dict[int, set[int]] = {}
    for read, event in zip(reads, events, strict=True):
        events_of_read.setdefault(read, set()).add(event)
    late = []
    for index in (0, tokens - 1):
        count = len(events_of_read[reads[index]])
        if count > 1:
            late.append(
                f"token {index} in a read of {count} events (a backlog: the client was late)"
            )
    together = events.count(events[0])
    if together > 1:
        late.append(f"token 0 in one event with {together - 1} later token(s) (held back)")
    return late


def row_rate(row: OracleRow, tokens: int) -> RowRate:
    span = row_span(row, tokens)
    return RowRate(row.prompt_id, span, (tokens - 1) / span, tokens / span)


def measure(rows: Sequence[OracleRow], tokens: int) -> Throughput:
    """Both rates of every row over its first `tokens` tokens, and their medians over the rows
    the client read as they came (at least half of them); the others left out by name."""
    if tokens < 2:
        raise ValueError(f"a rate needs at least 2 tokens, not {tokens}")
    if not rows:
        raise UnmeasurableRow("no rows to measure", expected="at least one row", found="none")
    rates: list[RowRate] = []
    left_out: list[LeftOut] = []
    for row in rows:
        try:
            rates.append(row_rate(row, tokens))
        except UnobservedWindow as unobserved:
            left_out.append(LeftOut(row.prompt_id, str(unobserved.found)))
    if 2 * len(rates) < len(rows):
        raise UnmeasurableRow(
            "most rows' windows do not start or end at an arrival: the suite has no rate",
            where=f"{len(rows)} rows over {tokens} tokens",
            expected=f"at least {(len(rows) + 1) // 2} of {len(rows)} rows read as they came",
            found=f"{len(rates)} of {len(rows)}; {_named(left_out)}",
            hint="the client read several events at once (it was not scheduled while the "
            "server streamed: a loaded or throttled host) or the server held tokens back; "
            "run again on a quieter host, nothing buffering between client and server",
        )
    return Throughput(
        tokens=tokens,
        rows=tuple(rates),
        conventional_median=statistics.median(rate.conventional for rate in rates),
        historical_median=statistics.median(rate.historical for rate in rates),
        left_out=tuple(left_out),
    )
