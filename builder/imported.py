"""Sealed-evidence bundles: a record produced elsewhere, imported, recomputed and sealed.

A manifest with `[evidence]` names someone else's run directory, teacher files, declared
identity and release-file list. `repro build` loads them (`launch.historical`), judges the record
by the manifest's own gates, and seals the files verbatim with a lock in which every claim it
recomputes from them is `sealed` and every claim it can only repeat is `declared`; nothing is
`live`. `repro verify` recomputes the sealed claims from the sealed copies with the same code.
"""

from __future__ import annotations

import posixpath
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from repro_serving.builder import recordfiles
from repro_serving.builder.canonical import canonical_json
from repro_serving.builder.claims import ClaimCheck, bundle_claim, content_check, oracle_claim
from repro_serving.builder.documents import parse_document
from repro_serving.builder.documents.evidence import Teacher, Verdict
from repro_serving.builder.documents.lock import (
    AcceleratorFacts,
    EvidenceClass,
    HostClaim,
    HostFacts,
    LaunchClaim,
    Lock,
    ModelClaim,
    NativeClaim,
    PythonClaim,
    RecordClaim,
    SourceClaim,
)
from repro_serving.builder.documents.manifest import Evidence, Manifest, Suite
from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.errors import BadInput
from repro_serving.builder.hashing import sha256_bytes, sha256_file
from repro_serving.builder.native.kernels import KERNELS_DIR, runtime_markers
from repro_serving.builder.readers import EVIDENCE_LIMIT, read_bytes
from repro_serving.builder.sealing import bundle
from repro_serving.builder.vllmlog import (
    logged_argument_problems,
    logged_version_problems,
)
from repro_serving.launch import consistency, gates
from repro_serving.launch.historical import (
    Record,
    load_bench,
    load_cleanup_status,
    load_idle_snapshots,
    load_metrics_delta,
    load_teacher,
    read_log,
)
from repro_serving.launch.throughput import measure

RUN = "run"
TEACHER_TOKENS = "teacher-tokens.json"
TEACHER_TEXTS = "teacher-texts.json"
TEACHER_BENCH = "teacher-bench.json"
IDENTITY = "identity.json"
MODEL_FILES = "model-files.sha256"
FILES = "files"
BENCH = "bench.json"
SERVER_LOG = "server.log"
METRICS_BEFORE = "metrics-before-suite.prom"
METRICS_AFTER = "metrics-after-suite.prom"
CLEANUP = "cleanup-status.txt"
IDLE = "idle-interval"
STORED_MEDIAN, STORED_TOKENS = "tok_s_1_100_after_ttft", 100
"""The summary a bench states its median in: N/span over its first 100 tokens after TTFT."""


@dataclass(frozen=True)
class ImportedFiles:
    """Where an imported record's files are: as the manifest names them, or sealed."""

    run: Path
    teacher_tokens: Path
    teacher_texts: Path
    identity: Path | None
    model_files: Path | None
    files: tuple[Path, ...]
    checksums: tuple[Path, ...] = ()
    teacher_bench: Path | None = None
    kernels: Path = KERNELS_DIR
    """Where the manifest's kernel sets are read: the repository's, or those a bundle sealed."""

    @classmethod
    def of_manifest(cls, manifest: Manifest, evidence: Evidence) -> ImportedFiles:
        def at(path: str | None) -> Path | None:
            return None if path is None else manifest.resolve(path)

        return cls(
            run=manifest.resolve(evidence.run),
            teacher_tokens=manifest.resolve(evidence.teacher_tokens),
            teacher_texts=manifest.resolve(evidence.teacher_texts),
            identity=at(evidence.identity),
            model_files=at(evidence.model_files),
            files=tuple(manifest.resolve(p) for p in evidence.files),
            checksums=tuple(manifest.resolve(p) for p in evidence.checksums),
            teacher_bench=at(evidence.teacher_bench),
        )

    @classmethod
    def in_bundle(cls, path: Path, evidence: Evidence) -> ImportedFiles:
        root = path / bundle.EVIDENCE_DIR
        return cls(
            run=root / RUN,
            teacher_tokens=root / TEACHER_TOKENS,
            teacher_texts=root / TEACHER_TEXTS,
            identity=root / IDENTITY if evidence.identity else None,
            model_files=root / MODEL_FILES if evidence.model_files else None,
            files=tuple(root / FILES / Path(p).name for p in evidence.files),
            checksums=tuple(root / FILES / Path(p).name for p in evidence.checksums),
            teacher_bench=root / TEACHER_BENCH if evidence.teacher_bench else None,
            kernels=path / bundle.KERNEL_SETS_DIR,
        )

    def sealed_names(self) -> dict[str, Path]:
        """The evidence/ names these files are sealed under."""
        names: dict[str, Path] = {
            RUN: self.run,
            TEACHER_TOKENS: self.teacher_tokens,
            TEACHER_TEXTS: self.teacher_texts,
        }
        if self.teacher_bench is not None:
            names[TEACHER_BENCH] = self.teacher_bench
        if self.identity is not None:
            names[IDENTITY] = self.identity
        if self.model_files is not None:
            names[MODEL_FILES] = self.model_files
        for path in (*self.files, *self.checksums):
            names[f"{FILES}/{path.name}"] = path
        return names

    def locate(self, evidence: Evidence, original: str) -> Path | None:
        """Where a file the manifest's `[evidence]` reaches is here, from its path relative
        to the manifest (lexically normalised); None when it is none of them."""
        original = posixpath.normpath(original)
        run = posixpath.normpath(evidence.run)
        if original.startswith(run + "/"):
            return self.run / original[len(run) + 1 :]
        named: list[tuple[str | None, Path | None]] = [
            (evidence.teacher_tokens, self.teacher_tokens),
            (evidence.teacher_texts, self.teacher_texts),
            (evidence.teacher_bench, self.teacher_bench),
            (evidence.identity, self.identity),
            (evidence.model_files, self.model_files),
            *zip(evidence.files, self.files, strict=True),
            *zip(evidence.checksums, self.checksums, strict=True),
        ]
        for path, here in named:
            if path is not None and posixpath.normpath(path) == original:
                return here
        return None


