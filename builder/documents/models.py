"""A model's release files as found (sealed in `evidence/observations.json`, observed by
`builder.observe.models`), and `compare`, their pure judgement against a `[[model]]`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from repro_serving.builder.documents.manifest import Model
from repro_serving.builder.drift import Drift, DriftKind


class _Fact(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelFile(_Fact):
    """One release file as found."""

    name: str
    """Relative to the model directory, as the manifest names it."""
    path: str
    """In placeholder form: `{model.target}/config.json`."""
    sha256: str | None
    """None when the file is missing."""
    size: int | None
    blob: str | None = None
    """Hub cache: the name of the file in the repository's `blobs/` it resolves to."""
    blob_id: str | None = None
    """The id of the content in the scheme `blob` claims (sha256 or git blob id); None when
    the blob's name is of neither form."""
    outside: str | None = None
    """Hub cache: where a link that does not resolve into `blobs/` leads, in placeholder form."""


class ModelFacts(_Fact):
    role: str
    repo: str
    layout: Literal["directory", "hf-cache"]
    directory: str
    """In placeholder form."""
    present: bool
    """Whether the directory exists."""
    files: tuple[ModelFile, ...]
    """The release files, by name; empty when the directory is absent."""
    extra: tuple[str, ...] = ()
    """Every other file of the directory, by name."""
    snapshot: str | None = None
    """Hub cache: the real name of the snapshot directory (after links)."""
    snapshots: tuple[str, ...] = ()
    """Hub cache: every snapshot of the repository, by name."""
    refs: dict[str, str] = {}
    """Hub cache: `refs/<name>` to the revision it names; recorded, never judged."""


# --- comparing ------------------------------------------------------------------------------------


def compare(expected: Model, observed: ModelFacts) -> list[Drift]:
    """Every way `observed` disagrees with the `[[model]]` that pins it."""
    if not observed.present:
        return [_absent(expected, observed)]
    drifts = _revision_drifts(expected, observed)
    for found in observed.files:
        drifts += file_drifts(expected.files[found.name], found)
        if observed.layout == "hf-cache":
            drifts += blob_drifts(found)
    drifts += [_extra(observed, name) for name in observed.extra]
    return drifts


def _subject(model: Model | ModelFacts) -> str:
    return f"model {model.role} {model.repo}"


def _absent(expected: Model, observed: ModelFacts) -> Drift:
    if observed.layout == "directory":
        return Drift(
            kind=DriftKind.MODEL_DIRECTORY,
            subject=_subject(expected),
            expected=f"a directory at {observed.directory}",
            observed="no directory",
            why="the model's directory is missing",
        )
    return Drift(
        kind=DriftKind.MODEL_REVISION,
        subject=_subject(expected),
        expected=f"snapshot {expected.revision}",
        observed=_snapshots_seen(observed),
        why="the hub cache holds no snapshot of the pinned revision",
    )


def _snapshots_seen(observed: ModelFacts) -> str:
    snapshots = ", ".join(observed.snapshots) or "none"
    refs = ", ".join(f"refs/{name} = {value}" for name, value in sorted(observed.refs.items()))
    return f"snapshots: {snapshots}" + (f"; {refs}" if refs else "")


def _revision_drifts(expected: Model, observed: ModelFacts) -> list[Drift]:
    if observed.layout != "hf-cache" or observed.snapshot == expected.revision:
        return []
    return [
        Drift(
            kind=DriftKind.MODEL_REVISION,
            subject=_subject(expected),
            expected=f"snapshot {expected.revision}",
            observed=f"snapshot {observed.snapshot}",
            why="the snapshot directory of the pinned revision leads to another revision",
        )
    ]


def file_drifts(pinned: str, found: ModelFile) -> list[Drift]:
    if found.sha256 == pinned:
        return []
    return [
        Drift(
            kind=DriftKind.MODEL_FILE,
            subject=found.path,
            expected=f"sha256 {pinned}",
            observed="missing" if found.sha256 is None else f"sha256 {found.sha256}",
            why="a release file of the model is not the pinned one",
        )
    ]


def blob_drifts(found: ModelFile) -> list[Drift]:
    """A hub cache file must resolve to a blob whose name is its content's id."""
    if found.sha256 is None:
        return []
    if found.outside is not None:
        return [_blob_drift(found, "a link into the cache's blobs", f"a link to {found.outside}")]
    if found.blob is None or found.blob == found.blob_id:
        return []
    if found.blob_id is None:
        expected = "a blob named by its content's sha256 or git blob id"
        return [_blob_drift(found, expected, f"blob {found.blob}")]
    scheme = "sha256" if len(found.blob) == 64 else "git blob id"
    expected = f"blob {found.blob} holding content whose {scheme} is {found.blob}"
    return [_blob_drift(found, expected, f"content whose {scheme} is {found.blob_id}")]


def _blob_drift(found: ModelFile, expected: str, observed: str) -> Drift:
    return Drift(
        kind=DriftKind.MODEL_BLOB,
        subject=found.path,
        expected=expected,
        observed=observed,
        why="the hub cache's blob does not hold what its name says",
    )


def _extra(observed: ModelFacts, name: str) -> Drift:
    return Drift(
        kind=DriftKind.MODEL_EXTRA_FILE,
        subject=f"{observed.directory}/{name}",
        expected="only the release files the manifest lists",
        observed="a file outside the release set",
        why="a loader may read any file of the model directory",
    )
