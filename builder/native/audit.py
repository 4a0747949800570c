"""The live audit: every ELF a running tree maps, explained by the loader emulation, or a drift.

For each process the emulation predicts what starting its executable in its own environment
loads (`executable_closure`). What else the process maps was loaded at run time: each such
object that no other object's search explains is a dlopen root, and `dlopen_closure` of the
root, with the startup objects already loaded, predicts its dependencies. Every mapped ELF then
carries a rule (startup, preload, dlopen, dependency) and the loader's reason, and every
disagreement is a `Drift`: a mapping from outside the allowed roots, LD_PRELOAD, origin drift
(the emulation names one file, the process maps another with the same name, unless that one
has the need as its SONAME: glibc reuses a loaded object by SONAME before any search), a need
nothing satisfies, a deleted or replaced file, a declared module no process maps, a process that
could not be read, or process roles other than declared.

`judge` takes the tree snapshot, the loader configuration and a file-system view as inputs; the
one read of its own is the bytes of a file the emulation predicts but no process maps, to tell
origin drift (the same bytes elsewhere) from another library.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.errors import NotObservable
from repro_serving.builder.hashing import sha256_file
from repro_serving.builder.native.elf import ElfError, ElfInfo
from repro_serving.builder.native.ldcache import LdCache
from repro_serving.builder.native.loader import (
    Closure,
    FileSystem,
    LoadedObject,
    LoaderConfig,
    Outcome,
    Resolution,
    dlopen_closure,
    executable_closure,
)
from repro_serving.builder.native.procmaps import FileId
from repro_serving.builder.native.rules import (
    AuditPolicy,
    env_drifts,
    inherited_environments,
    root_drifts,
    tree_rule_drifts,
)
from repro_serving.builder.native.snapshot import MappedFile, ProcessSnapshot, TreeSnapshot


@dataclass(frozen=True)
class LoaderInputs:
    """What the emulation needs of the host: its loader configuration, cache and files."""

    config: LoaderConfig
    cache: LdCache | None
    fs: FileSystem


@dataclass(frozen=True)
class ObjectVerdict:
    """One mapped ELF of one process and how the loader came to map it."""

    path: str
    file_id: FileId
    sha256: str | None
    rule: str  # executable | startup | preload | dlopen | dependency | unexplained
    reason: str
    requester: str | None


@dataclass(frozen=True)
class ProcessAudit:
    pid: int
    ppid: int
    role: str
    name: str
    exe: str | None
    objects: tuple[ObjectVerdict, ...]
    error: str | None
    environ: Mapping[str, str] = field(default_factory=dict)
    """The loader's variables the process started with (LD_LIBRARY_PATH, LD_PRELOAD, …)."""
    started_at: float | None = None
    """When the kernel started it (`ProcessSnapshot.started_at`)."""


@dataclass(frozen=True)
class AuditReport:
    root_pid: int
    processes: tuple[ProcessAudit, ...]
    files: tuple[MappedFile, ...]
    drifts: tuple[Drift, ...]

    @property
    def passed(self) -> bool:
        return not self.drifts


def judge(tree: TreeSnapshot, policy: AuditPolicy, loader: LoaderInputs) -> AuditReport:
    """Explain every mapping of every process of `tree`; each disagreement is a drift."""
    processes: list[ProcessAudit] = []
    drifts: list[Drift] = []
    elves = _read_elves(tree, loader.fs)
    places = inherited_environments((p.pid, p.ppid, p.environ) for p in tree.processes)
    digests: dict[str, str | None] = {}  # searched files hashed once for the whole tree
    for process in tree.processes:
        audit, found = _audit_process(
            process,
            tree.files,
            elves,
            policy,
            loader,
            places=places.get(process.pid, {}),
            digests=digests,
        )
        processes.append(audit)
        drifts.extend(found)
    drifts.extend(_file_drifts(tree))
    mapped = [(f.path, f.sha256) for f in tree.files.values() if f.is_elf]
    drifts.extend(tree_rule_drifts(mapped, tree.processes, tree.root_pid, policy))
    return AuditReport(tree.root_pid, tuple(processes), tuple(tree.files.values()), tuple(drifts))


# --- one process ---------------------------------------------------------------------------


