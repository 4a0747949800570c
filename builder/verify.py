"""`repro verify`: prove a bundle intact, then recompute every claim of its lock from evidence.

Offline: the signature, every file's digest and the file set (`builder.sealing.integrity`); then
each claim of the lock is recomputed from the sealed evidence by the same functions `repro build`
used, and compared: the oracle rows and throughput from the bench rows, the teacher file from
the rows, the native mappings of every role from the live audit evidence, the observed facts
from the observations the build recorded, the gates from the verdicts, the fresh starts from
their rows. `--host` also observes this machine (`builder.observations`) and compares it with
the manifest and the lock, starting nothing.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

from repro_serving.builder.claims import (
    ClaimCheck,
    built_classes,
    content_check,
    dispatch_claims,
    environments_claim,
    evidence_classes,
    mapped_claims,
    modules_claim,
    node_claims,
    oracle_claim,
)
from repro_serving.builder.documents import read_document, read_sealed
from repro_serving.builder.documents.audit import ProcessEvidence
from repro_serving.builder.documents.bundle import OpenedBundle, sealed_evidence
from repro_serving.builder.documents.evidence import (
    OracleRow,
    ReplayDocument,
    ServerDocument,
    Teacher,
    TeardownDocument,
    Verdict,
    Verdicts,
    VerdictStatus,
)
from repro_serving.builder.documents.formats import tag_problems
from repro_serving.builder.documents.lock import (
    EvidenceClass,
    OracleRowClaim,
    ThroughputClaim,
)
from repro_serving.builder.documents.manifest import Load, expand
from repro_serving.builder.documents.observations import (
    OBSERVATIONS_FILE,
    Observations,
)
from repro_serving.builder.documents.observations import drifts as observation_drifts
from repro_serving.builder.documents.probes import DISPATCH_FILE, Probes
from repro_serving.builder.documents.python import version_matches
from repro_serving.builder.documents.rundir import (
    AUDIT_DIR,
    DRIFTS_FILE,
    LOG_FILE,
    METRICS_AFTER,
    METRICS_BEFORE,
    NODES_FILE,
    QUALITY_FILE,
    REPLAY_FILE,
    ROWS_FILE,
    RUN_FILE,
    RUN_PRIVATE_ENV,
    SERVER_FILE,
    TEARDOWN_FILE,
    VERDICTS_FILE,
    phases,
    start_name,
)
from repro_serving.builder.drift import Difference, Drift, DriftKind
from repro_serving.builder.errors import BadInput, ReproError
from repro_serving.builder.freshstarts import StartEvidence, start_problems
from repro_serving.builder.handoff.checks import handoff_checks
from repro_serving.builder.hashing import sha256_bytes, sha256_file
from repro_serving.builder.native.rules import Launched
from repro_serving.builder.native.sealedaudit import Interpreter, manifest_policy, rejudge
from repro_serving.builder.sealing import bundle
from repro_serving.builder.sealing.bundle import SUITE_FILE, TEACHER_FILE
from repro_serving.builder.sealing.integrity import BundleReport, verify_bundle
from repro_serving.builder.sealing.keys import TrustedKeys
from repro_serving.builder.sealing.statement import (
    GateOutcome,
    descriptor_differences,
    gate_results_statement,
    resolved_dependencies,
)
from repro_serving.builder.vllmlog import (
    logged_argument_problems,
    logged_host_problems,
    logged_version_problems,
)
from repro_serving.launch import consistency, metrics, quality
from repro_serving.launch.gates import (
    audit_verdict,
    judge_run,
    kind_of,
    run_evidence,
    server_log_verdict,
)

if TYPE_CHECKING:  # a stack served across nodes only: read where one is
    from repro_serving.builder.documents.nodes import NodesDocument

_FIRST_ROWS: Final = f"{bundle.EVIDENCE_DIR}/{start_name(1)}/{ROWS_FILE}"
"""Start 1's rows, as a claim names them."""


@dataclass(frozen=True)
class VerifyReport:
    bundle: Path
    key_ids: tuple[str, ...]
    checks: tuple[ClaimCheck, ...]
    findings: tuple[Drift, ...]
    observations: Observations | None = None
    """This host as `--host` observed it."""
    stopped: str = ""
    """Why `--host` observed no more than it did (a host of another dispatch)."""
    differences: tuple[Difference, ...] = ()
    """What `--host` found other than sealed where the manifest allows it."""

    @property
    def ok(self) -> bool:
        return not self.findings and all(check.ok for check in self.checks)


def _formats_refused(problems: list[str]) -> ClaimCheck:
    """The one check of a bundle whose documents another repro wrote: nothing more is read."""
    return ClaimCheck(
        "format tags = the formats this repro reads",
        EvidenceClass.SEALED,
        "written by another repro",
        False,
        _shown(problems)
        + "; verify it with the repro it carries in tools/: ./launch --verify-only",
    )


def verify(path: Path, trusted: TrustedKeys, *, anchor: Path | None = None) -> VerifyReport:
    """Verify the bundle at `path` from its sealed files alone. `builder.hostcheck.verify_here`
    adds what this host is, against it (`--host`).

    `anchor` is the directory the manifest's relative paths resolve against on this host;
    by default the directory of the manifest as the build was given it, from here."""
    return opened(path, trusted, anchor)[0]


def opened(
    path: Path, trusted: TrustedKeys, anchor: Path | None = None
) -> tuple[VerifyReport, JudgedBundle | None]:
    """The verdict on the bundle at `path`, and the bundle as read when its integrity holds."""
    integrity = verify_bundle(path, trusted)
    if not integrity.ok:
        return VerifyReport(path, integrity.key_ids, (), integrity.findings), None
    statement = integrity.statement
    problems = tag_problems(statement.format_tags()) if statement is not None else []
    if problems:
        return VerifyReport(path, integrity.key_ids, (_formats_refused(problems),), ()), None
    sealed = JudgedBundle.read(path, anchor)
    checks = (
        *recompute(sealed, handoff=not integrity.sealed_run, sealed_run=integrity.sealed_run),
        *attestation_checks(sealed, integrity),
    )
    return VerifyReport(path, integrity.key_ids, checks, ()), sealed


class NotVerified(ReproError):
    """A flow that runs only verified bundles met one that does not verify: nothing was done.
    `report` says every drift and every claim that did not hold."""

    def __init__(self, what: str, report: VerifyReport) -> None:
        failed = [c for c in report.checks if not c.ok]
        super().__init__(
            what,
            where=str(report.bundle),
            found=f"{len(report.findings)} drift(s), {len(failed)} claim(s) not recomputed",
        )
        self.report = report


