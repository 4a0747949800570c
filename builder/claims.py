"""Claims computed from evidence: the one place both `repro build` and `repro verify` derive
the oracle rows, the throughput and the native mappings of a lock, so a verifier recomputes
exactly what a builder sealed."""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from repro_serving.builder.canonical import canonical_json
from repro_serving.builder.documents.audit import ProcessEvidence
from repro_serving.builder.documents.evidence import OracleRow
from repro_serving.builder.documents.lock import (
    BundleClaim,
    DispatchClaim,
    EvidenceClass,
    JitFiles,
    Lock,
    MappedObject,
    NodeClaim,
    OracleClaim,
    OracleRowClaim,
    ThroughputClaim,
)
from repro_serving.builder.documents.manifest import Manifest, Suite, placeholder_path
from repro_serving.builder.hashing import sha256_bytes, sha256_file
from repro_serving.builder.native.dispatch import DispatchKind, HostCapabilities, predict
from repro_serving.builder.native.kernels import KernelSet, Platform, jit_matcher
from repro_serving.builder.native.modules import is_module_file
from repro_serving.builder.native.rules import inherited_environments
from repro_serving.builder.sealing.statement import repro_version
from repro_serving.launch.throughput import UnmeasurableRow, measure

if TYPE_CHECKING:  # a stack served across nodes only: read where one is
    from repro_serving.builder.documents.nodes import NodesDocument

BUILT_EVIDENCE: Final = {
    "host": EvidenceClass.LIVE,
    "models": EvidenceClass.LIVE,
    "sources": EvidenceClass.LIVE,
    "python": EvidenceClass.LIVE,
    "native": EvidenceClass.SEALED,
    "launch": EvidenceClass.LIVE,
    "oracle": EvidenceClass.SEALED,
    "nodes": EvidenceClass.LIVE,
}
"""The evidence class of each section of a built lock: what repro observed on the host (live),
what it recomputes from sealed evidence (sealed)."""


def evidence_classes(lock: Lock) -> dict[str, EvidenceClass]:
    """The class each section of `lock` states, one entry per model, source and node."""
    found = {
        "host": lock.host.evidence,
        "python": lock.python.evidence,
        "native": lock.native.evidence,
        "launch": lock.launch.evidence,
        "oracle": lock.oracle.evidence,
    }
    found |= {f"models[{m.role}]": m.evidence for m in lock.models}
    found |= {f"sources[{s.name}]": s.evidence for s in lock.sources}
    found |= {f"nodes[{n.rank}]": n.evidence for n in lock.nodes}
    return found


def built_classes(lock: Lock) -> dict[str, EvidenceClass]:
    """What `evidence_classes` of a lock of `lock`'s sections must say for a built bundle."""
    return {name: BUILT_EVIDENCE[name.split("[")[0]] for name in evidence_classes(lock)}


LOADER_PATH_VARIABLES = ("LD_LIBRARY_PATH", "LD_PRELOAD")


@dataclass(frozen=True)
class ClaimCheck:
    """One claim of the lock, recomputed: what it says and whether the evidence agrees."""

    claim: str
    evidence: EvidenceClass
    value: str
    ok: bool
    detail: str = ""
    figures: Mapping[str, object] = field(default_factory=dict)
    """The numbers behind `value` for a machine, each unit in its key (`..._tok_s`, `..._s`)."""


def content_check(
    claim: str, found: set[str], expected: set[str], *, free: str | None = None
) -> ClaimCheck:
    """A bundle's content (`bundle.content_files`) against what its flow seals: nothing
    missing, nothing beside it (under `free`, any file may be, e.g. a record's run directory)."""
    missing = sorted(expected - found)
    extra = sorted(p for p in found - expected if free is None or not p.startswith(free))
    problems = [f"missing {', '.join(missing)}"] if missing else []
    problems += [f"sealed but part of nothing: {', '.join(extra)}"] if extra else []
    return ClaimCheck(
        claim, EvidenceClass.SEALED, f"{len(found)} files", not problems, "; ".join(problems)[:600]
    )


