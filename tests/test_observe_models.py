"""The model observer on real layouts built here: a Hugging Face hub cache (blobs, snapshot
links, refs) and a local directory; git itself names the small blobs."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from drifts import drift_of

from repro_serving.builder.documents.manifest import Model
from repro_serving.builder.documents.models import ModelFacts, compare
from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.observe.models import observe_model

REVISION = "0123456789abcdef0123456789abcdef01234567"
OTHER_REVISION = "89abcdef0123456789abcdef0123456789abcdef"
CONFIG = b'{"architectures": ["LlamaForCausalLM"]}\n'
TOKENIZER = b'{"version": "1.0"}\n'
WEIGHTS = bytes(range(256)) * 64
RELEASE = {
    "config.json": CONFIG,
    "model.safetensors": WEIGHTS,
    "tokenizer/tokenizer.json": TOKENIZER,
}
LFS = {"model.safetensors"}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def git_blob_id(path: Path) -> str:
    return subprocess.run(
        ["git", "hash-object", "--no-filters", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _model(**location: str) -> Model:
    return Model.model_validate(
        {
            "role": "target",
            "repo": "acme/tiny",
            "revision": REVISION,
            "files": {name: sha256(data) for name, data in RELEASE.items()},
            **location,
        }
    )


def _blob(repository: Path, data: bytes, *, lfs: bool) -> str:
    """Store `data` as the hub does: LFS files under their sha256, others under git's id."""
    blobs = repository / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    staging = blobs / "staging"
    staging.write_bytes(data)
    name = sha256(data) if lfs else git_blob_id(staging)
    staging.rename(blobs / name)
    return name


def _link(snapshot: Path, name: str, blob: str) -> None:
    link = snapshot / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(snapshot.parent.parent / "blobs" / blob, link.parent))


@pytest.fixture
def hub(tmp_path: Path) -> Path:
    """A hub cache holding `acme/tiny` at REVISION, refs/main naming it."""
    repository = tmp_path / "hub" / "models--acme--tiny"
    snapshot = repository / "snapshots" / REVISION
    for name, data in RELEASE.items():
        _link(snapshot, name, _blob(repository, data, lfs=name in LFS))
    (repository / "refs").mkdir()
    (repository / "refs" / "main").write_text(REVISION)
    return tmp_path / "hub"


@pytest.fixture
def local(tmp_path: Path) -> Path:
    directory = tmp_path / "local"
    for name, data in RELEASE.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)
    return directory


def _observe(model: Model) -> tuple[ModelFacts, list[Drift]]:
    directory = model.directory(Path("/"))
    facts = observe_model(model, directory, {"model.target": str(directory)})
    return facts, compare(model, facts)


def _hub_model(hub: Path) -> Model:
    return _model(hf_cache=str(hub))


def _snapshot(hub: Path) -> Path:
    return hub / "models--acme--tiny" / "snapshots" / REVISION


def _swap(path: Path, data: bytes) -> None:
    """Replace the bytes behind `path` in place (through a link, into its blob)."""
    Path(os.path.realpath(path)).write_bytes(data)


_file = drift_of(DriftKind.MODEL_FILE, why="a release file of the model is not the pinned one")
_blob_drift = drift_of(
    DriftKind.MODEL_BLOB, why="the hub cache's blob does not hold what its name says"
)
_extra_file = drift_of(
    DriftKind.MODEL_EXTRA_FILE,
    expected="only the release files the manifest lists",
    observed="a file outside the release set",
    why="a loader may read any file of the model directory",
)
_revision = drift_of(
    DriftKind.MODEL_REVISION, subject="model target acme/tiny", expected=f"snapshot {REVISION}"
)


def _changed_file(name: str, pinned: bytes, found: str) -> Drift:
    return _file(f"{{model.target}}/{name}", f"sha256 {sha256(pinned)}", found)


# --- a hub cache ----------------------------------------------------------------------------------


