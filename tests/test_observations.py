"""All of a manifest's facts observed at once: every drift in one report, nothing raised.

A source tree at another commit or dirty, and a venv that is not there, are drifts of the same
report as the host's, so `repro build` and the preflight of `repro launch` list every unmet
precondition at once.
"""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest
import tomli_w

from repro_serving.builder.documents.manifest import Manifest
from repro_serving.builder.documents.observations import drifts
from repro_serving.builder.drift import DriftKind
from repro_serving.builder.observations import observe

TINY = Path(__file__).resolve().parent.parent / "manifests" / "tiny-cpu.toml"


def git(repo: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return result.stdout.strip()


@pytest.fixture
def source_tree(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "src"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "kernel.c").write_text("int k(void) { return 1; }\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    pinned = git(repo, "rev-parse", "HEAD")
    (repo / "kernel.c").write_text("int k(void) { return 2; }\n")
    git(repo, "commit", "-qam", "two")
    return repo, pinned


def manifest_with(tmp_path: Path, changes: dict[str, object]) -> Manifest:
    document = tomllib.loads(TINY.read_text())
    document["oracle"]["suite"] = str(TINY.parent / document["oracle"]["suite"])
    document["python"]["venv"] = str((TINY.parent / document["python"]["venv"]).resolve())
    document["model"][0]["path"] = str((TINY.parent / document["model"][0]["path"]).resolve())
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(document.get(key), dict):
            document[key] = {**document[key], **value}
        else:
            document[key] = value
    path = tmp_path / "manifest.toml"
    path.write_text(tomli_w.dumps(document))
    return Manifest.from_path(path)


def test_a_source_tree_at_another_commit_and_dirty_is_drift_naming_it(
    tmp_path: Path, source_tree: tuple[Path, str]
) -> None:
    repo, pinned = source_tree
    (repo / "notes.txt").write_text("untracked\n")
    manifest = manifest_with(
        tmp_path, {"source": [{"name": "kernels", "path": str(repo), "commit": pinned}]}
    )
    found = [
        (d.kind, d.subject, d.expected)
        for d in drifts(manifest, observe(manifest))
        if d.kind in (DriftKind.SOURCE_COMMIT, DriftKind.SOURCE_DIRTY)
    ]
    assert found == [
        (DriftKind.SOURCE_COMMIT, "source kernels", f"commit {pinned}"),
        (DriftKind.SOURCE_DIRTY, "source kernels: notes.txt",
         "as the commit with the declared patches has it"),
    ]  # fmt: skip


def test_a_missing_venv_and_source_are_drifts_of_one_report(tmp_path: Path) -> None:
    manifest = manifest_with(
        tmp_path,
        {
            "python": {"venv": str(tmp_path / "no-venv")},
            "source": [{"name": "vllm", "path": str(tmp_path / "no-src"), "commit": "a" * 40}],
        },
    )
    found = {(d.kind, d.subject) for d in drifts(manifest, observe(manifest))}
    assert (DriftKind.NOT_OBSERVABLE, f"python: {tmp_path / 'no-venv' / 'pyvenv.cfg'}") in found
    assert (DriftKind.SOURCE_TREE, "source vllm") in found
