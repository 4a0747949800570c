"""A sealed live audit judged again: what `repro verify` decides of `start-N/audit/*.json`.

The live audit (`builder.native.audit.judge`) explains every mapping with the loader emulation
over the host's files, which a verifier does not have. Everything it decides without them is
decided again here, by the same functions (`builder.native.rules`), under the bundle's sealed
manifest, kernel sets and host facts, whatever the sealed verdict says: each mapping's rule and
the allowed roots and preloads, the environment (forbidden variables, LD_LIBRARY_PATH), the
kernel sets' pins, every declared module mapped as the variant the sealed host selects, the
roles and their counts. Beyond those, the audit must be one coherent tree: one root, every
parent in the tree, every pid once, one executable per process and one for the tree (the
interpreter the stack was started with), every file id one path and one digest, the file count
and the stated verdict those of the mappings listed.

What this cannot see: a mapping the sealed audit leaves out, or a rule it gives that the
emulation would not have given (a `dependency` that no RUNPATH explains): those need the host's
files. A coherent fabrication by the key's holder is beyond every offline check.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from repro_serving.builder.documents.audit import AuditDocument, ProcessEvidence
from repro_serving.builder.documents.manifest import Manifest, expand
from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.hashing import is_sha256_hex
from repro_serving.builder.native.dispatch import HostCapabilities
from repro_serving.builder.native.kernels import KernelSet, dispatches
from repro_serving.builder.native.roles import classify_role
from repro_serving.builder.native.rules import (
    KNOWN_RULES,
    AuditPolicy,
    env_drifts,
    inherited_environments,
    root_drifts,
    tree_rule_drifts,
)

START_TIME_PRECISION_S = 0.011
"""Two start times of one host share its boot time and count clock ticks (10 ms)."""


def manifest_policy(
    manifest: Manifest,
    values: Mapping[str, str],
    kernel_sets: Sequence[KernelSet],
    host: HostCapabilities | None,
    *,
    real: Callable[[str], str] = posixpath.normpath,
    roles: Mapping[str, int] | None = None,
) -> AuditPolicy:
    """The manifest's `[native]` and `[launch.processes]` (or `roles`, a node's) with its
    placeholders expanded by `values`, each path made real by `real` (live: the host's real
    path; offline: normalised as written), dispatch predicted for `host`."""
    native = manifest.native

    def paths(templates: Sequence[str]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(real(expand(t, dict(values))) for t in templates))

    return AuditPolicy(
        allowed_roots=paths(native.allowed_roots),
        modules=native.modules,
        forbidden_env=native.forbidden_environment,
        roles=dict(manifest.launch.processes if roles is None else roles),
        preload=paths(native.preload),
        platforms=tuple(kernel_set.platform for kernel_set in kernel_sets),
        kernel_sets=tuple(kernel_sets),
        # The kernel reports mapped files by their real paths: pins expand to real paths too.
        values={name: real(value) for name, value in values.items()},
        dispatches={name: d for name, (_, d) in dispatches(kernel_sets).items()},
        host=host,
    )


@dataclass(frozen=True)
class Interpreter:
    """Where the stack's executable must come from, when it is started as `{python}`: the
    venv's interpreter, or the base installation's that it links to."""

    python: str
    prefix: str
    series: str | None = None
    """The interpreter's release series (`3.11`), where the observations state it."""

    def admits(self, exe: str) -> bool:
        name = posixpath.basename(exe)
        in_bin = posixpath.dirname(exe) == posixpath.join(posixpath.normpath(self.prefix), "bin")
        names = ("python", "python3", f"python{self.series}") if self.series else None
        named = name in names if names else name.startswith("python")
        return exe == posixpath.normpath(self.python) or (in_bin and named)


def rejudge(
    documents: Sequence[AuditDocument],
    policy: AuditPolicy,
    *,
    interpreter: Interpreter | None,
    where: str,
) -> list[Drift]:
    """Every drift the sealed audit `documents` (one per role, of one tree) shows under
    `policy`, found again; `where` names the audit directory in each finding."""
    if not documents:
        return [_claim(where, "the audit's role documents", "one or more", "none")]
    drifts = _document_drifts(documents, where)
    processes = [p for document in documents for p in document.processes]
    drifts += _tree_drifts(documents[0].root_pid, processes, where)
    files: dict[str, tuple[str, str | None]] = {}
    places = inherited_environments((p.pid, p.ppid, p.environ) for p in processes)
    for process in processes:
        drifts += _process_drifts(
            process, policy, interpreter, files, where, places=places[process.pid]
        )
    drifts += _one_file_a_path(processes, where)
    exes = sorted({p.exe for p in processes if p.exe is not None})
    if len(exes) > 1:
        drifts.append(_claim(where, "executables", "one for every process of the tree", exes))
    if documents[0].files != len(files):
        found = f"files: {documents[0].files}, {len(files)} distinct file ids mapped"
        drifts.append(_claim(where, "files", "the number of distinct ELF files listed", found))
    distinct = sorted(set(files.values()))
    drifts += tree_rule_drifts(distinct, processes, documents[0].root_pid, policy)
    return drifts


