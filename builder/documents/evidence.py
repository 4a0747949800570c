"""The evidence of one run: what the oracle client records and what the gates judge.

These models are the contract between the run side's producers (`launch.oracle` streams the
suite, `launch.metrics` reads `/metrics`, the server log) and its judges (`launch.gates`): a
gate is a pure function from these records to a `Verdict`. The same models are filled from a
live run and from a historical record's files (e.g. a `bench.json` of the Laguna record), so a
gate never knows which it judges.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from enum import StrEnum
from itertools import pairwise
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, RootModel, model_validator

from repro_serving.builder.canonical import canonical_json
from repro_serving.builder.documents import parse_document
from repro_serving.builder.drift import Difference


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OracleRow(_Record):
    """One prompt of the suite, answered once, cold, streamed with token ids."""

    prompt_id: str
    prompt_index: int
    token_ids: tuple[int, ...]
    text_sha256: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None
    """`usage.prompt_tokens_details.cached_tokens`; None when the server did not report it."""
    token_offsets_s: tuple[float, ...]
    """Arrival offset of each token id from the request's start, in stream order: when the
    socket read that brought its event returned."""
    token_reads: tuple[int, ...] | None = None
    """For each token id, the number of the socket read that brought its event (counted from
    0 over the whole answer). Several tokens in one read came at once (a backlog the client
    read late, or the server sent them together): their offset is an upper bound of each
    one's arrival. None in a record that did not number its reads (e.g. a historical bench
    file): its offsets are taken as arrivals."""
    token_events: tuple[int, ...] | None = None
    """For each token id, the number of its event among the answer's token-bearing events
    (from 0); the ids of one event came together. Set with `token_reads`, or not at all."""
    first_token_after_s: float | None = None
    """When the read before the first token's returned (0.0, the request's start, when the
    first token came in the answer's first read): a lower bound of the first token's arrival.
    Set with `token_reads`, or not at all."""
    ttft_s: float
    sent_at_s: float | None = None
    """A load's row (`oracle.loads`): when its request was sent, from the load's first send, on
    the clock of its token offsets; None for the single-stream suite's rows, asked one after
    another."""
    finish_reason: str | None = None
    text: str | None = None
    """The output text, when the run kept it (what `[[oracle.quality]]` checks read); its
    sha256 is `text_sha256`. A record that kept only the hash leaves it None."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        problem = _stream_problem(self)
        if problem is not None:
            raise ValueError(f"row {self.prompt_id}: {problem}")
        if self.text is not None:
            digest = hashlib.sha256(self.text.encode("utf-8")).hexdigest()
            if digest != self.text_sha256:
                raise ValueError(
                    f"row {self.prompt_id}: text hashes to {digest}, not text_sha256 "
                    f"{self.text_sha256}"
                )
        return self


def _stream_problem(row: OracleRow) -> str | None:
    """What no stream could have given in the row's arrivals; None when they fit together:
    one offset per token id, in order; and where the oracle numbered reads and events, the
    first offset the TTFT and later than `first_token_after_s`, events numbered 0, 1, 2, … each
    within one read, reads in order, and the ids of one read at its one time, later reads
    later."""
    offsets = row.token_offsets_s
    if row.sent_at_s is not None and not 0.0 <= row.sent_at_s < float("inf"):
        return f"sent_at_s {row.sent_at_s!r} is not a time since the load's first send"
    if len(offsets) != len(row.token_ids):
        return f"{len(offsets)} token offsets for {len(row.token_ids)} token ids"
    if any(later < earlier for earlier, later in pairwise(offsets)):
        return "token offsets go back in time"
    reads, events, after = row.token_reads, row.token_events, row.first_token_after_s
    if reads is None and events is None and after is None:  # another producer's: its TTFT
        return None  # may be its own measure
    if offsets and row.ttft_s != offsets[0]:
        return f"ttft_s {row.ttft_s!r} is not the first token's offset {offsets[0]!r}"
    if reads is None or events is None or not len(reads) == len(events) == len(offsets):
        return (
            f"token_reads ({'none' if reads is None else len(reads)}) and token_events "
            f"({'none' if events is None else len(events)}) must both number each of the "
            f"{len(offsets)} token ids"
        )
    if after is None:
        return "first_token_after_s is missing beside token_reads and token_events"
    if offsets and not 0.0 <= after < offsets[0]:
        return (
            f"first_token_after_s {after!r} is not an earlier read's time: it must lie in "
            f"[0, {offsets[0]!r}) (the first token's offset)"
        )
    steps = list(zip(offsets, reads, events, strict=True))
    if steps and steps[0][2] != 0:
        return f"the first token's event is numbered {steps[0][2]}, not 0"
    for index, ((offset, read, event), (offset2, read2, event2)) in enumerate(pairwise(steps)):
        token = index + 1
        if event2 not in (event, event + 1):
            return f"token {token}'s event {event2} follows event {event}: events count 0, 1, 2"
        if read2 < read or (event2 == event and read2 != read):
            return f"token {token} came in read {read2} after read {read}, in event {event2}"
        if (read2 == read) != (offset2 == offset):
            return (
                f"tokens {token - 1} and {token} at offsets {offset!r} and {offset2!r} in reads "
                f"{read} and {read2}: one read has one time, a later read a later one"
            )
    return None


class TeacherRow(_Record):
    """What a candidate row must reproduce."""

    prompt_id: str
    prompt_index: int
    token_ids: tuple[int, ...]
    text_sha256: str