def test_a_hub_snapshot_of_the_pinned_files_gives_no_drift(hub: Path) -> None:
    facts, drifts = _observe(_hub_model(hub))

    assert drifts == []
    assert facts.layout == "hf-cache"
    assert facts.directory == "{model.target}"
    assert facts.snapshot == REVISION
    assert facts.snapshots == (REVISION,)
    assert facts.refs == {"main": REVISION}
    assert [(f.name, f.path, f.sha256, f.size) for f in facts.files] == [
        (name, f"{{model.target}}/{name}", sha256(data), len(data))
        for name, data in sorted(RELEASE.items())
    ]
    by_name = {f.name: f for f in facts.files}
    weights = by_name["model.safetensors"]
    assert weights.blob == weights.blob_id == sha256(WEIGHTS)
    config = by_name["config.json"]
    assert config.blob is not None
    assert len(config.blob) == 40
    assert config.blob == config.blob_id


@pytest.mark.parametrize(
    ("name", "pinned", "changed", "identity"),
    [
        # an LFS blob, named by its sha256
        ("model.safetensors", WEIGHTS, bytes(reversed(WEIGHTS)), "sha256"),
        # a small blob, named by its git blob id
        ("config.json", CONFIG, CONFIG.replace(b"Llama", b"Mixtr"), "git blob id"),
    ],
    ids=["weights", "small-blob"],
)
def test_a_same_size_swap_is_caught_by_hash_and_by_blob_name(
    hub: Path, tmp_path: Path, name: str, pinned: bytes, changed: bytes, identity: str
) -> None:
    assert len(changed) == len(pinned)
    _swap(_snapshot(hub) / name, changed)

    def named(data: bytes) -> str:
        """`data`'s name by the identity the hub names its blob with, computed here."""
        if identity == "sha256":
            return sha256(data)
        (tmp_path / "data").write_bytes(data)
        return git_blob_id(tmp_path / "data")

    _, drifts = _observe(_hub_model(hub))

    blob = named(pinned)
    assert drifts == [
        _changed_file(name, pinned, f"sha256 {sha256(changed)}"),
        _blob_drift(
            f"{{model.target}}/{name}",
            f"blob {blob} holding content whose {identity} is {blob}",
            f"content whose {identity} is {named(changed)}",
        ),
    ]


def test_a_link_to_a_misnamed_blob_is_drift_even_with_the_pinned_bytes(hub: Path) -> None:
    repository = hub / "models--acme--tiny"
    misnamed = "f" * 64
    (repository / "blobs" / misnamed).write_bytes(WEIGHTS)
    link = _snapshot(hub) / "model.safetensors"
    link.unlink()
    _link(_snapshot(hub), "model.safetensors", misnamed)

    _, drifts = _observe(_hub_model(hub))

    expected = f"blob {misnamed} holding content whose sha256 is {misnamed}"
    observed = f"content whose sha256 is {sha256(WEIGHTS)}"
    assert drifts == [_blob_drift("{model.target}/model.safetensors", expected, observed)]