def load_record(files: ImportedFiles) -> Record:
    bench = load_bench(files.run / BENCH)
    return Record(
        bench=bench,
        teacher=load_teacher(files.teacher_tokens, files.teacher_texts, bench.suite),
        metrics=load_metrics_delta(files.run / METRICS_BEFORE, files.run / METRICS_AFTER),
        server_log=read_log(files.run / SERVER_LOG),
        cleanup_status=load_cleanup_status(files.run / CLEANUP),
        idle=load_idle_snapshots(files.run / IDLE),
    )


def conventional_rate(manifest: Manifest, record: Record) -> float | None:
    gate = manifest.oracle.gates.throughput
    return None if gate is None else measure(record.bench.rows, gate.tokens).conventional_median


def record_verdicts(manifest: Manifest, record: Record, kernels: Path) -> tuple[Verdict, ...]:
    """The manifest's gates and its kernel sets' runtime markers over the record."""
    evidence = record.run_evidence(sealed_tok_s=conventional_rate(manifest, record))
    markers = runtime_markers(manifest.native.kernel_sets, kernels)
    return gates.judge(manifest.oracle.gates, evidence, kernel_markers=markers)


def record_claim(manifest: Manifest, record: Record, kernels: Path) -> RecordClaim:
    """Every number the record's files let repro recompute, and its gates' verdicts."""
    lines = gates.log_lines(record.server_log)
    metrics = record.metrics
    verdicts = record_verdicts(manifest, record, kernels)
    rows = record.bench.rows
    teacher = {row.prompt_id: row for row in record.teacher.rows}
    return RecordClaim(
        evidence=EvidenceClass.SEALED,
        suite=record.bench.suite,
        rows=len(rows),
        exact_token_ids=sum(
            r.prompt_id in teacher and teacher[r.prompt_id].token_ids == r.token_ids for r in rows
        ),
        exact_text_sha256=sum(
            r.prompt_id in teacher and teacher[r.prompt_id].text_sha256 == r.text_sha256
            for r in rows
        ),
        cached_tokens=tuple(r.cached_tokens for r in rows),
        markers={
            marker.name: dict(sorted(gates.marker_counts(marker, lines).items()))
            for marker in manifest.oracle.gates.log_markers
        },
        spec_decode_drafts=metrics.spec_decode_drafts,
        spec_decode_draft_tokens=metrics.spec_decode_draft_tokens,
        spec_decode_accepted=metrics.spec_decode_accepted,
        spec_decode_accepted_per_position=metrics.spec_decode_accepted_per_position,
        prefix_cache_hits=metrics.prefix_cache_hits,
        generation_tokens=metrics.generation_tokens,
        cleanup=dict(sorted(record.cleanup_status.items())),
        idle_prestart=len(record.idle.prestart),
        idle_poststop=len(record.idle.poststop),
        idle_all_passed=all(
            s.status == "passed" for s in (*record.idle.prestart, *record.idle.poststop)
        ),
        verdicts={v.gate: v.status.value for v in verdicts},
    )


def teacher_document(record: Record, manifest: Manifest) -> bytes:
    """The record's teacher in repro's own format, with the rate a throughput floor scales."""
    teacher: Teacher = record.teacher.model_copy(
        update={"conventional_tok_s": conventional_rate(manifest, record)}
    )
    return canonical_json(teacher.model_dump(mode="json"))


