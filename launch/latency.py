"""Latency of a suite's answers, from the client's sealed token times: TTFT, inter-token
latencies, time per output token, their percentiles, and stalls.

Pure, over `OracleRow`s. Every figure is the client's view of the stream, as the oracle sealed
it (`OracleRow.token_offsets_s`: when the socket read that brought each token returned):

- **TTFT**: the row's `ttft_s`, from sending the request to reading the first token.
- **Inter-token latency (ITL)**: the time between two consecutive reads that brought tokens,
  one per read after the first (vLLM's `bench serve` takes one per chunk the same way). Tokens
  one read brought together (a backlog, or a speculative step's) share its time: their gaps
  are not known apart, so they count as one. A row whose reads are not numbered (a historical
  record) has its offsets taken as arrivals, tokens of one offset as one chunk.
- **Time per output token (TPOT)**: per row, first to last token over the tokens after the
  first, `(t[last] - t[0]) / (N - 1)` (vLLM's definition); none for a row of one token.
- **Percentiles**: p50, p90, p99 by linear interpolation between closest ranks (numpy's
  default, the one `bench serve` reports), over every ITL of every row, every TTFT, every TPOT.
- **Stall**: a gap between two reads longer than `factor` times the row's median ITL and longer
  than `min_s`: named by its prompt, the index of the first token after it, and its length.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from repro_serving.builder.documents.evidence import OracleRow

PERCENTILES: Final = (50, 90, 99)


@dataclass(frozen=True)
class Gap:
    """The time before the read that brought token `token` (the first of that read)."""

    token: int
    seconds: float


def gaps(row: OracleRow) -> list[Gap]:
    """The row's inter-token latencies: one per read after its first (per distinct offset where
    reads are not numbered), each named by the first token its read brought."""
    offsets = row.token_offsets_s
    reads = row.token_reads
    found = []
    for token in range(1, len(offsets)):
        if reads is not None and reads[token] == reads[token - 1]:
            continue  # the same read: no time between them is known
        if reads is None and offsets[token] == offsets[token - 1]:
            continue  # unnumbered: one time, one chunk
        found.append(Gap(token, offsets[token] - offsets[token - 1]))
    return found


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0 <= q <= 100) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("no values to take a percentile of")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Distribution:
    """Percentiles of some times, in seconds, and how many they are over."""

    count: int
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution | None:
        if not values:
            return None
        p50, p90, p99 = (percentile(values, q) for q in PERCENTILES)
        return cls(len(values), p50, p90, p99, max(values))

    def as_details(self, unit: str = "_s") -> dict[str, float | int]:
        """Its figures by key, each with `unit` (seconds by default; "" for a figure whose
        unit the key holding it names, as `request_tok_s` does)."""
        return {
            "count": self.count,
            f"p50{unit}": self.p50,
            f"p90{unit}": self.p90,
            f"p99{unit}": self.p99,
            f"max{unit}": self.max,
        }


@dataclass(frozen=True)
class Latency:
    """A suite's latency distributions (None where no row gives one)."""

    ttft: Distribution | None
    itl: Distribution | None
    tpot: Distribution | None


def tpot(row: OracleRow) -> float | None:
    offsets = row.token_offsets_s
    if len(offsets) < 2:
        return None
    return (offsets[-1] - offsets[0]) / (len(offsets) - 1)


def latency(rows: Sequence[OracleRow]) -> Latency:
    per_token = [value for row in rows if (value := tpot(row)) is not None]
    return Latency(
        ttft=Distribution.of([row.ttft_s for row in rows]),
        itl=Distribution.of([gap.seconds for row in rows for gap in gaps(row)]),
        tpot=Distribution.of(per_token),
    )


@dataclass(frozen=True)
class Stall:
    prompt_id: str
    token: int
    """The first token the late read brought."""
    seconds: float
    median_s: float
    """The row's median inter-token latency it is measured against."""

    def shown(self) -> str:
        return (
            f"prompt {self.prompt_id!r} token {self.token}: {self.seconds * 1000:.0f} ms after "
            f"the token before ({self.seconds / self.median_s:.0f} x its median ITL "
            f"{self.median_s * 1000:.2f} ms)"
            if self.median_s > 0
            else f"prompt {self.prompt_id!r} token {self.token}: {self.seconds * 1000:.0f} ms "
            "after the token before"
        )


def stalls(rows: Sequence[OracleRow], factor: float, min_s: float) -> list[Stall]:
    """Every gap longer than `factor` times its row's median ITL and than `min_s`."""
    found = []
    for row in rows:
        row_gaps = gaps(row)
        if not row_gaps:
            continue
        median = statistics.median(gap.seconds for gap in row_gaps)
        found += [
            Stall(row.prompt_id, gap.token, gap.seconds, median)
            for gap in row_gaps
            if gap.seconds > min_s and gap.seconds > factor * median
        ]
    return found


@dataclass(frozen=True)
class LoadFigures:
    """What one start's rows under a load (`oracle.loads`) measure, from the client's sealed
    send times and token times: `duration_s` runs from the first send to the last token read;
    the aggregate rate is every output token over it; a request's rate is its output tokens
    over its own first-send-to-last-token time."""

    requests: int
    input_tokens: int
    output_tokens: int
    duration_s: float
    aggregate_tok_s: float | None
    """None when the duration is 0 (no token read after the first send's clock tick)."""
    request_tok_s: Distribution | None
    latency: Latency

    @classmethod
    def of(cls, rows: Sequence[OracleRow]) -> LoadFigures:
        answered = [row for row in rows if row.token_offsets_s]
        ends = [(row.sent_at_s or 0.0) + row.token_offsets_s[-1] for row in answered]
        duration = max(ends) - min(row.sent_at_s or 0.0 for row in rows) if ends else 0.0
        output = sum(row.completion_tokens for row in rows)
        rates = [
            row.completion_tokens / row.token_offsets_s[-1]
            for row in answered
            if row.token_offsets_s[-1] > 0
        ]
        return cls(
            requests=len(rows),
            input_tokens=sum(row.prompt_tokens for row in rows),
            output_tokens=output,
            duration_s=duration,
            aggregate_tok_s=output / duration if duration > 0 else None,
            request_tok_s=Distribution.of(rates),
            latency=latency(rows),
        )

    def as_details(self) -> dict[str, object]:
        """The figures with their unit in each key, numbers as numbers."""

        def shown(figure: Distribution | None, unit: str = "_s") -> object:
            return None if figure is None else figure.as_details(unit)

        return {
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "duration_s": self.duration_s,
            "aggregate_tok_s": self.aggregate_tok_s,
            "request_tok_s": shown(self.request_tok_s, ""),
            "ttft": shown(self.latency.ttft),
            "itl": shown(self.latency.itl),
            "tpot": shown(self.latency.tpot),
        }