def test_a_link_out_of_the_blobs_is_drift(hub: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.safetensors"
    elsewhere.write_bytes(WEIGHTS)
    link = _snapshot(hub) / "model.safetensors"
    link.unlink()
    link.symlink_to(elsewhere)

    _, drifts = _observe(_hub_model(hub))

    assert drifts == [
        _blob_drift(
            "{model.target}/model.safetensors",
            "a link into the cache's blobs",
            f"a link to {elsewhere}",
        )
    ]


def test_a_cache_without_the_pinned_revision_is_drift_naming_what_it_holds(hub: Path) -> None:
    snapshots = hub / "models--acme--tiny" / "snapshots"
    (snapshots / REVISION).rename(snapshots / OTHER_REVISION)
    (hub / "models--acme--tiny" / "refs" / "main").write_text(OTHER_REVISION)

    facts, drifts = _observe(_hub_model(hub))

    assert facts.present is False
    assert drifts == [
        _revision(
            f"snapshots: {OTHER_REVISION}; refs/main = {OTHER_REVISION}",
            "the hub cache holds no snapshot of the pinned revision",
        )
    ]


def test_a_snapshot_name_leading_to_another_revision_is_drift(hub: Path) -> None:
    snapshots = hub / "models--acme--tiny" / "snapshots"
    (snapshots / REVISION).rename(snapshots / OTHER_REVISION)
    (snapshots / REVISION).symlink_to(OTHER_REVISION)

    _, drifts = _observe(_hub_model(hub))

    assert drifts == [
        _revision(
            f"snapshot {OTHER_REVISION}",
            "the snapshot directory of the pinned revision leads to another revision",
        )
    ]


def test_an_extra_file_in_a_snapshot_is_drift(hub: Path) -> None:
    repository = hub / "models--acme--tiny"
    _link(_snapshot(hub), "pytorch_model.bin", _blob(repository, b"other weights", lfs=True))

    _, drifts = _observe(_hub_model(hub))

    assert drifts == [_extra_file("{model.target}/pytorch_model.bin")]


# --- a local directory ----------------------------------------------------------------------------


def test_a_local_directory_of_the_pinned_files_gives_no_drift(local: Path) -> None:
    facts, drifts = _observe(_model(path=str(local)))

    assert drifts == []
    assert facts.layout == "directory"
    assert [f.blob for f in facts.files] == [None, None, None]


def test_a_changed_file_is_drift_naming_both_hashes(local: Path) -> None:
    changed = CONFIG + b"\n"
    (local / "config.json").write_bytes(changed)

    _, drifts = _observe(_model(path=str(local)))

    assert drifts == [_changed_file("config.json", CONFIG, f"sha256 {sha256(changed)}")]


def test_a_same_size_swap_is_caught_by_hash(local: Path) -> None:
    swapped = bytes(reversed(WEIGHTS))
    (local / "model.safetensors").write_bytes(swapped)

    facts, drifts = _observe(_model(path=str(local)))

    assert {f.name: f.size for f in facts.files}["model.safetensors"] == len(WEIGHTS)
    assert drifts == [_changed_file("model.safetensors", WEIGHTS, f"sha256 {sha256(swapped)}")]


def test_a_missing_file_is_drift(local: Path) -> None:
    (local / "tokenizer" / "tokenizer.json").unlink()

    _, drifts = _observe(_model(path=str(local)))

    assert drifts == [_changed_file("tokenizer/tokenizer.json", TOKENIZER, "missing")]


def test_an_extra_file_is_drift_but_fetch_tool_bookkeeping_is_not(local: Path) -> None:
    (local / "generation_config.json").write_text("{}")
    (local / "tokenizer" / "merges.txt").write_text("a b\n")
    for bookkeeping in (".git/HEAD", ".cache/huggingface/download/config.json.metadata"):
        (local / bookkeeping).parent.mkdir(parents=True, exist_ok=True)
        (local / bookkeeping).write_text("x")

    _, drifts = _observe(_model(path=str(local)))

    assert drifts == [
        _extra_file("{model.target}/generation_config.json"),
        _extra_file("{model.target}/tokenizer/merges.txt"),
    ]


def test_a_missing_directory_is_one_drift(tmp_path: Path) -> None:
    _, drifts = _observe(_model(path=str(tmp_path / "nowhere")))

    assert drifts == [
        Drift(
            kind=DriftKind.MODEL_DIRECTORY,
            subject="model target acme/tiny",
            expected="a directory at {model.target}",
            observed="no directory",
            why="the model's directory is missing",
        )
    ]


def test_the_same_bytes_under_another_root_give_the_same_facts(local: Path, tmp_path: Path) -> None:
    here, _ = _observe(_model(path=str(local)))
    moved = tmp_path / "elsewhere" / "tiny"
    shutil.copytree(local, moved)
    there, drifts = _observe(_model(path=str(moved)))

    assert drifts == []
    assert there == here
    assert there.files[0].path == "{model.target}/config.json"