def assemble_lock(
    manifest: Manifest,
    manifest_source: str,
    files: ImportedFiles,
    record: Record,
    *,
    suite: Suite,
    suite_sha256: str,
    teacher_sha256: str,
    manifest_sha256: str,
) -> Lock:
    identity = _identity(files.identity)
    declared = EvidenceClass.DECLARED
    teacher_profile = manifest.oracle.teacher
    oracle = oracle_claim(manifest, suite, record.bench.rows, suite_sha256, teacher_sha256)
    return Lock(
        bundle=bundle_claim(manifest, manifest_source, manifest_sha256=manifest_sha256),
        host=HostClaim(
            evidence=declared,
            facts=identity.host.facts(where=f"{files.identity or IDENTITY}: host"),
            enforced=manifest.host,
        ),
        models=tuple(
            ModelClaim(
                evidence=EvidenceClass.SEALED if files.model_files else declared,
                role=model.role,
                repo=model.repo,
                revision=model.revision,
                location="{model." + model.role + "}",
                files=dict(model.files),
            )
            for model in manifest.models
        ),
        sources=tuple(
            SourceClaim(
                evidence=declared,
                name=s.name,
                location=s.path,
                commit=s.commit,
                clean=s.clean,
                patches={p.path: p.sha256 for p in s.patches},
            )
            for s in manifest.sources
        ),
        python=PythonClaim(
            evidence=declared,
            interpreter=identity.toolchain.python or manifest.python.interpreter,
            packages={name: p.pinned for name, p in manifest.python.packages.items()},
        ),
        native=NativeClaim(
            evidence=declared,
            kernel_sets=manifest.native.kernel_sets,
            modules={m.module: m.path for m in identity.native_modules},
            roles={},
        ),
        launch=LaunchClaim(
            evidence=declared,
            profile=teacher_profile,
            argv=manifest.launch.argv_for(teacher_profile),
            env=manifest.launch.env_for(teacher_profile),
        ),
        oracle=oracle,
        record=record_claim(manifest, record, files.kernels),
    )


def model_files_problems(manifest: Manifest, listing: str, where: str) -> list[str]:
    """The manifest's release files against a `sha256sum` listing: same digests, same names
    (a listing names each file under its model's directory)."""
    listed: list[tuple[str, str]] = []
    for number, line in enumerate(listing.splitlines(), start=1):
        digest, _, name = line.partition("  ")
        if len(digest) != 64 or not name:
            raise BadInput(
                "malformed release-file listing",
                where=f"{where}, line {number}",
                expected="<sha256>  <path>",
                found=repr(line),
            )
        listed.append((digest, name))
    pinned = sorted((d, n) for m in manifest.models for n, d in m.files.items())
    problems = []
    if sorted(d for d, _ in listed) != sorted(d for d, _ in pinned):
        problems.append(f"{len(listed)} listed digests differ from the {len(pinned)} pinned")
    for digest, name in pinned:
        if not any(d == digest and (n == name or n.endswith("/" + name)) for d, n in listed):
            problems.append(f"{name} ({digest[:12]}…) is not in the listing under that name")
    return problems


def checksum_drifts(evidence: Evidence, files: ImportedFiles) -> tuple[int, list[Drift]]:
    """The record's own checksum lists against the files they name: how many entries were
    checked, and a drift for each entry whose file is not sealed or holds other bytes. A path
    in a list is relative to the list's directory, as `sha256sum -c` run there reads it."""
    checked, drifts = 0, []
    named: set[Path] = set()
    for listed, path in zip(evidence.checksums, files.checksums, strict=True):
        base = posixpath.dirname(posixpath.normpath(listed))
        name = Path(listed).name
        text = read_bytes(path, limit=EVIDENCE_LIMIT, what=f"checksum list {name}").decode()
        for number, line in enumerate(text.splitlines(), start=1):
            digest, _, entry = line.partition("  ")
            where = f"{name}:{number}"
            if len(digest) != 64 or not entry:
                drifts.append(_checksum_drift(where, "<sha256>  <path>", repr(line[:80])))
                continue
            target = files.locate(evidence, posixpath.join(base, entry.lstrip("*")))
            if target is None:
                drifts.append(_checksum_drift(where, f"{entry} sealed", "not among the files"))
                continue
            found = sha256_file(target) if target.is_file() else "missing"
            checked += 1
            named.add(target)
            if found != digest:
                drifts.append(_checksum_drift(f"{where} {entry}", digest, found))
    if evidence.checksums:
        # The lists cover the run directory whole: a file of it no list names is unchecked.
        unlisted = sorted(p for p in files.run.rglob("*") if p.is_file() and p not in named)
        drifts += [
            _checksum_drift(str(p.relative_to(files.run)), "named by a checksum list", "unlisted")
            for p in unlisted
        ]
    return checked, drifts


def _checksum_drift(subject: str, expected: str, observed: str) -> Drift:
    return Drift(
        kind=DriftKind.CHECKSUMS,
        subject=subject,
        expected=expected,
        observed=observed,
        why="a record's files must be those its own checksum list names",
    )


def judge_record(manifest: Manifest) -> tuple[ImportedFiles, Record, tuple[Verdict, ...]]:
    """Load the record the manifest imports and judge it by the manifest's own gates."""
    assert manifest.evidence is not None, "only a manifest with [evidence] imports a record"
    files = ImportedFiles.of_manifest(manifest, manifest.evidence)
    record = load_record(files)
    return files, record, record_verdicts(manifest, record, files.kernels)


def release_files_problems(manifest: Manifest, files: ImportedFiles) -> list[str]:
    """How the manifest's model files differ from the record's listing of its release files."""
    if files.model_files is None:
        return []
    listing = _text(files.model_files, "the release-file listing")
    return model_files_problems(manifest, listing, str(files.model_files))


