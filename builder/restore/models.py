"""Restoring a `[[model]]`: its release files made on this machine, each checked by sha256.

A model is restorable two ways, both judged by the model observer (`builder.observe.models`:
`observe_model` and `compare`, the same judgement `verify --host` makes), before anything is
done and after:

- `generator = "tiny-llama"` (a model at `path`): repro's deterministic generator writes it into
  a temporary sibling `.<name>.restoring-<random>` of the directory; every file's sha256 is
  checked against the pins and the revision against the git tree id of the written files (how
  `builder.tinymodel.revision` defines it), then the sibling is renamed into place. A directory
  that is there and holds anything else is refused, or with `force` replaced by one atomic
  exchange. A kill at any point leaves the directory as it was, or complete, never half-written.
- `hf_cache` (a Hugging Face hub cache root): `huggingface_hub.snapshot_download` fetches the
  pinned files at the pinned revision into the cache's own layout (`models--<owner>--<name>/
  blobs|snapshots|refs`); the hub client's own writes are atomic per file (a download lands in
  `blobs/` under a temporary name first, the snapshot link last). Each file is then read through
  its snapshot link and checked. What does not hold is refused and left as the client wrote it:
  the check that refused it refuses it again, so a later run never calls it restored.

A model with neither has no source here: refused, unless it already holds.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from repro_serving.builder import tinymodel
from repro_serving.builder.documents.manifest import Model
from repro_serving.builder.documents.models import compare
from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.errors import ReproError
from repro_serving.builder.hashing import git_blob_sha1_file
from repro_serving.builder.observe.models import observe_model
from repro_serving.builder.restore.step import (
    Action,
    Progress,
    StepResult,
    no_progress,
    occupied,
    reason,
    remove,
)
from repro_serving.builder.sealing.atomic import move_into_place

GENERATORS: Final[Mapping[str, Callable[[Path], object]]] = {"tiny-llama": tinymodel.generate}
"""`[[model]].generator` to the function that writes that model into a new directory."""
_KIND: Final = "model"


def restore_model(
    model: Model, directory: Path, *, progress: Progress = no_progress, force: bool = False
) -> StepResult:
    """Make `directory` (`model.directory(anchor)`) hold exactly `model`'s pinned files.

    ALREADY when it does; RESTORED once made and checked; REFUSED, with the drifts that refuse
    it, otherwise. `force` replaces a generated model's directory that holds anything else (for a
    hub model it makes the hub client download the pinned files again)."""
    try:
        drifts = _judge(model, directory)
        if not drifts:
            return _result(model, directory, Action.ALREADY, "holds every pinned file")
        if model.generator is not None:
            return _generate(model, directory, drifts, progress, force=force)
        if model.hf_cache is not None:
            return _fetch(model, directory, progress, force=force)
    except ReproError as error:  # a file that cannot be read to hash it
        return _result(model, directory, Action.REFUSED, reason(error))
    detail = (
        'no source to restore this model from: give its [[model]] generator = "tiny-llama" '
        "(a model repro generates) or an hf_cache (a hub cache the pinned revision is fetched "
        "into), or put the pinned files at its path"
    )
    return _result(model, directory, Action.REFUSED, detail, drifts)


def _judge(model: Model, directory: Path) -> list[Drift]:
    """The observer's drifts for `model` in `directory`; they name files as
    `{model.<role>}/<file>`, as `verify --host` does."""
    values = {f"model.{model.role}": str(directory)}
    return compare(model, observe_model(model, directory, values))


def _result(
    model: Model,
    directory: Path,
    action: Action,
    detail: str,
    drifts: list[Drift] | tuple[Drift, ...] = (),
) -> StepResult:
    return StepResult(
        kind=_KIND,
        subject=model.role,
        target=str(directory),
        action=action,
        detail=detail,
        drifts=tuple(drifts),
    )


# --- generated models -----------------------------------------------------------------------------


def _generate(
    model: Model, directory: Path, drifts: list[Drift], progress: Progress, *, force: bool
) -> StepResult:
    if occupied(directory) and not force:
        detail = "the directory holds other files than the pinned ones; force replaces it"
        return _result(model, directory, Action.REFUSED, detail, drifts)
    workdir = directory.parent / f".{directory.name}.restoring-{secrets.token_hex(8)}"
    try:
        progress(f"generating the {model.generator} model into {workdir}")
        try:
            GENERATORS[str(model.generator)](workdir)
        except (ReproError, OSError) as error:
            detail = f"the {model.generator} generator failed: {reason(error)}"
            return _result(model, directory, Action.REFUSED, detail)
        progress(f"checking {len(model.files)} files")
        made = _judge(model, workdir) + _tree_drifts(model, workdir)
        if made:
            detail = f"the {model.generator} generator does not write the pinned files"
            return _result(model, directory, Action.REFUSED, detail, made)
        if occupied(directory) and not force:
            detail = "the directory appeared while the model was being generated"
            return _result(model, directory, Action.REFUSED, detail)
        try:
            replaced = move_into_place(workdir, directory, progress, what="model")
        except (ReproError, OSError) as error:
            return _result(model, directory, Action.REFUSED, reason(error))
        if replaced is not None:
            remove(replaced)
    finally:
        remove(workdir)
    detail = f"generated by {model.generator}, {len(model.files)} files checked"
    return _result(model, directory, Action.RESTORED, detail)


def _tree_drifts(model: Model, directory: Path) -> list[Drift]:
    """The revision of a generated model is the git tree id of its files (`tinymodel.revision`)."""
    found = tree_id(directory)
    if found == model.revision:
        return []
    return [
        Drift(
            kind=DriftKind.MODEL_REVISION,
            subject=f"model {model.role} {model.repo}",
            expected=f"revision {model.revision}",
            observed=f"revision {found}: the git tree id of the generated files",
            why="the generator wrote another revision than the pinned one",
        )
    ]


def tree_id(directory: Path) -> str:
    """`git write-tree` of a flat directory of regular files (mode 100644), computed here."""
    entries = b"".join(
        b"100644 " + os.fsencode(path.name) + b"\0" + bytes.fromhex(git_blob_sha1_file(path))
        for path in sorted(directory.iterdir(), key=lambda p: os.fsencode(p.name))
        if path.is_file()
    )
    return git_object_id(b"tree", entries)


def git_object_id(kind: bytes, content: bytes) -> str:
    header = kind + b" " + str(len(content)).encode() + b"\0"
    return hashlib.sha1(header + content, usedforsecurity=False).hexdigest()


# --- hub models -----------------------------------------------------------------------------------


def _fetch(model: Model, directory: Path, progress: Progress, *, force: bool) -> StepResult:
    cache = directory.parent.parent.parent
    progress(f"fetching {model.repo} at {model.revision} into {cache}")
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(
            repo_id=model.repo,
            revision=model.revision,
            cache_dir=str(cache),
            allow_patterns=sorted(model.files),
            force_download=force,
        )
    except Exception as error:  # the hub client's errors have no common base but Exception
        detail = f"the hub client could not fetch {model.repo} at {model.revision}: "
        detail += f"{type(error).__name__}: {_first_line(str(error))}"
        return _result(model, directory, Action.REFUSED, detail)
    progress(f"checking {len(model.files)} files")
    drifts = _judge(model, directory)
    if drifts:
        detail = "what the hub client fetched does not hold the pinned files"
        return _result(model, directory, Action.REFUSED, detail, drifts)
    detail = f"fetched from the hub into {cache}, {len(model.files)} files checked"
    return _result(model, directory, Action.RESTORED, detail)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "no message"
