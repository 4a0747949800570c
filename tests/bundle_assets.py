"""A small real bundle for the sealing, signing and integrity tests.

Its evidence is a few files and one directory of the Laguna 102 tok/s record
(`records/laguna-102tps/`), its oracle the record's teacher text hashes, its manifest
the minimal test manifest; the lock is a tiny document. Sealed with the example key.
"""

from __future__ import annotations

from pathlib import Path

from builder.sealing.keys import SigningKey, TrustedKeys
from builder.sealing.seal import BundleContent, Progress, SealedBundle, seal

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