def _text(path: Path, what: str) -> str:
    return read_bytes(path, limit=EVIDENCE_LIMIT, what=what).decode("utf-8", errors="replace")


class _Foreign(BaseModel):
    """A part of someone else's format: read for what repro repeats, the rest ignored here and
    sealed verbatim."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class IdentityModule(_Foreign):
    module: str
    path: str = ""


class IdentityToolchain(_Foreign):
    python: str | None = None


class IdentityHost(_Foreign):
    """The host as the producer's identity names it, in its own words; `facts` says it in the
    lock's (`builder.documents.lock.HostFacts`), stating exactly what this states."""

    os: str | None = None
    """The distribution's name (`Ubuntu 24.04.4 LTS`): os-release's PRETTY_NAME."""
    kernel: str | None = None
    architecture: str | None = None
    gpu_name: str | None = None
    gpu_vendor_device: str | None = None
    gpu_bdfs: tuple[str, ...] | None = None
    """The PCI address of each card."""
    gpu_count: Annotated[int, Field(ge=0)] | None = None

    def facts(self, *, where: str) -> HostFacts:
        """The lock's host facts: those this names, under the lock's names; a fact it does not
        name is absent. Its cards are listed one by one when it says how many there are or
        where they are, and it must not say both differently."""
        stated: dict[str, object] = {}
        if self.architecture is not None:
            stated["arch"] = self.architecture
        if self.os is not None:
            stated["os_release"] = {"PRETTY_NAME": self.os}
        if self.kernel is not None:
            stated["kernel"] = self.kernel
        cards = self._cards(where)
        if cards is not None:
            stated["accelerators"] = cards
        return HostFacts.model_validate(stated)

    def _cards(self, where: str) -> tuple[AcceleratorFacts, ...] | None:
        bdfs, count = self.gpu_bdfs, self.gpu_count
        if bdfs is not None and count is not None and count != len(bdfs):
            raise BadInput(
                "the identity's host contradicts itself",
                where=f"{where}.gpu_count",
                expected=f"{len(bdfs)}, the number of gpu_bdfs",
                found=str(count),
            )
        if bdfs is None and count is None:
            if self.gpu_vendor_device is not None or self.gpu_name is not None:
                raise BadInput(
                    "the identity names a card but not how many there are",
                    where=where,
                    expected="gpu_bdfs or gpu_count beside gpu_vendor_device and gpu_name",
                    found="neither",
                )
            return None
        card: dict[str, str] = {}
        if self.gpu_vendor_device is not None:
            card["vendor_device"] = self.gpu_vendor_device
        if self.gpu_name is not None:
            card["name"] = self.gpu_name
        if bdfs is None:
            return tuple(AcceleratorFacts.model_validate(card) for _ in range(count or 0))
        return tuple(
            AcceleratorFacts.model_validate({"address": bdf, **card}) for bdf in sorted(bdfs)
        )


class Identity(_Foreign):
    """The producer's own declaration of its stack (their runtime lock), as far as a lock
    repeats it: host facts, the interpreter, the native modules. Declared, never checked."""

    host: IdentityHost = IdentityHost()
    toolchain: IdentityToolchain = IdentityToolchain()
    native_modules: tuple[IdentityModule, ...] = ()


def _identity(path: Path | None) -> Identity:
    return _document(path, Identity, "the identity file")


_D = TypeVar("_D", bound=BaseModel)


# --- what the record's own files state -------------------------------------------------------


@dataclass(frozen=True)
class Statement:
    """One named judgement of what the record's files state (`builder.recordfiles`)."""

    claim: str
    value: str
    problems: tuple[str, ...]


class _Named(_Foreign):
    source_sha256: str | None = None


class _RunIdentity(_Foreign):
    created_at_utc: str | None = None


class _BenchIdentity(_Foreign):
    run_identity: _RunIdentity = _RunIdentity()


