"""Sealing: write `repro/<name>/` from a manifest, a lock and evidence, signed, all or nothing.

Everything is written into a temporary sibling `.<name>.sealing-*` in the same parent: the content
files, SHA256SUMS, for a sealed run test-result.dsse.json (its gates' verdicts as an in-toto
test-result statement), statement.json and, last, statement.dsse.json (`builder.sealing.statement`
says what each statement holds; both are signed by the same key); each file and then each
directory is fsynced, the directory is renamed into place and the parent fsynced. A kill at any
point leaves either no bundle or the previous one at the final path. A leftover temporary
directory never verifies: the signed statement names the bundle, and its directory has another
name. An existing bundle is replaced only when asked, and then by one atomic exchange
(renameat2 RENAME_EXCHANGE), or where the file system cannot exchange, by two renames between
which the final path is briefly absent, never half-written.

A seal holds an exclusive lock (flock) on its temporary directory until it is done, and the
next seal of the same bundle name removes every `.<name>.sealing-*` directory beside the bundle
that no live seal holds, saying so through its progress: what a killed seal left is cleaned, a
running seal's work is not, and no other directory is touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from repro_serving.builder.canonical import canonical_json
from repro_serving.builder.errors import BadInput, NotObservable
from repro_serving.builder.hashing import sha256_file
from repro_serving.builder.readers import EVIDENCE_LIMIT, describe_mode, read_bytes
from repro_serving.builder.sealing import dsse
from repro_serving.builder.sealing.atomic import fsync_dir, move_into_place
from repro_serving.builder.sealing.bundle import (
    ENVELOPE,
    EVIDENCE_DIR,
    KERNEL_SETS_DIR,
    LAUNCHER,
    LOCK,
    MANIFEST,
    ORACLE_DIR,
    README,
    SHA256SUMS,
    STATEMENT,
    TEST_RESULT_ENVELOPE,
    TOOLS_DIR,
    check_bundle_name,
    path_problem,
    render_sha256sums,
)
from repro_serving.builder.sealing.keys import SigningKey
from repro_serving.builder.sealing.statement import (
    BUILD_TYPE,
    RUN_BUILD_TYPE,
    GateOutcome,
    ResourceDescriptor,
    gate_results_statement,
    statement_for,
)

FILE_MODE = 0o644
LAUNCHER_MODE = 0o755
DIR_MODE = 0o755

Progress = Callable[[str], None]
"""Called after each step of sealing with what was done; it may stop the process there."""


def _no_progress(step: str) -> None:
    """Sealing without a listener."""


@dataclass(frozen=True)
class Handoff:
    """What lets a bundle run where repro never was (`builder.handoff`): `launcher`, copied to
    `launch` and made executable; the files of tools/ by their name there; and `readme`, which
    makes README.md from the staged bundle (every file written but README.md, SHA256SUMS and the
    seal files) before SHA256SUMS is written, and may refuse by raising."""

    launcher: Path
    tools: Mapping[str, Path]
    readme: Callable[[Path], bytes]


@dataclass(frozen=True)
class BundleContent:
    """What a build hands to the sealer.

    `oracle`, `evidence` and `kernels` map a path under oracle/, evidence/ or kernels/ to a file
    or a directory to copy there (a directory with every file below it); symlinks and special
    files are refused.
    """

    name: str
    manifest: Path
    manifest_source: str
    """The manifest's path as it was named to `repro build`, recorded in the provenance."""
    lock: Mapping[str, Any]
    oracle: Mapping[str, Path] = field(default_factory=lambda: MappingProxyType({}))
    evidence: Mapping[str, Path] = field(default_factory=lambda: MappingProxyType({}))
    kernels: Mapping[str, Path] = field(default_factory=lambda: MappingProxyType({}))
    handoff: Handoff | None = None
    """Every bundle `repro build` seals has one; a sealed run has none."""
    run: bool = False
    """A replay's run directory, sealed by `repro launch` with the run build type."""
    dependencies: tuple[ResourceDescriptor, ...] = ()
    """What the build resolved, for the provenance: `statement.resolved_dependencies` of the
    lock (`repro verify` recomputes it from the sealed lock and refuses any difference)."""
    gates: GateOutcome | None = None
    """A sealed run's gate verdicts, for its test-result statement; a sealed run has them, a
    bundle none."""


@dataclass(frozen=True)
class SealedBundle:
    path: Path
    key_id: str
    digests: Mapping[str, str]
    """Every sealed path (all files but the seal files, `bundle.SEAL_FILES`) to its sha256."""


