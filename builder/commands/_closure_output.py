"""`repro closure --json`: how the loader resolves each dependency of each file, as a document.

Apart from `closure` so that its plain run, a tree for a person, imports no pydantic.
"""

from __future__ import annotations

from repro_serving.builder.native.loader import Closure, Outcome, Resolution
from repro_serving.builder.render import Output, Report


class LoadedOutput(Output):
    """One object of the process's link map, in load order."""

    path: str
    """The name the loader opened it under."""
    file_id: tuple[int, int] | None
    """Its (device, inode); null when it was never opened (the loader itself, unread)."""


class CandidateOutput(Output):
    """One file the loader tried."""

    path: str
    source: str
    """The rule that tried it (RUNPATH, LD_LIBRARY_PATH, the cache, a default directory, …)."""
    result: str


class ResolutionOutput(Output):
    """How one needed name was resolved, or why not."""

    need: str
    requester: str
    outcome: Outcome
    path: str | None
    """The file the loader uses; null when nothing was loaded."""
    reason: str
    directory: str | None
    """The search directory that held it."""
    element: str | None
    """That directory's path element as written, before expansion (`$ORIGIN/../lib`)."""
    file_id: tuple[int, int] | None
    newly_loaded: bool
    """False when an object already loaded satisfied the need."""
    searched: tuple[CandidateOutput, ...]
    """Every file tried, in order."""


class FileClosure(Output):
    file: str
    ok: bool
    """Every dependency resolves."""
    order: tuple[LoadedOutput, ...]
    libraries: tuple[ResolutionOutput, ...]
    """Every resolution, in the order the loader made them."""


class ClosureOutput(Report):
    """`repro closure --json`: each FILE's closure (`ok`: every dependency of every file
    resolves)."""

    files: tuple[FileClosure, ...]

    @classmethod
    def of(cls, closures: list[tuple[str, Closure]]) -> ClosureOutput:
        files = tuple(_file(path, closure) for path, closure in closures)
        return cls(ok=all(f.ok for f in files), files=files)


def _file(path: str, closure: Closure) -> FileClosure:
    return FileClosure(
        file=path,
        ok=not closure.failures,
        order=tuple(LoadedOutput(path=o.path, file_id=o.file_id) for o in closure.order),
        libraries=tuple(_resolution(r) for r in closure.resolutions),
    )


def _resolution(resolution: Resolution) -> ResolutionOutput:
    return ResolutionOutput(
        need=resolution.need,
        requester=resolution.requester,
        outcome=resolution.outcome,
        path=resolution.path,
        reason=resolution.reason,
        directory=resolution.directory,
        element=resolution.element,
        file_id=resolution.file_id,
        newly_loaded=resolution.newly_loaded,
        searched=tuple(
            CandidateOutput(path=c.path, source=c.source, result=c.result)
            for c in resolution.searched
        ),
    )