def statements(
    manifest: Manifest, suite: Suite, files: ImportedFiles, record: Record
) -> list[Statement]:
    """Every file of the record judged against the others, the manifest and the suite: the
    same judgement at build (which refuses) and at verify."""
    run = _run_files(files.run)
    environment, unread = recordfiles.read_environment(_decoded(run, recordfiles.ENVIRONMENT))
    said = recordfiles.read_statements(_decoded(run, recordfiles.IDENTITY))
    runtime = _document(files.identity, recordfiles.RuntimeLock, "the producer's runtime lock")
    sealed = {
        path.name: read_bytes(path, limit=EVIDENCE_LIMIT, what=path.name) for path in files.files
    }
    freeze = runtime.python_packages.get("observed_full_freeze")
    argv = manifest.launch.argv_for(manifest.oracle.teacher)
    rows = record.bench.rows
    teacher_sources = {
        name: _document(path, _Named, name).source_sha256
        for name, path in (
            (TEACHER_TOKENS, files.teacher_tokens),
            (TEACHER_TEXTS, files.teacher_texts),
        )
    }
    inventory = recordfiles.inventory_problems(list(run))
    inventory += [
        f"files/{name}: a sealed file no check of this record judges (expected only "
        f"{recordfiles.MODEL_LISTING} and the freeze the runtime lock names)"
        for name in sealed
        if name not in (recordfiles.MODEL_LISTING, freeze)
    ]
    if recordfiles.STATUS in run:
        inventory += recordfiles.status_problems(_decoded(run, recordfiles.STATUS))
    limits = consistency.Limits.of(suite, argv)
    bench_stated = recordfiles.read_bench(run.get(BENCH, b"{}"))
    found = consistency.rows_problems(
        suite,
        rows,
        where=f"run/{BENCH}",
        limits=limits,
        cached_tokens_gated=manifest.oracle.gates.cached_tokens_zero,
    )
    read = consistency.metrics_problems(
        rows,
        _decoded(run, METRICS_BEFORE),
        _decoded(run, METRICS_AFTER),
        limits=limits,
        sources=(f"run/{METRICS_BEFORE}", f"run/{METRICS_AFTER}"),
        served_log=record.server_log,
        log_source=f"run/{SERVER_LOG}",
        facts=_server_facts(manifest, record, bench_stated, runtime, environment),
    )
    uncheckable = len({*found.not_applicable, *read.not_applicable})
    created = parse_document(
        _BenchIdentity, run.get(BENCH, b"{}"), where=f"run/{BENCH}", what="the bench"
    ).run_identity.created_at_utc
    identity = recordfiles.identity_problems(
        said,
        recordfiles.Run(
            manifest=manifest,
            argv=argv,
            environment=environment,
            lock=runtime,
            teacher_sources=teacher_sources,
            sealed=sealed,
            server_log=record.server_log,
        ),
    )
    snapshots = sum(1 for name in run if name.endswith(".json") and "idle" in name)
    freeze_count, freeze_problems = (
        (0, [f"files/{freeze}: expected the freeze runtime-lock.json names, found none"])
        if freeze is not None and freeze not in sealed
        else recordfiles.freeze_problems(
            sealed[freeze].decode(errors="replace") if freeze else "",
            f"files/{freeze}",
            manifest,
            runtime,
        )
    )
    bench = None
    if files.teacher_bench is not None:
        raw = load_bench(files.teacher_bench)
        bench = recordfiles.TeacherBench(
            sha256=sha256_file(files.teacher_bench),
            rows=raw.rows,
            suite=raw.suite,
            stored_median=raw.stored_medians.get(STORED_MEDIAN),
        )
    teacher_bench, bench_problems = recordfiles.teacher_bench_problems(
        bench,
        record.teacher.rows,
        {
            **teacher_sources,
            f"run/{recordfiles.IDENTITY} teacher_sha256": said.values.get("teacher_sha256"),
        },
        suite,
        STORED_TOKENS,
    )
    if bench is not None:
        bench_problems += consistency.rows_problems(
            suite,
            bench.rows,
            where=TEACHER_BENCH,
            limits=consistency.Limits(suite.api, suite.max_tokens, None, speculative=False),
            cached_tokens_gated=manifest.oracle.gates.cached_tokens_zero,
        ).problems
    log = gates.server_log_verdict(1, run.get(SERVER_LOG, b""), None, answered=len(rows))
    return [
        Statement(
            "the teacher's bench = the sha256 every file names, the teacher files",
            teacher_bench,
            tuple(bench_problems),
        ),
        Statement(
            "the record's files: each one judged, status=PASS",
            f"{len(run)} run files, {len(sealed)} beside them",
            tuple(inventory),
        ),
        Statement(
            "bench rows = their suite, their counts and their /metrics",
            f"{len(rows)} rows of {len(suite.prompts)} prompts"
            + (f"; not checkable: {uncheckable}" if uncheckable else ""),
            (
                *found.problems,
                *read.problems,
                *recordfiles.bench_problems(
                    bench_stated,
                    rows,
                    suite,
                    manifest,
                    argv=argv,
                    stored_median=record.bench.stored_medians.get(STORED_MEDIAN),
                    tokens=STORED_TOKENS,
                    created_utc=created,
                ),
            ),
        ),
        Statement(
            "server.log: no crash while serving, the argv it logs, every suite request logged",
            log.summary,
            (
                *(() if log.passed else (f"run/{SERVER_LOG}: {log.summary}",)),
                *logged_argument_problems(record.server_log, argv, f"run/{SERVER_LOG}"),
                *logged_version_problems(record.server_log, f"run/{SERVER_LOG}", None),
                *recordfiles.log_dated_problems(run.get(SERVER_LOG, b""), run, f"run/{SERVER_LOG}"),
            ),
        ),
        Statement(
            "idle snapshots around the run passed, in order",
            f"{snapshots} snapshots",
            tuple(
                recordfiles.idle_problems(
                    run,
                    created,
                    recordfiles.verified_interval(said),
                    _observer(runtime),
                    count if isinstance(count := runtime.host.get("gpu_count"), int) else None,
                    requests=_requests(bench_stated),
                )
            ),
        ),
        Statement(
            "identity.txt = the runtime lock, the manifest, the argv, the environment, the log",
            f"{identity.bound} statements bound, {len(identity.stated_only)} stated only",
            identity.problems,
        ),
        Statement(
            "exactness-vs-q1.json = the rows and the teacher",
            f"{len(rows)} rows",
            tuple(
                recordfiles.exactness_problems(
                    run.get(recordfiles.EXACTNESS, b"{}"),
                    suite,
                    rows,
                    record.teacher.rows,
                    recordfiles.run_directory(environment),
                )
            ),
        ),
        Statement(
            "service-environment.txt = [launch.env], no loader override",
            f"{len(environment)} variables",
            (*unread, *recordfiles.environment_problems(environment, manifest)),
        ),
        Statement(
            "pip freeze = the pinned packages and the runtime lock",
            f"{freeze_count} distributions",
            tuple(freeze_problems),
        ),
    ]


