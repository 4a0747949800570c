"""Pure functions from verified evidence to the sections of a report.

Nothing here reads a file: `gather` verifies the bundle, reads its sealed evidence into the
run's own models, and hands them here. Every number a report shows is computed here from that
evidence by the functions the gates and `repro verify` use (`launch.throughput.measure`,
`launch.gates`), never taken from a lock or a summary on trust.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from repro_serving.builder.documents import evidence
from repro_serving.builder.documents.audit import ProcessEvidence
from repro_serving.builder.documents.evidence import MetricsDelta, OracleRow, Teacher, VerdictStatus
from repro_serving.builder.documents.lock import DispatchClaim, Lock
from repro_serving.builder.documents.manifest import Gates, SpecDecodeGate, ThroughputGate
from repro_serving.builder.drift import Drift
from repro_serving.builder.report import headline
from repro_serving.builder.report.differences import (
    ABSENT,
    SECTIONS,
    Difference,
    section_of,
    summarise,
)
from repro_serving.builder.report.model import (
    Acceptance,
    AuditStart,
    ClaimLine,
    Comparison,
    DifferenceLine,
    DispatchLine,
    DriftLine,
    FigureLine,
    GateLine,
    LatencyLine,
    Native,
    ProcessLine,
    PromptTiming,
    RuleCount,
    Series,
    Throughput,
    Verdict,
)
from repro_serving.builder.verify import VerifyReport
from repro_serving.launch.gates import SURVIVAL_RATIO_MAX, first_difference, kind_of
from repro_serving.launch.gatetext import NONE, Shown
from repro_serving.launch.latency import latency
from repro_serving.launch.throughput import UnmeasurableRow, measure, row_rate

FAILURE_LINE = 300
"""Characters of one failure line: a claim's detail can hold a whole listing."""


# --- the verdict --------------------------------------------------------------------------------


def drift_line(drift: Drift) -> DriftLine:
    return DriftLine(
        kind=drift.kind.value,
        subject=drift.subject,
        expected=drift.expected,
        observed=drift.observed,
        why=drift.why,
    )


def verdict(report: VerifyReport, *, intact: bool) -> Verdict:
    """`repro verify`'s report as a report opens: PASS or FAIL, who signed, how many claims of
    each evidence class, and one line for each claim that failed and each drift."""
    classes = Counter(check.evidence.value for check in report.checks)
    failures = [
        _clip(f"{c.claim}: {c.value}" + (f" ({c.detail})" if c.detail else ""))
        for c in report.checks
        if not c.ok
    ]
    failures += [
        _clip(f"{d.kind.value} {d.subject}: expected {d.expected}, found {d.observed}")
        for d in report.findings
    ]
    return Verdict(
        ok=report.ok,
        intact=intact,
        signers=report.key_ids,
        classes=dict(sorted(classes.items())),
        failures=tuple(failures),
        claims=tuple(
            ClaimLine(
                claim=c.claim, evidence=c.evidence.value, value=c.value, ok=c.ok, detail=c.detail
            )
            for c in report.checks
        ),
        drifts=tuple(drift_line(d) for d in report.findings),
    )


def _clip(text: str) -> str:
    return text if len(text) <= FAILURE_LINE else text[: FAILURE_LINE - 1] + "…"


# --- the gates ----------------------------------------------------------------------------------


def gate_lines(verdicts: Sequence[evidence.Verdict], gates: Gates) -> tuple[GateLine, ...]:
    """Each recomputed verdict with what it measured and the bound the manifest sets."""
    return tuple(gate_line(v, gates) for v in verdicts)


def gate_line(verdict: evidence.Verdict, gates: Gates) -> GateLine:
    """What `verdict` measured against which bound, as its kind of gate describes it
    (`launch.gates.GATES`)."""
    status = verdict.status
    name = verdict.gate.partition(":")[2]
    kind = kind_of(verdict.gate)
    if status is VerdictStatus.NOT_APPLICABLE:
        shown = Shown(NONE, NONE)
    elif "missing" in verdict.details:
        shown = Shown(f"no {verdict.details['missing']}", NONE if kind is None else kind.bound)
    elif kind is not None and kind.shown is not None:
        shown = kind.shown(verdict.details, gates, name)
    else:
        shown = Shown(verdict.summary, NONE)
    return GateLine(
        gate=verdict.gate,
        status=status,
        measured=shown.measured,
        bound=shown.bound,
        summary=verdict.summary,
    )


# --- latency -------------------------------------------------------------------------------------