def seal(
    content: BundleContent,
    key: SigningKey,
    parent: Path,
    *,
    force: bool = False,
    progress: Progress | None = None,
) -> SealedBundle:
    """Seal `content` with `key` as `parent/<name>/`; refuse an existing one unless `force`.

    `progress`, if given, is called after each step with what was done."""
    progress = progress or _no_progress
    if content.run != (content.gates is not None):
        raise BadInput(
            "a sealed run carries its gates' verdicts, and only a sealed run",
            where=content.name,
            expected="gates with run, neither without",
            found=f"run {content.run}, gates {content.gates is not None}",
        )
    final = parent / check_bundle_name(content.name)
    check_destination(final, force=force)
    try:
        digests = _seal_into(content, key, final, progress)
    except OSError as error:
        raise NotObservable(
            "cannot write the bundle",
            where=error.filename or str(final),
            found=error.strerror or type(error).__name__,
            hint="check that the directory to seal into is writable and has room",
        ) from error
    return SealedBundle(final, key.key_id, MappingProxyType(digests))


def _seal_into(
    content: BundleContent, key: SigningKey, final: Path, progress: Progress
) -> dict[str, str]:
    _remove_leftovers(final.parent, content.name, progress)
    workdir = Path(tempfile.mkdtemp(prefix=_workdir_prefix(content.name), dir=final.parent))
    progress("created the temporary directory")
    with _locked(workdir, wait=True):
        try:
            workdir.chmod(DIR_MODE)
            digests = _write_bundle(content, key, workdir, progress)
            _sync_tree(workdir, progress)
            replaced = move_into_place(workdir, final, progress, what="bundle")
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        if replaced is not None:
            shutil.rmtree(replaced)
            fsync_dir(final.parent)
            progress("removed the replaced bundle")
    return digests


def _workdir_prefix(name: str) -> str:
    return f".{name}.sealing-"


def _remove_leftovers(parent: Path, name: str, progress: Progress) -> None:
    """Remove the temporary directories killed seals of `name` left in `parent`.

    Only `.<name>.sealing-<suffix>` directories, the suffix as tempfile makes it (letters, digits
    and '_', never '.' nor '-'), so a bundle whose name merely starts like this one keeps its
    own; and only those no live seal holds locked."""
    ours = re.compile(re.escape(_workdir_prefix(name)) + r"[A-Za-z0-9_]+")
    with os.scandir(parent) as entries:
        leftovers = sorted(
            entry.name
            for entry in entries
            if ours.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False)
        )
    for leftover in leftovers:
        try:
            with _locked(parent / leftover, wait=False) as held:
                if held:
                    shutil.rmtree(parent / leftover)
                    progress(f"removed {leftover}, left by an interrupted seal")
        except OSError as error:  # never a reason not to seal: it is only left for later
            progress(f"could not remove {leftover}: {error.strerror or type(error).__name__}")


