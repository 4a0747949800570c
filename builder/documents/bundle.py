"""A sealed bundle, or a sealed run, opened for reading: its lock, manifest and suite, and every
sealed document at the one path it lies at (`start-N`, `rank-R`: `documents.rundir.start_name`).
Read only after `builder.sealing.integrity` proved the bundle intact; nothing here judges."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Self

from repro_serving.builder.documents import read_document, read_sealed
from repro_serving.builder.documents.audit import AuditDocument, AuditDrifts
from repro_serving.builder.documents.evidence import OracleRow, Rows, RunDocument
from repro_serving.builder.documents.host import HostFacts
from repro_serving.builder.documents.lock import Lock
from repro_serving.builder.documents.manifest import Manifest, Suite
from repro_serving.builder.documents.observations import OBSERVATIONS_FILE, ObservationsDocument
from repro_serving.builder.documents.probes import DISPATCH_FILE
from repro_serving.builder.documents.rundir import (
    AUDIT_DIR,
    DRIFTS_FILE,
    NODES_FILE,
    REPLAY_FILE,
    ROWS_FILE,
    RUN_FILE,
    evidence_names,
    phase_name,
    start_name,
)
from repro_serving.builder.drift import Drift
from repro_serving.builder.errors import BadInput
from repro_serving.builder.native.kernels import KernelSet
from repro_serving.builder.readers import LOCK_LIMIT, MANIFEST_LIMIT
from repro_serving.builder.sealing.bundle import (
    EVIDENCE_DIR,
    KERNEL_SETS_DIR,
    LOCK,
    MANIFEST,
    ORACLE_DIR,
    SUITE_FILE,
    TEACHER_FILE,
)

if TYPE_CHECKING:  # a stack served across nodes only: read where one is
    from repro_serving.builder.documents.nodes import NodesDocument


def sealed_evidence(manifest: Manifest, *, replayed: bool) -> set[str]:
    """Every evidence file a bundle seals of its manifest's run, by its path under evidence/
    (the same in the run directory): each start's (and each rank's, each load's), the run's
    record and verdicts, the observations and dispatch probes, and a replay's own record
    (`replayed`: sealed by `repro launch`). A build and a launch seal exactly these; verify
    holds a bundle's evidence to them."""
    ranks = {n.rank: manifest.node_processes(n.rank) for n in manifest.declared_nodes if n.rank}
    names = evidence_names(
        manifest.oracle.gates.fresh_starts,
        manifest.launch.processes,
        ranks,
        manifest.oracle.load_names,
    )
    return names | {OBSERVATIONS_FILE, DISPATCH_FILE, *([REPLAY_FILE] if replayed else [])}