@dataclass(frozen=True)
class JudgedBundle(OpenedBundle):
    """An opened bundle whose sealed live audits are judged again, each once."""

    _audits: dict[tuple[int, int], SealedAudit] = field(default_factory=dict, compare=False)

    def audit(self, start: int, rank: int = 0) -> SealedAudit:
        """The sealed live audit of `start` (on rank `rank`'s node, for a stack served across
        nodes), judged again (`builder.native.sealedaudit`) under the sealed manifest, kernel
        sets and the facts of the host it ran on; `drifts.json` must be its documents' list."""
        key = (start, rank)
        if key not in self._audits:
            self._audits[key] = self._judge_audit(start, rank)
        return self._audits[key]

    def _launched(self, rank: int) -> Launched | None:
        """The environment rank `rank`'s tree was started with (run.json's; a rank beyond 0:
        the lock's environment of its node); None where that file cannot be read (its own stage
        refuses it)."""
        if rank:
            node = next((n for n in self.lock.nodes if n.rank == rank), None)
            env, where = (None if node is None else node.env), f"lock nodes[rank {rank}].env"
        else:
            env, where = _readable(lambda: self.run.env), "run.json env"
        return None if env is None else Launched(env, where, RUN_PRIVATE_ENV)

    def _judge_audit(self, start: int, rank: int) -> SealedAudit:
        where = str((self.start(start, rank) / AUDIT_DIR).relative_to(self.path))
        drifts, documents = self.audit_documents(start, rank)
        values = self.observations.values
        host = self.host(rank)
        roles = self.manifest.node_processes(rank) if self.manifest.clustered else None
        policy = manifest_policy(
            self.manifest,
            values,
            self.kernel_sets(),
            host.capabilities() if host is not None else None,
            roles=roles,
        )
        interpreter = None
        launched = self.manifest.launch.argv[:1] == ("{python}",)
        if launched and {"python", "python_prefix"} <= set(values):
            facts = self.observations.python
            series = ".".join(facts.version.split(".")[:2]) if facts is not None else None
            interpreter = Interpreter(values["python"], values["python_prefix"], series)
        policy = replace(policy, launched=self._launched(rank))
        found = rejudge(documents, policy, interpreter=interpreter, where=where)
        if documents and documents[0].drifts != drifts:
            found.insert(
                0,
                Drift(
                    kind=DriftKind.CLAIM,
                    subject=f"{where}/{DRIFTS_FILE}",
                    expected="the drifts every role document lists",
                    observed=f"{len(drifts)} drift(s), the documents list "
                    f"{len(documents[0].drifts)}",
                    why="the sealed audit contradicts itself",
                ),
            )
        processes = [process for document in documents for process in document.processes]
        files = documents[0].files if documents else 0
        root = documents[0].root_pid if documents else None
        return SealedAudit(tuple(processes), files, drifts, tuple(found), root)


@dataclass(frozen=True)
class SealedAudit:
    processes: tuple[ProcessEvidence, ...]
    files: int
    """Distinct ELF files the tree mapped."""
    drifts: tuple[Drift, ...]
    """What the live audit found, as sealed."""
    rejudged: tuple[Drift, ...] = ()
    """What judging the sealed audit again found that it does not list."""
    root_pid: int | None = None

    @property
    def all_drifts(self) -> tuple[Drift, ...]:
        """Every drift of the tree: those sealed, then those the sealed list hides."""
        return (*self.drifts, *(d for d in self.rejudged if d not in self.drifts))


# --- claims recomputed from the sealed evidence ------------------------------------------------


@dataclass(frozen=True)
class _Recomputing:
    """What every stage of the pipeline is given."""

    sealed: JudgedBundle
    rows: tuple[OracleRow, ...]
    """The rows of start 1."""
    taught: bool
    """The teacher was captured from these rows (a bundle, not a sealed run)."""
    handoff: bool
    """A bundle as sealed, with its launcher, tools and README."""


def _nodes_stage(r: _Recomputing) -> list[ClaimCheck]:
    if r.sealed.manifest.clustered or r.sealed.lock.nodes:
        return [_nodes_check(r.sealed)]
    return [_not_applicable("nodes (every node answered, each audited)", "one host: no [[node]]")]


LIVE_RUN_STAGES: tuple[tuple[str, Callable[[_Recomputing], list[ClaimCheck]]], ...] = (
    ("content", lambda r: [_content_check(r.sealed, r.handoff, replayed=not r.taught)]),
    ("oracle", lambda r: _oracle_checks(r.sealed, r.rows, taught_here=r.taught)),
    ("fresh starts", lambda r: _fresh_start_checks(r.sealed, r.rows)),
    ("rows and metrics", lambda r: _consistency_checks(r.sealed)),
    ("live audits", lambda r: _audit_checks(r.sealed)),
    ("native.roles", lambda r: [_native_check(r.sealed)]),
    ("native.dispatch", lambda r: [_dispatch_check(r.sealed)]),
    ("nodes", _nodes_stage),
    ("gates", lambda r: [_gates_check(r.sealed)]),
    ("quality", lambda r: [_quality_check(r.sealed, r.rows)]),
    ("observations", lambda r: _observed_checks(r.sealed)),
    ("lock anchors", lambda r: _anchored_checks(r.sealed, taught=r.taught)),
    ("replay", lambda r: [] if r.taught else [_replay_check(r.sealed)]),
)
"""The fixed pipeline of a live run's claims, in order: each stage a pure function of the
sealed files; a stage whose evidence cannot be read fails alone, naming it, and every later
stage still runs."""


def recompute(
    sealed: JudgedBundle, *, handoff: bool = True, sealed_run: bool = False
) -> tuple[ClaimCheck, ...]:
    """Every claim of the lock recomputed from the sealed evidence, stage by stage
    (`LIVE_RUN_STAGES`, or `builder.imported` for a record's); with `handoff` (a bundle sealed,
    not one being staged nor a sealed run), also its launcher, tools and README
    (`builder.handoff`). `sealed_run`: a run sealed by `repro launch`, whose teacher is the
    bundle's."""
    checks: list[ClaimCheck] = [_manifest_check(sealed)]
    if sealed.lock.record is not None:
        # an imported record's own judges, read only for such a bundle (a live one's verify
        # need not load them)
        from repro_serving.builder import imported

        checks += _guarded(
            "evidence",
            lambda: imported.recompute(sealed.path, sealed.manifest, sealed.lock, handoff),
        )
    else:
        read = _guarded(_FIRST_ROWS, lambda: [_rows_read(sealed)])
        rows = sealed.rows(1) if read[0].ok else ()
        checks += [] if read[0].ok else read
        context = _Recomputing(sealed, rows, taught=not sealed_run, handoff=handoff)
        for name, stage in LIVE_RUN_STAGES:
            checks += _guarded(name, functools.partial(stage, context))
    checks += _guarded("handoff", lambda: _handoff_checks(sealed, checks, handoff))
    return tuple(checks)


def _rows_read(sealed: JudgedBundle) -> ClaimCheck:
    rows = sealed.rows(1)
    return ClaimCheck(
        _FIRST_ROWS,
        EvidenceClass.SEALED,
        f"{len(rows)} rows",
        True,
    )


def _guarded(name: str, stage: Callable[[], list[ClaimCheck]]) -> list[ClaimCheck]:
    """`stage`'s checks; when its evidence cannot be read, one failed check naming why."""
    try:
        return stage()
    except (ReproError, OSError, ValueError, KeyError, StopIteration, ArithmeticError) as error:
        detail = error.diagnostics() if isinstance(error, ReproError) else repr(error)
        return [ClaimCheck(f"{name}: evidence", EvidenceClass.SEALED, "unreadable", False, detail)]


def _not_applicable(claim: str, why: str) -> ClaimCheck:
    return ClaimCheck(claim, EvidenceClass.SEALED, f"not applicable: {why}", True)


def _handoff_checks(
    sealed: JudgedBundle, checks: list[ClaimCheck], handoff: bool
) -> list[ClaimCheck]:
    return handoff_checks(sealed.path, sealed.lock, checks) if handoff else []


