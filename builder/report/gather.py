"""Read a report from a bundle or sealed run: verify it first, then read only what it seals.

`read_report` runs `repro verify` (offline) with the trusted keys. When the signature or a
file's digest does not hold, the report is the verdict alone: nothing of the evidence is read,
since nothing of it is what the signer sealed. When the files are intact, every section is read
from the sealed evidence with the readers and models `repro verify` uses and computed by
`compute`, also when a claim failed (the verdict then says FAIL and why). A section whose
evidence cannot be read is left out, naming why (`Report.unreadable`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from repro_serving.builder import imported
from repro_serving.builder.claims import dispatch_claims, roles_claim
from repro_serving.builder.documents import read_document, read_sealed
from repro_serving.builder.documents.evidence import MetricsDelta, Teacher
from repro_serving.builder.documents.evidence import Verdict as GateVerdict
from repro_serving.builder.documents.lock import Lock
from repro_serving.builder.documents.probes import DISPATCH_FILE, Probes
from repro_serving.builder.documents.rundir import METRICS_AFTER, METRICS_BEFORE
from repro_serving.builder.errors import ReproError
from repro_serving.builder.report import compute
from repro_serving.builder.report.differences import compare, flatten
from repro_serving.builder.report.model import (
    Acceptance,
    Comparison,
    Native,
    PromptTiming,
    Report,
    Subject,
    SubjectKind,
    Throughput,
    Verdict,
)
from repro_serving.builder.sealing import bundle
from repro_serving.builder.sealing.keys import TrustedKeys
from repro_serving.builder.sealing.statement import Statement
from repro_serving.builder.verify import JudgedBundle, recompute_verdicts, verify
from repro_serving.launch import metrics

_T = TypeVar("_T")


@dataclass(frozen=True)
class _Sealed:
    """What a report reads of one intact bundle or sealed run, in the run's own models."""

    opened: JudgedBundle
    kind: SubjectKind
    starts: tuple[compute.Stream, ...]
    """Each fresh start's rows (an imported record: its one run)."""
    teacher: Teacher
    verdicts: tuple[GateVerdict, ...]
    metrics: MetricsDelta | None
    sealed_rate: float | None
    """The rate the throughput floor scales: the teacher's; None when the rows set it."""

    @property
    def lock(self) -> Lock:
        return self.opened.lock


def read_report(path: Path, trusted: TrustedKeys, *, against: Path | None = None) -> Report:
    """The report of the bundle or sealed run at `path`, compared with `against` when given."""
    checked = verify(path, trusted)
    # Offline, every finding is one of the files' integrity: the claims then are not computed.
    verdict = compute.verdict(checked, intact=not checked.findings)
    unreadable: list[str] = []
    sealed = _attempt("evidence", unreadable, lambda: _read(path)) if verdict.intact else None
    if sealed is None:
        return _verdict_only(path, verdict, unreadable)
    gates = sealed.opened.manifest.oracle.gates
    reference = None
    comparison: Comparison | None = None
    if against is not None:
        reference, comparison = _against(against, trusted, sealed, unreadable)
    return Report(
        subject=_subject(path, sealed),
        verdict=verdict,
        gates=compute.gate_lines(sealed.verdicts, gates),
        timings=_timings(sealed, reference),
        throughput=_attempt("throughput", unreadable, lambda: _throughput(sealed, reference)),
        latency=compute.latency_lines(sealed.starts),
        acceptance=_acceptance(sealed),
        native=_attempt("native", unreadable, lambda: _native(sealed)),
        comparison=comparison,
        unreadable=tuple(unreadable),
    )


def _attempt(section: str, unreadable: list[str], read: Callable[[], _T]) -> _T | None:
    """`read()`, or None with the reason noted when the sealed evidence does not allow it."""
    try:
        return read()
    except ReproError as error:
        unreadable.append(f"{section}: {error.diagnostics()}")
    except (OSError, ValueError, KeyError) as error:
        unreadable.append(f"{section}: {type(error).__name__}: {error}")
    return None


def _verdict_only(path: Path, verdict: Verdict, unreadable: list[str]) -> Report:
    return Report(
        subject=Subject(
            path=str(path), name=path.name, description="", kind=None, repro_version=None
        ),
        verdict=verdict,
        gates=(),
        timings=(),
        throughput=None,
        acceptance=None,
        native=None,
        comparison=None,
        unreadable=tuple(unreadable),
    )


def _subject(path: Path, sealed: _Sealed) -> Subject:
    claim = sealed.lock.bundle
    return Subject(
        path=str(path),
        name=claim.name if sealed.kind is not SubjectKind.RUN else path.name,
        description=claim.description,
        kind=sealed.kind,
        repro_version=claim.repro_version,
    )


# --- reading one intact bundle or run ---------------------------------------------------------


