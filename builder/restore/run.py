"""The order of a restore: the bundle proven first, then each pin made, each step reported.

Nothing is made for a bundle that does not verify offline (signature, every file, every claim
recomputed): restore runs nothing it has not verified first. Then the serving environment, each
model and each source tree are made where the manifest places them on this host (its relative
paths anchored like `verify --anchor`), each step independent, idempotent and atomic.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from repro_serving.builder.documents.bundle import OpenedBundle
from repro_serving.builder.documents.manifest import normal_path
from repro_serving.builder.placeholders import model_directory
from repro_serving.builder.restore.models import restore_model
from repro_serving.builder.restore.python import restore_python
from repro_serving.builder.restore.sources import restore_source
from repro_serving.builder.restore.step import Action, Progress, StepResult, no_progress
from repro_serving.builder.sealing.keys import TrustedKeys
from repro_serving.builder.verify import NotVerified, VerifyReport, verify


class RestoreRefused(NotVerified):
    """The bundle does not verify offline: nothing was made."""

    def __init__(self, report: VerifyReport) -> None:
        super().__init__("restore refused: the bundle does not verify", report)


@dataclass(frozen=True)
class RestoreReport:
    bundle: Path
    key_ids: tuple[str, ...]
    steps: tuple[StepResult, ...]

    @property
    def ok(self) -> bool:
        return all(step.ok for step in self.steps)

    @property
    def changed(self) -> bool:
        return any(step.action is Action.RESTORED for step in self.steps)


def restore(
    path: Path,
    trusted: TrustedKeys,
    *,
    anchor: Path | None = None,
    force: bool = False,
    interpreter: Path | None = None,
    progress: Progress = no_progress,
) -> RestoreReport:
    progress(f"verifying {path} offline")
    report = verify(path, trusted, anchor=anchor)
    if not report.ok:
        raise RestoreRefused(report)
    opened = OpenedBundle.read(path, anchor)
    manifest = opened.manifest
    base = normal_path(manifest.resolve("."))
    steps = [
        restore_python(
            opened.lock.python,
            manifest.python,
            normal_path(manifest.resolve(manifest.python.venv)),
            force=force,
            interpreter=interpreter,
            progress=progress,
        )
    ]
    steps += [
        restore_model(model, model_directory(manifest, model), force=force, progress=progress)
        for model in manifest.models
    ]
    steps += [
        restore_source(
            source, normal_path(base / source.path), base, force=force, progress=progress
        )
        for source in manifest.sources
    ]
    return RestoreReport(path, report.key_ids, tuple(steps))
