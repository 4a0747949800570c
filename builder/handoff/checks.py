"""The claims `repro verify` checks of what lets a bundle run where repro never was."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from repro_serving.builder.claims import ClaimCheck
from repro_serving.builder.documents import read_sealed
from repro_serving.builder.documents.lock import EvidenceClass, Lock
from repro_serving.builder.errors import ReproError
from repro_serving.builder.handoff.kernelsets import kernel_sets_check
from repro_serving.builder.handoff.launcher import launcher_check
from repro_serving.builder.handoff.readme import render_readme
from repro_serving.builder.handoff.tools import tools_check
from repro_serving.builder.sealing.bundle import README


def handoff_checks(bundle: Path, lock: Lock, checks: Sequence[ClaimCheck]) -> list[ClaimCheck]:
    """The launcher, the tools, the kernel sets against the tools, and the README against the
    `checks` just recomputed."""
    return [
        launcher_check(bundle),
        tools_check(bundle, lock),
        kernel_sets_check(bundle, lock, lock.native.kernel_sets),
        readme_check(bundle, lock, checks),
    ]


def readme_check(bundle: Path, lock: Lock, checks: Sequence[ClaimCheck]) -> ClaimCheck:
    """README.md is the one made from the lock and the claims recomputed: every value it states
    is the one verify prints."""
    expected = render_readme(lock, checks)
    try:
        found = read_sealed(bundle / README, what="the README")
    except ReproError as error:
        found, problem = b"", error.what
    else:
        problem = "" if found == expected else _first_difference(found, expected)
    return ClaimCheck(
        f"{README} = the claims recomputed above",
        EvidenceClass.SEALED,
        f"{len(expected.splitlines())} lines",
        not problem,
        problem,
    )


def _first_difference(found: bytes, expected: bytes) -> str:
    ours, theirs = expected.splitlines(), found.splitlines()
    for number, (mine, its) in enumerate(zip(ours, theirs, strict=False), start=1):
        if mine != its:
            return f"line {number} reads {its[:120]!r}, not {mine[:120]!r}"
    return f"{len(theirs)} lines, not {len(ours)}"
