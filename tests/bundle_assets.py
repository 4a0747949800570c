"""A small real bundle for the sealing, signing and integrity tests.

Its evidence is a few files and one directory of the Laguna 102 tok/s record
(`records/laguna-102tps/`), its oracle the record's teacher text hashes, its manifest
the minimal test manifest; the lock is a tiny document. Sealed with the example key.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from repro_serving.builder import claims
from repro_serving.builder.canonical import canonical_json
from repro_serving.builder.documents.lock import Lock
from repro_serving.builder.errors import ReproError
from repro_serving.builder.sealing import bundle, statement
from repro_serving.builder.sealing.keys import SigningKey, TrustedKeys
from repro_serving.builder.sealing.seal import BundleContent, Handoff, Progress, SealedBundle, seal
from repro_serving.builder.sealing.statement import ResourceDescriptor, resolved_dependencies

REPO_ROOT = Path(__file__).resolve().parent.parent
RECORD = REPO_ROOT / "records" / "laguna-102tps"
RUN = RECORD / "evidence" / "record-run"
EXAMPLE_KEY = REPO_ROOT / "keys" / "example.key"
EXAMPLE_PUB = REPO_ROOT / "keys" / "example.pub"
MANIFEST = REPO_ROOT / "tests" / "manifests" / "minimal.toml"
BUNDLE_NAME = "laguna-mini"


def example_key() -> SigningKey:
    return SigningKey.from_path(EXAMPLE_KEY)


def example_trust() -> TrustedKeys:
    return TrustedKeys.from_key_file(EXAMPLE_PUB)


def lock_document(tag: str = "record") -> dict[str, object]:
    return {
        "schema": "repro.lock/v1",
        "bundle": BUNDLE_NAME,
        "tag": tag,
        "models": {"target": {"config.json": "0" * 64}},
        "note": "température, 102 tok/s",
    }


def content(name: str = BUNDLE_NAME, tag: str = "record") -> BundleContent:
    return BundleContent(
        name=name,
        manifest=MANIFEST,
        manifest_source="tests/manifests/minimal.toml",
        lock=lock_document(tag),
        oracle={"teacher-text-sha256-v1.json": RECORD / "teacher-text-sha256-v1.json"},
        evidence={
            "server.log": RUN / "server.log",
            "metrics/before.prom": RUN / "metrics-before-suite.prom",
            "metrics/after.prom": RUN / "metrics-after-suite.prom",
            "cleanup-status.txt": RUN / "cleanup-status.txt",
            "idle-interval": RUN / "idle-interval",
        },
    )


def seal_example(
    parent: Path,
    *,
    name: str = BUNDLE_NAME,
    tag: str = "record",
    key: SigningKey | None = None,
    force: bool = False,
    progress: Progress | None = None,
) -> SealedBundle:
    parent.mkdir(parents=True, exist_ok=True)
    return seal(content(name, tag), key or example_key(), parent, force=force, progress=progress)


def staged_content(staging: Path, manifest_source: str, *, handoff: bool = True) -> BundleContent:
    """The content of a bundle directory `staging`, every file as it now is (the README too,
    whatever the sealer would write), to seal again."""

    def files(directory: str) -> dict[str, Path]:
        return {p.name: p for p in (staging / directory).iterdir()}

    lock = json.loads((staging / bundle.LOCK).read_text())
    # an attacker's statement agrees with the lock it seals (written canonical by the sealer),
    # so only the claims can refuse
    try:
        sealed_lock = Lock.from_bytes(canonical_json(lock), where=bundle.LOCK)
    except ReproError:
        dependencies: tuple[ResourceDescriptor, ...] = ()
    else:
        dependencies = resolved_dependencies(sealed_lock)
    return BundleContent(
        name=staging.name,
        manifest=staging / bundle.MANIFEST,
        manifest_source=manifest_source,
        lock=lock,
        dependencies=dependencies,
        oracle=files(bundle.ORACLE_DIR),
        evidence=files(bundle.EVIDENCE_DIR),
        kernels=files(bundle.KERNEL_SETS_DIR),
        handoff=Handoff(
            launcher=staging / bundle.LAUNCHER,
            tools=files(bundle.TOOLS_DIR),
            readme=lambda _: (staging / bundle.README).read_bytes(),
        )
        if handoff
        else None,
    )


def resealed(
    source: Path,
    parent: Path,
    edit: Callable[[Path], None],
    manifest_source: str,
    *,
    handoff: bool = True,
) -> Path:
    """The bundle `source` copied, edited, then sealed again with the example key, every file
    as edited: the signature and every digest hold, so only the recomputed claims can refuse."""
    staging = parent / "staging" / source.name
    shutil.copytree(source, staging)
    edit(staging)
    (parent / "out").mkdir()
    with as_its_sealer(staging):
        content = staged_content(staging, manifest_source, handoff=handoff)
        return seal(content, example_key(), parent / "out").path


@contextlib.contextmanager
def as_its_sealer(root: Path) -> Iterator[None]:
    """Seal `root` again as the repro that sealed it would: the version its lock names, not this
    checkout's labelled one, in the statement and in a lock assembled again (unchanged where its
    lock names none)."""
    version = sealer_version(root)
    if version is None:
        yield
        return
    originals = statement.repro_version, claims.repro_version
    statement.repro_version = claims.repro_version = lambda: version
    try:
        yield
    finally:
        statement.repro_version, claims.repro_version = originals


def sealer_version(root: Path) -> str | None:
    """The repro_version the lock of the bundle at `root` names; None when it names none or is
    no JSON (a mutation under test)."""
    path = root / bundle.LOCK
    try:
        lock = json.loads(path.read_bytes()) if path.is_file() and not path.is_symlink() else {}
    except (OSError, ValueError, RecursionError):
        return None
    section = lock.get("bundle") if isinstance(lock, dict) else None
    version = section.get("repro_version") if isinstance(section, dict) else None
    return version if isinstance(version, str) else None


def lock_edit(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    """An edit of a bundle's files (for `resealed`) that changes its lock.json by `change`."""

    def edit(root: Path) -> None:
        lock = json.loads((root / bundle.LOCK).read_text())
        change(lock)
        (root / bundle.LOCK).write_text(json.dumps(lock))

    return edit
