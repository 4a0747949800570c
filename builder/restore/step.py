"""The outcome of one restore step, as data: what was made, where, and what refused it."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from repro_serving.builder.drift import Drift
from repro_serving.builder.errors import ReproError

Progress = Callable[[str], None]
"""Told what a step is doing, for a person watching; a no-op by default."""


def no_progress(_message: str) -> None:
    return None


class Action(StrEnum):
    RESTORED = "restored"
    """Made now, checked against the lock, renamed into place."""
    ALREADY = "already"
    """It already held exactly what the lock pins: nothing was done."""
    REFUSED = "refused"
    """It cannot be made to hold: `drifts` say why; nothing was left at the target."""


@dataclass(frozen=True)
class StepResult:
    kind: str
    """python, model or source."""
    subject: str
    """The venv, the model's role, the source's name."""
    target: str
    """Where it lives on this host."""
    action: Action
    detail: str = ""
    drifts: tuple[Drift, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.action is not Action.REFUSED


def occupied(path: Path) -> bool:
    """Whether something is at `path` that restoring would replace: an empty directory holds
    nothing to lose (it is exchanged like anything else, then removed)."""
    if path.is_dir() and not path.is_symlink():
        return any(path.iterdir())
    return path.exists() or path.is_symlink()


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def reason(error: ReproError | OSError) -> str:
    """One line saying why a step failed: what, where, what was found."""
    if isinstance(error, OSError):
        return str(error)
    parts = [error.what]
    if error.where:
        parts.append(f"at {error.where}")
    if error.found:
        parts.append(f"found {error.found}")
    return "; ".join(parts)
