"""`repro build`: observe every pin, run the teacher, assemble the lock, seal the bundle.

The order is fixed: the manifest and its kernel sets are read; every fact is observed and
compared (any drift refuses the build before a server starts); the teacher profile runs once
(with the manifest's fresh starts) and must pass its own gates; the lock is assembled from the
observations and the run's evidence; the bundle is sealed atomically. Nothing is written under
the bundle's final path unless all of it holds.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from repro_serving.builder import imported
from repro_serving.builder.canonical import canonical_json
from repro_serving.builder.claims import (
    BUILT_EVIDENCE,
    DispatchFindings,
    bundle_claim,
    dispatch_claims,
    environments_claim,
    mapped_claims,
    modules_claim,
    node_claims,
    oracle_claim,
    roles_claim,
)
from repro_serving.builder.documents.audit import ProcessEvidence
from repro_serving.builder.documents.bundle import sealed_evidence
from repro_serving.builder.documents.lock import (
    DispatchClaim,
    HostClaim,
    LaunchClaim,
    Lock,
    ModelClaim,
    NativeClaim,
    NodeClaim,
    PythonClaim,
    SourceClaim,
)
from repro_serving.builder.documents.manifest import Manifest, Suite, expand, placeholder_path
from repro_serving.builder.documents.nodes import NodesDocument
from repro_serving.builder.documents.observations import (
    OBSERVATIONS_FILE,
    Observations,
    ObservationsDocument,
    drifts,
)
from repro_serving.builder.documents.probes import DISPATCH_FILE
from repro_serving.builder.documents.rundir import NODES_FILE
from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.errors import BadInput, ReproError
from repro_serving.builder.handoff.launcher import HELPER_SOURCE, LAUNCHER_SOURCE
from repro_serving.builder.handoff.readme import in_readme, render_readme
from repro_serving.builder.hashing import sha256_file
from repro_serving.builder.native.auditreport import audit_document
from repro_serving.builder.native.kernels import KernelSet, kernel_set_files
from repro_serving.builder.observations import observe
from repro_serving.builder.observe.artifacts import ArtifactFacts, resolve_artifacts
from repro_serving.builder.observe.dispatch import probe_code_paths
from repro_serving.builder.observe.tools import build_tools
from repro_serving.builder.sealing import bundle
from repro_serving.builder.sealing.keys import SigningKey
from repro_serving.builder.sealing.seal import (
    BundleContent,
    Handoff,
    SealedBundle,
    check_destination,
    seal,
)
from repro_serving.builder.sealing.statement import resolved_dependencies
from repro_serving.builder.verify import JudgedBundle, recompute
from repro_serving.launch.historical import Record
from repro_serving.launch.run import RunPlan, RunRecord, capture_teacher, run_profile

# What of a run directory is evidence: never the server's private HOME and TMPDIR.

Progress = Callable[[str], None]


class BuildRefused(ReproError):
    """A pin disagrees with this host or the teacher run failed: no bundle is written."""

    def __init__(self, what: str, drifts: Sequence[Drift], *, where: str) -> None:
        named = "; ".join(f"{d.subject}: {d.observed}" for d in drifts[:3])
        more = f"; and {len(drifts) - 3} more" if len(drifts) > 3 else ""
        super().__init__(what, where=where, found=f"{len(drifts)} drift(s): {named}{more}")
        self.drifts = tuple(drifts)

    def __str__(self) -> str:
        """What a traceback shows: the drifts too, so that a refused build in a log says why."""
        return f"{self.what}: {self.found}"


@dataclass(frozen=True)
class BuildResult:
    sealed: SealedBundle
    lock: Lock
    run: RunRecord | None
    """The teacher run; None for a bundle sealed from imported evidence."""


def build(
    manifest_path: Path,
    key: SigningKey,
    parent: Path,
    run_dir: Path,
    *,
    force: bool = False,
    progress: Progress | None = None,
) -> BuildResult:
    say = progress or (lambda _message: None)
    manifest = Manifest.from_path(manifest_path)
    check_destination(parent / manifest.bundle.name, force=force)
    say("building the wheel of this repro and pinning its dependencies")
    with tempfile.TemporaryDirectory(prefix="repro-tools-") as scratch:
        handoff = handoff_for(Path(scratch))
        if manifest.evidence is not None:
            return _build_imported(
                manifest, manifest_path, key, parent, run_dir, force=force, say=say, handoff=handoff
            )
        return _build_live(
            manifest, manifest_path, key, parent, run_dir, force=force, say=say, handoff=handoff
        )


def handoff_for(directory: Path) -> Handoff:
    """What lets the bundle run where repro never was: the running repro's wheel and pinned
    dependencies (built into `directory`), the launcher, and the README made from the staged
    bundle."""
    tools = build_tools(directory)
    return Handoff(
        launcher=LAUNCHER_SOURCE,
        tools={
            tools.wheel.name: tools.wheel,
            bundle.REQUIREMENTS_FILE: tools.requirements,
            bundle.LAUNCH_HELPER: HELPER_SOURCE,
        },
        readme=staged_readme,
    )


def staged_readme(staged: Path) -> bytes:
    """README.md of the bundle staged at `staged`, from the claims recomputed there as verify
    recomputes them; refused when one does not hold: repro seals nothing its verify refuses."""
    opened = JudgedBundle.read(staged)
    checks = recompute(opened, handoff=False)
    failed = [
        Drift(
            kind=DriftKind.CLAIM,
            subject=check.claim,
            expected="the claim recomputed from the staged bundle",
            observed=check.detail or check.value,
            why="a bundle is sealed only when verify would recompute every claim",
        )
        for check in checks
        if in_readme(check) and not check.ok
    ]
    version = opened.lock.bundle.repro_version
    wheels = sorted(p.name for p in (staged / bundle.TOOLS_DIR).glob("*.whl"))
    if wheels != [bundle.wheel_filename(version)]:
        failed.append(
            Drift(
                kind=DriftKind.CLAIM,
                subject=f"{bundle.TOOLS_DIR}/",
                expected=f"the wheel of repro {version}, the version the lock names",
                observed=", ".join(wheels) or "no wheel",
                why="repro's source changed while it built (its version names its files): "
                "build again from a tree that does not change",
            )
        )
    if failed:
        raise BuildRefused("the staged bundle does not verify", failed, where=str(staged))
    return render_readme(opened.lock, checks)


def _models_here(found: Sequence[Drift], values: Mapping[str, str]) -> list[Drift]:
    """`found` with each `{model.<role>}` replaced by that model's directory on this host: a
    refusal names a path the user can look at (a bundle keeps the placeholder)."""
    places = {f"{{{key}}}": path for key, path in values.items() if key.startswith("model.")}

    def here(text: str) -> str:
        for placeholder, path in places.items():
            text = text.replace(placeholder, path)
        return text

    return [
        drift.model_copy(
            update={
                "subject": here(drift.subject),
                "expected": here(drift.expected),
                "observed": here(drift.observed),
            }
        )
        for drift in found
    ]


def _build_live(
    manifest: Manifest,
    manifest_path: Path,
    key: SigningKey,
    parent: Path,
    run_dir: Path,
    *,
    force: bool,
    say: Progress,
    handoff: Handoff,
) -> BuildResult:
    suite = manifest.load_suite()
    kernel_sets = tuple(KernelSet.load(name) for name in manifest.native.kernel_sets)
    say("observing every pinned fact")
    observed = observe(manifest)
    found = drifts(manifest, observed)
    if found:
        raise BuildRefused(
            "this host does not hold the manifest",
            _models_here(found, observed.values),
            where=str(manifest_path),
        )
    say("pinning the wheel each distribution was installed from")
    artifacts = pinned_artifacts(observed)
    teacher_profile = manifest.oracle.teacher
    say("asking the stack which code paths this host selects")
    probes = probe_dispatch(manifest, teacher_profile, observed, kernel_sets)
    say(f"running the teacher profile {teacher_profile!r}")
    record = run_profile(
        RunPlan(manifest, manifest.oracle.teacher, run_dir),
        observe=lambda event: say(f"  start {event.start} {event.kind}: {event.message}"),
    )
    if not record.passed:
        refusals = [_verdict_drift(v.gate, v.summary) for v in record.verdicts if not v.passed]
        if record.error is not None:
            refusals.append(_verdict_drift("run", record.error.what))
        raise BuildRefused("the teacher run did not pass", refusals, where=str(run_dir))
    dispatch = live_dispatch(manifest, observed, record, kernel_sets, probes)
    nodes, node_problems = run_node_claims(manifest, record, observed.values, kernel_sets)
    if dispatch.disagreements or node_problems:
        problems = (*dispatch.disagreements, *node_problems)
        refusals = [_dispatch_drift(problem) for problem in problems]
        raise BuildRefused(
            "the stack's choice of code is not its kernel sets'", refusals, where=str(run_dir)
        )
    (run_dir / DISPATCH_FILE).write_bytes(canonical_json(probes))
    teacher = capture_teacher(record)
    teacher_path = run_dir / bundle.TEACHER_FILE
    teacher_path.write_bytes(canonical_json(teacher.model_dump(mode="json")))
    observations_path = run_dir / OBSERVATIONS_FILE
    observations_path.write_bytes(
        ObservationsDocument.of(observed, artifacts.artifacts, artifacts.unresolved).to_bytes()
    )
    suite_path = manifest.resolve(manifest.oracle.suite)
    lock = assemble_lock(
        manifest,
        str(manifest_path),
        observed,
        record,
        suite,
        suite_sha256=sha256_file(suite_path),
        teacher_sha256=sha256_file(teacher_path),
        dispatch=dispatch.claims,
        artifacts=artifacts,
        kernel_sets=kernel_sets,
        nodes=nodes,
    )
    say("sealing")
    evidence = evidence_files(run_dir, manifest, replayed=False)
    content = _content(
        manifest,
        manifest_path,
        lock,
        oracle=(suite_path, teacher_path),
        evidence=evidence,
        handoff=handoff,
    )
    sealed = seal(content, key, parent, force=force, progress=None)
    return BuildResult(sealed, lock, record)


def _build_imported(
    manifest: Manifest,
    manifest_path: Path,
    key: SigningKey,
    parent: Path,
    workdir: Path,
    *,
    force: bool,
    say: Progress,
    handoff: Handoff,
) -> BuildResult:
    """A record produced elsewhere: it must pass the manifest's gates on its own evidence."""
    say("recomputing the imported record from its evidence")
    files, record, verdicts = imported.judge_record(manifest)
    assert manifest.evidence is not None
    _checked, refusals = imported.checksum_drifts(manifest.evidence, files)
    refusals += [_verdict_drift(v.gate, v.summary) for v in verdicts if not v.passed]
    refusals += [
        Drift(
            kind=DriftKind.CLAIM,
            subject=statement.claim,
            expected="the record's files agreeing with each other, the manifest and the suite",
            observed=problem,
            why="a record is sealed only when what its files state holds",
        )
        for statement in imported.statements(manifest, manifest.load_suite(), files, record)
        for problem in statement.problems
    ]
    if refusals:
        raise BuildRefused("the record fails its own checks", refusals, where=str(manifest_path))
    say("sealing")
    sealed, lock = seal_record(
        manifest,
        manifest_path,
        files,
        record,
        key=key,
        parent=parent,
        workdir=workdir,
        force=force,
        handoff=handoff,
    )
    return BuildResult(sealed, lock, None)