@contextlib.contextmanager
def _locked(directory: Path, *, wait: bool) -> Iterator[bool]:
    """Hold an exclusive lock on `directory` for the block; False when another holds it and
    `wait` is not asked. A killed process holds no lock: the kernel drops it with the process."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(descriptor)


def check_destination(final: Path, *, force: bool) -> None:
    if not final.parent.is_dir():
        raise BadInput("the directory to seal into does not exist", where=str(final.parent))
    if final.is_symlink() or (final.exists() and not final.is_dir()):
        raise BadInput(
            "the bundle path is taken by something that is not a directory",
            where=str(final),
            hint="move it away; repro replaces only a bundle directory",
        )
    if final.exists() and not force:
        raise BadInput(
            "the bundle already exists",
            where=str(final),
            hint="pass --force to replace it (atomically), or choose another bundle name",
        )


def _write_bundle(
    content: BundleContent, key: SigningKey, workdir: Path, progress: Progress
) -> dict[str, str]:
    _copy_file(content.manifest, workdir / MANIFEST, progress, MANIFEST)
    _write_file(workdir / LOCK, canonical_json(dict(content.lock)), progress, LOCK)
    for directory, sources in (
        (ORACLE_DIR, content.oracle),
        (EVIDENCE_DIR, content.evidence),
        (KERNEL_SETS_DIR, content.kernels),
    ):
        for name in sorted(sources):
            _copy_source(sources[name], workdir, f"{directory}/{_check_name(name)}", progress)
    if content.handoff is not None:
        _write_handoff(content.handoff, workdir, progress)
    digests = {path: sha256_file(workdir / path) for path in _files_below(workdir)}
    _write_file(workdir / SHA256SUMS, render_sha256sums(digests), progress, SHA256SUMS)
    digests[SHA256SUMS] = sha256_file(workdir / SHA256SUMS)
    if content.gates is not None:
        results = gate_results_statement(digests, content.gates).to_json()
        envelope = dsse.sign(results, key).to_json()
        _write_file(workdir / TEST_RESULT_ENVELOPE, envelope, progress, TEST_RESULT_ENVELOPE)
    build_type = RUN_BUILD_TYPE if content.run else BUILD_TYPE
    statement = statement_for(
        content.name, content.manifest_source, digests, build_type, content.dependencies
    ).to_json()
    _write_file(workdir / STATEMENT, statement, progress, STATEMENT)
    envelope = dsse.sign(statement, key).to_json()
    _write_file(workdir / ENVELOPE, envelope, progress, ENVELOPE)
    return digests


def _write_handoff(handoff: Handoff, workdir: Path, progress: Progress) -> None:
    for name in sorted(handoff.tools):
        _copy_file(handoff.tools[name], workdir / TOOLS_DIR / _check_name(name), progress, name)
    data = read_bytes(handoff.launcher, limit=EVIDENCE_LIMIT, what="the launcher")
    _write_file(workdir / LAUNCHER, data, progress, LAUNCHER, mode=LAUNCHER_MODE)
    _write_file(workdir / README, handoff.readme(workdir), progress, README)


def _check_name(name: str) -> str:
    problem = path_problem(name)
    if problem is not None:
        raise BadInput(
            "an oracle or evidence name cannot be a path inside a bundle",
            where=repr(name),
            found=problem,
            hint="use a relative path with '/' between plain parts",
        )
    return name


def _copy_source(source: Path, workdir: Path, target: str, progress: Progress) -> None:
    """Copy a file, or every file below a directory, to `target` inside the bundle."""
    info = _lstat(source)
    if stat.S_ISREG(info.st_mode):
        # what was looked at is what is read: a symlink swapped in since is refused
        _copy_file(source, workdir / target, progress, target, follow_symlinks=False)
    elif stat.S_ISDIR(info.st_mode):
        for child in sorted(entry.name for entry in source.iterdir()):
            _copy_source(source / child, workdir, f"{target}/{_check_name(child)}", progress)
    else:
        _refuse_not_regular(source, info)


def _lstat(path: Path) -> os.stat_result:
    try:
        return path.lstat()
    except OSError as error:
        raise BadInput(
            "a file to seal cannot be read",
            where=str(path),
            found=error.strerror or type(error).__name__,
        ) from error


def _refuse_not_regular(path: Path, info: os.stat_result) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise BadInput(
            "a symlink cannot be sealed",
            where=str(path),
            found=f"a symlink to {path.readlink()}",
            hint="a bundle holds regular files only: copy the file it points to instead",
        )
    raise BadInput(
        "only regular files and directories can be sealed",
        where=str(path),
        found=describe_mode(info.st_mode),
    )


def _copy_file(
    source: Path, target: Path, progress: Progress, name: str, *, follow_symlinks: bool = True
) -> None:
    data = read_bytes(
        source, limit=EVIDENCE_LIMIT, what="a file to seal", follow_symlinks=follow_symlinks
    )
    _write_file(target, data, progress, name)


def _write_file(
    target: Path, data: bytes, progress: Progress, name: str, *, mode: int = FILE_MODE
) -> None:
    """Create `target` (never replacing a file), write `data` and fsync it."""
    target.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    try:
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError as error:
        raise BadInput(
            "two oracle or evidence files would land on one path in the bundle", where=name
        ) from error
    with os.fdopen(descriptor, "wb") as stream:
        os.fchmod(descriptor, mode)
        stream.write(data)
        stream.flush()
        os.fsync(descriptor)
    progress(f"wrote {name}")


def _files_below(root: Path) -> Iterator[str]:
    for directory, _subdirs, files in os.walk(root):
        for name in files:
            yield (Path(directory) / name).relative_to(root).as_posix()


def _sync_tree(root: Path, progress: Progress) -> None:
    """fsync every directory below `root`, deepest first, so every name is durable."""
    directories = sorted((Path(entry[0]) for entry in os.walk(root)), key=lambda d: -len(d.parts))
    for directory in directories:
        directory.chmod(DIR_MODE)
        fsync_dir(directory)
        progress(f"synced {directory.relative_to(root).as_posix()}/")
