"""A bundle's `kernels/` against the repro that sealed it.

The kernel sets decide what the sealed audit is judged by (pins, allowed driver and JIT places,
dispatch rules): a set rewritten to allow everything would make every audit pass. A bundle
carries the repro that sealed it (`tools/`, checked member by member by `tools_check`), which
ships its kernel sets as package data; each sealed set it also ships must be those bytes. A set
the wheel does not ship (one of the manifest's own) is named as such: nothing anchors it but the
signature.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from repro_serving.builder.claims import ClaimCheck
from repro_serving.builder.documents import read_sealed
from repro_serving.builder.documents.lock import EvidenceClass, Lock
from repro_serving.builder.errors import ReproError
from repro_serving.builder.handoff.tools import UNREADABLE_ZIP
from repro_serving.builder.readers import KERNEL_SET_LIMIT
from repro_serving.builder.sealing.bundle import KERNEL_SETS_DIR, TOOLS_DIR, wheel_filename

PACKAGED_KERNELS: Final = ("repro_serving/kernels", "repro_serving/builder/kernels")
"""Where repro's wheel holds the kernel sets it ships: at the package's top level, and under
builder/ in the wheels of the releases before they moved there. Every place a wheel has one
must hold the sealed bytes."""


def kernel_sets_check(bundle: Path, lock: Lock, names: Sequence[str]) -> ClaimCheck:
    claim = f"{KERNEL_SETS_DIR}/ = the kernel sets of {TOOLS_DIR}/ (the repro that sealed it)"
    wheel = bundle / TOOLS_DIR / wheel_filename(lock.bundle.repro_version)
    problems, own = [], []
    try:
        read_sealed(wheel, what="repro's wheel")  # a regular file of the bundle, not too large
        with zipfile.ZipFile(wheel) as archive:
            shipped = set(archive.namelist())
            for name in names:
                members = [f"{place}/{name}.toml" for place in PACKAGED_KERNELS]
                members = [member for member in members if member in shipped]
                sealed = read_sealed(
                    bundle / KERNEL_SETS_DIR / f"{name}.toml",
                    what="a kernel set",
                    limit=KERNEL_SET_LIMIT,
                )
                if not members:
                    own.append(name)
                for member in members:
                    info = archive.getinfo(member)
                    if info.file_size > KERNEL_SET_LIMIT or archive.read(member) != sealed:
                        problems.append(
                            f"{KERNEL_SETS_DIR}/{name}.toml: expected the bytes of {wheel.name} "
                            f"member {member}, found other bytes"
                        )
    except (ReproError, *UNREADABLE_ZIP) as error:
        detail = error.diagnostics() if isinstance(error, ReproError) else repr(error)
        return ClaimCheck(claim, EvidenceClass.SEALED, "unreadable", False, detail[:600])
    value = f"{len(names) - len(own)} of {len(names)} shipped by repro"
    if own:
        value += f"; the manifest's own: {', '.join(own)} (signed, not anchored)"
    return ClaimCheck(claim, EvidenceClass.SEALED, value, not problems, "; ".join(problems))
