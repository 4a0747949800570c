"""The live audit: every ELF a running tree maps, explained by the loader emulation, or a drift.

For each process the emulation predicts what starting its executable in its own environment
loads (`executable_closure`). What else the process maps was loaded at run time: each such
object that no other object's search explains is a dlopen root, and `dlopen_closure` of the
root, with the startup objects already loaded, predicts its dependencies. Every mapped ELF then
carries a rule (startup, preload, dlopen, dependency) and the loader's reason, and every
disagreement is a `Drift`: a mapping from outside the allowed roots, LD_PRELOAD, origin drift
(the emulation names one file, the process maps another with the same name), a need nothing
satisfies, a deleted or replaced file, a declared module no process maps, a process that
could not be read, or process roles other than declared.

`judge` takes the tree snapshot, the loader configuration and a file-system view as inputs; the
one read of its own is the bytes of a file the emulation predicts but no process maps, to tell
origin drift (the same bytes elsewhere) from another library.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.errors import NotObservable
from repro_serving.builder.hashing import sha256_file
from repro_serving.builder.native.dispatch import (
    Dispatch,
    DispatchKind,
    HostCapabilities,
    Prediction,
    predict,
)
from repro_serving.builder.native.elf import ElfError, ElfInfo
from repro_serving.builder.native.kernels import (
    Category,
    KernelSet,
    Origin,
    Platform,
    classify,
    origin_of,
)
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
from repro_serving.builder.native.modules import is_module_file, module_file_description
from repro_serving.builder.native.processes import MappedFile, ProcessSnapshot, TreeSnapshot
from repro_serving.builder.native.procmaps import FileId

DEFAULT_FORBIDDEN_ENV = ("LD_PRELOAD", "LD_AUDIT")

# Extension-module file suffixes of this interpreter family (e.g. .cpython-311-x86_64-linux-gnu.so,
# .abi3.so, .so): how a module name becomes a file name.


@dataclass(frozen=True)
class AuditPolicy:
    """What must hold of the tree: allowed roots (real paths), declared modules and roles."""

    allowed_roots: tuple[str, ...]
    modules: tuple[str, ...] = ()
    forbidden_env: tuple[str, ...] = DEFAULT_FORBIDDEN_ENV
    roles: Mapping[str, int] = field(default_factory=dict)
    preload: tuple[str, ...] = ()
    """Real paths the stack itself may put in LD_PRELOAD; any other entry is drift."""
    platforms: tuple[Platform, ...] = ()
    """Platform sets (`kernels/`): a driver library from the driver's roots or a kernel
    compiled at run time into a JIT directory may lie outside the allowed roots; its hash is
    still recorded."""
    kernel_sets: tuple[KernelSet, ...] = ()
    """Kernel sets whose pinned modules and libraries every mapping is judged against."""
    values: Mapping[str, str] = field(default_factory=dict)
    """Placeholder values on this host (real paths), to expand the kernel sets' pins."""
    dispatches: Mapping[str, Dispatch] = field(default_factory=dict)
    """The kernel sets' run-time choices by the name they choose for (`builder.native.dispatch`): a
    declared module with one is expected as the variant `host` selects, and no other."""
    host: HostCapabilities | None = None
    """The facts of the host the tree runs on, for `dispatches`."""

    def predictions(self, env: Mapping[str, str]) -> dict[str, Prediction]:
        """The variant of each declared module that has a module dispatch, on `host`, for a
        stack started with `env`."""
        if self.host is None:
            return {}
        return {
            module: predict(self.dispatches[module], self.host, env)
            for module in self.modules
            if module in self.dispatches and self.dispatches[module].kind is DispatchKind.MODULE
        }


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
    for process in tree.processes:
        audit, found = _audit_process(process, tree.files, elves, policy, loader)
        processes.append(audit)
        drifts.extend(found)
    drifts.extend(_file_drifts(tree))
    drifts.extend(_pin_drifts(tree, policy))
    drifts.extend(_module_drifts(tree, policy))
    drifts.extend(_role_drifts(tree, policy.roles))
    return AuditReport(tree.root_pid, tuple(processes), tuple(tree.files.values()), tuple(drifts))