def _content_check(sealed: JudgedBundle, handoff: bool, *, replayed: bool) -> ClaimCheck:
    """The bundle holds exactly what its manifest's run seals: the suite and the teacher, the
    kernel sets the manifest names, and every evidence file of each fresh start, no fewer (a
    teardown record or a start's audit removed) and no more (a file nothing reads); a bundle
    (not a sealed run) also its launcher, README and tools; a run sealed by `repro launch`
    (`replayed`) its record of the bundle it replayed."""
    expected = bundle.fixed_content(sealed.manifest.native.kernel_sets)
    if handoff:
        expected |= bundle.handoff_content(sealed.lock.bundle.repro_version)
    evidence = sealed_evidence(sealed.manifest, replayed=replayed)
    expected |= {f"{bundle.EVIDENCE_DIR}/{name}" for name in evidence}
    return content_check(
        "content = what the manifest's run seals", bundle.content_files(sealed.path), expected
    )


def _replay_check(sealed: JudgedBundle) -> ClaimCheck:
    """A run sealed by `repro launch` says what differed from the bundle it replayed; each
    difference is one the manifest allows, and this run's own observations show it (the
    bundle's side is its lock's, which the run names by sha256 and does not carry)."""
    path = sealed.evidence(REPLAY_FILE)
    replayed = read_document(ReplayDocument, path, what="the replay's record")
    python = sealed.observations.python
    here = python.version if python is not None else None
    pin = sealed.manifest.python.interpreter
    problems = []
    for difference in replayed.differences:
        sealed_release = difference.sealed.removeprefix("Python ")
        expected = (
            "python.interpreter",
            f"Python {here}",
            f'[python] interpreter = "{pin}"',
        )
        found = (difference.subject, difference.here, difference.accepted_by)
        if found != expected or sealed_release == here or not version_matches(pin, sealed_release):
            problems.append(
                f"{REPLAY_FILE}: {difference.subject}: expected another release than this run's "
                f"{here} that {expected[2]} admits, found {difference.sealed} → "
                f"{difference.here} ({difference.accepted_by})"
            )
    count = len(replayed.differences)
    return ClaimCheck(
        f"{REPLAY_FILE} = what differed from the bundle it replayed, as the manifest allows",
        EvidenceClass.SEALED,
        f"{replayed.bundle} (lock {replayed.lock_sha256[:12]}…), {count} difference(s)",
        not problems,
        _shown(problems),
    )


def _manifest_check(sealed: JudgedBundle) -> ClaimCheck:
    digest = sha256_file(sealed.path / bundle.MANIFEST)
    return _equal(
        "bundle.manifest_sha256", EvidenceClass.SEALED, digest, sealed.lock.bundle.manifest_sha256
    )


def _oracle_checks(
    sealed: JudgedBundle, rows: tuple[OracleRow, ...], *, taught_here: bool
) -> list[ClaimCheck]:
    """The oracle claim recomputed from the bench rows of start 1. `taught_here`: the teacher
    was captured from these rows (a bundle), so its rate is theirs; a sealed run carries the
    teacher of the bundle it replayed, whose rate its own rows cannot give."""
    lock = sealed.lock.oracle
    suite_sha = sha256_file(sealed.oracle(SUITE_FILE))
    teacher_bytes = sealed.teacher_bytes()
    claim = oracle_claim(
        sealed.manifest, sealed.suite, rows, suite_sha, sha256_bytes(teacher_bytes)
    )
    checks = [
        _equal("oracle.suite", lock.evidence, claim.suite, lock.suite),
        _equal("oracle.suite_sha256", lock.evidence, claim.suite_sha256, lock.suite_sha256),
        _equal("oracle.teacher_sha256", lock.evidence, claim.teacher_sha256, lock.teacher_sha256),
    ]
    exact = sum(a == b for a, b in zip(claim.rows, lock.rows, strict=False))
    checks.append(
        ClaimCheck(
            "oracle.rows (token ids, text sha256)",
            lock.evidence,
            f"{exact}/{len(lock.rows)} rows recomputed equal",
            claim.rows == lock.rows,
            "" if claim.rows == lock.rows else _first_row_difference(claim.rows, lock.rows),
        )
    )
    # the gates of every replay find a teacher row by its prompt: each row whole, and the suite
    teacher = Teacher.from_bytes(teacher_bytes, where=str(sealed.oracle(TEACHER_FILE)))
    taught = [(t.prompt_id, t.prompt_index, t.token_ids, t.text_sha256) for t in teacher.rows]
    benched = [(r.prompt_id, r.prompt_index, r.token_ids, r.text_sha256) for r in rows]
    differs = [
        f"row {i}: teacher {t[0]!r} (index {t[1]}), bench {b[0]!r} (index {b[1]})"
        for i, (t, b) in enumerate(zip(taught, benched, strict=False))
        if t != b
    ]
    if len(taught) != len(benched):
        differs.append(f"{len(taught)} teacher rows, {len(benched)} bench rows")
    if teacher.suite != sealed.suite.name:
        differs.insert(0, f"suite {teacher.suite!r}, sealed suite {sealed.suite.name!r}")
    checks.append(
        ClaimCheck(
            "oracle/teacher.json = bench rows",
            lock.evidence,
            f"{len(teacher.rows)} rows",
            not differs,
            "; ".join(differs[:SHOWN_DIFFERENCES]),
        )
    )
    if taught_here:  # the rate every throughput floor of a replay scales, recomputed
        rate = claim.throughput.conventional_median if claim.throughput is not None else None
        stated = teacher.conventional_tok_s
        checks.append(
            ClaimCheck(
                "oracle/teacher.json conventional_tok_s",
                lock.evidence,
                f"{rate!r} tok/s recomputed from the bench rows",
                stated == rate,  # the same function over the same rows: the same double
                f"teacher states {stated!r}",
            )
        )
    return [*checks, *_throughput_checks(claim.throughput, lock.throughput, lock.evidence)]


def _throughput_checks(
    ours: ThroughputClaim | None, theirs: ThroughputClaim | None, evidence: EvidenceClass
) -> list[ClaimCheck]:
    """The lock's throughput claim, recomputed: a lock stating one where the rows give none
    (or none where they give one) is refused, and so is any other window of tokens."""
    if ours is None or theirs is None:
        if ours is theirs:
            return []
        return [
            ClaimCheck(
                "oracle.throughput",
                evidence,
                "not measurable from the bench rows" if ours is None else f"{ours.tokens} tokens",
                False,
                f"locked {theirs!r}",
            )
        ]
    checks = [_equal("oracle.throughput.tokens", evidence, str(ours.tokens), str(theirs.tokens))]
    for name in ("conventional_median", "historical_median"):
        value, locked = getattr(ours, name), getattr(theirs, name)
        if value is None and locked is None:
            continue
        checks.append(
            ClaimCheck(
                f"oracle.throughput.{name}",
                evidence,
                f"{value!r} tok/s",
                None not in (value, locked) and abs(value - locked) <= 1e-12,
                f"locked {locked!r}",
                figures={f"{name}_tok_s": value, f"locked_{name}_tok_s": locked},
            )
        )
    return checks