def _requests(bench: recordfiles.BenchStatements | str) -> tuple[tuple[float, float], ...]:
    """Each bench request's start and end (the epochs the bench states)."""
    if isinstance(bench, str):
        return ()
    return tuple((row.request_started_epoch_s, row.request_ended_epoch_s) for row in bench.rows)


def _server_facts(
    manifest: Manifest,
    record: Record,
    bench: recordfiles.BenchStatements | str,
    runtime: recordfiles.RuntimeLock,
    environment: Mapping[str, str],
) -> consistency.ServerFacts:
    """What the record's other files state about the server its `/metrics` reads came from:
    its first request's start (the server answered by then, the suite sent nothing before),
    the last idle snapshot before the run (no engine held a card yet), the interpreter of the
    runtime lock, the service environment and the manifest's readiness path. The record states
    no time its server became ready nor its engine core's start."""
    requests = _requests(bench)
    answering = None
    if requests:
        first = min(range(len(requests)), key=lambda place: requests[place][0])
        answering = (requests[first][0], f"run/{BENCH} rows[{first}] request_started_epoch_s")
    engine = None
    before = [
        (seconds, snapshot.name)
        for snapshot in record.idle.prestart
        if (seconds := recordfiles.utc_seconds(snapshot.observed_utc)) is not None
    ]
    if before:
        seconds, name = max(before)
        engine = (seconds, f"run/{IDLE}/{name} observed_utc (the last idle snapshot before)")
    python = runtime.toolchain.get("python")
    return consistency.ServerFacts(
        answering=answering,
        engine=engine,
        python=(python, "the runtime lock's toolchain.python") if isinstance(python, str) else None,
        environment=(environment, f"run/{recordfiles.ENVIRONMENT}"),
        readiness_path=manifest.launch.readiness.path,
    )


def _observer(runtime: recordfiles.RuntimeLock) -> str | None:
    """The sha256 of the xpu-smi that took the idle snapshots, as the runtime lock states it."""
    stated = runtime.host.get("xpu_smi_sha256")
    return stated if isinstance(stated, str) else None


def _run_files(run: Path) -> dict[str, bytes]:
    return {
        path.relative_to(run).as_posix(): read_bytes(
            path, limit=EVIDENCE_LIMIT, what="a record file", follow_symlinks=False
        )
        for path in sorted(run.rglob("*"))
        if not path.is_dir()
    }


def _decoded(run: Mapping[str, bytes], name: str) -> str:
    return run.get(name, b"").decode("utf-8", errors="replace")


def _document(path: Path | None, model: type[_D], what: str) -> _D:
    if path is None:
        return model()
    data = read_bytes(path, limit=EVIDENCE_LIMIT, what=what)
    return parse_document(model, data, where=str(path), what=what)


# --- recomputed by repro verify ---------------------------------------------------------------


def recompute(path: Path, manifest: Manifest, lock: Lock, handoff: bool = True) -> list[ClaimCheck]:
    """Every sealed claim of an imported bundle recomputed from its sealed copies, each with
    the value a person checks; the declared ones listed as such, unchecked. With `handoff`, its
    content holds the launcher, README and tools every bundle `repro build` seals."""
    assert manifest.evidence is not None and lock.record is not None
    files = ImportedFiles.in_bundle(path, manifest.evidence)
    record = load_record(files)
    sealed = EvidenceClass.SEALED
    content = _content_check(path, manifest, files, lock, handoff)
    checks = [content, *_oracle_checks(path, manifest, lock, record)]
    claim = record_claim(manifest, record, files.kernels)
    suite = Suite.from_path(path / bundle.ORACLE_DIR / bundle.SUITE_FILE)
    summaries = {v.gate: v.summary for v in record_verdicts(manifest, record, files.kernels)}
    checks.extend(_record_checks(claim, lock.record, len(suite.prompts), summaries))
    checks.extend(
        ClaimCheck(s.claim, sealed, s.value, not s.problems, "; ".join(s.problems[:5]))
        for s in statements(manifest, suite, files, record)
    )
    if files.model_files is not None:
        listing = _text(files.model_files, "the release-file listing")
        problems = model_files_problems(manifest, listing, MODEL_FILES)
        count = sum(len(m.files) for m in manifest.models)
        checks.append(
            ClaimCheck(
                "models: release files = the record's listing",
                sealed,
                f"{count} files",
                not problems,
                "; ".join(problems),
            )
        )
    checked, drifts = checksum_drifts(manifest.evidence, files)
    if manifest.evidence.checksums:
        checks.append(
            ClaimCheck(
                "the record's own checksum lists = its files",
                sealed,
                f"{checked} files",
                not drifts,
                "; ".join(
                    f"{d.subject}: listed {d.expected}, found {d.observed}" for d in drifts[:5]
                ),
            )
        )
    checks.append(_lock_check(path, manifest, lock, files, record))
    checks.extend(_declared(lock))
    return checks