@dataclass
class _Explainer:
    """Accumulates the verdicts of one process while its closures are replayed."""

    process: ProcessSnapshot
    mapped: dict[FileId, MappedFile]
    names: Mapping[FileId, frozenset[str]]
    """Each mapped object's file name and SONAME: the names a need can match it by."""
    sonames: Mapping[FileId, str] = field(default_factory=dict)
    """Each mapped object's SONAME, where it has one."""
    substitutes: dict[str, str] = field(default_factory=dict)
    """A file the emulation loaded but the process does not map → the mapped object of its
    SONAME and bytes that met its need (`met_by_soname`): the requester its dependencies name."""
    digests: dict[str, str | None] = field(default_factory=dict)
    """The sha256 of each file the emulation searched and the process does not map, hashed
    once for the whole tree (`judge` shares it between processes); None when unreadable."""
    verdicts: dict[FileId, ObjectVerdict] = field(default_factory=dict)
    drifts: list[Drift] = field(default_factory=list)

    def subject(self, path: str) -> str:
        return f"pid {self.process.pid} ({self.process.role}): {path}"

    def explain(self, obj: LoadedObject, rule: str, reason: str, requester: str | None) -> None:
        file_id = obj.file_id
        if file_id is None or file_id not in self.mapped or file_id in self.verdicts:
            return
        mapped = self.mapped[file_id]
        self.verdicts[file_id] = ObjectVerdict(
            mapped.path, file_id, mapped.sha256, rule, reason, requester
        )

    def check_resolution(self, resolution: Resolution) -> None:
        """A resolution the emulation made must name a file the process maps."""
        if resolution.outcome is Outcome.DROPPED:
            return
        if resolution.failed or resolution.file_id is None:
            if self._mapped_by_name(resolution.need) is None:
                self.drifts.append(
                    Drift(
                        kind=DriftKind.UNRESOLVED,
                        subject=self.subject(resolution.need),
                        expected=f"{resolution.need} resolvable from {resolution.requester}",
                        observed=resolution.reason,
                        why="the emulation finds no file for this need and the process maps "
                        "nothing of that name",
                    )
                )
            return
        file_id = resolution.file_id
        if file_id in self.mapped:
            return
        if self.met_by_soname(resolution) is not None:
            return
        other = self._mapped_by_name(resolution.need)
        if other is None:
            self.drifts.append(
                Drift(
                    kind=DriftKind.NOT_MAPPED,
                    subject=self.subject(resolution.need),
                    expected=f"{resolution.path} ({resolution.reason})",
                    observed="no mapping of that file or name",
                    why="the loader emulation predicts this library but the process does not "
                    "map it",
                )
            )
            return
        self.drifts.append(_origin_drift(self, resolution, other))

    def met_by_soname(self, resolution: Resolution) -> MappedFile | None:
        """The mapped object that met `resolution`'s need where the emulation's search names a
        file the process does not map: one whose SONAME is the need and whose bytes are the
        searched file's. glibc matches a need against the SONAME of every object already
        loaded before it searches (_dl_map_object): the searched file is not mapped and such an
        object is, so it was loaded first (a dlopen by path, as torch loads its CUDA runtime
        from site-packages, or another requester's search) and met this need. The order of
        loads is not in the maps; that object's own loading is judged on its own, like every
        mapping. Other bytes under that SONAME stay a drift."""
        if resolution.file_id is None or resolution.file_id in self.mapped:
            return None
        candidates = [
            self.mapped[fid]
            for fid in self.process.files
            if fid in self.mapped and self.sonames.get(fid) == resolution.need
        ]
        if not candidates:
            return None
        predicted = self.digest_of(resolution.path)
        same = [c for c in candidates if predicted is not None and c.sha256 == predicted]
        if not same:
            return None
        if resolution.path is not None:
            self.substitutes.setdefault(resolution.path, same[0].path)
        return same[0]

    def digest_of(self, path: str | None) -> str | None:
        if path is None:
            return None
        if path not in self.digests:
            try:
                self.digests[path] = sha256_file(path)
            except NotObservable:
                self.digests[path] = None
        return self.digests[path]

    def requester_of(self, resolution: Resolution) -> str:
        """The object a dependency was loaded for, as the process maps it."""
        return self.substitutes.get(resolution.requester, resolution.requester)

    def _mapped_by_name(self, need: str) -> MappedFile | None:
        base = posixpath.basename(need)
        for file_id in self.process.files:
            if file_id in self.mapped and base in self.names.get(file_id, ()):
                return self.mapped[file_id]
        return None