def _fresh_start_checks(sealed: JudgedBundle, first: tuple[OracleRow, ...]) -> list[ClaimCheck]:
    checks = []
    for start in range(2, sealed.manifest.oracle.gates.fresh_starts + 1):
        again = sealed.rows(start)
        same = [r.token_ids for r in again] == [r.token_ids for r in first]
        checks.append(
            ClaimCheck(
                f"fresh start {start} reproduces token ids",
                EvidenceClass.SEALED,
                f"{len(again)} rows",
                same,
            )
        )
    starts = _start_evidence(sealed)
    repro_pid = None if sealed.manifest.clustered else sealed.run.repro_pid
    nodes = sealed.nodes
    kernels = {n.rank: n.boot_id for n in nodes.nodes} if nodes is not None else {}
    problems = start_problems(starts, repro_pid=repro_pid, kernels=kernels)
    problems += _log_version_problems(starts, sealed.lock.python.packages)
    for evidence in starts:
        host = sealed.host(evidence.rank)
        if host is not None:
            problems += logged_host_problems(
                evidence.log.decode(errors="replace"),
                f"{evidence.where}/server.log",
                host.cpu_count,
                host.memory_bytes,
            )
    # each rank's log against the argv that started it: run.json's, a further rank's node's
    argvs = {0: sealed.run.argv, **{n.rank: n.argv for n in sealed.lock.nodes if n.rank}}
    problems += [
        problem
        for start in starts
        if start.rank in argvs
        for problem in logged_argument_problems(
            start.log.decode(errors="replace"), argvs[start.rank], f"{start.where}/server.log"
        )
    ]
    if sealed.manifest.clustered and any(
        sealed.run.repro_pid == p.pid for start in starts for p in start.processes
    ):
        problems.append(
            f"run.json repro_pid {sealed.run.repro_pid}: expected the repro that ran the stack, "
            "found a process of its audited tree"
        )
    checks.append(
        ClaimCheck(
            "fresh starts (each one tree, torn down with proof; none a copy of another)",
            EvidenceClass.SEALED,
            f"{sealed.manifest.oracle.gates.fresh_starts} start(s), {len(starts)} tree(s)",
            not problems,
            _shown(problems),
        )
    )
    return checks


VLLM_DISTRIBUTION: Final = re.compile(r"vllm(-(cpu|cuda|rocm|xpu|tpu|hpu))?")
"""The distributions that install vLLM itself (not its kernels) under the lock's names."""


def _log_version_problems(
    starts: Sequence[StartEvidence], packages: Mapping[str, str]
) -> list[str]:
    """Every vLLM version a start's log states, in any of the phrasings vLLM logs it
    (`builder.vllmlog.LOGGED_VERSION`), is the one the lock pins; where no one
    distribution pins it (vLLM served from a source tree), each log states one version."""
    pinned = [v for name, v in packages.items() if VLLM_DISTRIBUTION.fullmatch(name)]
    return [
        problem
        for start in starts
        for problem in logged_version_problems(
            start.log.decode(errors="replace"),
            f"{start.where}/server.log",
            pinned[0] if len(pinned) == 1 else None,
        )
    ]


def _consistency_checks(sealed: JudgedBundle) -> list[ClaimCheck]:
    """Each start's rows, its suite's and each load's, against themselves and the suite, the
    `/metrics` reads around each against them and each load's send times against its shape
    (`launch.consistency`), and every start's rows against start 1's: the same prompt
    tokenizes alike, the same token ids decode to the same text, within a start as across
    starts (a row's text is decoded from its ids, each after the chat template's end of its
    prompt)."""
    manifest, suite = sealed.manifest, sealed.suite
    limits = consistency.Limits.of(suite, sealed.lock.launch.argv)
    loads = {load.name: load for load in manifest.oracle.gates.loads}
    checks = []
    starts = []
    for start in range(1, manifest.oracle.gates.fresh_starts + 1):
        served = _served(sealed, start)
        for load, rows_name, before_name, after_name in phases(start, tuple(loads)):
            rows = sealed.rows(start, load)
            starts.append((f"{bundle.EVIDENCE_DIR}/{rows_name}", rows))
            checks.append(
                _phase_check(
                    sealed,
                    start,
                    load=None if load is None else loads[load],
                    rows=rows,
                    names=(rows_name, before_name, after_name),
                    limits=limits,
                    served=served,
                )
            )
    problems = consistency.starts_problems(starts)
    for where, rows in starts:
        decoded: dict[tuple[int, ...], OracleRow] = {}
        for row in rows:
            same = decoded.setdefault(row.token_ids, row)
            if same.text_sha256 != row.text_sha256:
                problems.append(
                    f"{where}: row {row.prompt_id} text_sha256 {row.text_sha256!r}: expected "
                    f"{same.text_sha256!r}, row {same.prompt_id}'s for the same token ids"
                )
    first = {row.prompt_id: row for row in starts[0][1]} if starts else {}
    for where, rows in starts[1:]:
        for row in rows:
            earlier = first.get(row.prompt_id)
            if earlier is None or row.token_ids != earlier.token_ids:
                continue
            problems += [
                f"{where}: row {row.prompt_id} {field} {mine!r}: expected {theirs!r}, start 1's "
                "for the same token ids"
                for field, mine, theirs in (
                    ("text_sha256", row.text_sha256, earlier.text_sha256),
                    ("finish_reason", row.finish_reason, earlier.finish_reason),
                )
                if mine != theirs
            ]
    checks.append(
        ClaimCheck(
            "every start's rows = start 1's prompts and texts",
            EvidenceClass.SEALED,
            f"{manifest.oracle.gates.fresh_starts} start(s)"
            + (f", {len(loads)} load(s) each" if loads else ""),
            not problems,
            _shown(problems),
        )
    )
    return checks


@dataclass(frozen=True)
class _Served:
    """What one start's sealed files say of the server its phases were asked of, read once for
    all its phases."""

    log: str | None
    """What the server logged while it served (up to teardown's `log_bytes`); None if none."""
    log_source: str
    read_by: float | None
    """When teardown began: every `/metrics` read was taken before."""
    facts: consistency.ServerFacts


def _served(sealed: JudgedBundle, start: int) -> _Served:
    teardown = _teardown(sealed, start)
    log = _log(sealed, start, 0)
    served = teardown.log_bytes if teardown is not None else None
    return _Served(
        log=log[: len(log) if served is None else served].decode(errors="replace") if log else None,
        log_source=f"{bundle.EVIDENCE_DIR}/{start_name(start)}/{LOG_FILE}",
        read_by=None if teardown is None else teardown.began_at,
        facts=_server_facts(sealed, start),
    )


def _phase_check(
    sealed: JudgedBundle,
    start: int,
    *,
    load: Load | None,
    rows: tuple[OracleRow, ...],
    names: tuple[str, str, str],
    limits: consistency.Limits,
    served: _Served,
) -> ClaimCheck:
    """The rows of one phase of a start (its suite, or a load) against themselves and the
    suite, and the `/metrics` reads around it against them (`launch.consistency`). `names`:
    the rows' file and the reads before and after, by path under evidence/."""
    suite = sealed.suite
    rows_name, before_name, after_name = (f"{bundle.EVIDENCE_DIR}/{name}" for name in names)
    gated = load is None and sealed.manifest.oracle.gates.cached_tokens_zero
    found = consistency.rows_problems(
        suite, rows, where=rows_name, limits=limits, cached_tokens_gated=gated
    )
    problems = list(found.problems)
    problems += consistency.load_problems(load, rows, where=rows_name)
    before, after = sealed.evidence_text(names[1]), sealed.evidence_text(names[2])
    if before is None or after is None:
        missing = " and ".join(
            n for n, t in ((before_name, before), (after_name, after)) if t is None
        )
        problems.append(f"expected the /metrics reads around the rows, found no {missing}")
    else:
        read = consistency.metrics_problems(
            rows,
            before,
            after,
            limits=limits,
            sources=(before_name, after_name),
            read_by=served.read_by,
            served_log=served.log,
            log_source=served.log_source,
            facts=served.facts,
        )
        problems += read.problems
        found = consistency.Findings(found.problems, (*found.not_applicable, *read.not_applicable))
    value = f"{len(rows)} rows of {len(suite.prompts)} prompts"
    if found.not_applicable:
        value += f"; not checkable: {len(found.not_applicable)}"
    phase = "" if load is None else f" under load {load.name} ({load.shape})"
    return ClaimCheck(
        f"start-{start} rows{phase} = their suite, their counts and their /metrics",
        EvidenceClass.SEALED,
        value,
        not problems,
        _shown(problems),
    )


