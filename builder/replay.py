"""`repro launch`: replay a sealed bundle on this machine and fail closed on any drift.

Preflight is `repro verify --host`: the bundle intact, every claim recomputed, this host
observed against the manifest and the lock. Only then is the candidate profile started exactly
as locked, audited live, asked the suite once and judged against the sealed teacher; the run
directory is then sealed like a bundle, so the replay is itself evidence anyone can verify.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from repro_serving.builder.build import (
    assemble_lock,
    evidence_files,
    live_dispatch,
    probe_dispatch,
    run_node_claims,
)
from repro_serving.builder.canonical import canonical_json
from repro_serving.builder.documents.bundle import OpenedBundle
from repro_serving.builder.documents.evidence import ReplayDocument, Teacher
from repro_serving.builder.documents.host import compare as compare_host
from repro_serving.builder.documents.nodes import node_name
from repro_serving.builder.documents.observations import OBSERVATIONS_FILE, ObservationsDocument
from repro_serving.builder.documents.probes import DISPATCH_FILE
from repro_serving.builder.documents.rundir import REPLAY_FILE
from repro_serving.builder.drift import Drift
from repro_serving.builder.hashing import sha256_file
from repro_serving.builder.hostcheck import claim_drifts, verify_here
from repro_serving.builder.native.kernels import KernelSet, kernel_set_files
from repro_serving.builder.observe.artifacts import ArtifactFacts
from repro_serving.builder.placeholders import path_values
from repro_serving.builder.sealing import bundle
from repro_serving.builder.sealing.bundle import KERNEL_SETS_DIR, SUITE_FILE, TEACHER_FILE
from repro_serving.builder.sealing.keys import SigningKey, TrustedKeys
from repro_serving.builder.sealing.seal import BundleContent, SealedBundle, seal
from repro_serving.builder.sealing.statement import resolved_dependencies
from repro_serving.builder.verify import NotVerified, VerifyReport, gate_outcome
from repro_serving.launch import cluster
from repro_serving.launch.run import RunPlan, RunRecord, observe_cluster, run_profile


class PreflightRefused(NotVerified):
    """`verify --host` found drift: nothing was started."""

    def __init__(self, report: VerifyReport) -> None:
        super().__init__("preflight refused: this host or this bundle does not hold", report)


@dataclass(frozen=True)
class Replay:
    preflight: VerifyReport
    run: RunRecord
    sealed: SealedBundle | None
    """The run directory sealed as a bundle; None when no signing key was given."""


def launch(
    path: Path,
    trusted: TrustedKeys,
    *,
    runs: Path,
    signing_key: SigningKey | None,
    profile: str | None = None,
    anchor: Path | None = None,
) -> Replay:
    preflight = verify_here(path, trusted, anchor=anchor)
    if not preflight.ok:
        raise PreflightRefused(preflight)
    opened = OpenedBundle.read(path, anchor)
    manifest = opened.manifest
    chosen = profile or ("candidate" if "candidate" in manifest.launch.profiles else None)
    chosen = chosen or manifest.oracle.teacher
    if manifest.clustered:
        refused = node_preflight(opened, chosen)
        if refused:
            stopped = "a node does not hold the bundle: nothing was started on any node"
            raise PreflightRefused(replace(preflight, findings=tuple(refused), stopped=stopped))
    teacher = Teacher.from_bytes(opened.teacher_bytes(), where=str(opened.oracle(TEACHER_FILE)))
    name = f"{manifest.bundle.name}-run-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    run_dir = runs / f".{name}.work"
    kernels = path / KERNEL_SETS_DIR
    kernel_sets = tuple(KernelSet.load(n, kernels) for n in manifest.native.kernel_sets)
    observed = preflight.observations
    probes = probe_dispatch(manifest, chosen, observed, kernel_sets) if observed else {}
    plan = RunPlan(manifest, chosen, run_dir, teacher=teacher, kernels=kernels, suite=opened.suite)
    record = run_profile(plan)
    sealed = None
    if signing_key is not None and observed is not None and record.starts:
        teacher_path = opened.oracle(TEACHER_FILE)
        # A replay installs nothing: its artifacts are the bundle's.
        artifacts = ArtifactFacts(
            dict(opened.lock.python.artifacts), dict(opened.lock.python.unrestorable)
        )
        document = ObservationsDocument.of(observed, artifacts.artifacts, artifacts.unresolved)
        (run_dir / OBSERVATIONS_FILE).write_bytes(document.to_bytes())
        (run_dir / DISPATCH_FILE).write_bytes(canonical_json(probes))
        replayed = ReplayDocument(
            bundle=manifest.bundle.name,
            lock_sha256=sha256_file(path / bundle.LOCK),
            differences=preflight.differences,
        )
        (run_dir / REPLAY_FILE).write_bytes(replayed.to_bytes())
        dispatch = live_dispatch(manifest, observed, record, kernel_sets, probes)
        nodes, _problems = run_node_claims(manifest, record, observed.values, kernel_sets)
        lock = assemble_lock(
            manifest,
            opened.lock.bundle.manifest_path,
            observed,
            record,
            opened.suite,
            suite_sha256=opened.lock.oracle.suite_sha256,
            teacher_sha256=sha256_file(teacher_path),
            dispatch=dispatch.claims,
            artifacts=artifacts,
            kernel_sets=kernel_sets,
            manifest_sha256=sha256_file(path / bundle.MANIFEST),
            nodes=nodes,
        )
        content = BundleContent(
            name=name,
            manifest=path / bundle.MANIFEST,
            manifest_source=str(path / bundle.MANIFEST),
            lock=lock.model_dump(mode="json", by_alias=True),
            dependencies=resolved_dependencies(lock),
            gates=gate_outcome(record.verdicts),
            oracle={
                SUITE_FILE: opened.oracle(SUITE_FILE),
                TEACHER_FILE: opened.oracle(TEACHER_FILE),
            },
            evidence=evidence_files(run_dir, record.plan.manifest, replayed=True),
            kernels=kernel_set_files(manifest.native.kernel_sets, kernels),
            run=True,
        )
        sealed = seal(content, signing_key, runs)
    return Replay(preflight, record, sealed)


def node_preflight(opened: OpenedBundle, profile: str) -> list[Drift]:
    """Every node of the cluster against the bundle, before anything starts on any: each
    declared node answers (else `NodeUnreachable`, naming it), no other node is in the
    cluster, no forbidden variable is set on one, and each node's host holds the manifest's
    `[host]` and selects the code its sealed node claim ran."""
    manifest = opened.manifest
    kernel_sets = opened.kernel_sets()
    with cluster.connect(manifest, os.environ) as nodes:
        facts = observe_cluster(nodes, profile, kernel_sets, path_values(manifest))
    found = cluster.node_drifts(facts)
    for claim in opened.lock.nodes:
        node = facts.node(claim.rank).host
        name = node_name(claim.rank, claim.address)
        found += [
            drift.model_copy(update={"subject": f"{name}: {drift.subject}"})
            for drift in (
                *compare_host(manifest.host, node),
                *claim_drifts(claim.dispatch, kernel_sets, claim.env, node.capabilities()),
            )
        ]
    return found