def _lock_check(
    path: Path, manifest: Manifest, lock: Lock, files: ImportedFiles, record: Record
) -> ClaimCheck:
    """The whole lock assembled again from the sealed manifest, identity and record: every
    declared value is the one its sealed file states, and nothing else."""
    oracle = path / bundle.ORACLE_DIR
    again = assemble_lock(
        manifest,
        lock.bundle.manifest_path,
        files,
        record,
        suite=Suite.from_path(oracle / bundle.SUITE_FILE),
        suite_sha256=sha256_file(oracle / bundle.SUITE_FILE),
        teacher_sha256=sha256_file(oracle / bundle.TEACHER_FILE),
        manifest_sha256=sha256_file(path / bundle.MANIFEST),
    )
    # which repro sealed is no fact of the record: the statement and tools/ are checked for it
    # (the repro that verifies is often another: its version names its own files)
    sealer = again.bundle.model_copy(update={"repro_version": lock.bundle.repro_version})
    again = again.model_copy(update={"bundle": sealer})
    names = [name for name in Lock.model_fields if name in {*lock.sections(), *again.sections()}]
    sections = [name for name in names if getattr(again, name) != getattr(lock, name)]
    return ClaimCheck(
        "lock = the sealed manifest, identity and record",
        EvidenceClass.SEALED,
        f"{len(names) - len(sections)}/{len(names)} sections equal",
        not sections,
        "differs: " + ", ".join(sections) if sections else "",
    )


def _content_check(
    path: Path, manifest: Manifest, files: ImportedFiles, lock: Lock, handoff: bool
) -> ClaimCheck:
    """The bundle holds the suite, the teacher, the manifest's kernel sets and the record's
    files as the manifest names them, its launcher, README and tools, and nothing else."""
    named = {f"{bundle.EVIDENCE_DIR}/{name}" for name in files.sealed_names() if name != RUN}
    if handoff:
        named |= bundle.handoff_content(lock.bundle.repro_version)
    return content_check(
        "content = the record's files as the manifest names them",
        bundle.content_files(path),
        bundle.fixed_content(manifest.native.kernel_sets) | named,
        free=f"{bundle.EVIDENCE_DIR}/{RUN}/",
    )


def _oracle_checks(path: Path, manifest: Manifest, lock: Lock, record: Record) -> list[ClaimCheck]:
    teacher = teacher_document(record, manifest)
    oracle = oracle_claim(
        manifest,
        Suite.from_path(path / bundle.ORACLE_DIR / bundle.SUITE_FILE),
        record.bench.rows,
        sha256_file(path / bundle.ORACLE_DIR / bundle.SUITE_FILE),
        sha256_bytes(teacher),
    )
    sealed = EvidenceClass.SEALED
    checks = [
        ClaimCheck(
            "oracle/teacher.json = the record's teacher files",
            sealed,
            f"{len(record.teacher.rows)} rows",
            read_bytes(
                path / bundle.ORACLE_DIR / bundle.TEACHER_FILE,
                limit=EVIDENCE_LIMIT,
                what="the sealed teacher",
                follow_symlinks=False,
            )
            == teacher,
        ),
        ClaimCheck(
            "oracle.rows = bench rows",
            sealed,
            f"{len(oracle.rows)} rows",
            oracle.rows == lock.oracle.rows,
        ),
    ]
    if oracle.throughput is not None and lock.oracle.throughput is not None:
        for field, label in (
            ("historical_median", "N/span, the historical mislabelled convention"),
            ("conventional_median", "(N-1)/span, the conventional rate"),
        ):
            ours = getattr(oracle.throughput, field)
            theirs = getattr(lock.oracle.throughput, field)
            if theirs is None:
                continue
            same = ours is not None and abs(ours - theirs) <= 1e-12
            checks.append(
                ClaimCheck(
                    f"throughput median {label}",
                    sealed,
                    f"{ours!r} tok/s",
                    same,
                    f"locked {theirs!r}",
                )
            )
    return checks