ENGINE_CORE_ROLE: Final = "engine_core"
_T = TypeVar("_T")


def _server_facts(sealed: JudgedBundle, start: int) -> consistency.ServerFacts:
    """What start `start`'s other sealed files state about the server its `/metrics` reads came
    from (`launch.consistency.ServerFacts`): when it was ready (`server.json`), when its engine
    core started (rank 0's sealed audit), its interpreter (the observations), its environment
    (`run.json`) and readiness path (the manifest). A file that cannot be read states nothing
    here: the stage that reads it fails, naming it."""
    where = f"{bundle.EVIDENCE_DIR}/{start_name(start)}"
    ready = _readable(lambda: _server(sealed, start).ready_at)
    started = _readable(
        lambda: [
            process.started_at
            for process in sealed.audit(start, 0).processes
            if process.role == ENGINE_CORE_ROLE and process.started_at is not None
        ]
    )
    python = _readable(lambda: sealed.observations.python)
    environment = _readable(lambda: sealed.run.env)
    return consistency.ServerFacts(
        answering=None if ready is None else (ready, f"{where}/{SERVER_FILE} ready_at"),
        engine=(
            (min(started), f"the engine core's started_at in {where}/{AUDIT_DIR}")
            if started
            else None
        ),
        python=(
            None
            if python is None
            else (python.version, f"{bundle.EVIDENCE_DIR}/{OBSERVATIONS_FILE} python.version")
        ),
        environment=(
            None if environment is None else (environment, f"{bundle.EVIDENCE_DIR}/{RUN_FILE} env")
        ),
        readiness_path=sealed.manifest.launch.readiness.path,
    )


def _readable(read: Callable[[], _T]) -> _T | None:
    """What `read` returns; None when its file cannot be read (refused by its own stage)."""
    try:
        return read()
    except ReproError:
        return None


def _audit_checks(sealed: JudgedBundle) -> list[ClaimCheck]:
    """Each start's sealed live audit on each node, judged again: whatever it states, a drift
    found again fails it."""
    checks = []
    roots: dict[str, ProcessEvidence] = {}
    for start, rank in _starts_and_ranks(sealed):
        audit = sealed.audit(start, rank)
        problems = [
            f"{d.kind.value} {d.subject}: expected {d.expected}, found {d.observed}"
            for d in audit.all_drifts
        ]
        root = _root(audit)
        if root is not None:
            problems += _private_problems(sealed.run.env, start, rank, root)
            problems += _shared_private(root, roots)
            roots[f"start {start}" + (f" rank {rank}" if rank else "")] = root
        name = f"start-{start}" + (f" rank {rank}" if rank else "")
        checks.append(
            ClaimCheck(
                f"live audit of {name} judged again (roots, preload, env, pins, dispatch, roles)",
                EvidenceClass.SEALED,
                f"{len(audit.processes)} processes, {audit.files} ELF files",
                not problems,
                _shown(problems),
            )
        )
    return checks


def _root(audit: SealedAudit) -> ProcessEvidence | None:
    return next((p for p in audit.processes if p.pid == audit.root_pid), None)


def _shared_private(root: ProcessEvidence, earlier: Mapping[str, ProcessEvidence]) -> list[str]:
    """A private HOME or temporary directory is one start's and one rank's alone."""
    return [
        f"environment pid {root.pid} ({root.role}): {name}: expected a directory of its own, "
        f"found {root.environ[name]!r}, {where}'s"
        for where, other in earlier.items()
        for name in sorted(RUN_PRIVATE_ENV)
        if name in root.environ and other.environ.get(name) == root.environ[name]
    ]


def _private_problems(
    launched: Mapping[str, str], start: int, rank: int, root: ProcessEvidence
) -> list[str]:
    """A start's root has the private HOME repro gives each start and rank under its run
    directory (run.json's HOME is start 1's), and a private temporary directory where run.json's
    was made (`launch.spec`), each its own (checked across starts by the caller)."""
    problems = []
    home, tmp = launched.get("HOME"), launched.get("TMPDIR")
    if home is not None:
        run = posixpath.dirname(posixpath.dirname(home))
        expected = posixpath.join(run, start_name(start, rank), "home")
        if root.environ.get("HOME", expected) != expected:
            problems.append(
                f"environment pid {root.pid} ({root.role}): HOME: expected {expected!r} (this "
                f"start's under run.json's), found {root.environ['HOME']!r}"
            )
    found = root.environ.get("TMPDIR")
    where = posixpath.dirname(tmp) if tmp is not None else None
    if where is not None and found is not None and posixpath.dirname(found) != where:
        problems.append(
            f"environment pid {root.pid} ({root.role}): TMPDIR: expected a directory of its own "
            f"in {where!r} (where run.json's was made), found {found!r}"
        )
    return problems


def _starts_and_ranks(sealed: JudgedBundle) -> list[tuple[int, int]]:
    ranks = [n.rank for n in sealed.manifest.declared_nodes] or [0]
    starts = range(1, sealed.manifest.oracle.gates.fresh_starts + 1)
    return [(start, rank) for start in starts for rank in ranks]


def _start_evidence(sealed: JudgedBundle) -> list[StartEvidence]:
    found = []
    for start, rank in _starts_and_ranks(sealed):
        directory = sealed.start(start, rank)
        audit = sealed.audit(start, rank)
        server = _server(sealed, start) if rank == 0 else None
        teardown = read_document(
            TeardownDocument, directory / TEARDOWN_FILE, what="the teardown's record"
        )
        root = audit.root_pid if audit.root_pid is not None else -1
        found.append(
            StartEvidence(
                start=start,
                rank=rank,
                where=str(directory.relative_to(sealed.path)),
                root_pid=root,
                processes=audit.processes,
                teardown=teardown,
                log=_log(sealed, start, rank),
                server=server,
                rows=sealed.rows(start) if rank == 0 else (),
                served_by=_served_by(sealed, start) if rank == 0 else (),
            )
        )
    return found


def _served_by(sealed: JudgedBundle, start: int) -> tuple[float, ...]:
    """The start time each of the start's `/metrics` reads states of the process serving it."""
    stated = []
    for name in (METRICS_BEFORE, METRICS_AFTER):
        text = sealed.start_text(start, name)
        if text is None:
            continue
        where = str(sealed.start_file(start, name))
        values = metrics.samples(text, where).get("process_start_time_seconds", {})
        stated += list(values.values())
    return tuple(stated)


def _server(sealed: JudgedBundle, start: int) -> ServerDocument:
    path = sealed.start_file(start, SERVER_FILE)
    return read_document(ServerDocument, path, what="the server's record")


def _teardown(sealed: JudgedBundle, start: int) -> TeardownDocument | None:
    """Rank 0's `teardown.json` of `start`; None when it is not sealed (refused elsewhere)."""
    path = sealed.start_file(start, TEARDOWN_FILE)
    if not path.is_file():
        return None
    return read_document(TeardownDocument, path, what="the teardown's record")