def bundle_claim(
    manifest: Manifest, manifest_source: str, *, manifest_sha256: str | None = None
) -> BundleClaim:
    """The bundle's name, its manifest's digest (of the file at `manifest_source` unless
    given) and where the build was given it."""
    return BundleClaim(
        name=manifest.bundle.name,
        description=manifest.bundle.description,
        manifest_sha256=manifest_sha256 or sha256_file(Path(manifest_source)),
        manifest_path=manifest_source,
        repro_version=repro_version(),
    )


def oracle_claim(
    manifest: Manifest,
    suite: Suite,
    rows: Sequence[OracleRow],
    suite_sha256: str,
    teacher_sha256: str,
) -> OracleClaim:
    """What `repro verify` recomputes from the sealed rows: the same function builds it."""
    gate = manifest.oracle.gates.throughput
    throughput = None
    measured = None
    if gate is not None and rows:
        with contextlib.suppress(UnmeasurableRow):  # no rate: the throughput gate failed on it
            measured = measure(rows, gate.tokens)
    if measured is not None and gate is not None:
        historical = measured.historical_median if gate.record_historical else None
        throughput = ThroughputClaim(
            tokens=gate.tokens,
            conventional_median=measured.conventional_median,
            historical_median=historical,
        )
    return OracleClaim(
        evidence=BUILT_EVIDENCE["oracle"],
        suite=suite.name,
        suite_sha256=suite_sha256,
        teacher_sha256=teacher_sha256,
        rows=tuple(row_claim(row) for row in rows),
        throughput=throughput,
    )


def row_claim(row: OracleRow) -> OracleRowClaim:
    return OracleRowClaim(
        prompt_id=row.prompt_id,
        prompt_index=row.prompt_index,
        token_ids_sha256=sha256_bytes(canonical_json(list(row.token_ids))),
        text_sha256=row.text_sha256,
        completion_tokens=row.completion_tokens,
    )


def roles_claim(
    processes: Sequence[ProcessEvidence],
    values: Mapping[str, str],
    *,
    kernel_sets: Sequence[KernelSet],
) -> dict[str, tuple[MappedObject, ...]]:
    """Every ELF each role's processes mapped (`mapped_claims`), what they compiled at run time
    aside."""
    return mapped_claims(processes, values, kernel_sets=kernel_sets)[0]


def mapped_claims(
    processes: Sequence[ProcessEvidence],
    values: Mapping[str, str],
    *,
    kernel_sets: Sequence[KernelSet],
) -> tuple[dict[str, tuple[MappedObject, ...]], dict[str, tuple[JitFiles, ...]]]:
    """What each role's processes mapped, from the live audit (`native.auditreport`) or from its
    sealed evidence, read alike: every ELF in placeholder form, one entry per path (`native.roles`),
    but for the files compiled at run time into the kernel sets' JIT places, counted by place
    and name (`native.jit`, `documents.lock.JitFiles`): two fresh starts of one stack compile them
    to other paths (vLLM's compile cache is keyed by its environment, HOME among it), not always
    to the same bytes."""
    compiled = _jit_places(processes, [kernel_set.platform for kernel_set in kernel_sets])
    roles: dict[str, dict[str, MappedObject]] = {}
    jit: dict[str, dict[tuple[str, str], set[str]]] = {}
    for process in processes:
        for obj in process.objects:
            place = compiled.get((process.pid, obj.path))
            if place is not None:
                key = (place, posixpath.basename(obj.path))
                jit.setdefault(process.role, {}).setdefault(key, set()).add(obj.path)
                continue
            path = placeholder_path(obj.path, values)
            requester = placeholder_path(obj.requester, values) if obj.requester else None
            entry = MappedObject(
                path=path, sha256=obj.sha256, rule=obj.rule, reason=obj.reason,
                requester=requester,
            )  # fmt: skip
            roles.setdefault(process.role, {}).setdefault(path, entry)
    return (
        {role: tuple(entries[p] for p in sorted(entries)) for role, entries in roles.items()},
        {
            role: tuple(
                JitFiles(place=place, name=name, files=len(paths))
                for (place, name), paths in sorted(files.items())
            )
            for role, files in jit.items()
        },
    )