def _one_file_a_path(processes: Sequence[ProcessEvidence], where: str) -> list[Drift]:
    """One path is one file in the whole tree while it runs: a file replaced at its path is
    mapped as deleted by the processes that had it, never as another file at the same path."""
    seen: dict[str, tuple[int, str, str | None]] = {}
    drifts = []
    for process in processes:
        for obj in process.objects:
            first = seen.setdefault(obj.path, (process.pid, obj.file_id, obj.sha256))
            if first[1:] != (obj.file_id, obj.sha256):
                found = (
                    f"pid {first[0]}: {first[1]} {first[2]}; pid {process.pid}: "
                    f"{obj.file_id} {obj.sha256}"
                )
                drifts.append(_claim(f"{where}: {obj.path}", "path", "one file in the tree", found))
    return drifts


def canonical(path: str) -> bool:
    """An absolute path in the one form the kernel writes a mapping's path in: no `.`, `..`,
    empty or trailing segment."""
    return path.startswith("/") and not path.startswith("//") and posixpath.normpath(path) == path


def _document_drifts(documents: Sequence[AuditDocument], where: str) -> list[Drift]:
    """The role documents of one tree agree on the tree, each holds its own role's processes,
    and each verdict is what its drifts say."""
    drifts = []
    trees = {(d.root_pid, d.files, d.passed, d.drifts) for d in documents}
    if len(trees) != 1:
        found = f"{len(documents)} role documents, {len(trees)} different trees"
        drifts.append(_claim(where, "root_pid, files, passed, drifts", "one tree", found))
    for document in documents:
        if document.passed != (not document.drifts):
            found = f"passed: {document.passed} with {len(document.drifts)} drift(s)"
            drifts.append(_claim(where, "passed", "true exactly when no drift is listed", found))
        roles = sorted({p.role for p in document.processes})
        if len(roles) > 1:
            drifts.append(_claim(where, "processes", "one role a document", roles))
    return drifts


def _tree_drifts(root_pid: int, processes: Sequence[ProcessEvidence], where: str) -> list[Drift]:
    drifts = []
    pids = [p.pid for p in processes]
    if len(set(pids)) != len(pids):
        repeated = sorted({pid for pid in pids if pids.count(pid) > 1})
        drifts.append(_claim(where, "pid", "every process once", f"pids {repeated} repeated"))
    if root_pid not in pids:
        drifts.append(_claim(where, "root_pid", "a process of the tree", root_pid))
    orphans = [p.pid for p in processes if p.pid != root_pid and p.ppid not in pids]
    if orphans:
        found = f"pids {orphans} have a parent outside the tree"
        drifts.append(_claim(where, "ppid", f"every process descends from {root_pid}", found))
    parents = {p.pid: p for p in processes}
    cut_off = []
    for process in processes:
        seen, at = {process.pid}, process
        while at.pid != root_pid and at.ppid in parents and at.ppid not in seen:
            at = parents[at.ppid]
            seen.add(at.pid)
        if at.pid != root_pid and at.ppid in parents:
            cut_off.append(process.pid)
    if cut_off:
        found = f"pids {sorted(cut_off)} descend from a cycle of parents"
        drifts.append(_claim(where, "ppid", f"every process descends from {root_pid}", found))
    early = [
        p.pid
        for p in processes
        if p.ppid in parents and _before(p.started_at, parents[p.ppid].started_at)
    ]
    if early:
        found = f"pids {early} started before their parent"
        drifts.append(_claim(where, "started_at", "every process after its parent", found))
    return drifts


def _before(child: float | None, parent: float | None) -> bool:
    if child is None or parent is None:
        return False
    return child < parent - START_TIME_PRECISION_S


