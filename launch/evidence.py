"""The evidence of one run: what the oracle client records and what the gates judge.

These models are the contract between the run side's producers (`launch.oracle` streams the
suite, `launch.metrics` reads `/metrics`, the server log) and its judges (`launch.gates`): a
gate is a pure function from these records to a `Verdict`. The same models are filled from a
live run and from a historical record's files (e.g. a `bench.json` of the Laguna record), so a
gate never knows which it judges.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, RootModel, model_validator

from repro_serving.builder.documents import parse_document


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
    token_read_events: tuple[int, ...] | None = None
    """For each token id, how many token-bearing events the read that brought it carried: 1
    when the client read its event as it came, more when the client was late and read a
    backlog (those events' offsets are not their arrival). None in a record that did not count
    (e.g. a historical bench file): its offsets are taken as arrivals."""
    ttft_s: float
    finish_reason: str | None = None
    text: str | None = None
    """The output text, when the run kept it (what `[[oracle.quality]]` checks read); its
    sha256 is `text_sha256`. A record that kept only the hash leaves it None."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        counts = self.token_read_events
        if counts is not None:
            self._reads_fit_offsets(counts)
        if self.text is not None:
            digest = hashlib.sha256(self.text.encode("utf-8")).hexdigest()
            if digest != self.text_sha256:
                raise ValueError(
                    f"row {self.prompt_id}: text hashes to {digest}, not text_sha256 "
                    f"{self.text_sha256}"
                )
        return self

    def _reads_fit_offsets(self, counts: tuple[int, ...]) -> None:
        """One read, one time: tokens of one read share its offset and its count of events,
        and a read of k events brought at least k tokens."""
        offsets = self.token_offsets_s
        if len(counts) != len(offsets) or any(count < 1 for count in counts):
            raise ValueError(
                f"row {self.prompt_id}: token_read_events must count at least 1 event for "
                f"each of its {len(offsets)} token offsets"
            )
        reads: dict[float, list[int]] = {}
        for offset, count in zip(offsets, counts, strict=True):
            reads.setdefault(offset, []).append(count)
        for offset, shared in reads.items():
            if len(set(shared)) != 1 or len(shared) < shared[0]:
                raise ValueError(
                    f"row {self.prompt_id}: the {len(shared)} token(s) at offset {offset!r} "
                    f"count {sorted(set(shared))} events for their read: one read brings each "
                    "of its events' tokens at one time"
                )


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


class Verdicts(RootModel[tuple[Verdict, ...]]):
    """`verdicts.json`: every gate verdict of a run, in the order it judged them."""

    model_config = ConfigDict(frozen=True, strict=True)


class Rows(RootModel[tuple[OracleRow, ...]]):
    """`start-N/rows.json`: the suite's rows of one start, in prompt order."""

    model_config = ConfigDict(frozen=True, strict=True)
