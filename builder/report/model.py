"""The report of a verified bundle or sealed run, as typed data.

Everything a report page draws and `repro report --json` prints is one `Report`: the verdict of
the verification first, then each section computed from the sealed evidence (`compute`). A
section the evidence does not hold is None (an imported record has no live audit) and a section
whose evidence could not be read names why in `Report.unreadable`; nothing is filled in.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict

from repro_serving.builder.documents.evidence import VerdictStatus

REPORT_SCHEMA: Final = "repro.report/v1"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class SubjectKind(StrEnum):
    BUNDLE = "bundle"
    """Sealed by `repro build` from a live run of the teacher profile."""
    IMPORTED = "imported record"
    """Sealed by `repro build` from a record made elsewhere (`[evidence]`)."""
    RUN = "sealed run"
    """A replay sealed by `repro launch`."""


class Subject(_Model):
    path: str
    name: str
    description: str
    kind: SubjectKind | None
    """None when the files are not those the signer sealed: nothing of them is read."""
    repro_version: str | None
    """The repro that sealed it, as its lock says."""


class ClaimLine(_Model):
    """One claim of `repro verify`, recomputed, with its evidence class."""

    claim: str
    evidence: str
    value: str
    ok: bool
    detail: str


class DriftLine(_Model):
    kind: str
    subject: str
    expected: str
    observed: str
    why: str


class Verdict(_Model):
    """What `repro verify` concluded: the verdict a report opens with."""

    ok: bool
    intact: bool
    """The signature and every file's digest hold: the evidence below is what the signer
    sealed. When False nothing of the evidence is shown."""
    signers: tuple[str, ...]
    classes: dict[str, int]
    """Evidence class (`live`, `sealed`, `declared`) → claims of that class."""
    failures: tuple[str, ...]
    """Each claim that did not hold and each drift, one line each: why it is FAIL."""
    claims: tuple[ClaimLine, ...]
    drifts: tuple[DriftLine, ...]


class GateLine(_Model):
    """One gate recomputed from the sealed evidence: what it measured against its bound."""

    gate: str
    status: VerdictStatus
    measured: str
    bound: str
    summary: str


class Series(_Model):
    """One stream of one prompt: when each token arrived."""

    label: str
    offsets_s: tuple[float, ...]
    """Arrival offset of each token from the request's start, in stream order."""
    ttft_s: float


class PromptTiming(_Model):
    prompt_id: str
    prompt_index: int
    series: tuple[Series, ...]
    """The subject's starts first (start 1 is what the gates judge), then the reference's."""
    tokens: int
    """Tokens the subject's first start streamed."""
    ttft_s: float
    conventional: float | None
    """(N-1)/span over the throughput window of the first start; None without a window."""
    historical: float | None
    """N/span over the same window: the historical convention, recorded, never gated."""
    teacher_exact: bool | None
    """The first start's token ids equal the teacher's; None when there is no teacher."""
    first_difference: int | None
    """The first token index where they differ; None when equal or without a teacher."""


class Throughput(_Model):
    """The suite's rate over the window, as `launch.throughput` measures it, and its floor."""

    tokens: int
    conventional_median: float
    historical_median: float
    record_historical: bool
    """The manifest records the historical convention beside the gated one."""
    floor: float
    """The fraction of the sealed rate a run must reach."""
    sealed_rate: float
    """The rate the floor scales: the teacher's conventional median."""
    floor_rate: float
    gated: bool
    """This subject's rate is judged against the floor (a run, an imported record); a bundle
    capturing its teacher sets the floor its replays must reach."""
    problem: str | None = None
    """Why the sealed rate is not the one the rows it was captured from give."""
    lower_bounds: dict[str, str] = {}
    """Rows whose rates are lower bounds (token 0 came with later tokens, or the window's last
    token in a read of several events), by prompt id, with why."""


