"""A source tree's facts as found (sealed in `evidence/observations.json`, observed by
`builder.observe.sources` with git as the judge), and `compare`, their pure judgement against a
`[[source]]`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from repro_serving.builder.documents.manifest import Source
from repro_serving.builder.drift import Drift, DriftKind


class _Fact(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PatchFacts(_Fact):
    path: str
    """As the manifest declares it."""
    sha256: str | None
    """None when the patch file is missing."""
    applied: bool
    """Whether it reverse-applies in its place of the chain (see the module docstring); false
    for a missing patch file."""


class Change(_Fact):
    """A path where the work tree differs from the commit with its patches."""

    path: str
    """Relative to the work tree."""
    change: str
    """`added`, `deleted`, `modified` or `type changed`, against the commit."""


class SourceFacts(_Fact):
    name: str
    state: Literal["work-tree", "missing", "not-a-work-tree"]
    toplevel: str | None = None
    """For a directory inside another work tree, the top of that one."""
    commit: str | None = None
    """HEAD, 40 hex digits; None when HEAD names no commit yet."""
    status: tuple[str, ...] = ()
    """`git status --porcelain=v1` entries (`XY path`), untracked files included; evidence."""
    changes: tuple[Change, ...] = ()
    """What differs beyond the declared patches, by path."""
    patches: tuple[PatchFacts, ...] = ()
    """In the manifest's order."""


# --- comparing ------------------------------------------------------------------------------------


def compare(expected: Source, observed: SourceFacts) -> list[Drift]:
    """Every way `observed` disagrees with the `[[source]]` that pins it."""
    if observed.state != "work-tree":
        return [_no_work_tree(observed)]
    drifts = commit_drifts(expected, observed)
    for pinned, found in zip(expected.patches, observed.patches, strict=True):
        drifts += patch_drifts(expected.name, pinned.sha256, found)
    if expected.clean:
        drifts += [_changed(expected.name, change) for change in observed.changes]
    return drifts


def _no_work_tree(observed: SourceFacts) -> Drift:
    if observed.state == "missing":
        found, why = "no directory", "the source tree is missing"
    else:
        found = "not a git work tree"
        if observed.toplevel is not None:
            found = f"a directory inside the work tree {observed.toplevel}"
        why = "only a work tree of its own has a commit and a state to judge"
    return Drift(
        kind=DriftKind.SOURCE_TREE,
        subject=f"source {observed.name}",
        expected="the top directory of a git work tree",
        observed=found,
        why=why,
    )


def commit_drifts(expected: Source, observed: SourceFacts) -> list[Drift]:
    if observed.commit == expected.commit:
        return []
    return [
        Drift(
            kind=DriftKind.SOURCE_COMMIT,
            subject=f"source {expected.name}",
            expected=f"commit {expected.commit}",
            observed=f"commit {observed.commit}" if observed.commit else "no commit",
            why="the work tree is checked out at another commit",
        )
    ]


def patch_drifts(source: str, pinned: str, found: PatchFacts) -> list[Drift]:
    subject = f"source {source}: patch {found.path}"
    drifts = []
    if found.sha256 != pinned:
        drifts.append(
            Drift(
                kind=DriftKind.SOURCE_PATCH,
                subject=subject,
                expected=f"sha256 {pinned}",
                observed=f"sha256 {found.sha256}" if found.sha256 else "missing",
                why="the patch file is not the pinned one",
            )
        )
    if found.sha256 is not None and not found.applied:
        drifts.append(
            Drift(
                kind=DriftKind.SOURCE_PATCH,
                subject=subject,
                expected="applied in the work tree",
                observed="not applied: it does not reverse-apply",
                why="a declared patch is not in the work tree",
            )
        )
    return drifts


def _changed(source: str, change: Change) -> Drift:
    return Drift(
        kind=DriftKind.SOURCE_DIRTY,
        subject=f"source {source}: {change.path}",
        expected="as the commit with the declared patches has it",
        observed=change.change,
        why="the work tree holds a change beyond the declared patches",
    )