def latency_lines(starts: Sequence[Stream]) -> tuple[LatencyLine, ...]:
    """Per start, its TTFT, ITL and TPOT distributions (`launch.latency`), in ms."""
    lines = []
    for label, rows in starts:
        measured = latency(rows)
        for figure, found in (("TTFT", measured.ttft), ("ITL", measured.itl),
                              ("TPOT", measured.tpot)):  # fmt: skip
            if found is not None:
                lines.append(
                    LatencyLine(
                        start=label,
                        figure=figure,
                        count=found.count,
                        p50_ms=found.p50 * 1e3,
                        p90_ms=found.p90 * 1e3,
                        p99_ms=found.p99 * 1e3,
                        max_ms=found.max * 1e3,
                    )
                )
    return tuple(lines)


# --- token arrival and rates --------------------------------------------------------------------

Stream = tuple[str, Sequence[OracleRow]]
"""A label and the rows of one start."""


def timings(
    starts: Sequence[Stream],
    reference: Sequence[Stream],
    teacher: Teacher | None,
    window: int | None,
) -> tuple[PromptTiming, ...]:
    """Per prompt of the first start: every stream's token arrivals (the subject's starts, then
    the reference's), its TTFT, both rates over the window and whether its token ids equal the
    teacher's."""
    if not starts:
        return ()
    first = starts[0][1]
    taught = {row.prompt_id: row.token_ids for row in teacher.rows} if teacher else {}
    result = []
    for row in first:
        series = tuple(
            Series(label=label, offsets_s=other.token_offsets_s, ttft_s=other.ttft_s)
            for label, rows in (*starts, *reference)
            for other in rows
            if other.prompt_id == row.prompt_id
        )
        conventional, historical = _rates(row, window)
        expected = taught.get(row.prompt_id)
        difference = None if expected is None else first_difference(expected, row.token_ids)
        result.append(
            PromptTiming(
                prompt_id=row.prompt_id,
                prompt_index=row.prompt_index,
                series=series,
                tokens=len(row.token_offsets_s),
                ttft_s=row.ttft_s,
                conventional=conventional,
                historical=historical,
                teacher_exact=None if expected is None else difference is None,
                first_difference=difference,
            )
        )
    return tuple(result)


def _rates(row: OracleRow, window: int | None) -> tuple[float | None, float | None]:
    if window is None:
        return None, None
    try:
        rate = row_rate(row, window)
    except UnmeasurableRow:  # the throughput gate fails on it and says why
        return None, None
    return rate.conventional, rate.historical


def throughput(
    rows: Sequence[OracleRow], gate: ThroughputGate, *, sealed_rate: float | None, gated: bool
) -> Throughput:
    """The suite's medians over the gate's window (`launch.throughput.measure`) and the floor:
    `gate.floor` of `sealed_rate`, or of these rows' own median when they set the rate (a bundle
    capturing its teacher). Raises `UnmeasurableRow` when a row has no rate."""
    measured = measure(rows, gate.tokens)
    rate = measured.conventional_median if sealed_rate is None else sealed_rate
    return Throughput(
        tokens=gate.tokens,
        conventional_median=measured.conventional_median,
        historical_median=measured.historical_median,
        record_historical=gate.record_historical,
        floor=gate.floor,
        sealed_rate=rate,
        floor_rate=gate.floor * rate,
        gated=gated,
        lower_bounds=measured.lower_bounds,
    )


def rate_problem(teacher: Teacher, rows: Sequence[OracleRow], gate: ThroughputGate) -> str | None:
    """Why the teacher's rate, the one a replay's floor scales, is not the conventional median of
    the rows it was captured from; None when it is."""
    measured = measure(rows, gate.tokens).conventional_median
    stated = teacher.conventional_tok_s
    if stated is not None and abs(stated - measured) <= 1e-9 * max(1.0, measured):
        return None
    shown = "none" if stated is None else f"{stated!r}"
    return (
        f"oracle/teacher.json states a conventional rate of {shown} tok/s; its rows give "
        f"{measured!r} tok/s: a replay's floor would scale the stated one"
    )


# --- speculative decoding -----------------------------------------------------------------------


def acceptance(
    metrics: MetricsDelta, gate: SpecDecodeGate | None, ratio_max: float = SURVIVAL_RATIO_MAX
) -> Acceptance | None:
    """The acceptance counters of the suite and the flatness bound the gate applies; None when
    the server exported no speculative-decoding counter."""
    curve = metrics.spec_decode_accepted_per_position
    if not curve and metrics.spec_decode_accepted is None:
        return None
    return Acceptance(
        per_position=curve,
        accepted=metrics.spec_decode_accepted,
        draft_tokens=metrics.spec_decode_draft_tokens,
        drafts=metrics.spec_decode_drafts,
        ratio_max=ratio_max,
        threshold=curve[0] * ratio_max if curve else 0.0,
        bounds=None if gate is None else (gate.acceptance_min, gate.acceptance_max),
        positions=None if gate is None else gate.positions,
    )


# --- the native truth ---------------------------------------------------------------------------


