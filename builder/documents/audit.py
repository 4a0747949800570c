"""The live audit as evidence. `AuditDocument` is its one shape: `audit --json` prints it, a run
seals one file of it per role (`start-N/audit/<role>.json`, with that role's processes), and
`repro verify` reads those files back into the same model, validated whole; `AuditDrifts` is
`start-N/audit/drifts.json`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, RootModel

from repro_serving.builder.documents import parse_document
from repro_serving.builder.drift import Drift


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
    def from_bytes(cls, data: bytes, *, where: str) -> AuditDocument:
        return parse_document(cls, data, where=where, what="sealed audit evidence")


class AuditDrifts(RootModel[tuple[Drift, ...]]):
    """`start-N/audit/drifts.json`: every drift the live audit of one start found."""

    model_config = ConfigDict(frozen=True, strict=True)
