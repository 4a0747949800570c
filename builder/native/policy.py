"""Live native facts: a running tree judged against a policy, from flags or from a manifest.

The assembly of the live audit: this host's loader configuration and cache, the snapshot of
the tree, and the policy (allowed roots, declared modules and preloads, roles). The judgement
itself is `builder.native.audit.judge`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from rich.progress import Progress, SpinnerColumn, TextColumn

from builder.manifest import Manifest
from builder.native.audit import AuditPolicy, AuditReport, LoaderInputs, judge
from builder.native.dispatch import HostCapabilities
from builder.native.kernels import KERNELS_DIR, KernelSet, dispatches
from builder.native.loaderhost import HostFileSystem, RememberingFileSystem, host_config, read_cache
from builder.native.processes import HashMemo, TreeSnapshot, snapshot_tree
from builder.observe.python import expand_all, path_values


def policy_from_manifest(
    manifest: Manifest, host: HostCapabilities, *, kernels: Path = KERNELS_DIR
) -> AuditPolicy:
    """The manifest's `[native]` and `[launch.processes]` with placeholders expanded, its kernel
    sets read from `kernels`, dispatch predicted for `host`."""
    values = path_values(manifest)
    values |= {f"source.{s.name}": str(manifest.resolve(s.path)) for s in manifest.sources}
    native = manifest.native
    kernel_sets = tuple(KernelSet.load(name, kernels) for name in native.kernel_sets)
    return AuditPolicy(
        allowed_roots=_real(expand_all(native.allowed_roots, values)),
        modules=native.modules,
        forbidden_env=native.forbidden_environment,
        roles=dict(manifest.launch.processes),
        preload=_real(expand_all(native.preload, values)),
        platforms=tuple(kernel_set.platform for kernel_set in kernel_sets),
        kernel_sets=kernel_sets,
        # The kernel reports mapped files by their real paths: pins expand to real paths too.
        values={name: str(Path(value).resolve()) for name, value in values.items()},
        dispatches={name: d for name, (_, d) in dispatches(kernel_sets).items()},
        host=host,
    )


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
    """Without a manifest: the roots given, else the loader's system directories and the
    prefix (`bin/..`) of every executable, both the real one and the one it was started as.
    A module a kernel set dispatches is expected as the variant it predicts for `host`."""
    roots = tuple(allowed_roots) or (*system_dirs, *_executable_prefixes(tree))
    sets = tuple(KernelSet.load(name) for name in kernel_sets)
    return AuditPolicy(
        allowed_roots=_real(roots),
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


def _executable_prefixes(tree: TreeSnapshot) -> list[str]:
    prefixes = {str(Path(p.exe).parent.parent) for p in tree.processes if p.exe}
    prefixes |= {
        str(Path(p.cmdline[0]).parent.parent)
        for p in tree.processes
        if p.cmdline and p.cmdline[0].startswith("/") and Path(p.cmdline[0]).parent.name == "bin"
    }
    return sorted(prefixes)


def _real(paths: Sequence[str]) -> tuple[str, ...]:
    return tuple(str(Path(path).resolve()) for path in paths)
