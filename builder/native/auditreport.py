"""The live audit as people read it: a table per tree; and as machines do, its `--json` document
(`builder.documents.audit.AuditDocument`)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from repro_serving.builder.documents.audit import AuditDocument, ObjectEvidence, ProcessEvidence
from repro_serving.builder.render import console, drift_table, table

if TYPE_CHECKING:  # the judgement itself: not loaded to read sealed evidence
    from repro_serving.builder.native.audit import AuditReport, ObjectVerdict


def audit_document(report: AuditReport) -> AuditDocument:
    """A live audit as its evidence document."""
    return AuditDocument(
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


def report_document(report: AuditReport) -> dict[str, object]:
    return audit_document(report).model_dump(mode="json")


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