def evidence_files(run_dir: Path, manifest: Manifest, *, replayed: bool) -> dict[str, Path]:
    """The run directory's evidence by its name under evidence/: exactly what a bundle seals of
    the manifest's run (`documents.bundle.sealed_evidence`). A file of it that the run did not
    write refuses the seal, naming each."""
    names = sorted(sealed_evidence(manifest, replayed=replayed))
    missing = [name for name in names if not (run_dir / name).is_file()]
    if missing:
        raise BadInput(
            "the run directory lacks evidence a bundle of its manifest seals",
            where=str(run_dir),
            expected=f"{len(names)} evidence files",
            found=f"{len(missing)} missing: " + ", ".join(missing),
        )
    return {name: run_dir / name for name in names}


def run_node_claims(
    manifest: Manifest,
    record: RunRecord,
    values: Mapping[str, str],
    kernel_sets: Sequence[KernelSet],
) -> tuple[tuple[NodeClaim, ...], tuple[str, ...]]:
    """The claims of the nodes of a run served across nodes, from its nodes' facts and its
    first start's audits (`claims.node_claims`); none for a run on one host."""
    facts_path = record.plan.run_dir / NODES_FILE
    if not manifest.clustered or not facts_path.is_file():
        return (), ()
    facts = NodesDocument.from_bytes(facts_path.read_bytes(), where=str(facts_path))
    first = record.starts[0] if record.starts else None
    audits: dict[int, tuple[ProcessEvidence, ...]] = {0: _first_audit(record)}
    for rank, rank_record in (first.ranks if first is not None else {}).items():
        report = rank_record.audit
        audits[rank] = audit_document(report).processes if report is not None else ()
    return node_claims(
        manifest,
        record.plan.profile,
        facts,
        audits=audits,
        values=values,
        kernel_sets=kernel_sets,
    )