def _origin_drift(explainer: _Explainer, resolution: Resolution, other: MappedFile) -> Drift:
    predicted_sha = explainer.digest_of(resolution.path)
    same_bytes = predicted_sha is not None and predicted_sha == other.sha256
    return Drift(
        kind=DriftKind.ORIGIN_DRIFT if same_bytes else DriftKind.UNEXPECTED_MAPPING,
        subject=explainer.subject(resolution.need),
        expected=f"{resolution.path} ({resolution.reason})",
        observed=other.path,
        why="same bytes at another path: the loader mapped a copy from elsewhere"
        if same_bytes
        else "the process maps another file under the name the emulation resolves elsewhere",
    )


def _audit_process(
    process: ProcessSnapshot,
    files: Mapping[FileId, MappedFile],
    elves: Mapping[FileId, ElfInfo | None],
    policy: AuditPolicy,
    loader: LoaderInputs,
    *,
    places: Mapping[str, str],
    digests: dict[str, str | None],
) -> tuple[ProcessAudit, list[Drift]]:
    """`places`: what places the process's JIT directories (`rules.inherited_environments`);
    `digests`: the searched files hashed so far in the tree."""
    mapped = {fid: files[fid] for fid in process.files if fid in files and files[fid].is_elf}
    names = {fid: _names(files[fid].path, elves.get(fid)) for fid in mapped}
    sonames = {fid: info.soname for fid in mapped if (info := elves.get(fid)) and info.soname}
    explainer = _Explainer(process, mapped, names, sonames, digests=digests)
    if process.error is not None or process.exe is None:
        explainer.drifts.append(
            Drift(
                kind=DriftKind.UNREADABLE,
                subject=f"pid {process.pid}",
                expected="a readable process of the tree",
                observed=process.error or "no executable",
                why="what this process maps cannot be audited",
            )
        )
        return _process_audit(process, explainer), explainer.drifts
    explainer.drifts.extend(
        env_drifts(process.pid, process.role, process.environ, policy, loader.fs.realpath)
    )
    env_loader = replace(
        loader,
        config=replace(
            loader.config,
            library_path=process.environ.get("LD_LIBRARY_PATH"),
            preload=process.environ.get("LD_PRELOAD"),
        ),
    )
    startup = executable_closure(
        process.exe, config=env_loader.config, cache=env_loader.cache, fs=env_loader.fs
    )
    _explain_startup(explainer, startup)
    _explain_runtime(explainer, startup, elves, env_loader)
    audit = _process_audit(process, explainer)
    explainer.drifts.extend(root_drifts(process.pid, process.role, audit.objects, policy, places))
    return audit, explainer.drifts


def _loading_resolutions(resolutions: Sequence[Resolution]) -> dict[str, Resolution]:
    """The resolution that loaded each object, by path (later ones found it already loaded)."""
    return {r.path: r for r in resolutions if r.path is not None and r.newly_loaded}


def _explain_startup(explainer: _Explainer, startup: Closure) -> None:
    by_path = _loading_resolutions(startup.resolutions)
    for obj in startup.order:
        resolution = by_path.get(obj.path)
        if obj.executable:
            explainer.explain(obj, "executable", "the process's executable", None)
        elif resolution is not None and resolution.reason.startswith("LD_PRELOAD"):
            explainer.explain(obj, "preload", resolution.reason, None)
        else:
            reason = resolution.reason if resolution else "program interpreter"
            requester = resolution.requester if resolution else None
            explainer.explain(obj, "startup", reason, requester)
    for resolution in startup.resolutions:
        explainer.check_resolution(resolution)