class Teacher(_Record):
    suite: str
    rows: tuple[TeacherRow, ...]
    conventional_tok_s: float | None = None
    """The teacher run's conventional median rate (`launch.throughput`) over the manifest's
    throughput tokens, tok/s: what a throughput floor scales. None when no throughput is gated."""

    @classmethod
    def of_rows(
        cls, suite: str, rows: Sequence[OracleRow], conventional_tok_s: float | None
    ) -> Teacher:
        """The teacher a run's rows make: each row's token ids and text sha256."""
        taught = (
            TeacherRow(
                prompt_id=row.prompt_id,
                prompt_index=row.prompt_index,
                token_ids=row.token_ids,
                text_sha256=row.text_sha256,
            )
            for row in rows
        )
        return cls(suite=suite, rows=tuple(taught), conventional_tok_s=conventional_tok_s)

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str) -> Teacher:
        """A teacher file (`oracle/teacher.json`) validated whole."""
        return parse_document(cls, data, where=where, what="the teacher")


class MetricsDelta(_Record):
    """Prometheus counters after minus before the suite (absent counters are None)."""

    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None
    generation_tokens: float | None = None
    spec_decode_drafts: float | None = None
    spec_decode_draft_tokens: float | None = None
    spec_decode_accepted: float | None = None
    spec_decode_accepted_per_position: tuple[float, ...] = ()


class RunEvidence(_Record):
    """Everything the gates of one run judge; a field is None when the run did not produce it,
    and a gate that needs it then fails saying so."""

    rows: tuple[OracleRow, ...] | None = None
    """The suite's rows of the first fresh start."""
    teacher: Teacher | None = None
    metrics: MetricsDelta | None = None
    server_log: str | None = None
    """The server's log of the first start, decoded."""
    later_starts: tuple[tuple[OracleRow, ...], ...] = ()
    """The suite's rows of each further fresh start, in order (start 2, 3, …)."""
    metrics_after: str | None = None
    """The raw `/metrics` text read after the suite of the first start: its info gauges
    (e.g. `vllm:cache_config_info`) are the engine's own report of its configuration."""
    loads: dict[str, tuple[tuple[OracleRow, ...], ...]] = Field(default_factory=dict)
    """Each load's rows (`oracle.loads`, by name), one tuple a start (start 1, 2, …)."""


class VerdictStatus(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    NOT_APPLICABLE = "n/a"


class Verdict(_Record):
    """One gate's judgement with the numbers it was made from."""

    gate: str
    status: VerdictStatus
    summary: str
    """One line a person reads: what was measured against what."""
    details: dict[str, object] = Field(default_factory=dict)
    """The numbers, for `--json` and for recomputation."""

    @property
    def passed(self) -> bool:
        return self.status is not VerdictStatus.FAIL


class RunDocument(_Record):
    """`run.json`: what a run was asked to do, written first, before any start."""

    manifest: str
    bundle: str
    profile: str
    suite: str
    fresh_starts: int
    teacher: Teacher | None
    """The teacher the run was judged against; None when it captures the teacher."""
    argv: tuple[str, ...]
    env: dict[str, str]
    port: int
    repro_pid: int


class ReplayDocument(_Record):
    """`replay.json` of a run sealed by `repro launch`: the bundle it replayed (its name and the
    sha256 of its lock) and each difference from it that the manifest allows, as the preflight
    found it on this host."""

    bundle: str
    lock_sha256: str
    differences: tuple[Difference, ...]

    def to_bytes(self) -> bytes:
        return canonical_json(self.model_dump(mode="json"))

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str) -> ReplayDocument:
        return parse_document(cls, data, where=where, what="the replay's record")


class _Timed(BaseModel):
    """A record of times and counts: NaN and infinity are no time."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class ServerDocument(_Timed):
    """`start-N/server.json`: the started tree's group leader, where it answered, and when it
    was spawned and ready (seconds since the epoch, the clock of process start times)."""

    pid: int
    port: int
    ready_after_s: float
    started_at: float | None = None
    """None in a run sealed before repro recorded it: `repro verify` refuses such a start."""
    ready_at: float | None = None


class TeardownDocument(_Timed):
    """`start-N/teardown.json` (and a rank's): the tree torn down with proof (`proven`), or
    why not (`error`); every pid it held, those that needed SIGKILL, when teardown began and
    ended, and how many bytes of the server's log were written before it began."""

    proven: bool
    error: str | None = None
    pids: tuple[int, ...] = ()
    killed: tuple[int, ...] = ()
    seconds: float | None = None
    began_at: float | None = None
    ended_at: float | None = None
    log_bytes: int | None = None


class Verdicts(RootModel[tuple[Verdict, ...]]):
    """`verdicts.json`: every gate verdict of a run, in the order it judged them."""

    model_config = ConfigDict(frozen=True, strict=True)


class Rows(RootModel[tuple[OracleRow, ...]]):
    """`start-N/rows.json`: the suite's rows of one start, in prompt order. Written by the
    oracle, each numbers the read and the event of every token: a row without them would take
    every offset as an arrival, so it is refused (the validator of `OracleRow` requires the
    three together)."""

    model_config = ConfigDict(frozen=True, strict=True)

    @model_validator(mode="after")
    def _reads_numbered(self) -> Self:
        unnumbered = [row.prompt_id for row in self.root if row.token_reads is None]
        if unnumbered:
            raise ValueError(
                "rows without token_reads, token_events and first_token_after_s (the oracle "
                "records them): " + ", ".join(unnumbered)
            )
        return self