def assemble_lock(
    manifest: Manifest,
    manifest_source: str,
    observed: Observations,
    record: RunRecord,
    suite: Suite,
    *,
    suite_sha256: str,
    teacher_sha256: str,
    dispatch: tuple[DispatchClaim, ...],
    artifacts: ArtifactFacts,
    kernel_sets: Sequence[KernelSet],
    manifest_sha256: str | None = None,
    nodes: tuple[NodeClaim, ...] = (),
) -> Lock:
    """The lock of a run of `manifest`; its digest is that of the file at `manifest_source`
    unless given (a replay's manifest is the bundle's sealed copy, wherever the build read it)."""
    values = observed.values
    audit = _first_audit(record)
    roles, jit = mapped_claims(audit, values, kernel_sets=kernel_sets)
    return Lock(
        bundle=bundle_claim(manifest, manifest_source, manifest_sha256=manifest_sha256),
        host=HostClaim(
            evidence=BUILT_EVIDENCE["host"],
            facts=observed.host.locked(),
            enforced=manifest.host,
        ),
        models=tuple(
            ModelClaim(
                evidence=BUILT_EVIDENCE["models"],
                role=facts.role,
                repo=facts.repo,
                revision=model.revision,
                location=facts.directory,
                files={f.name: f.sha256 or "" for f in facts.files},
            )
            for model, facts in zip(manifest.models, observed.models, strict=True)
        ),
        sources=tuple(
            SourceClaim(
                evidence=BUILT_EVIDENCE["sources"],
                name=facts.name,
                location=placeholder_path(manifest.resolve(source.path), values),
                commit=facts.commit or "",
                clean=not facts.changes,
                patches={p.path: p.sha256 or "" for p in facts.patches},
            )
            for source, facts in zip(manifest.sources, observed.sources, strict=True)
        ),
        python=_python_claim(observed, artifacts),
        native=NativeClaim(
            evidence=BUILT_EVIDENCE["native"],
            kernel_sets=manifest.native.kernel_sets,
            modules=modules_claim(manifest.native.modules, roles, dispatch),
            roles=roles,
            jit=jit,
            environments=environments_claim(audit, values),
            dispatch=dispatch,
        ),
        launch=LaunchClaim(
            evidence=BUILT_EVIDENCE["launch"],
            profile=record.plan.profile,
            argv=manifest.launch.argv_for(record.plan.profile),
            env=manifest.launch.env_for(record.plan.profile),
        ),
        oracle=oracle_claim(manifest, suite, record.rows, suite_sha256, teacher_sha256),
        nodes=nodes,
    )


