"""Decode throughput of a suite, measured from the streamed token arrival offsets.

This module owns the one definition of a row's rate (DESIGN.md, "Oracle and gates"): over the
first N streamed tokens, starting at the first one (the end of TTFT), span = t[N-1] - t[0], and
the conventional rate is (N-1)/span: N-1 intervals between N arrivals. The suite's rate is the
median over rows. The historical convention N/span (a helper that divided N events by N-1
intervals) is computed beside it, labelled, and never gated.

A row that streamed fewer than N tokens, or whose N tokens arrived with no time between the
first and the last, has no rate: `measure` refuses it by name instead of dropping it.
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
    conventional_median: float
    historical_median: float


def row_span(row: OracleRow, tokens: int) -> float:
    """t[N-1] - t[0] over the row's first N token arrival offsets, in seconds."""
    offsets = row.token_offsets_s
    if len(offsets) < tokens:
        raise UnmeasurableRow(
            f"row {row.prompt_id!r} streamed fewer tokens than the throughput window",
            where=f"row {row.prompt_index} ({row.prompt_id})",
            expected=f"at least {tokens} token arrival offsets",
            found=f"{len(offsets)}",
        )
    span = offsets[tokens - 1] - offsets[0]
    if span <= 0:
        raise UnmeasurableRow(
            f"row {row.prompt_id!r} has no time between its first and last measured token",
            where=f"row {row.prompt_index} ({row.prompt_id})",
            expected=f"t[{tokens - 1}] - t[0] > 0",
            found=f"{span!r} s",
        )
    return span


def row_rate(row: OracleRow, tokens: int) -> RowRate:
    span = row_span(row, tokens)
    return RowRate(row.prompt_id, span, (tokens - 1) / span, tokens / span)


def measure(rows: Sequence[OracleRow], tokens: int) -> Throughput:
    """Both rates of every row over its first `tokens` tokens, and their medians over rows."""
    if tokens < 2:
        raise ValueError(f"a rate needs at least 2 tokens, not {tokens}")
    if not rows:
        raise UnmeasurableRow("no rows to measure", expected="at least one row", found="none")
    rates = tuple(row_rate(row, tokens) for row in rows)
    return Throughput(
        tokens=tokens,
        rows=rates,
        conventional_median=statistics.median(rate.conventional for rate in rates),
        historical_median=statistics.median(rate.historical for rate in rates),
    )