def _explain_runtime(
    explainer: _Explainer,
    startup: Closure,
    elves: Mapping[FileId, ElfInfo | None],
    loader: LoaderInputs,
) -> None:
    """Replay a dlopen of each runtime root, in mapping order, with what is known loaded."""
    loaded: list[LoadedObject] = list(startup.order)
    executable = next(obj for obj in startup.order if obj.executable)
    needed = _needed_names(explainer, elves)
    pending = [fid for fid in explainer.mapped if fid not in explainer.verdicts]
    # Objects nobody needs by name first: their dependencies are then explained by search.
    pending.sort(key=lambda fid: bool(explainer.names[fid] & needed))
    for file_id in pending:
        if file_id in explainer.verdicts:
            continue
        path = explainer.mapped[file_id].path
        try:
            closure = dlopen_closure(
                path,
                caller=executable,
                loaded=loaded,
                config=loader.config,
                cache=loader.cache,
                fs=loader.fs,
            )
        except ElfError as error:
            explainer.drifts.append(
                Drift(
                    kind=DriftKind.UNREADABLE,
                    subject=explainer.subject(path),
                    expected="a readable ELF object",
                    observed=error.diagnostics().splitlines()[0],
                    why="the emulation cannot read a file the process maps",
                )
            )
            continue
        # The first resolution is the dlopen itself; the first new object is the root.
        dependencies = closure.resolutions[1:]
        for need in dependencies:
            # a need met by a mapped object of its SONAME: what the emulation loaded for the
            # file it searched was loaded for that object (the same bytes, the same needs)
            explainer.met_by_soname(need)
        if closure.order:
            explainer.explain(closure.order[0], "dlopen", "loaded at run time (dlopen)", None)
        by_path = _loading_resolutions(dependencies)
        for obj in closure.order[1:]:
            resolution = by_path.get(obj.path)
            if resolution is not None:
                requester = explainer.requester_of(resolution)
                explainer.explain(obj, "dependency", resolution.reason, requester)
        for resolution in dependencies:
            explainer.check_resolution(resolution)
        loaded.extend(closure.order)


def _needed_names(explainer: _Explainer, elves: Mapping[FileId, ElfInfo | None]) -> set[str]:
    names: set[str] = set()
    for file_id in explainer.mapped:
        info = elves.get(file_id)
        if info is not None:
            names.update(posixpath.basename(need) for need in info.needed)
    return names


def _read_elves(tree: TreeSnapshot, fs: FileSystem) -> dict[FileId, ElfInfo | None]:
    """The ELF facts of every mapped ELF of the tree, read once from its path."""
    elves: dict[FileId, ElfInfo | None] = {}
    for file_id, mapped in tree.files.items():
        if not mapped.is_elf:
            continue
        try:
            elves[file_id] = fs.read_elf(mapped.path)
        except ElfError:
            elves[file_id] = None
    return elves


def _names(path: str, info: ElfInfo | None) -> frozenset[str]:
    soname = info.soname if info is not None else None
    return frozenset(name for name in (posixpath.basename(path), soname) if name)


def _process_audit(process: ProcessSnapshot, explainer: _Explainer) -> ProcessAudit:
    objects = []
    for file_id, mapped in explainer.mapped.items():
        verdict = explainer.verdicts.get(file_id)
        objects.append(
            verdict or ObjectVerdict(mapped.path, file_id, mapped.sha256, "unexplained", "", None)
        )
    return ProcessAudit(
        pid=process.pid,
        ppid=process.ppid,
        role=process.role,
        name=process.name,
        exe=process.exe,
        objects=tuple(objects),
        error=process.error,
        environ=process.environ,
        started_at=process.started_at,
    )


# --- drifts of the files themselves -------------------------------------------------------


def _file_drifts(tree: TreeSnapshot) -> list[Drift]:
    drifts = []
    for mapped in tree.files.values():
        if mapped.error is not None:
            drifts.append(
                Drift(
                    kind=DriftKind.UNREADABLE,
                    subject=mapped.path,
                    expected="the mapped file readable, to tell ELF from data and hash it",
                    observed=mapped.error,
                    why="a mapping repro cannot read cannot be explained",
                )
            )
        if not mapped.is_elf:
            continue
        if mapped.deleted or mapped.replaced:
            state = "replaced on disk" if mapped.replaced else "deleted"
            drifts.append(
                Drift(
                    kind=DriftKind.DELETED_MAPPING,
                    subject=mapped.path,
                    expected="the mapped file still at its path",
                    observed=f"{state} (mapped sha256 {mapped.sha256})",
                    why="what runs is no longer what is on disk",
                )
            )
    return drifts