def probe_dispatch(
    manifest: Manifest, profile: str, observed: Observations, kernel_sets: Sequence[KernelSet]
) -> dict[str, str]:
    """Each code path's probe, asked of the serving interpreter with `profile`'s environment."""
    values = observed.values
    env = {k: expand(v, values) for k, v in manifest.launch.env_for(profile).items()}
    return probe_code_paths(kernel_sets, Path(values["python"]), env)


def live_dispatch(
    manifest: Manifest,
    observed: Observations,
    record: RunRecord,
    kernel_sets: Sequence[KernelSet],
    probes: Mapping[str, str],
) -> DispatchFindings:
    """The choices of code the run made, from its first start's audit and the probes."""
    audit = _first_audit(record)
    return dispatch_claims(
        kernel_sets,
        manifest.native.modules,
        host=observed.host.capabilities(),
        env=manifest.launch.env_for(record.plan.profile),
        roles=roles_claim(audit, observed.values, kernel_sets=kernel_sets),
        probes=probes,
    )


def _dispatch_drift(problem: str) -> Drift:
    name, _, detail = problem.partition(": ")
    return Drift(
        kind=DriftKind.DISPATCH,
        subject=name,
        expected="the variant the kernel set predicts for this host",
        observed=detail,
        why="a kernel set's dispatch rule must say what the stack really runs",
    )