def _log(sealed: JudgedBundle, start: int, rank: int) -> bytes:
    path = sealed.start(start, rank) / LOG_FILE
    return read_sealed(path, what="a server log") if path.is_file() else b""


def _native_check(sealed: JudgedBundle) -> ClaimCheck:
    values = sealed.observations.values
    kernel_sets = sealed.kernel_sets()
    lock = sealed.lock.native

    def same_as_lock(processes: Sequence[ProcessEvidence]) -> bool:
        roles, jit = mapped_claims(processes, values, kernel_sets=kernel_sets)
        environments = environments_claim(processes, values)
        return (roles, jit, environments) == (lock.roles, lock.jit, lock.environments)

    audit = sealed.audit(1)
    audit_drifts = audit.all_drifts
    count = sum(len(objects) for objects in lock.roles.values())
    same = same_as_lock(audit.processes)
    # every later start maps what the lock says the stack maps, with the same environments
    others = [
        start
        for start in range(2, sealed.manifest.oracle.gates.fresh_starts + 1)
        if not same_as_lock(sealed.audit(start).processes)
    ]
    ok = same and not audit_drifts and not others
    detail = "" if ok else f"{len(audit_drifts)} audit drift(s); mappings equal: {same}"
    if others:
        detail += "; start " + ", ".join(map(str, others)) + " maps other files or environments"
    return ClaimCheck(
        "native.roles (live audit of every process)",
        lock.evidence,
        f"{len(lock.roles)} roles, {count} mappings",
        ok,
        detail,
    )


def _dispatch_check(sealed: JudgedBundle) -> ClaimCheck:
    """Each choice of code recomputed: the variant mapped in the sealed audit (or reported by
    the sealed probe) and the deciding facts of the sealed host, by the sealed kernel sets."""
    host = sealed.observations.host.capabilities()
    probes_path = sealed.evidence(DISPATCH_FILE)
    probes = read_document(Probes, probes_path, what="the dispatch probes")
    lock = sealed.lock
    found = dispatch_claims(
        sealed.kernel_sets(),
        sealed.manifest.native.modules,
        host=host,
        env=lock.launch.env,
        roles=lock.native.roles,
        probes=probes.root,
    )
    same = found.claims == lock.native.dispatch
    shown = ", ".join(f"{c.name}={c.variant}" for c in lock.native.dispatch) or "none"
    problems = list(found.disagreements)
    if not same:
        ours = ", ".join(f"{c.name}={c.variant} {c.facts}" for c in found.claims) or "none"
        problems.append(f"recomputed {ours}")
    return ClaimCheck(
        "native.dispatch (variant and deciding facts)",
        EvidenceClass.SEALED,
        shown,
        same and not found.disagreements,
        "; ".join(problems),
    )


def _nodes_check(sealed: JudgedBundle) -> ClaimCheck:
    """Each node's claim recomputed from what its actor said (`nodes.json`) and its rank's
    sealed audit of start 1: every declared node answered, from its declared address, and no
    other; its host facts, mappings, loader environments and choices of code are the lock's."""
    lock = sealed.lock
    shown = ", ".join(f"rank {n.rank} {n.address} ({n.hostname})" for n in lock.nodes) or "none"
    if not sealed.manifest.clustered:
        detail = "the lock claims nodes, the manifest declares none"
        return ClaimCheck("nodes (every node answered)", EvidenceClass.SEALED, shown, False, detail)
    facts = sealed.nodes
    assert facts is not None  # the manifest is clustered
    audits = {n.rank: sealed.audit(1, n.rank).processes for n in sealed.manifest.declared_nodes}
    claims, problems = node_claims(
        sealed.manifest,
        lock.launch.profile,
        facts,
        audits=audits,
        values=sealed.observations.values,
        kernel_sets=sealed.kernel_sets(),
    )
    found = [*problems, *one_kernel_problems(facts)]
    if claims != lock.nodes:
        differing = [
            f"rank {mine.rank}"
            for mine, theirs in itertools.zip_longest(claims, lock.nodes)
            if mine != theirs and mine is not None
        ]
        found.append(
            f"the lock's nodes are not those recomputed from {NODES_FILE} and the audits "
            f"({', '.join(differing) or f'{len(lock.nodes)} claimed, {len(claims)} recomputed'})"
        )
    return ClaimCheck(
        "nodes (every node answered, each audited)",
        EvidenceClass.SEALED,
        shown,
        not found,
        "; ".join(found),
    )


def one_kernel_problems(document: NodesDocument) -> list[str]:
    """Nodes reached on loopback addresses are one machine: they state one kernel boot id. Nodes
    of one boot id are one kernel: they state the same host facts."""
    problems = []
    nodes = sorted(document.nodes, key=lambda n: n.rank)
    local = [n for n in nodes if _loopback(n.address)]
    if len({n.boot_id for n in local}) > 1 or any(n.boot_id is None for n in local):
        stated = ", ".join(f"rank {n.rank}: {n.boot_id}" for n in local)
        problems.append(
            f"{NODES_FILE}: boot_id: expected one for the nodes on loopback addresses, which are "
            f"this one machine, found {stated}"
        )
    for first, other in itertools.combinations(nodes, 2):
        if first.boot_id is None or first.boot_id != other.boot_id:
            continue
        differing = sorted(
            name
            for name, value in first.host.to_json().items()
            if other.host.to_json().get(name) != value
        )
        if differing:
            problems.append(
                f"{NODES_FILE}: rank {other.rank} host {', '.join(differing)}: expected rank "
                f"{first.rank}'s, whose kernel (boot_id {first.boot_id}) it runs on"
            )
    return problems


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # a host name: it may name any machine
        return False


def _gates_check(sealed: JudgedBundle) -> ClaimCheck:
    """Every gate verdict recomputed from the sealed evidence by the function the run judged
    with, and equal to the sealed verdicts: the same gates, in order, with the same outcome and
    numbers. A start's live audit passes exactly when its sealed audit holds no drift."""
    path = sealed.evidence(VERDICTS_FILE)
    document = read_document(Verdicts, path, what="the sealed verdicts")
    sealed_verdicts = document.root
    ours = recompute_verdicts(sealed)
    names = [v.gate for v in ours]
    failed = [v.gate for v in ours if not v.passed]
    problems = []
    if [v.gate for v in sealed_verdicts] != names:
        problems.append(
            f"{VERDICTS_FILE} names {[v.gate for v in sealed_verdicts]}, the manifest's gates "
            f"over the sealed evidence give {names}"
        )
    else:
        for mine, theirs in zip(ours, sealed_verdicts, strict=True):
            if mine != theirs:
                problems.append(
                    f"{mine.gate}: recomputed {mine.status.value} ({mine.summary}), "
                    f"sealed {theirs.status.value} ({theirs.summary})"
                )
    if failed:
        problems.append(
            "failed: " + "; ".join(f"{v.gate}: {v.summary}" for v in ours if not v.passed)
        )
    return ClaimCheck(
        "gates (every verdict recomputed)",
        EvidenceClass.SEALED,
        f"{len(ours) - len(failed)}/{len(ours)} pass or n/a",
        not problems,
        "; ".join(problems),
        figures={
            verdict.gate: verdict.details
            for verdict in ours
            if (kind := kind_of(verdict.gate)) is not None and kind.measures and verdict.details
        },
    )