class Acceptance(_Model):
    """Speculative decoding during the suite: the `/metrics` counters, after minus before."""

    per_position: tuple[float, ...]
    """Draft tokens accepted at each draft position, 0 first."""
    accepted: float | None
    draft_tokens: float | None
    drafts: float | None
    ratio_max: float
    """The flatness bound: the last position may keep at most this share of the first."""
    threshold: float
    """`ratio_max` times the first position's count: the last position must be at or below."""
    bounds: tuple[float, float] | None
    """The acceptance rate's gate bounds; None when no spec_decode gate is declared."""
    positions: int | None
    """The positions the gate declares; None when it declares none."""


class RuleCount(_Model):
    role: str
    rule: str
    objects: int


class ProcessLine(_Model):
    start: int
    pid: int
    ppid: int
    role: str
    name: str
    objects: int
    rules: dict[str, int]
    error: str | None
    drifted: bool
    """A drift of this start's audit names this process."""


class AuditStart(_Model):
    start: int
    files: int
    """Distinct ELF files the tree mapped."""
    processes: tuple[ProcessLine, ...]
    by_rule: tuple[RuleCount, ...]
    """ELF objects mapped per process role and loader rule, roles and rules sorted."""
    drifts: tuple[DriftLine, ...]


class DispatchLine(_Model):
    name: str
    kernel_set: str
    variant: str
    facts: dict[str, bool | str]
    path: str | None
    as_locked: bool
    """The lock states this same choice (a live one is recomputed from the sealed audit and
    probes by the sealed kernel sets; a declared one is the lock's own)."""


class Native(_Model):
    """The native truth: what every process mapped and why, and the code the host selected."""

    evidence: str
    """`live` when a live audit is sealed; `declared` for an imported record's assertion."""
    kernel_sets: tuple[str, ...]
    modules: dict[str, str]
    starts: tuple[AuditStart, ...]
    dispatch: tuple[DispatchLine, ...]
    problems: tuple[str, ...]
    """What disagrees: the recomputed dispatch against the lock's, and the like."""


class SectionCount(_Model):
    """The differences of one section between side A (a report's subject) and side B."""

    section: str
    changed: int
    """Keys on both sides with different values."""
    only_a: int
    only_b: int

    @property
    def total(self) -> int:
        return self.changed + self.only_a + self.only_b


class DifferenceLine(_Model):
    section: str
    key: str
    subject: str | None
    reference: str | None


class FigureLine(_Model):
    """A headline figure here and in the reference (`builder.report.headline`), as shown."""

    figure: str
    subject: str
    reference: str
    change: str
    """`+12.5 %` between two numbers, else `same` or `differs`."""


class Comparison(_Model):
    """What differs from a reference bundle: the headline figures first, then by section."""

    reference: str
    reference_ok: bool
    reference_intact: bool
    reference_failures: tuple[str, ...]
    figures: tuple[FigureLine, ...] = ()
    """Empty where nothing was compared (the reference is not intact)."""
    exactness: str | None = None
    """How many prompts give the same tokens here and there, in a sentence."""
    sections: tuple[SectionCount, ...]
    """Every section, in a fixed order, with its count (0 where equal)."""
    differences: tuple[DifferenceLine, ...]


class LatencyLine(_Model):
    """One latency figure of one start (`launch.latency`), in milliseconds."""

    start: str
    figure: Literal["TTFT", "ITL", "TPOT"]
    count: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float


class Report(_Model):
    format: Literal["repro.report/v1"] = REPORT_SCHEMA
    subject: Subject
    verdict: Verdict
    gates: tuple[GateLine, ...]
    timings: tuple[PromptTiming, ...]
    throughput: Throughput | None
    latency: tuple[LatencyLine, ...] = ()
    """Every start's TTFT, inter-token latency and time per output token percentiles, from
    its sealed token times."""
    acceptance: Acceptance | None
    native: Native | None
    comparison: Comparison | None
    unreadable: tuple[str, ...]
    """A section whose evidence could not be read, and why."""