def _jit_places(
    processes: Sequence[ProcessEvidence], platforms: Sequence[Platform]
) -> dict[tuple[int, str], str]:
    """(pid, path) → the JIT glob it matched, for every mapping of a JIT place of `platforms`,
    each process's places as it inherited them (`rules.inherited_environments`)."""
    places = inherited_environments((p.pid, p.ppid, p.environ) for p in processes)
    compiled = {}
    for process in processes:
        place_of = jit_matcher(platforms, places[process.pid])
        for obj in process.objects:
            place = place_of(obj.path)
            if place is not None:
                compiled[(process.pid, obj.path)] = place
    return compiled


def modules_claim(
    modules: Sequence[str],
    roles: Mapping[str, tuple[MappedObject, ...]],
    dispatch: Sequence[DispatchClaim],
) -> dict[str, str]:
    """Each declared module and the file it was mapped from (placeholder form, from `roles`):
    the live variant of a dispatched module, else the first mapped file of the module's name."""
    paths = sorted({obj.path for objects in roles.values() for obj in objects})
    found = {
        module: match
        for module in modules
        if (match := next((p for p in paths if is_module_file(p, module)), None))
    }
    return found | {c.name: c.path for c in dispatch if c.path is not None}


def environments_claim(
    processes: Sequence[ProcessEvidence], values: Mapping[str, str]
) -> dict[str, dict[str, str]]:
    """The loader's variables each role started with, path elements in placeholder form."""
    environments: dict[str, dict[str, str]] = {}
    for process in processes:
        loader_env = {
            name: ":".join(_raw_placeholder(element, values) for element in value.split(":"))
            for name, value in sorted(process.environ.items())
            if name in LOADER_PATH_VARIABLES
        }
        environments.setdefault(process.role, loader_env)
    return environments


def _raw_placeholder(element: str, values: Mapping[str, str]) -> str:
    """A search-path element with its longest placeholder prefix replaced, and nothing else
    touched: `..` in it is the kernel's to resolve, physically, so it stays as written."""
    matches = [
        (len(value), name)
        for name, value in values.items()
        if element == value or element.startswith(value.rstrip("/") + "/")
    ]
    escaped = element.replace("{", "{{").replace("}", "}}")
    if not matches:
        return escaped
    _, name = max(matches)
    return "{" + name + "}" + escaped[len(values[name]) :]


@dataclass(frozen=True)
class DispatchFindings:
    claims: tuple[DispatchClaim, ...]
    disagreements: tuple[str, ...]
    """Where the live choice is not the one the kernel set predicts for the host's facts: the
    set's rule is wrong for this stack, or the facts are not the host's."""