def _quality_check(sealed: JudgedBundle, rows: tuple[OracleRow, ...]) -> ClaimCheck:
    """The quality verdicts recomputed from the sealed answers: the same checks, the same
    outcomes. They report; they never fail the record (they are kept apart from the gates)."""
    path = sealed.evidence(QUALITY_FILE)
    recorded = read_document(Verdicts, path, what="the sealed quality verdicts").root
    ours = quality.assess(sealed.manifest.oracle.quality, rows)
    shown = ", ".join(f"{v.gate} {v.status.value}" for v in ours) or "none declared"
    return ClaimCheck(
        "quality verdicts (recomputed from the answers)",
        EvidenceClass.SEALED,
        shown,
        ours == recorded,
        "" if ours == recorded else f"sealed {[(v.gate, v.status.value) for v in recorded]}",
    )


def recompute_verdicts(sealed: JudgedBundle) -> tuple[Verdict, ...]:
    """The manifest's gates over the bundle's sealed run, as `launch.run.judge` judged it."""
    manifest = sealed.manifest
    teacher = sealed.run.teacher
    sealed_teacher = Teacher.from_bytes(
        sealed.teacher_bytes(), where=str(sealed.oracle(TEACHER_FILE))
    )
    if teacher is not None and teacher != sealed_teacher:
        raise BadInput(
            "the run was judged against another teacher than the one sealed",
            where=str(sealed.evidence(RUN_FILE)),
            expected=f"the teacher of {bundle.ORACLE_DIR}/{TEACHER_FILE}",
        )
    starts = manifest.oracle.gates.fresh_starts
    evidence = run_evidence(sealed, manifest.oracle, teacher)
    markers = tuple(marker for kernel_set in sealed.kernel_sets() for marker in kernel_set.markers)
    verdicts = judge_run(manifest.oracle.gates, evidence, kernel_markers=markers)
    audits = []
    ranks = [n.rank for n in manifest.declared_nodes] or [0]
    for start in range(1, starts + 1):
        for rank in ranks:
            audit = sealed.audit(start, rank)
            roles = [process.role for process in audit.processes]
            audits.append(audit_verdict(start, roles, audit.files, audit.all_drifts, rank=rank))
    logs = []
    for start in range(1, starts + 1):
        for rank in ranks:
            directory = sealed.start(start, rank)
            teardown = read_document(
                TeardownDocument, directory / TEARDOWN_FILE, what="the teardown's record"
            )
            log = _log(sealed, start, rank)
            answered = 0 if rank else _answered(sealed, start)
            logs.append(
                server_log_verdict(start, log, teardown.log_bytes, answered=answered, rank=rank)
            )
    return (*verdicts, *audits, *logs)


def _observations_check(sealed: JudgedBundle) -> ClaimCheck:
    """The observations the build (or a replay's preflight) recorded, judged again against the
    sealed manifest by the function that refused any disagreement then
    (`builder.observations.drifts`): a sealed observation that breaks the manifest (a model
    file of other bytes, a package of another version, a RECORD mismatch, a host fact) is a
    run that should never have been sealed."""
    document = sealed.observations
    observed = Observations(
        values=document.values,
        host=document.host,
        models=document.models,
        sources=document.sources,
        python=document.python,
        unobservable=(),
    )
    found = [*observation_drifts(sealed.manifest, observed), *document.contradictions()]
    if document.python is None:
        found.insert(0, _sealed_drift(OBSERVATIONS_FILE, "python", "the venv observed", "null"))
    return ClaimCheck(
        f"{OBSERVATIONS_FILE} judged again against the manifest",
        EvidenceClass.SEALED,
        f"{len(document.models)} models, {len(document.sources)} sources, "
        f"{len(document.python.distributions) if document.python else 0} distributions",
        not found,
        _shown(
            [
                f"{d.kind.value} {d.subject}: expected {d.expected}, found {d.observed}"
                for d in found
            ]
        ),
    )


def _sealed_drift(file: str, field: str, expected: str, found: str) -> Drift:
    return Drift(
        kind=DriftKind.CLAIM,
        subject=f"{file}: {field}",
        expected=expected,
        observed=found,
        why="the sealed evidence contradicts itself",
    )


def _observed_checks(sealed: JudgedBundle) -> list[ClaimCheck]:
    """The live claims against the observations the build recorded."""
    observed = sealed.observations
    lock = sealed.lock
    checks = [_observations_check(sealed)]
    for claim, facts in zip(lock.models, observed.models, strict=True):
        files = {f.name: f.sha256 for f in facts.files}
        checks.append(
            _equal(
                f"models[{claim.role}].files",
                claim.evidence,
                f"{len(files)} files",
                f"{len(claim.files)} files",
                files == claim.files,
            )
        )
    distributions = observed.python.distributions if observed.python else ()
    packages = {d.name: d.version for d in distributions}
    checks.append(
        _equal(
            "python.packages",
            lock.python.evidence,
            f"{len(packages)} distributions",
            f"{len(lock.python.packages)} distributions",
            packages == lock.python.packages,
        )
    )
    artifacts = observed.artifacts
    same = artifacts.pinned == lock.python.artifacts
    same = same and artifacts.unresolved == lock.python.unrestorable
    checks.append(
        _equal(
            "python.artifacts (wheel file and sha256)",
            lock.python.evidence,
            f"{len(artifacts.pinned)} wheels, {len(artifacts.unresolved)} unrestorable",
            f"{len(lock.python.artifacts)} wheels",
            same,
        )
    )
    host_ok = observed.host_facts() == lock.host.facts
    checks.append(_equal("host.facts", lock.host.evidence, "recorded", "recorded", host_ok))
    return checks


