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
bytes need not be that wheel's.
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


def pack_installed(distribution: str, wheel: Path) -> Path:
    """`distribution`'s installed files packed into `wheel` (a path named as PEP 427 says)."""
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
    lines = io.StringIO()
    rows_out = csv.writer(lines, lineterminator="\n")
    wheel.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
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
            _write(archive, file.name, data)
            rows_out.writerow((file.name, f"sha256={digest}", len(data)))
        rows_out.writerow((f"{dist_info}/RECORD", "", ""))
        _write(archive, f"{dist_info}/RECORD", lines.getvalue().encode())
    return wheel


def _record_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _write(archive: zipfile.ZipFile, name: str, data: bytes) -> None:
    entry = zipfile.ZipInfo(name, date_time=_EPOCH)
    entry.external_attr = 0o644 << 16
    entry.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(entry, data)
