"""The live audit as people and machines read it: a table per tree, a `--json` document.

`AuditDocument` is the one shape of the audit as evidence: `audit --json` prints it, a run seals
one file of it per role (`start-N/audit/<role>.json`, with that role's processes), and `repro
verify` reads those files back into the same model, validated whole.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, RootModel

from repro_serving.builder.documents import parse_document
from repro_serving.builder.drift import Drift
from repro_serving.builder.render import console, drift_table, table

if TYPE_CHECKING:  # the judgement itself: not loaded to read sealed evidence
    from repro_serving.builder.native.audit import AuditReport, ObjectVerdict


class _Document(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ObjectEvidence(_Document):
    """One mapped ELF of one process and the loader rule that explains it."""

    path: str
    file_id: str
    sha256: str | None
    rule: str
    reason: str
    requester: str | None


class ProcessEvidence(_Document):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    pid: int
    ppid: int
    role: str
    name: str
    exe: str | None
    error: str | None
    environ: dict[str, str]
    objects: tuple[ObjectEvidence, ...]
    started_at: float | None = None
    """When the kernel started it, seconds since the epoch; None in an audit sealed before
    repro recorded it (`repro verify` then cannot tell two starts apart, and refuses)."""


class AuditDocument(_Document):
    root_pid: int
    passed: bool
    processes: tuple[ProcessEvidence, ...]
    files: int
    """Distinct ELF files mapped by the whole tree."""
    drifts: tuple[Drift, ...]

    @classmethod
    def of(cls, report: AuditReport) -> AuditDocument:
        return cls(
            root_pid=report.root_pid,
            passed=report.passed,
            processes=tuple(
                ProcessEvidence(
                    pid=p.pid,
                    ppid=p.ppid,
                    role=p.role,
                    name=p.name,
                    exe=p.exe,
                    error=p.error,
                    environ=dict(p.environ),
                    started_at=p.started_at,
                    objects=tuple(
                        ObjectEvidence(
                            path=o.path,
                            file_id=str(o.file_id),
                            sha256=o.sha256,
                            rule=o.rule,
                            reason=o.reason,
                            requester=o.requester,
                        )
                        for o in p.objects
                    ),
                )
                for p in report.processes
            ),
            files=len([f for f in report.files if f.is_elf]),
            drifts=report.drifts,
        )

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str) -> AuditDocument:
        return parse_document(cls, data, where=where, what="sealed audit evidence")


class AuditDrifts(RootModel[tuple[Drift, ...]]):
    """`start-N/audit/drifts.json`: every drift the live audit of one start found."""

    model_config = ConfigDict(frozen=True, strict=True)


def report_document(report: AuditReport) -> dict[str, object]:
    return AuditDocument.of(report).model_dump(mode="json")


def _rule_counts(objects: tuple[ObjectVerdict, ...]) -> str:
    return ", ".join(f"{rule} {n}" for rule, n in Counter(o.rule for o in objects).items())


def print_report(report: AuditReport, *, objects: bool) -> None:
    out = console()
    out.print(
        table(
            f"process tree of pid {report.root_pid}",
            ("pid", "ppid", "role", "name", "ELF objects", "by rule"),
            (
                (
                    p.pid,
                    p.ppid,
                    p.role,
                    p.name,
                    len(p.objects),
                    _rule_counts(p.objects) if p.error is None else p.error,
                )
                for p in report.processes
            ),
        )
    )
    if objects:
        for process in report.processes:
            out.print(
                table(
                    f"pid {process.pid} ({process.role})",
                    ("path", "rule", "reason"),
                    ((o.path, o.rule, o.reason) for o in process.objects),
                )
            )
    distinct = len([f for f in report.files if f.is_elf])
    if report.passed:
        out.print(f"PASS: {distinct} distinct ELF files, every mapping explained by a loader rule")
    else:
        out.print(drift_table(report.drifts))
        out.print(f"FAIL: {len(report.drifts)} drift(s) over {distinct} distinct ELF files")