def _anchored_checks(sealed: JudgedBundle, *, taught: bool = True) -> list[ClaimCheck]:
    """Every lock value taken from a sealed file, checked equal to that file: the manifest
    (bundle, model pins, source pins, launch, enforced host facts, kernel sets), the build's
    observations (interpreter, source state, RECORD checks) and the run record (profile)."""
    lock, manifest = sealed.lock, sealed.manifest
    observed = sealed.observations
    run = sealed.run
    python = observed.python
    records = (python.records or ()) if python else ()
    sources = observed.sources
    profile = lock.launch.profile
    pairs: list[tuple[str, object, object]] = [
        (
            "lock.bundle = manifest [bundle]",
            (lock.bundle.name, lock.bundle.description),
            (manifest.bundle.name, manifest.bundle.description),
        ),
        (
            "lock.models = manifest [[model]]",
            [(m.role, m.repo, m.revision, m.files) for m in lock.models],
            [(m.role, m.repo, m.revision, dict(m.files)) for m in manifest.models],
        ),
        (
            "lock.sources = manifest [[source]] and observations",
            [(s.name, s.commit, s.clean, s.patches) for s in lock.sources],
            [
                (m.name, m.commit, not f.changes, {p.path: p.sha256 for p in m.patches})
                for m, f in zip(manifest.sources, sources, strict=True)
            ]
            if len(sources) == len(manifest.sources)
            else "a different number of observed sources",
        ),
        (
            "lock.sources commit = observations",
            [s.commit for s in lock.sources],
            [f.commit or "" for f in sources],
        ),
        (
            "lock.python.interpreter = observations",
            lock.python.interpreter,
            python.version if python else None,
        ),
        (
            "lock.python.record_checked = observations",
            lock.python.record_checked,
            tuple(sorted(r.distribution for r in records if not r.mismatches)),
        ),
        (
            "lock.launch = manifest [launch] and the run",
            (profile, lock.launch.argv, lock.launch.env),
            (
                run.profile,
                manifest.launch.argv_for(profile),
                manifest.launch.env_for(profile),
            ),
        ),
        (
            "lock.host.enforced = manifest [host]",
            lock.host.enforced,
            manifest.host,
        ),
        (
            "lock.native.kernel_sets = manifest [native]",
            lock.native.kernel_sets,
            manifest.native.kernel_sets,
        ),
        ("lock.oracle.suite = oracle/suite.json", lock.oracle.suite, sealed.suite.name),
        (
            "run.json bundle, suite, fresh_starts = the lock's and the manifest's",
            (run.bundle, run.suite, run.fresh_starts),
            (lock.bundle.name, sealed.suite.name, manifest.oracle.gates.fresh_starts),
        ),
        (
            "run.json manifest and teacher = the lock's (a bundle captures its teacher)",
            (run.manifest, run.teacher is None) if taught else (None, None),
            (lock.bundle.manifest_path, True) if taught else (None, None),
        ),
        (
            "run.json port = each start's server.json port",
            [run.port] * manifest.oracle.gates.fresh_starts,
            [
                _server(sealed, start).port
                for start in range(1, manifest.oracle.gates.fresh_starts + 1)
            ],
        ),
        (
            "run.json argv = the lock's, expanded on the observed host",
            run.argv,
            tuple(
                expand(arg, {**observed.values, "port": str(run.port)}) for arg in lock.launch.argv
            ),
        ),
        (
            "run.json environment = the lock's, expanded on the observed host",
            {k: v for k, v in run.env.items() if k not in RUN_PRIVATE_ENV},
            {k: expand(v, observed.values) for k, v in lock.launch.env.items()},
        ),
        (
            "lock.native.modules = the sealed audit",
            lock.native.modules,
            modules_claim(manifest.native.modules, lock.native.roles, lock.native.dispatch),
        ),
        (
            "lock.models location = observations",
            [m.location for m in lock.models],
            [m.directory for m in observed.models],
        ),
        ("lock evidence classes = a built lock's", evidence_classes(lock), built_classes(lock)),
    ]

    differing = [
        f"{claim}: lock {ours!r}, sealed {theirs!r}"[:300]
        for claim, ours, theirs in pairs
        if ours != theirs
    ]
    return [
        ClaimCheck(
            "lock = the sealed manifest, observations and run",
            EvidenceClass.SEALED,
            f"{len(pairs) - len(differing)}/{len(pairs)} values equal",
            not differing,
            "; ".join(differing),
        )
    ]


def _answered(sealed: JudgedBundle, start: int) -> int:
    """The requests start `start`'s client posted: its suite's rows and every load's."""
    loads = (None, *sealed.manifest.oracle.load_names)
    return sum(len(sealed.rows(start, load)) for load in loads)


def _equal(
    claim: str,
    evidence: EvidenceClass,
    value: str,
    locked: str,
    ok: bool | None = None,
) -> ClaimCheck:
    same = value == locked if ok is None else ok
    return ClaimCheck(claim, evidence, value, same, "" if same else f"locked {locked}")


def _first_row_difference(
    ours: tuple[OracleRowClaim, ...], theirs: tuple[OracleRowClaim, ...]
) -> str:
    for index, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a != b:
            return f"row {index} ({b.prompt_id}) differs from the lock"
    return f"{len(ours)} rows recomputed, {len(theirs)} locked"


# --- the signed statements, recomputed ------------------------------------------------------------

SHOWN_DIFFERENCES = 5
"""Differing entries a check names, before saying how many more there are."""


def attestation_checks(sealed: JudgedBundle, integrity: BundleReport) -> list[ClaimCheck]:
    """What the signed statements say beyond the files they seal, recomputed from what the
    bundle seals: the provenance's resolvedDependencies and builder version from the lock; for
    a sealed run, its test-result statement from the gates recomputed over its evidence."""
    statement = integrity.statement
    if statement is None:  # integrity held, so the statement was read: never here
        raise BadInput("the signed statement was not read", where=str(sealed.path))
    stated = statement.dependencies
    problems = descriptor_differences(
        resolved_dependencies(sealed.lock), stated, what="the sealed lock"
    )
    locked = sealed.lock.bundle
    if statement.repro_version != locked.repro_version:
        problems.insert(
            0,
            f"builder.version: the statement says repro {statement.repro_version}, "
            f"the sealed lock {locked.repro_version}",
        )
    if not integrity.sealed_run:  # a run is named for itself, its manifest read from the bundle
        for field, says, lock_says in (
            ("bundle", statement.bundle_name, locked.name),
            ("manifest.path", statement.manifest.path, locked.manifest_path),
        ):
            if says != lock_says:
                what = f"externalParameters.{field}"
                problems.insert(0, f"{what}: the statement says {says!r}, the lock {lock_says!r}")
    checks = [
        ClaimCheck(
            "statement.json = the sealed lock",
            EvidenceClass.SEALED,
            f"{len(stated)} dependencies",
            not problems,
            _shown(problems),
        )
    ]
    if integrity.sealed_run:
        checks.append(_gate_results_check(sealed, integrity))
    return checks


def gate_outcome(verdicts: tuple[Verdict, ...]) -> GateOutcome:
    """The gates that passed and those that failed, by name; an `n/a` gate judged nothing and
    is in neither."""
    return GateOutcome(
        passed=tuple(v.gate for v in verdicts if v.status is VerdictStatus.PASS),
        failed=tuple(v.gate for v in verdicts if v.status is VerdictStatus.FAIL),
    )


def _gate_results_check(sealed: JudgedBundle, integrity: BundleReport) -> ClaimCheck:
    claim = "test-result.dsse.json = the gates recomputed"
    stated = integrity.gate_results
    if stated is None:  # integrity held, so a sealed run's results were read: never here
        raise BadInput("the signed gate results were not read", where=str(sealed.path))
    try:
        verdicts = recompute_verdicts(sealed)
    except (ReproError, OSError, ValueError, KeyError) as error:
        detail = error.diagnostics() if isinstance(error, ReproError) else repr(error)
        return ClaimCheck(claim, EvidenceClass.SEALED, "unreadable", False, detail)
    ours = gate_results_statement(integrity.digests, gate_outcome(verdicts)).predicate
    theirs = stated.predicate
    problems = [
        f"{field}: the statement says {found!r}, recomputed {expected!r}"
        for field, found, expected in (
            ("result", theirs.result, ours.result),
            ("passedTests", sorted(theirs.passed_tests), sorted(ours.passed_tests)),
            ("failedTests", sorted(theirs.failed_tests), sorted(ours.failed_tests)),
            ("warnedTests", sorted(theirs.warned_tests), sorted(ours.warned_tests)),
        )
        if found != expected
    ]
    problems += descriptor_differences(
        ours.configuration, theirs.configuration, what="the sealed files"
    )
    return ClaimCheck(
        claim,
        EvidenceClass.SEALED,
        f"{theirs.result}: {len(theirs.passed_tests)} passed, {len(theirs.failed_tests)} failed",
        not problems,
        _shown(problems),
    )


def _shown(problems: list[str]) -> str:
    more = len(problems) - SHOWN_DIFFERENCES
    return "; ".join(problems[:SHOWN_DIFFERENCES]) + (f"; and {more} more" if more > 0 else "")