def pinned_artifacts(observed: Observations) -> ArtifactFacts:
    """The wheel artifact of every distribution of the observed venv."""
    python = observed.python
    assert python is not None, "a build refuses an unobservable venv before this"
    values = observed.values
    return resolve_artifacts(Path(values["python"]), Path(values["site"]), python.distributions)


def _python_claim(observed: Observations, artifacts: ArtifactFacts) -> PythonClaim:
    python = observed.python
    assert python is not None, "a build refuses an unobservable venv before this"
    checked = tuple(sorted(r.distribution for r in python.records or () if not r.mismatches))
    return PythonClaim(
        evidence=BUILT_EVIDENCE["python"],
        interpreter=python.version,
        packages={d.name: d.version for d in python.distributions},
        record_checked=checked,
        artifacts=artifacts.artifacts,
        unrestorable=artifacts.unresolved,
    )


def _first_audit(record: RunRecord) -> tuple[ProcessEvidence, ...]:
    """The processes of the run's first start as its evidence records them; none when the run
    failed before its audit (a replay is still sealed with what it saw)."""
    report = record.starts[0].audit if record.starts else None
    return audit_document(report).processes if report is not None else ()


def _verdict_drift(gate: str, summary: str) -> Drift:
    return Drift(
        kind=DriftKind.GATE,
        subject=gate,
        expected="pass",
        observed=summary,
        why="the teacher run must pass its own gates before it is sealed",
    )


def seal_record(
    manifest: Manifest,
    manifest_path: Path,
    files: imported.ImportedFiles,
    record: Record,
    *,
    key: SigningKey,
    parent: Path,
    workdir: Path,
    force: bool,
    handoff: Handoff | None = None,
) -> tuple[SealedBundle, Lock]:
    """Seal the imported files verbatim with a lock of sealed and declared claims, and
    `handoff`, what lets the bundle run where repro never was."""
    problems = imported.release_files_problems(manifest, files)
    if problems:
        raise BadInput(
            "the manifest's model files are not the record's release files",
            where=str(files.model_files),
            found="; ".join(problems),
        )
    workdir.mkdir(parents=True, exist_ok=True)
    teacher_path = workdir / bundle.TEACHER_FILE
    teacher_path.write_bytes(imported.teacher_document(record, manifest))
    suite_path = manifest.resolve(manifest.oracle.suite)
    lock = imported.assemble_lock(
        manifest,
        str(manifest_path),
        files,
        record,
        suite=manifest.load_suite(),
        suite_sha256=sha256_file(suite_path),
        teacher_sha256=sha256_file(teacher_path),
        manifest_sha256=sha256_file(manifest_path),
    )
    content = _content(
        manifest,
        manifest_path,
        lock,
        oracle=(suite_path, teacher_path),
        evidence=files.sealed_names(),
        handoff=handoff,
    )
    return seal(content, key, parent, force=force), lock


def _content(
    manifest: Manifest,
    manifest_path: Path,
    lock: Lock,
    *,
    oracle: tuple[Path, Path],
    evidence: Mapping[str, Path],
    handoff: Handoff | None,
) -> BundleContent:
    """What a bundle seals, a live record's and an imported one's alike: `oracle` is the suite
    and the teacher; only `evidence` differs."""
    return BundleContent(
        name=manifest.bundle.name,
        manifest=manifest_path,
        manifest_source=str(manifest_path),
        lock=lock.model_dump(mode="json", by_alias=True),
        dependencies=resolved_dependencies(lock),
        oracle={bundle.SUITE_FILE: oracle[0], bundle.TEACHER_FILE: oracle[1]},
        evidence=evidence,
        kernels=kernel_set_files(manifest.native.kernel_sets),
        handoff=handoff,
    )
