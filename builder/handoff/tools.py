"""A bundle's `tools/`, as far as it can be checked offline.

The wheel must be repro's, of the version the lock records, and hold every file its RECORD
hashes with that hash (pip would refuse it otherwise, after the launcher fetched everything);
`requirements.txt` must be in the one form repro writes and pin every dependency the wheel
declares. Whether the package index serves those bytes is for the launcher's pip to find out:
nothing here asks it.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import zipfile
from email.parser import HeaderParser
from pathlib import Path
from typing import Final

from packaging.requirements import InvalidRequirement, Requirement

from repro_serving.builder.claims import ClaimCheck
from repro_serving.builder.documents import read_sealed
from repro_serving.builder.errors import ReproError
from repro_serving.builder.lock import EvidenceClass, Lock
from repro_serving.builder.observe.python import normalize
from repro_serving.builder.observe.tools import PROJECT, ToolRequirements
from repro_serving.builder.sealing.bundle import REQUIREMENTS_FILE, TOOLS_DIR, wheel_filename

WHEEL_LIMIT: Final = 64 * 1024 * 1024
"""The most a wheel's members may hold, uncompressed, for its RECORD to be checked."""


def tools_check(bundle: Path, lock: Lock) -> ClaimCheck:
    version = lock.bundle.repro_version
    claim = f"{TOOLS_DIR}/ = repro {version} and its dependencies pinned by sha256"
    try:
        data = read_sealed(bundle / TOOLS_DIR / REQUIREMENTS_FILE, what="the tools' pins")
        where = f"{TOOLS_DIR}/{REQUIREMENTS_FILE}"
        requirements = ToolRequirements.from_bytes(data, where=where)
        wheel = bundle / TOOLS_DIR / wheel_filename(version)
        problems = _wheel_problems(wheel, version, requirements)
    except (ReproError, OSError, zipfile.BadZipFile, ValueError) as error:
        detail = error.diagnostics() if isinstance(error, ReproError) else repr(error)
        return ClaimCheck(claim, EvidenceClass.SEALED, "unreadable", False, detail[:600])
    if requirements.repro != version:
        problems.append(f"{REQUIREMENTS_FILE} is written for repro {requirements.repro}")
    value = (
        f"{len(requirements.pins)} dependencies for Python {requirements.python} on "
        f"{requirements.platform}"
    )
    return ClaimCheck(claim, EvidenceClass.SEALED, value, not problems, "; ".join(problems)[:600])


def _wheel_problems(wheel: Path, version: str, requirements: ToolRequirements) -> list[str]:
    read_sealed(wheel, what="repro's wheel", limit=WHEEL_LIMIT)  # a regular file, not too large
    with zipfile.ZipFile(wheel) as archive:
        members = archive.infolist()
        if sum(member.file_size for member in members) > WHEEL_LIMIT:
            return [f"{wheel.name} unpacks to more than {WHEEL_LIMIT} bytes"]
        metadata = _single(archive, ".dist-info/METADATA")
        record = _single(archive, ".dist-info/RECORD")
        if metadata is None or record is None:
            return [f"{wheel.name} has not one METADATA and one RECORD"]
        headers = HeaderParser().parsestr(metadata.decode("utf-8").split("\n\n", 1)[0])
        problems = []
        if (normalize(headers.get("Name", "")), headers.get("Version")) != (PROJECT, version):
            found = f"{headers.get('Name')} {headers.get('Version')}"
            problems.append(f"{wheel.name} is {found}, not {PROJECT} {version}")
        problems += _record_problems(archive, record.decode("utf-8"))
    pinned = requirements.pinned()
    for text in headers.get_all("Requires-Dist") or ():
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            problems.append(f"{wheel.name} declares a malformed requirement {text!r}")
            continue
        if requirement.marker is None and normalize(requirement.name) not in pinned:
            problems.append(f"{requirement.name}, which repro needs, is not pinned")
    return problems


def _single(archive: zipfile.ZipFile, suffix: str) -> bytes | None:
    names = [name for name in archive.namelist() if name.endswith(suffix) and name.count("/") == 1]
    return archive.read(names[0]) if len(names) == 1 else None


def _record_problems(archive: zipfile.ZipFile, record: str) -> list[str]:
    problems = []
    hashed = {row[0]: row[1] for row in csv.reader(io.StringIO(record)) if len(row) >= 2 and row[1]}
    for name in sorted(set(archive.namelist()) - set(hashed)):
        if not name.endswith(".dist-info/RECORD") and not name.endswith("/"):
            problems.append(f"{name} is in the wheel but not in its RECORD")
    for name, expected in sorted(hashed.items()):
        try:
            data = archive.read(name)
        except KeyError:
            problems.append(f"{name} is in the wheel's RECORD but not in the wheel")
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if expected != f"sha256={digest}":
            problems.append(f"{name} is not the bytes the wheel's RECORD hashes")
    return problems