def _record_checks(
    claim: RecordClaim, locked: RecordClaim, prompts: int, summaries: Mapping[str, str]
) -> list[ClaimCheck]:
    """The recomputed record against the locked one, each count of rows against the suite's
    prompts (a dropped row is not "12/12 equal" of a 13-prompt suite)."""
    sealed = EvidenceClass.SEALED
    every = claim.rows == prompts
    cached = [c for c in claim.cached_tokens if c == 0]
    curve = ", ".join(f"{v:g}" for v in claim.spec_decode_accepted_per_position)
    checks = [
        _judged(
            "token ids = teacher",
            f"{claim.exact_token_ids}/{prompts} rows",
            every and claim.exact_token_ids == locked.exact_token_ids == prompts,
            f"expected every one of the {prompts} prompts equal; {claim.rows} rows, "
            f"locked {locked.exact_token_ids} equal",
        ),
        _judged(
            "text sha256 = teacher",
            f"{claim.exact_text_sha256}/{prompts} rows",
            every and claim.exact_text_sha256 == locked.exact_text_sha256 == prompts,
            f"expected every one of the {prompts} prompts equal; {claim.rows} rows, "
            f"locked {locked.exact_text_sha256} equal",
        ),
        _judged(
            "cached_tokens",
            f"0 on {len(cached)}/{prompts} rows",
            every and claim.cached_tokens == locked.cached_tokens and len(cached) == prompts,
            f"expected 0 on each of the {prompts} prompts, found {list(claim.cached_tokens)}, "
            f"locked {list(locked.cached_tokens)}",
        ),
        ClaimCheck(
            "prefix-cache hits during the suite",
            sealed,
            _number(claim.prefix_cache_hits),
            claim.prefix_cache_hits == locked.prefix_cache_hits,
        ),
        ClaimCheck(
            "speculative decoding accepted / draft tokens",
            sealed,
            f"{_number(claim.spec_decode_accepted)}/"
            f"{_number(claim.spec_decode_draft_tokens)} over "
            f"{_number(claim.spec_decode_drafts)} drafts",
            (claim.spec_decode_accepted, claim.spec_decode_draft_tokens, claim.spec_decode_drafts)
            == (
                locked.spec_decode_accepted,
                locked.spec_decode_draft_tokens,
                locked.spec_decode_drafts,
            ),
        ),
        ClaimCheck(
            "accepted per position",
            sealed,
            curve,
            claim.spec_decode_accepted_per_position == locked.spec_decode_accepted_per_position,
        ),
        ClaimCheck(
            "generation tokens",
            sealed,
            _number(claim.generation_tokens),
            claim.generation_tokens == locked.generation_tokens,
        ),
        ClaimCheck(
            "cleanup status",
            sealed,
            ", ".join(f"{k}={v}" for k, v in claim.cleanup.items()),
            claim.cleanup == locked.cleanup and not any(claim.cleanup.values()),
        ),
        ClaimCheck(
            "idle snapshots",
            sealed,
            f"{claim.idle_prestart} before start, {claim.idle_poststop} after stop",
            (claim.idle_prestart, claim.idle_poststop, claim.idle_all_passed)
            == (locked.idle_prestart, locked.idle_poststop, True),
        ),
    ]
    for name, counts in claim.markers.items():
        shown = ", ".join(f"{rank}: {n}" for rank, n in counts.items()) or "no line"
        checks.append(
            ClaimCheck(f"log marker {name}", sealed, shown, counts == locked.markers.get(name))
        )
    for gate, status in claim.verdicts.items():
        held = status != "fail" and status == locked.verdicts.get(gate)
        checks.append(
            ClaimCheck(
                f"gate {gate}",
                sealed,
                status,
                held,
                "" if held else f"{summaries.get(gate, '')}; locked {locked.verdicts.get(gate)}",
            )
        )
    return checks


def _judged(claim: str, value: str, ok: bool, why: str) -> ClaimCheck:
    """A sealed check that says `why` only when it fails."""
    return ClaimCheck(claim, EvidenceClass.SEALED, value, ok, "" if ok else why)


def _declared(lock: Lock) -> list[ClaimCheck]:
    """What the record only asserts: listed with its class, never presented as checked."""
    declared = EvidenceClass.DECLARED
    commits = ", ".join(f"{s.name}@{s.commit[:12]}" for s in lock.sources)
    return [
        ClaimCheck(
            "host",
            declared,
            describe_host(lock.host.facts),
            True,
            "as the producer recorded it; not checked",
        ),
        ClaimCheck("sources", declared, commits or "none", True, "not checked"),
        ClaimCheck(
            "python",
            declared,
            f"{lock.python.interpreter}, {len(lock.python.packages)} pinned packages",
            True,
            "not checked",
        ),
        ClaimCheck(
            "native modules",
            declared,
            ", ".join(lock.native.modules) or "none",
            True,
            "not checked",
        ),
    ]


def describe_host(facts: HostFacts) -> str:
    """The facts a person checks first, each as stated, "?" where the record states none."""
    system = (facts.os_release or {}).get("PRETTY_NAME") or facts.os or "?"
    kernel = facts.kernel or "?"
    if facts.accelerators is None:
        cards = "accelerators ?"
    elif not facts.accelerators:
        cards = "no accelerator"
    else:
        kinds = Counter(
            " ".join(filter(None, (a.vendor_device or "?", a.name and f"({a.name})")))
            for a in facts.accelerators
        )
        cards = ", ".join(f"{count} x {kind}" for kind, count in kinds.items())
    return f"{facts.arch or '?'}, {system}, kernel {kernel}, {cards}"


def _number(value: float | None) -> str:
    return "not reported" if value is None else f"{value:g}"
