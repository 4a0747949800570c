"""The judgements of the live audit that need no loader emulation, on plain data: a process's
environment, each mapping against the allowed roots and declared preloads, the kernel sets'
pins, the declared modules and their dispatched variants, the roles. `judge`
(`builder.native.audit`) applies them to a live tree; `repro verify` applies the same functions
again to a sealed audit (`builder.native.sealedaudit`), so the two can never judge apart.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.native.dispatch import (
    Dispatch,
    DispatchKind,
    HostCapabilities,
    Prediction,
    predict,
)
from repro_serving.builder.native.kernels import (
    Category,
    KernelSet,
    Origin,
    Platform,
    classify,
    origin_of,
)
from repro_serving.builder.native.modules import is_module_file, module_file_description

DEFAULT_FORBIDDEN_ENV = ("LD_PRELOAD", "LD_AUDIT")


@dataclass(frozen=True)
class Launched:
    """The environment a tree was started with, and where that is stated (`run.json env`)."""

    env: Mapping[str, str]
    where: str
    private: frozenset[str] = frozenset()
    """Variables each start holds of its own (its HOME and temporary directory), which `env`
    states for another start: the root's value is taken as the tree's, and judged elsewhere."""


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
    launched: Launched | None = None
    """The environment the tree was started with, where it is known (`environment_drifts`);
    without it the root's own environment is what every other process inherited."""

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


