"""Model release files: each declared file's sha256 on disk against the manifest's pin."""

from __future__ import annotations

from pathlib import Path

from builder.drift import Drift, DriftKind
from builder.hashing import sha256_file
from builder.manifest import Model


def model_drifts(model: Model, directory: Path) -> list[Drift]:
    """One drift per declared file that is missing or holds other bytes than pinned."""
    drifts = []
    for name, pinned in sorted(model.files.items()):
        path = directory / name
        if not path.is_file():
            observed = "missing"
        else:
            digest = sha256_file(path)
            if digest == pinned:
                continue
            observed = f"sha256 {digest}"
        drifts.append(
            Drift(
                kind=DriftKind.MODEL_FILE,
                subject=f"{model.role} {model.repo}@{model.revision}: {path}",
                expected=f"sha256 {pinned}",
                observed=observed,
                why="a release file of the model is not the pinned one",
            )
        )
    return drifts
