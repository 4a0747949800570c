"""A bundle's `launch` and `tools/launch_helper.py`: written by `repro build`, checked by verify.

Both are fixed files of the repro that seals (`launch.sh` and `launch_helper.py` beside this
module, shipped as package data): the launcher reads everything it needs from the bundle it sits
in (its lock, its SHA256SUMS, its tools), so a bundle's launcher is the same bytes as any other
sealed by the same repro, and `repro verify` refuses one that is not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from repro_serving.builder.claims import ClaimCheck
from repro_serving.builder.documents import read_sealed
from repro_serving.builder.documents.lock import EvidenceClass
from repro_serving.builder.errors import ReproError
from repro_serving.builder.hashing import sha256_bytes
from repro_serving.builder.sealing.bundle import LAUNCH_HELPER, LAUNCHER, TOOLS_DIR
from repro_serving.builder.sealing.statement import repro_version

LAUNCHER_SOURCE: Final = Path(__file__).with_name("launch.sh")
HELPER_SOURCE: Final = Path(__file__).with_name(LAUNCH_HELPER)


def launcher_check(bundle: Path) -> ClaimCheck:
    """`launch` and `tools/launch_helper.py` are the ones this repro writes."""
    problems = []
    for sealed, source in (
        (LAUNCHER, LAUNCHER_SOURCE),
        (f"{TOOLS_DIR}/{LAUNCH_HELPER}", HELPER_SOURCE),
    ):
        expected = sha256_bytes(source.read_bytes())
        try:
            found = sha256_bytes(read_sealed(bundle / sealed, what=f"the bundle's {sealed}"))
        except ReproError as error:
            problems.append(f"{sealed}: {error.what}")
            continue
        if found != expected:
            problems.append(f"{sealed}: sha256 {found}, repro {repro_version()} writes {expected}")
    return ClaimCheck(
        f"{LAUNCHER}, {TOOLS_DIR}/{LAUNCH_HELPER} = what repro writes",
        EvidenceClass.SEALED,
        f"as repro {repro_version()} writes them",
        not problems,
        "; ".join(problems),
    )