def under_roots(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


# --- drifts that need no emulation: judged live, and again by `repro verify` on the sealed audit


KNOWN_RULES: Final = ("executable", "startup", "preload", "dlopen", "dependency", "unexplained")
"""Every rule an audit gives a mapping (`ObjectVerdict.rule`)."""


class Explained(Protocol):
    """One mapped ELF of one process with its rule: live (`ObjectVerdict`) or sealed."""

    @property
    def path(self) -> str: ...
    @property
    def sha256(self) -> str | None: ...
    @property
    def rule(self) -> str: ...
    @property
    def reason(self) -> str: ...


def env_drifts(
    pid: int,
    role: str,
    environ: Mapping[str, str],
    policy: AuditPolicy,
    realpath: Callable[[str], str] = posixpath.normpath,
) -> list[Drift]:
    """The process's environment against the policy: a forbidden variable (LD_PRELOAD naming
    only declared preloads excepted), and a directory of LD_LIBRARY_PATH outside the allowed
    roots, where the loader would look first for every need. `realpath` resolves a path on the
    host the process ran on (live); offline a path is judged as written, normalised."""
    drifts = []
    for name in policy.forbidden_env:
        value = environ.get(name)
        if value is None:
            continue
        if name == "LD_PRELOAD" and _declared_preload(value, policy.preload, realpath):
            continue
        expected = f"{name} unset"
        if name == "LD_PRELOAD" and policy.preload:
            expected += " or only " + ":".join(policy.preload)
        drifts.append(
            Drift(
                kind=DriftKind.FORBIDDEN_ENV,
                subject=f"pid {pid} ({role}): {name}",
                expected=expected,
                observed=f"{name}={value}",
                why="this variable changes what the loader maps outside every pin",
            )
        )
    # An empty entry is the process's working directory: what it maps from there is judged
    # by the roots, as every mapping is.
    for entry in (e for e in re.split(r"[:;]", environ.get("LD_LIBRARY_PATH", "")) if e):
        directory = realpath(entry) if entry.startswith("/") else entry
        if under_roots(directory, policy.allowed_roots) or any(
            directory in _roots_of(platform) for platform in policy.platforms
        ):
            continue
        drifts.append(
            Drift(
                kind=DriftKind.FORBIDDEN_ENV,
                subject=f"pid {pid} ({role}): LD_LIBRARY_PATH",
                expected="directories under " + ", ".join(policy.allowed_roots),
                observed=f"{entry} ({directory})" if directory != entry else entry,
                why="the loader searches this directory before any RUNPATH for every need",
            )
        )
    return drifts


def _roots_of(platform: Platform) -> tuple[str, ...]:
    return tuple(posixpath.normpath(root) for root in platform.driver_roots)


def _declared_preload(value: str, declared: Sequence[str], realpath: Callable[[str], str]) -> bool:
    """Every entry of LD_PRELOAD (split as rtld.c does) is a declared preload library."""
    entries = [entry for entry in re.split(r"[: \t]", value) if entry]
    return all(realpath(entry) in declared for entry in entries)


JIT_ENV: Final = ("HOME", "TMPDIR", "TEMP", "TMP")
"""What places a process's JIT directories (`builder.native.kernels.jit_directories`)."""


def inherited_environments(
    processes: Iterable[tuple[int, int, Mapping[str, str]]],
) -> dict[int, dict[str, str]]:
    """Each process's (pid, ppid, environ) environment as far as it places JIT directories: its
    own HOME and temporary directory, or, where it states none of them (a process that renamed
    itself cleared the start of its environment block), its parent's, which it inherited."""
    by_pid = {pid: (ppid, environ) for pid, ppid, environ in processes}
    found: dict[int, dict[str, str]] = {}

    def resolve(pid: int, seen: frozenset[int]) -> dict[str, str]:
        if pid in found:
            return found[pid]
        ppid, environ = by_pid[pid]
        own = {name: environ[name] for name in JIT_ENV if name in environ}
        if not own and ppid in by_pid and ppid not in seen:
            own = resolve(ppid, seen | {pid})
        found[pid] = own
        return own

    for pid in by_pid:
        resolve(pid, frozenset())
    return found


def root_drifts(
    pid: int,
    role: str,
    objects: Iterable[Explained],
    policy: AuditPolicy,
    environ: Mapping[str, str],
) -> list[Drift]:
    """Each mapping of one process (whose environment is `environ`) against the allowed roots,
    the platform sets' places and the declared preloads."""
    drifts = []
    roots = policy.allowed_roots
    for obj in objects:
        subject = f"pid {pid} ({role}): {obj.path}"
        if obj.rule == "preload" and obj.path not in policy.preload:
            drifts.append(
                Drift(
                    kind=DriftKind.UNEXPECTED_MAPPING,
                    subject=subject,
                    expected="no preloaded library",
                    observed=f"{obj.path} (sha256 {obj.sha256})",
                    why=f"loaded by {obj.reason or 'LD_PRELOAD'}",
                )
            )
        elif not under_roots(obj.path, roots) and not _platform_allows(
            obj.path, obj.rule, policy.platforms, environ
        ):
            drifts.append(
                Drift(
                    kind=DriftKind.UNEXPECTED_MAPPING,
                    subject=subject,
                    expected="a library under " + ", ".join(roots),
                    observed=f"{obj.path} ({obj.rule})",
                    why="mapped from outside the allowed roots",
                )
            )
    return drifts


def _platform_allows(
    path: str, rule: str, platforms: Sequence[Platform], environ: Mapping[str, str]
) -> bool:
    allowed = (Category.DRIVER, Category.JIT)
    return any(classify(path, rule, platform, environ)[0] in allowed for platform in platforms)


class TreeProcess(Protocol):
    """One process of a tree as the tree-wide rules read it: live (`ProcessSnapshot`) or sealed
    (`ProcessEvidence`)."""

    @property
    def pid(self) -> int: ...
    @property
    def role(self) -> str: ...
    @property
    def environ(self) -> Mapping[str, str]: ...


def tree_rule_drifts(
    files: Sequence[tuple[str, str | None]],
    processes: Sequence[TreeProcess],
    root_pid: int,
    policy: AuditPolicy,
) -> list[Drift]:
    """What the tree as a whole must hold, for a live audit and a sealed one alike: each
    process's environment against the one the tree was started with (`environment_drifts`), its
    mapped ELFs (path and sha256) against the kernel sets' pins (`pin_drifts`), the declared modules
    mapped as the root's environment selects them (`module_drifts`), its processes by role
    (`role_drifts`)."""
    root = next((p for p in processes if p.pid == root_pid), None)
    launched = policy.launched or Launched(root.environ if root else {}, "the root's environment")
    return [
        *environment_drifts(processes, root_pid, launched),
        *pin_drifts(files, policy),
        *module_drifts([path for path, _ in files], root.environ if root else {}, policy),
        *role_drifts([p.role for p in processes], policy.roles),
    ]


SET_BY_THE_STACK: Final = re.compile(r"^VLLM_[A-Z0-9_]+$")
"""What a process of the stack may add for its children beyond the environment it was started
with: vLLM's own settings (`VLLM_WORKER_MULTIPROC_METHOD`)."""

JUDGED_BY_CONTENT: Final = ("LD_PRELOAD", "LD_LIBRARY_PATH")
"""What a process of the stack may add or change for its children (opencv's cv2 prepends its
own library directory to LD_LIBRARY_PATH when imported): `env_drifts` judges every entry of
them in every process (a declared preload; a directory under the allowed roots or a driver
root), and the loader emulation searches each process's own."""


def environment_drifts(
    processes: Sequence[TreeProcess], root_pid: int, launched: Launched
) -> list[Drift]:
    """Each process's environment against the one the tree was started with: the root holds
    exactly the variables the audit keeps of it (`native.processes.LOADER_ENV`), `private` ones
    at its own value; every other process keeps each at that value and adds or changes none but
    `SET_BY_THE_STACK` (added) and `JUDGED_BY_CONTENT`. Every other variable the audit keeps
    (where Python imports from and how it runs, which code a kernel library or glibc selects,
    where run-time kernels are compiled) is the one the tree was started with. A process that
    renames itself may have cleared some: one missing is not a drift."""
    root = next((p for p in processes if p.pid == root_pid), None)
    own = {n: v for n, v in (root.environ if root else {}).items() if n in launched.private}
    drifts = []
    for process in processes:
        child = process is not root
        for name, value in sorted(process.environ.items()):
            if name in own and not child:
                continue
            stated = own[name] if name in own else launched.env.get(name)
            if stated == value or (
                child
                and (
                    name in JUDGED_BY_CONTENT
                    or (stated is None and SET_BY_THE_STACK.match(name) is not None)
                )
            ):
                continue
            drifts.append(
                Drift(
                    kind=DriftKind.ENVIRONMENT,
                    subject=f"pid {process.pid} ({process.role}): {name}",
                    expected=("unset" if stated is None else repr(stated))
                    + f" ({'the root' if name in own else launched.where})",
                    observed=repr(value),
                    why="a process runs with another environment than the tree was started with",
                )
            )
    return drifts


def pin_drifts(files: Iterable[tuple[str, str | None]], policy: AuditPolicy) -> list[Drift]:
    """Every mapped ELF of the tree (its path and sha256, each distinct file once) against the
    kernel sets' pins: other bytes at a pinned path, pinned bytes mapped from elsewhere (origin
    drift), an external module the set does not declare."""
    drifts = []
    for path, sha256 in files:
        if sha256 is None:
            continue
        for kernel_set in policy.kernel_sets:
            verdict = origin_of(path, sha256, kernel_set, policy.values)
            if not verdict.drift:
                continue
            drifts.append(
                Drift(
                    kind=DriftKind.ORIGIN_DRIFT
                    if verdict.origin is Origin.ORIGIN_DRIFT
                    else DriftKind.UNEXPECTED_MAPPING,
                    subject=path,
                    expected=verdict.entry,
                    observed=f"{verdict.origin.value} (sha256 {sha256})",
                    why=f"kernel set {kernel_set.name} pins what this mapping must be",
                )
            )
    return drifts


def module_drifts(
    elf_paths: Sequence[str], root_environ: Mapping[str, str], policy: AuditPolicy
) -> list[Drift]:
    """A declared module no process maps did not run. A module the host dispatches is expected
    as the variant the set predicts for this host (for a stack started with the root's
    environment); any other variant mapped ran other code."""
    predictions = policy.predictions(root_environ)
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


def role_drifts(process_roles: Iterable[str], roles: Mapping[str, int]) -> list[Drift]:
    """The tree's processes by role against `[launch.processes]`."""
    counts: dict[str, int] = {}
    for role in process_roles:
        counts[role] = counts.get(role, 0) + 1
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
