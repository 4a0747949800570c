"""Live native facts: a running tree judged against a policy, from flags or from a manifest.

The assembly of the live audit: this host's loader configuration and cache, the snapshot of
the tree, and the policy (allowed roots, declared modules and preloads, roles). The judgement
itself is `builder.native.audit.judge`. Without a manifest the allowed roots are the Python
environment each process runs in, found as its interpreter found it (`builder.native.pyenv`),
its base installation and the loader's system directories, each named once by its real path.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.progress import Progress, SpinnerColumn, TextColumn

from repro_serving.builder.documents.manifest import Manifest
from repro_serving.builder.native.audit import AuditReport, LoaderInputs, judge
from repro_serving.builder.native.dispatch import HostCapabilities
from repro_serving.builder.native.kernels import KERNELS_DIR, KernelSet, dispatches
from repro_serving.builder.native.loaderhost import (
    HostFileSystem,
    RememberingFileSystem,
    host_config,
    read_cache,
)
from repro_serving.builder.native.processes import HashMemo, snapshot_tree
from repro_serving.builder.native.pyenv import Environment, Files, HostFiles, tree_environments
from repro_serving.builder.native.rules import AuditPolicy
from repro_serving.builder.native.sealedaudit import manifest_policy
from repro_serving.builder.native.snapshot import TreeSnapshot
from repro_serving.builder.placeholders import path_values


def policy_from_manifest(
    manifest: Manifest, host: HostCapabilities, *, kernels: Path = KERNELS_DIR
) -> AuditPolicy:
    """The manifest's `[native]` and `[launch.processes]` with placeholders expanded on this
    host, each path by its real path, its kernel sets read from `kernels`, dispatch predicted
    for `host` (`builder.native.sealedaudit.manifest_policy`, which verify applies offline)."""
    values = path_values(manifest)
    values |= {f"source.{s.name}": str(manifest.resolve(s.path)) for s in manifest.sources}
    kernel_sets = tuple(KernelSet.load(name, kernels) for name in manifest.native.kernel_sets)
    return manifest_policy(manifest, values, kernel_sets, host, real=_realpath)


def _realpath(path: str) -> str:
    return str(Path(path).resolve())


@dataclass(frozen=True)
class DefaultRoots:
    """The roots an audit without a manifest allows, and the environments they come from."""

    roots: tuple[str, ...]
    """Real paths, each once: every process's environment and base installation, then the
    loader's system directories."""
    environments: tuple[Environment, ...]


def default_roots(
    tree: TreeSnapshot, system_dirs: Sequence[str], files: Files | None = None
) -> DefaultRoots:
    """The environment each process of `tree` runs in, found as its interpreter found it
    (`builder.native.pyenv`), its base installation, and the loader's system directories."""
    environments = tree_environments(tree, files or HostFiles())
    found = [root for environment in environments for root in environment.roots]
    return DefaultRoots(_real([*found, *system_dirs]), environments)


def policy_from_flags(
    tree: TreeSnapshot,
    system_dirs: Sequence[str],
    *,
    allowed_roots: Sequence[str],
    modules: Sequence[str],
    roles: dict[str, int],
    preload: Sequence[str],
    kernel_sets: Sequence[str] = (),
    host: HostCapabilities | None = None,
) -> AuditPolicy:
    """Without a manifest: the roots given, else `default_roots`. A platform set's driver
    libraries and JIT artifacts are accepted where the set places them; a module a kernel set
    dispatches is expected as the variant it predicts for `host`."""
    roots = _real(allowed_roots) if allowed_roots else default_roots(tree, system_dirs).roots
    sets = tuple(KernelSet.load(name) for name in kernel_sets)
    return AuditPolicy(
        allowed_roots=roots,
        modules=tuple(modules),
        roles=roles,
        preload=_real(preload),
        platforms=tuple(kernel_set.platform for kernel_set in sets),
        dispatches={name: d for name, (_, d) in dispatches(sets).items()},
        host=host,
    )


def observe_tree(pid: int, *, show_progress: bool, memo: HashMemo | None = None) -> TreeSnapshot:
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        transient=True,
        disable=not show_progress or not sys.stderr.isatty(),
    ) as progress:
        task = progress.add_task("reading mappings")
        return snapshot_tree(
            pid,
            progress=lambda path: progress.update(task, description=f"hashing {path}"),
            memo=memo,
        )


def judge_tree(tree: TreeSnapshot, policy: AuditPolicy) -> AuditReport:
    """Judge `tree` with this host's loader, cache and files."""
    fs = RememberingFileSystem(HostFileSystem.here())
    loader = LoaderInputs(config=host_config(), cache=read_cache(), fs=fs)
    return judge(tree, policy, loader)


def _real(paths: Sequence[str]) -> tuple[str, ...]:
    """Each path by its real path, each once, in the order first named (`/lib` and `/usr/lib`
    are one directory on a merged-/usr host, and a policy names it once)."""
    return tuple(dict.fromkeys(str(Path(path).resolve()) for path in paths))