def _process_drifts(
    process: ProcessEvidence,
    policy: AuditPolicy,
    interpreter: Interpreter | None,
    files: dict[str, tuple[str, str | None]],
    where: str,
    *,
    places: Mapping[str, str],
) -> list[Drift]:
    """`places`: what places the process's JIT directories (`rules.inherited_environments`)."""
    at = f"{where}: pid {process.pid} ({process.role})"
    if process.error is not None or process.exe is None:
        return [
            Drift(
                kind=DriftKind.UNREADABLE,
                subject=at,
                expected="a readable process of the tree",
                observed=process.error or "no executable",
                why="what this process maps cannot be audited",
            )
        ]
    drifts = env_drifts(process.pid, process.role, process.environ, policy)
    drifts += root_drifts(process.pid, process.role, process.objects, policy, places)
    named = classify_role(process.name, ())
    if named not in ("other", process.role):
        drifts.append(
            _claim(at, "name", f"a name of role {process.role}", f"{process.name} ({named})")
        )
    for path in (process.exe, *(o.path for o in process.objects)):
        if not canonical(path):
            expected = "an absolute path in canonical form, as /proc/<pid>/maps writes it"
            drifts.append(_claim(f"{at}: {path!r}", "path", expected, path))
    drifts += [
        _claim(
            f"{at}: {o.path}",
            "rule",
            "a mapping the loader rules explain (a live audit leaves one unexplained only with "
            "a drift that says why)",
            f"{o.rule}: {o.reason or 'no reason'}",
        )
        for o in process.objects
        if o.rule == "unexplained"
    ]
    drifts += _requester_drifts(process, at)
    executables = [o.path for o in process.objects if o.rule == "executable"]
    if executables != [process.exe]:
        drifts.append(_claim(at, "objects[rule=executable]", f"exactly {process.exe}", executables))
    if interpreter is not None and not interpreter.admits(process.exe):
        expected = f"{interpreter.python} or {interpreter.prefix}/bin/python*"
        drifts.append(_claim(at, "exe", expected, process.exe))
    preloaded = {
        posixpath.basename(entry)
        for entry in re.split(r"[: \t]", process.environ.get("LD_PRELOAD", ""))
        if entry
    }
    mapped: dict[str, tuple[str, str | None]] = {}
    for obj in process.objects:
        if obj.rule == "preload" and posixpath.basename(obj.path) not in preloaded:
            drifts.append(
                _claim(f"{at}: {obj.path}", "rule", "preload named by LD_PRELOAD", "no such entry")
            )
        once = mapped.setdefault(obj.path, (obj.file_id, obj.sha256))
        if once != (obj.file_id, obj.sha256):
            found = f"{obj.file_id} {obj.sha256} and {once[0]} {once[1]}"
            drifts.append(_claim(f"{at}: {obj.path}", "path", "one file mapped at a path", found))
        if obj.rule not in KNOWN_RULES:
            drifts.append(_claim(f"{at}: {obj.path}", "rule", " | ".join(KNOWN_RULES), obj.rule))
        if obj.sha256 is None or not is_sha256_hex(obj.sha256):
            drifts.append(_claim(f"{at}: {obj.path}", "sha256", "64 hex digits", obj.sha256))
        known = files.setdefault(obj.file_id, (obj.path, obj.sha256))
        if known != (obj.path, obj.sha256):
            found = f"{obj.path} {obj.sha256}, elsewhere {known[0]} {known[1]}"
            drifts.append(_claim(f"{at}: {obj.file_id}", "file_id", "one path and digest", found))
    return drifts


MERGED_USR: Final = ("/lib/", "/lib32/", "/lib64/", "/libx32/", "/bin/", "/sbin/")
"""Directories a merged-/usr host links into /usr: a path through them names the file under it."""


def _under_usr(path: str) -> str:
    return "/usr" + path if path.startswith(MERGED_USR) else path


def _requester_drifts(process: ProcessEvidence, at: str) -> list[Drift]:
    """A mapping loaded for another object names an object the process maps: the requester as
    the loader found it (`dir/../lib/x.so`: its normalised path mapped), through a merged-/usr
    link (`/lib/...` for `/usr/lib/...`), or by a versioned file's soname link in its directory
    (`libstdc++.so.6` for `libstdc++.so.6.0.30`). A requester no mapping explains loaded
    nothing. Offline the links themselves cannot be followed: a name of a mapped file in the
    mapped file's directory is taken as that file."""
    mapped = {_under_usr(o.path) for o in process.objects}
    named = {(posixpath.dirname(path), posixpath.basename(path)) for path in mapped}
    drifts = []
    for obj in process.objects:
        if obj.requester is None:
            continue
        requester = _under_usr(posixpath.normpath(obj.requester))
        directory, name = posixpath.dirname(requester), posixpath.basename(requester)
        if requester in mapped or any(d == directory and n.startswith(name) for d, n in named):
            continue
        drifts.append(
            _claim(f"{at}: {obj.path}", "requester", "an object this process maps", obj.requester)
        )
    return drifts


def _claim(subject: str, field: str, expected: object, found: object) -> Drift:
    return Drift(
        kind=DriftKind.CLAIM,
        subject=f"{subject}: {field}",
        expected=str(expected),
        observed=str(found),
        why="the sealed audit contradicts itself",
    )