def audit_start(
    start: int, processes: Sequence[ProcessEvidence], files: int, drifts: Sequence[Drift]
) -> AuditStart:
    """One start's sealed live audit: each process with its ELF objects by loader rule, the
    objects of each role by rule, and its drifts, each process a drift names marked."""
    by_rule: Counter[tuple[str, str]] = Counter()
    lines = []
    for process in processes:
        rules = Counter(obj.rule for obj in process.objects)
        by_rule.update({(process.role, rule): n for rule, n in rules.items()})
        lines.append(
            ProcessLine(
                start=start,
                pid=process.pid,
                ppid=process.ppid,
                role=process.role,
                name=process.name,
                objects=len(process.objects),
                rules=dict(sorted(rules.items())),
                error=process.error,
                drifted=any(_names(drift, process) for drift in drifts),
            )
        )
    return AuditStart(
        start=start,
        files=files,
        processes=tuple(lines),
        by_rule=tuple(
            RuleCount(role=role, rule=rule, objects=count)
            for (role, rule), count in sorted(by_rule.items())
        ),
        drifts=tuple(drift_line(d) for d in drifts),
    )


def _names(drift: Drift, process: ProcessEvidence) -> bool:
    """The drift is about this process: its pid, its role, or a file it maps."""
    pid = f"pid {process.pid}"
    if drift.subject == pid or drift.subject.startswith(pid + " "):
        return True
    if drift.subject == f"role {process.role}":
        return True
    return any(obj.path == drift.subject for obj in process.objects)


def native_live(
    lock: Lock,
    starts: Sequence[AuditStart],
    recomputed: Sequence[DispatchClaim],
    disagreements: Sequence[str],
) -> Native:
    """The live audit of every start and each choice of code, recomputed from the sealed audit,
    probes and kernel sets; a choice the lock states otherwise is a problem."""
    problems = list(disagreements)
    if tuple(recomputed) != lock.native.dispatch:
        shown = ", ".join(f"{c.name}={c.variant}" for c in lock.native.dispatch) or "none"
        problems.append(f"the lock states {shown}; the sealed evidence gives otherwise")
    return Native(
        evidence=lock.native.evidence.value,
        kernel_sets=lock.native.kernel_sets,
        modules=dict(lock.native.modules),
        starts=tuple(starts),
        dispatch=tuple(_dispatch_line(c, c in lock.native.dispatch) for c in recomputed),
        problems=tuple(problems),
    )


def _dispatch_line(claim: DispatchClaim, as_locked: bool) -> DispatchLine:
    return DispatchLine(
        name=claim.name,
        kernel_set=claim.kernel_set,
        variant=claim.variant,
        facts=dict(claim.facts),
        path=claim.path,
        as_locked=as_locked,
    )


def native_declared(lock: Lock) -> Native:
    """What an imported record asserts of its native stack: listed, never presented as
    observed (no process of it was audited by repro)."""
    return Native(
        evidence=lock.native.evidence.value,
        kernel_sets=lock.native.kernel_sets,
        modules=dict(lock.native.modules),
        starts=(),
        dispatch=tuple(_dispatch_line(claim, True) for claim in lock.native.dispatch),
        problems=(),
    )


# --- against a reference ------------------------------------------------------------------------


def comparison(
    reference: str,
    reference_verdict: Verdict,
    differences: Sequence[Difference],
    locks: tuple[Lock, Lock] | None = None,
) -> Comparison:
    """What differs from the reference: the headline figures of the two `locks` (subject,
    reference) when both were read, each change the subject's against the reference, then by
    section (every section, 0 where equal)."""
    # change is the subject's against the reference: the reference is side A
    figures = headline.figures(locks[1], locks[0]) if locks is not None else []
    return Comparison(
        reference=reference,
        reference_ok=reference_verdict.ok,
        reference_intact=reference_verdict.intact,
        reference_failures=reference_verdict.failures,
        figures=tuple(
            FigureLine(
                figure=f"{f.name} ({f.unit})" if f.unit else f.name,
                subject=headline.shown(f.b),
                reference=headline.shown(f.a),
                change=headline.shown_change(f),
            )
            for f in figures
        ),
        exactness=headline.exactness(*locks).sentence() if locks is not None else None,
        sections=summarise(differences, SECTIONS),
        differences=tuple(
            DifferenceLine(
                section=section_of(key),
                key=key,
                subject=_shown(a),
                reference=_shown(b),
            )
            for key, a, b in differences
        ),
    )


def _shown(value: object) -> str | None:
    """A fact as text: None where the side lacks it, `null` for a fact stated as null."""
    if value is ABSENT:
        return None
    return "null" if value is None else str(value)


def gate_facts(verdicts: Sequence[evidence.Verdict]) -> dict[str, str]:
    """Recomputed verdicts as facts to compare, under `gates.<gate>`: status and summary."""
    facts = {}
    for v in verdicts:
        facts[f"gates.{v.gate}.status"] = v.status.value
        facts[f"gates.{v.gate}.summary"] = v.summary
    return facts