def dispatch_claims(
    kernel_sets: Sequence[KernelSet],
    modules: Sequence[str],
    *,
    host: HostCapabilities,
    env: Mapping[str, str],
    roles: Mapping[str, tuple[MappedObject, ...]],
    probes: Mapping[str, str],
) -> DispatchFindings:
    """Each run-time choice as it was made: for a declared module the variant some process
    mapped (`roles`, placeholder form), for a code path what the stack reported (`probes`),
    each with only the facts that select it, and checked against the set's prediction."""
    mapped = {obj.path: obj for objects in roles.values() for obj in objects}
    claims: list[DispatchClaim] = []
    disagreements: list[str] = []
    for kernel_set in kernel_sets:
        for dispatch in kernel_set.dispatch:
            if dispatch.kind is DispatchKind.MODULE and dispatch.name not in modules:
                continue
            prediction = predict(dispatch, host, env)
            path = sha256 = None
            if dispatch.kind is DispatchKind.MODULE:
                live = [
                    (variant, obj)
                    for variant in dispatch.names()
                    for obj in mapped.values()
                    if is_module_file(obj.path, variant)
                ]
                names = sorted({variant for variant, _ in live})
                if len(names) != 1:
                    disagreements.append(
                        f"{dispatch.name}: mapped {', '.join(names) or 'no variant'}, "
                        f"expected exactly one of {', '.join(dispatch.names())}"
                    )
                variant = names[0] if names else prediction.variant or dispatch.name
                obj = next((o for v, o in live if v == variant), None)
                path, sha256 = (obj.path, obj.sha256) if obj else (None, None)
            else:
                if dispatch.probe and dispatch.name not in probes:
                    disagreements.append(f"{dispatch.name}: the stack's own answer is missing")
                answered = dispatch.name in probes
                variant = probes[dispatch.name] if answered else (prediction.variant or "")
            if variant != prediction.variant:
                disagreements.append(
                    f"{dispatch.name}: the stack chose {variant}, kernel set {kernel_set.name} "
                    f"predicts {prediction.describe()}"
                )
            claims.append(
                DispatchClaim(
                    name=dispatch.name,
                    kernel_set=kernel_set.name,
                    variant=variant,
                    facts=prediction.facts,
                    path=path,
                    sha256=sha256,
                )
            )
    asked = {d.name for kernel_set in kernel_sets for d in kernel_set.dispatch if d.probe}
    disagreements += [f"{name}: an answer to no probe" for name in sorted(set(probes) - asked)]
    return DispatchFindings(tuple(claims), tuple(disagreements))


def node_claims(
    manifest: Manifest,
    profile: str,
    facts: NodesDocument,
    *,
    audits: Mapping[int, Sequence[ProcessEvidence]],
    values: Mapping[str, str],
    kernel_sets: Sequence[KernelSet],
) -> tuple[tuple[NodeClaim, ...], tuple[str, ...]]:
    """The claim of each node of a stack served across nodes, from what its actor observed
    (`facts`) and its rank's audit of the first start (`audits[rank]`); with every place a
    node's live choice of code is not the one its kernel sets predict, and every node missing
    or undeclared, named."""
    claims: list[NodeClaim] = []
    problems = [
        f"node {address}: a live Ray node no [[node]] declares" for address in facts.undeclared
    ]
    observed = {node.rank: node for node in facts.nodes}
    for declared in manifest.declared_nodes:
        node = observed.get(declared.rank)
        where = f"node rank {declared.rank} ({declared.address})"
        if node is None or node.address != declared.address:
            found = "no answer" if node is None else f"an answer from {node.address}"
            problems.append(f"{where}: {found}")
            continue
        problems += [
            f"{where}: {name}={value} in its environment: a variable of native.forbidden_env"
            for name, value in sorted(node.forbidden.items())
        ]
        processes = audits.get(declared.rank, ())
        roles, jit = mapped_claims(processes, values, kernel_sets=kernel_sets)
        env = manifest.node_env(declared.rank, profile)
        dispatch = dispatch_claims(
            kernel_sets,
            manifest.native.modules,
            host=node.host.capabilities(),
            env=env,
            roles=roles,
            probes=node.probes,
        )
        problems += [f"{where}: {problem}" for problem in dispatch.disagreements]
        claims.append(
            NodeClaim(
                evidence=BUILT_EVIDENCE["nodes"],
                rank=declared.rank,
                address=declared.address,
                hostname=node.hostname,
                host=node.host.locked(),
                argv=manifest.node_argv(declared.rank, profile),
                env=env,
                roles=roles,
                jit=jit,
                environments=environments_claim(processes, values),
                dispatch=dispatch.claims,
            )
        )
    ids = [node.node_id for node in facts.nodes]
    problems += [
        f"node {node_id}: answered for ranks "
        f"{sorted(n.rank for n in facts.nodes if n.node_id == node_id)}: one Ray node each"
        for node_id in sorted({i for i in ids if ids.count(i) > 1})
    ]
    extra = sorted(set(observed) - {n.rank for n in manifest.declared_nodes})
    problems += [f"node rank {rank}: an answer from a rank no [[node]] declares" for rank in extra]
    return tuple(claims), tuple(problems)
