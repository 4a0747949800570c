"""The wheel of a repro installed from a wheel, packed again from its installed files.

A bundle carries the repro that sealed it (`builder.observe.tools`). A checkout builds that wheel
from its source; a repro installed by `pip install` from a wheel or an sdist has no source tree,
but pip's RECORD names every file the wheel installed, with its sha256 and size. Those files
are packed again into a wheel of the same name: each read once and checked against its RECORD
row first (a file changed since it was installed is refused, naming it), the scripts pip
generated outside site-packages (`../../../bin/repro`, rebuilt by pip from entry_points.txt),
bytecode and pip's own records (INSTALLER, REQUESTED, direct_url.json, RECORD) left out, and a
RECORD written anew. Entries are sorted and stamped 1980-01-01, so the same installed files
always give the same bytes. The wheel installs the same files as the one pip installed; its
bytes need not be that wheel's. Its version is the labelled one of the repro that runs
(`builder.own.release`): a repro pip built from its source without the label has its
dist-info folder and METADATA's Version written for it.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Final

from repro_serving.builder.errors import NotObservable

_PIP_RECORDS: Final = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"})
_EPOCH: Final = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class InstalledFile:
    """A file a wheel installed, as RECORD names it: its path relative to site-packages."""

    name: str
    sha256: str
    """RECORD's digest: urlsafe base64 of the sha256, without padding."""
    size: int


def packed_files(rows: Iterable[tuple[str, str, str]]) -> list[InstalledFile]:
    """The RECORD rows (path, `sha256=digest`, size) a wheel packed again holds, sorted; a row
    of a packed file without a sha256 is refused (pip writes one for every installed file)."""
    files = []
    for name, digest, size in rows:
        path = PurePosixPath(name)
        if name.startswith("../") or "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        if path.parent.name.endswith(".dist-info") and path.name in _PIP_RECORDS:
            continue
        algorithm, _, value = digest.partition("=")
        if algorithm != "sha256" or not value or not size.isdigit():
            raise NotObservable(
                "the installed repro's RECORD has a row without a sha256 and size",
                where=name,
                expected="sha256=<urlsafe base64>,<size>",
                found=f"{digest!r},{size!r}",
            )
        files.append(InstalledFile(name, value, int(size)))
    return sorted(files, key=lambda f: f.name)


def pack_installed(distribution: str, version: str, wheel: Path) -> Path:
    """`distribution`'s installed files packed into `wheel` (a path named as PEP 427 says), a
    wheel of `version` (`installed_members`)."""
    members = installed_members(distribution, version)
    lines = io.StringIO()
    rows_out = csv.writer(lines, lineterminator="\n")
    wheel.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            _write(archive, name, data)
            rows_out.writerow((name, f"sha256={_record_digest(data)}", len(data)))
        record = f"{_dist_info(members)}/RECORD"
        rows_out.writerow((record, "", ""))
        _write(archive, record, lines.getvalue().encode())
    return wheel


def installed_members(distribution: str, version: str) -> list[tuple[str, bytes]]:
    """(name, bytes) of every member but RECORD of `distribution`'s wheel of `version`, packed
    again from its installed files, sorted by name: each file RECORD names read once and checked
    against its row. A repro pip built from its source is installed under its release alone,
    which names no source (`builder.own.release`): its dist-info folder and the Version of
    its METADATA are then written for `version`, what its files are."""
    try:
        installed = metadata.distribution(distribution)
    except metadata.PackageNotFoundError as error:
        raise NotObservable(
            f"{distribution} is not installed: no RECORD to pack its wheel from",
            found=str(error),
        ) from error
    record = installed.read_text("RECORD")
    if record is None:
        raise NotObservable(f"{distribution} was installed without a RECORD", found="no RECORD")
    rows = [[*row, "", ""][:3] for row in csv.reader(record.splitlines()) if row]
    files = packed_files((name, digest, size) for name, digest, size in rows)
    site = Path(str(installed.locate_file("")))
    dist_info = next(PurePosixPath(f.name).parts[0] for f in files if ".dist-info/" in f.name)
    renamed = f"{dist_info.split('-', 1)[0]}-{version.replace('-', '_')}.dist-info"
    members = []
    for file in files:
        data = (site / file.name).read_bytes()
        digest = _record_digest(data)
        if (digest, len(data)) != (file.sha256, file.size):
            raise NotObservable(
                "an installed file of repro differs from what its wheel installed",
                where=str(site / file.name),
                expected=f"sha256={file.sha256}, {file.size} bytes (RECORD)",
                found=f"sha256={digest}, {len(data)} bytes",
                hint=f"reinstall {distribution}",
            )
        name = file.name
        if installed.version != version and name.startswith(f"{dist_info}/"):
            name = renamed + name[len(dist_info) :]
            if name == f"{renamed}/METADATA":
                data = _versioned(data, installed.version, version, where=str(site / file.name))
        members.append((name, data))
    return sorted(members)


def _dist_info(members: list[tuple[str, bytes]]) -> str:
    return next(PurePosixPath(name).parts[0] for name, _ in members if ".dist-info/" in name)


def _versioned(metadata_file: bytes, old: str, new: str, *, where: str) -> bytes:
    """METADATA with its one `Version: old` header written `Version: new`."""
    head, separator, body = metadata_file.partition(b"\n\n")
    lines = head.split(b"\n")
    stated = [number for number, line in enumerate(lines) if line.startswith(b"Version:")]
    if len(stated) != 1 or lines[stated[0]] != f"Version: {old}".encode():
        raise NotObservable(
            "the installed repro's METADATA does not state its version once",
            where=where,
            expected=f"one header Version: {old}",
        )
    lines[stated[0]] = f"Version: {new}".encode()
    return b"\n".join(lines) + separator + body


def _record_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _write(archive: zipfile.ZipFile, name: str, data: bytes) -> None:
    entry = zipfile.ZipInfo(name, date_time=_EPOCH)
    entry.external_attr = 0o644 << 16
    entry.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(entry, data)