@dataclass(frozen=True)
class OpenedBundle:
    """A bundle proven intact (`builder.sealing.integrity`), read for its claims and evidence."""

    path: Path
    lock: Lock
    manifest: Manifest
    suite: Suite
    _rows: dict[tuple[int, str | None], tuple[OracleRow, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @classmethod
    def read(cls, path: Path, anchor: Path | None = None) -> Self:
        lock_bytes = read_sealed(path / LOCK, what="the lock", limit=LOCK_LIMIT)
        lock = Lock.from_bytes(lock_bytes, where=str(path / LOCK))
        data = read_sealed(path / MANIFEST, what="the manifest", limit=MANIFEST_LIMIT)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise BadInput(
                "the sealed manifest is not UTF-8", where=str(path / MANIFEST)
            ) from error
        base = anchor if anchor is not None else Path(lock.bundle.manifest_path).parent
        manifest = Manifest.from_toml(text, source=str(path / MANIFEST), base_dir=base)
        suite = Suite.from_path(path / ORACLE_DIR / SUITE_FILE)
        return cls(path, lock, manifest, suite)

    def evidence(self, relative: str) -> Path:
        return self.path / EVIDENCE_DIR / relative

    def oracle(self, relative: str) -> Path:
        return self.path / ORACLE_DIR / relative

    @property
    def kernels(self) -> Path:
        """The kernel sets the bundle sealed: its dispatch rules and pins are judged by these."""
        return self.path / KERNEL_SETS_DIR

    def kernel_sets(self) -> tuple[KernelSet, ...]:
        return self._kernel_sets

    @cached_property
    def _kernel_sets(self) -> tuple[KernelSet, ...]:
        """Read once: each start's audit, the dispatch and the markers are judged by them."""
        return tuple(KernelSet.load(n, self.kernels) for n in self.manifest.native.kernel_sets)

    def teacher_bytes(self) -> bytes:
        return read_sealed(self.oracle(TEACHER_FILE), what="the sealed teacher")

    @cached_property
    def observations(self) -> ObservationsDocument:
        """Read once: several claims are checked against it."""
        path = self.evidence(OBSERVATIONS_FILE)
        return read_document(ObservationsDocument, path, what="the sealed observations")

    @cached_property
    def run(self) -> RunDocument:
        path = self.evidence(RUN_FILE)
        return read_document(RunDocument, path, what="the run record")

    @cached_property
    def nodes(self) -> NodesDocument | None:
        """What each node's actor said (`nodes.json`), for a stack served across nodes."""
        if not self.manifest.clustered:
            return None
        path = self.evidence(NODES_FILE)
        from repro_serving.builder.documents.nodes import NodesDocument

        return NodesDocument.from_bytes(read_sealed(path, what="the nodes' facts"), where=str(path))

    def host(self, rank: int) -> HostFacts | None:
        """The sealed facts of the host rank `rank` ran on: the observations' for one host or
        rank 0, the nodes' facts for a further rank (None for a rank the nodes do not name)."""
        if rank == 0 or self.nodes is None:
            return self.observations.host
        return next((n.host for n in self.nodes.nodes if n.rank == rank), None)

    def start(self, start: int, rank: int = 0) -> Path:
        """The sealed evidence of start `start` (of rank `rank`'s node, for a stack served
        across nodes)."""
        return self.evidence(start_name(start, rank))

    def start_file(self, start: int, name: str, rank: int = 0) -> Path:
        return self.start(start, rank) / name

    def evidence_text(self, relative: str) -> str | None:
        """A sealed evidence file (by its path under evidence/) as the run read it: decoded with
        replacement; None when it is not sealed (the content check refuses that)."""
        path = self.evidence(relative)
        if not path.is_file():
            return None
        return read_sealed(path, what="sealed evidence").decode(errors="replace")

    def start_text(self, start: int, name: str) -> str | None:
        """A sealed file of `start`'s, as `evidence_text` reads it."""
        return self.evidence_text(f"{start_name(start)}/{name}")

    def rows(self, start: int, load: str | None = None) -> tuple[OracleRow, ...]:
        """The sealed rows of start `start`'s suite, or of its load `load`: read once, however
        many claims judge them."""
        key = (start, load)
        if key not in self._rows:
            path = self.evidence(f"{phase_name(start, load)}/{ROWS_FILE}")
            if not path.is_file():
                raise BadInput("sealed evidence is missing", where=str(path))
            self._rows[key] = read_document(Rows, path, what="the sealed rows").root
        return self._rows[key]

    def audit_documents(
        self, start: int, rank: int = 0
    ) -> tuple[tuple[Drift, ...], tuple[AuditDocument, ...]]:
        """The sealed live audit of a start as written: its `drifts.json`, and each role's
        document, by file name."""
        directory = self.start(start, rank) / AUDIT_DIR
        drifts = read_document(AuditDrifts, directory / DRIFTS_FILE, what="the audit's drifts")
        documents = tuple(
            read_document(AuditDocument, role_file, what="sealed audit evidence")
            for role_file in sorted(directory.glob("*.json"))
            if role_file.name != DRIFTS_FILE
        )
        return drifts.root, documents