def under_roots(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


# --- one process ---------------------------------------------------------------------------


@dataclass
class _Explainer:
    """Accumulates the verdicts of one process while its closures are replayed."""

    process: ProcessSnapshot
    mapped: dict[FileId, MappedFile]
    names: Mapping[FileId, frozenset[str]]
    """Each mapped object's file name and SONAME: the names a need can match it by."""
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

    def _mapped_by_name(self, need: str) -> MappedFile | None:
        base = posixpath.basename(need)
        for file_id in self.process.files:
            if file_id in self.mapped and base in self.names.get(file_id, ()):
                return self.mapped[file_id]
        return None


def _origin_drift(explainer: _Explainer, resolution: Resolution, other: MappedFile) -> Drift:
    predicted_sha = _sha_of_path(resolution.path)
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


def _sha_of_path(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        return sha256_file(path)
    except NotObservable:
        return None


def _audit_process(
    process: ProcessSnapshot,
    files: Mapping[FileId, MappedFile],
    elves: Mapping[FileId, ElfInfo | None],
    policy: AuditPolicy,
    loader: LoaderInputs,
) -> tuple[ProcessAudit, list[Drift]]:
    mapped = {fid: files[fid] for fid in process.files if fid in files and files[fid].is_elf}
    names = {fid: _names(files[fid].path, elves.get(fid)) for fid in mapped}
    explainer = _Explainer(process, mapped, names)
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
    explainer.drifts.extend(_env_drifts(process, policy, loader.fs))
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
    explainer.drifts.extend(_root_drifts(explainer, policy))
    return _process_audit(process, explainer), explainer.drifts


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
        if closure.order:
            explainer.explain(closure.order[0], "dlopen", "loaded at run time (dlopen)", None)
        by_path = _loading_resolutions(dependencies)
        for obj in closure.order[1:]:
            resolution = by_path.get(obj.path)
            if resolution is not None:
                explainer.explain(obj, "dependency", resolution.reason, resolution.requester)
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
    )


# --- drifts that need no emulation ----------------------------------------------------------


def _env_drifts(process: ProcessSnapshot, policy: AuditPolicy, fs: FileSystem) -> list[Drift]:
    drifts = []
    for name in policy.forbidden_env:
        value = process.environ.get(name)
        if value is None:
            continue
        if name == "LD_PRELOAD" and _declared_preload(value, policy.preload, fs):
            continue
        expected = f"{name} unset"
        if name == "LD_PRELOAD" and policy.preload:
            expected += " or only " + ":".join(policy.preload)
        drifts.append(
            Drift(
                kind=DriftKind.FORBIDDEN_ENV,
                subject=f"pid {process.pid} ({process.role}): {name}",
                expected=expected,
                observed=f"{name}={value}",
                why="this variable changes what the loader maps outside every pin",
            )
        )
    return drifts


def _declared_preload(value: str, declared: Sequence[str], fs: FileSystem) -> bool:
    """Every entry of LD_PRELOAD (split as rtld.c does) is a declared preload library."""
    entries = [entry for entry in re.split(r"[: \t]", value) if entry]
    return all(fs.realpath(entry) in declared for entry in entries)


def _root_drifts(explainer: _Explainer, policy: AuditPolicy) -> list[Drift]:
    drifts = []
    roots = policy.allowed_roots
    for file_id, mapped in explainer.mapped.items():
        verdict = explainer.verdicts.get(file_id)
        rule = verdict.rule if verdict else "unexplained"
        if rule == "preload" and mapped.path not in policy.preload:
            drifts.append(
                Drift(
                    kind=DriftKind.UNEXPECTED_MAPPING,
                    subject=explainer.subject(mapped.path),
                    expected="no preloaded library",
                    observed=f"{mapped.path} (sha256 {mapped.sha256})",
                    why=f"loaded by {verdict.reason if verdict else 'LD_PRELOAD'}",
                )
            )
        elif not under_roots(mapped.path, roots) and not _platform_allows(
            mapped.path, rule, policy.platforms
        ):
            drifts.append(
                Drift(
                    kind=DriftKind.UNEXPECTED_MAPPING,
                    subject=explainer.subject(mapped.path),
                    expected="a library under " + ", ".join(roots),
                    observed=f"{mapped.path} ({rule})",
                    why="mapped from outside the allowed roots",
                )
            )
    return drifts


def _platform_allows(path: str, rule: str, platforms: Sequence[Platform]) -> bool:
    allowed = (Category.DRIVER, Category.JIT)
    return any(classify(path, rule, platform)[0] in allowed for platform in platforms)


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


def _pin_drifts(tree: TreeSnapshot, policy: AuditPolicy) -> list[Drift]:
    """Every mapped ELF against the kernel sets' pins: other bytes at a pinned path, pinned bytes
    mapped from elsewhere (origin drift), an external module the set does not declare."""
    drifts = []
    for mapped in tree.files.values():
        if not mapped.is_elf or mapped.sha256 is None:
            continue
        for kernel_set in policy.kernel_sets:
            verdict = origin_of(mapped.path, mapped.sha256, kernel_set, policy.values)
            if not verdict.drift:
                continue
            drifts.append(
                Drift(
                    kind=DriftKind.ORIGIN_DRIFT
                    if verdict.origin is Origin.ORIGIN_DRIFT
                    else DriftKind.UNEXPECTED_MAPPING,
                    subject=mapped.path,
                    expected=verdict.entry,
                    observed=f"{verdict.origin.value} (sha256 {mapped.sha256})",
                    why=f"kernel set {kernel_set.name} pins what this mapping must be",
                )
            )
    return drifts


def _module_drifts(tree: TreeSnapshot, policy: AuditPolicy) -> list[Drift]:
    """A declared module no process maps did not run. A module the host dispatches is expected
    as the variant the set predicts for this host; any other variant mapped ran other code."""
    elf_paths = [f.path for f in tree.files.values() if f.is_elf]
    root = next((p for p in tree.processes if p.pid == tree.root_pid), None)
    predictions = policy.predictions(root.environ if root is not None else {})
    drifts = []
    for module in policy.modules:
        prediction = predictions.get(module)
        expected = (
            module if prediction is None or prediction.variant is None else prediction.variant
        )
        if not _maps_module(elf_paths, expected):
            drifts.append(
                Drift(
                    kind=DriftKind.NOT_MAPPED,
                    subject=module,
                    expected=f"{expected} mapped by a process of the tree"
                    + (f" (selected here: {prediction.describe()})" if prediction else ""),
                    observed=f"no process maps a file {module_file_description(expected)}",
                    why="a declared module that no process maps did not run",
                )
            )
        if prediction is None:
            continue
        for variant in policy.dispatches[module].names():
            if variant != expected and _maps_module(elf_paths, variant):
                drifts.append(
                    Drift(
                        kind=DriftKind.DISPATCH,
                        subject=module,
                        expected=f"{expected} only: {prediction.describe()}",
                        observed=f"{variant} mapped",
                        why="the process runs a kernel variant this host does not select",
                    )
                )
    return drifts


def _maps_module(elf_paths: Sequence[str], module: str) -> bool:
    return any(is_module_file(path, module) for path in elf_paths)


def _role_drifts(tree: TreeSnapshot, roles: Mapping[str, int]) -> list[Drift]:
    counts: dict[str, int] = {}
    for process in tree.processes:
        counts[process.role] = counts.get(process.role, 0) + 1
    return [
        Drift(
            kind=DriftKind.PROCESS_ROLES,
            subject=f"role {role}",
            expected=str(roles.get(role, 0)),
            observed=str(counts.get(role, 0)),
            why="the server runs another process layout than declared",
        )
        for role in sorted(set(roles) | set(counts))
        if roles and roles.get(role, 0) != counts.get(role, 0)
    ]
