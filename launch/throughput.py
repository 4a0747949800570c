"""Decode throughput of a suite, measured from the streamed token arrival offsets.

This module owns the one definition of a row's rate (DESIGN.md, "Oracle and gates"): over the
first N streamed tokens, starting at the first one (the end of TTFT), span = t[N-1] - t[0], and
the conventional rate is (N-1)/span: N-1 intervals between N arrivals. The suite's rate is the
median over rows. The historical convention N/span (a helper that divided N events by N-1
intervals) is computed beside it, labelled, and never gated.

A row that streamed fewer than N tokens, or whose N tokens arrived with no time between the
first and the last, has no rate: `measure` refuses it by name instead of dropping it.

A span is only as true as its two ends. The oracle counts, per token, the token-bearing events
of the socket read that brought it (`OracleRow.token_read_events`): a window whose first or
N-th token came in a read of several events was read out of a backlog (the client was not
scheduled while the server streamed: 32 tokens that took 200 ms then parse within 2 ms), and
its span is the client's delay, not the server's rate. Such a row is left out of the medians
and named; a suite whose rows were mostly read that way has no rate (fewer than half the rows
observed refuses it), since the median of a biased few is no measurement either.
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
    """An end of the row's window came in a read of a backlog: its offset is not its arrival."""


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
        named = "; ".join(f"{row.prompt_id}: {row.reason}" for row in self.left_out)
        return f"; {len(self.left_out)} of {total} rows left out ({named})"


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
    counts = row.token_read_events
    late = [] if counts is None else [i for i in (0, tokens - 1) if counts[i] > 1]
    if counts is not None and late:
        raise UnobservedWindow(
            f"row {row.prompt_id!r} was read out of a backlog: the client was late",
            where=where,
            expected=f"tokens 0 and {tokens - 1} each read alone, as they came",
            found="; ".join(f"token {i} in a read of {counts[i]} events" for i in late),
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
            "the client read most rows out of a backlog: the suite has no rate",
            where=f"{len(rows)} rows over {tokens} tokens",
            expected=f"at least {(len(rows) + 1) // 2} rows read as they came",
            found=f"{len(rates)}; "
            + "; ".join(f"{row.prompt_id}: {row.reason}" for row in left_out),
            hint="something kept the client from running while the server streamed (a loaded "
            "or throttled host); run again on a quieter one",
        )
    return Throughput(
        tokens=tokens,
        rows=tuple(rates),
        conventional_median=statistics.median(rate.conventional for rate in rates),
        historical_median=statistics.median(rate.historical for rate in rates),
        left_out=tuple(left_out),
    )