def _read(path: Path) -> _Sealed:
    opened = JudgedBundle.read(path)
    if opened.lock.record is not None:
        return _read_imported(opened)
    data = read_sealed(path / bundle.STATEMENT, what="the statement")
    statement = Statement.from_json(data, where=str(path / bundle.STATEMENT))
    kind = SubjectKind.RUN if statement.sealed_run else SubjectKind.BUNDLE
    manifest = opened.manifest
    teacher = Teacher.from_bytes(opened.teacher_bytes(), where=str(opened.oracle("teacher.json")))
    starts = tuple(
        (f"start {n}", opened.rows(n)) for n in range(1, manifest.oracle.gates.fresh_starts + 1)
    )
    before = opened.start_text(1, METRICS_BEFORE)
    after = opened.start_text(1, METRICS_AFTER)
    delta = None
    if before is not None and after is not None:
        delta = metrics.delta(
            before,
            after,
            before_source=str(opened.start_file(1, METRICS_BEFORE)),
            after_source=str(opened.start_file(1, METRICS_AFTER)),
        )
    return _Sealed(
        opened=opened,
        kind=kind,
        starts=starts,
        teacher=teacher,
        verdicts=recompute_verdicts(opened),
        metrics=delta,
        sealed_rate=teacher.conventional_tok_s if kind is SubjectKind.RUN else None,
    )


def _read_imported(opened: JudgedBundle) -> _Sealed:
    manifest = opened.manifest
    assert manifest.evidence is not None  # a lock with a record is sealed from [evidence]
    files = imported.ImportedFiles.in_bundle(opened.path, manifest.evidence)
    record = imported.load_record(files)
    return _Sealed(
        opened=opened,
        kind=SubjectKind.IMPORTED,
        starts=(("record run", record.bench.rows),),
        teacher=record.teacher,
        verdicts=imported.record_verdicts(manifest, record, files.kernels),
        metrics=record.metrics,
        sealed_rate=imported.conventional_rate(manifest, record),
    )


# --- the sections -----------------------------------------------------------------------------


def _window(sealed: _Sealed) -> int | None:
    gate = sealed.opened.manifest.oracle.gates.throughput
    return None if gate is None else gate.tokens


def _timings(sealed: _Sealed, reference: _Sealed | None) -> tuple[PromptTiming, ...]:
    others: Sequence[compute.Stream] = ()
    if reference is not None:
        label, rows = reference.starts[0]
        others = ((f"{reference.opened.path.name} {label}", rows),)
    return compute.timings(sealed.starts, others, sealed.teacher, _window(sealed))


def _throughput(sealed: _Sealed, reference: _Sealed | None) -> Throughput | None:
    gate = sealed.opened.manifest.oracle.gates.throughput
    if gate is None:
        return None
    rows = sealed.starts[0][1]
    gated = sealed.kind is not SubjectKind.BUNDLE
    result = compute.throughput(rows, gate, sealed_rate=sealed.sealed_rate, gated=gated)
    # The floor scales the teacher's stated rate: checked against the rows it came from.
    problem = None
    if sealed.kind is SubjectKind.BUNDLE:
        problem = compute.rate_problem(sealed.teacher, rows, gate)
    elif reference is not None and reference.kind is SubjectKind.BUNDLE:
        problem = compute.rate_problem(sealed.teacher, reference.starts[0][1], gate)
    return result.model_copy(update={"problem": problem})


def _acceptance(sealed: _Sealed) -> Acceptance | None:
    if sealed.metrics is None:
        return None
    return compute.acceptance(sealed.metrics, sealed.opened.manifest.oracle.gates.spec_decode)


def _native(sealed: _Sealed) -> Native:
    opened, lock = sealed.opened, sealed.lock
    if sealed.kind is SubjectKind.IMPORTED:
        return compute.native_declared(lock)
    fresh_starts = opened.manifest.oracle.gates.fresh_starts
    audits = [(n, opened.audit(n)) for n in range(1, fresh_starts + 1)]
    starts = [compute.audit_start(n, a.processes, a.files, a.drifts) for n, a in audits]
    observations = opened.observations
    probes = read_document(Probes, opened.evidence(DISPATCH_FILE), what="the dispatch probes")
    found = dispatch_claims(
        opened.kernel_sets(),
        opened.manifest.native.modules,
        host=observations.host.capabilities(),
        env=lock.launch.env,
        roles=roles_claim(
            audits[0][1].processes,
            observations.values,
            kernel_sets=opened.kernel_sets(),
        ),
        probes=probes.root,
    )
    return compute.native_live(lock, starts, found.claims, found.disagreements)


def _against(
    path: Path, trusted: TrustedKeys, sealed: _Sealed, unreadable: list[str]
) -> tuple[_Sealed | None, Comparison]:
    """The reference verified and read as the subject is; what differs from it."""
    checked = verify(path, trusted)
    verdict = compute.verdict(checked, intact=not checked.findings)
    reference = None
    if verdict.intact:
        reference = _attempt("reference", unreadable, lambda: _read(path))
    if reference is None:
        return None, compute.comparison(str(path), verdict, ())
    ours = flatten(sealed.lock) | compute.gate_facts(sealed.verdicts)
    theirs = flatten(reference.lock) | compute.gate_facts(reference.verdicts)
    return reference, compute.comparison(
        str(path), verdict, compare(ours, theirs), (sealed.lock, reference.lock)
    )
