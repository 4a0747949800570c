"""Model payloads: the release files of a model, where they live, and what they hold.

This module owns the model facts (`observe_model`) and their pure judgement against a
`[[model]]` (`compare`). A model lives in a local directory or in a Hugging Face hub cache,
as the snapshot `models--<owner>--<name>/snapshots/<revision>/` whose files are links into
`../../blobs/`. Observed:

- the sha256 and size of each release file (the manifest's file table is the release set);
- every other file of the directory, by name: a loader picks up what lies beside the release
  (a second weights file, another generation config), so an extra file is drift. Only the
  bookkeeping of the tools that fetch models is left out: `.git/` (a clone's own database) and
  `.cache/huggingface/` (huggingface_hub's download state in a `--local-dir`); no loader reads
  either;
- in a hub cache, the blob each release file resolves to and its content's id in the scheme the
  blob's name claims: a 64-hex name is the sha256 of an LFS file, a 40-hex name the git blob
  id (sha1 of `blob <size>\\0` and the bytes) of a small file; and the revision: the real name
  of the snapshot directory, every snapshot of the repository and every `refs/` file, recorded.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

from repro_serving.builder.documents.manifest import Model, placeholder_path
from repro_serving.builder.documents.models import ModelFacts, ModelFile
from repro_serving.builder.hashing import git_blob_sha1_file, is_sha256_hex, sha256_file
from repro_serving.builder.readers import ENVIRONMENT_FILE_LIMIT, read_bytes

NOT_RELEASE: Final = (".git", ".cache/huggingface")
"""Directories of fetch-tool bookkeeping inside a model directory; see the module docstring."""
_GIT_BLOB_NAME: Final = re.compile(r"^[0-9a-f]{40}$")


# --- observing ------------------------------------------------------------------------------------


def observe_model(model: Model, directory: Path, values: Mapping[str, str]) -> ModelFacts:
    """The facts of `model`'s release files in `directory` (`model.directory(base)`)."""
    hub = model.hf_cache is not None
    present = directory.is_dir()
    blobs = directory.parent.parent / "blobs" if hub else None
    snapshot, snapshots, refs = _revision(directory) if hub else (None, (), {})
    return ModelFacts(
        role=model.role,
        repo=model.repo,
        layout="hf-cache" if hub else "directory",
        directory=placeholder_path(directory, values),
        present=present,
        files=tuple(observe_file(name, directory, blobs, values) for name in sorted(model.files))
        if present
        else (),
        extra=tuple(sorted(set(listing(directory)) - set(model.files))) if present else (),
        snapshot=snapshot,
        snapshots=snapshots,
        refs=refs,
    )


def observe_file(
    name: str, directory: Path, blobs: Path | None, values: Mapping[str, str]
) -> ModelFile:
    """One release file; `blobs` is the hub cache's blob directory, None for a local one."""
    path = directory / name
    form = placeholder_path(path, values)
    if not path.is_file():
        return ModelFile(name=name, path=form, sha256=None, size=None)
    sha256 = sha256_file(path)
    found = ModelFile(name=name, path=form, sha256=sha256, size=path.stat().st_size)
    if blobs is None or not path.is_symlink():
        return found
    real, real_blobs = Path(os.path.realpath(path)), Path(os.path.realpath(blobs))
    if real.parent != real_blobs:
        return found.model_copy(update={"outside": placeholder_path(real, values)})
    return found.model_copy(update={"blob": real.name, "blob_id": _blob_id(real, sha256)})


def _blob_id(blob: Path, sha256: str) -> str | None:
    if is_sha256_hex(blob.name):
        return sha256
    if _GIT_BLOB_NAME.match(blob.name):
        return git_blob_sha1_file(blob)
    return None


def listing(directory: Path) -> Iterator[str]:
    """Every non-directory entry under `directory`, relative, `NOT_RELEASE` left out; a link to
    a directory is listed as an entry, not followed."""
    for root, dirs, files in os.walk(directory):
        here = Path(root).relative_to(directory)
        for name in list(dirs):
            if (here / name).as_posix() in NOT_RELEASE:
                dirs.remove(name)
            elif (Path(root) / name).is_symlink():
                dirs.remove(name)
                files.append(name)
        yield from ((here / name).as_posix() for name in files)


def _revision(snapshot: Path) -> tuple[str | None, tuple[str, ...], dict[str, str]]:
    """The snapshot's real name, the repository's snapshots and its refs."""
    repository = snapshot.parent.parent
    real = Path(os.path.realpath(snapshot)).name if snapshot.is_dir() else None
    snapshots = repository / "snapshots"
    names = tuple(sorted(p.name for p in snapshots.iterdir())) if snapshots.is_dir() else ()
    return real, names, _refs(repository / "refs")


def _refs(refs: Path) -> dict[str, str]:
    if not refs.is_dir():
        return {}
    return {
        ref.relative_to(refs).as_posix(): _ref(ref)
        for ref in sorted(refs.rglob("*"))
        if ref.is_file()
    }


def _ref(path: Path) -> str:
    """A hub cache ref: the commit a branch or tag name stands for, one short line."""
    data = read_bytes(path, limit=ENVIRONMENT_FILE_LIMIT, what="a hub cache ref")
    return data.decode("utf-8", errors="replace").strip()
