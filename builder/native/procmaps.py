"""Parsing of `/proc/<pid>/maps`: pure functions from text to typed mappings.

Each line is `start-end perms offset major:minor inode [path]`. A file-backed mapping has an
inode other than 0 and an absolute path; the kernel appends " (deleted)" to the path of a file
unlinked after it was mapped. `FileId` is the (st_dev, st_ino) pair `os.stat` gives for the
same file, so mappings and files on disk compare by identity, never by name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NamedTuple

from repro_serving.builder.errors import BadInput

DELETED_SUFFIX = " (deleted)"


class FileId(NamedTuple):
    """A file's identity: `st_dev` and `st_ino` as `os.stat` reports them.

    A tuple, so the loader emulation and the maps parser compare identities the same way."""

    device: int
    inode: int

    def __str__(self) -> str:
        return f"{os.major(self.device):x}:{os.minor(self.device):x}/{self.inode}"


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str
    offset: int
    file_id: FileId | None
    path: str | None
    deleted: bool

    @property
    def range_name(self) -> str:
        """The entry name of this mapping under `/proc/<pid>/map_files/`."""
        return f"{self.start:x}-{self.end:x}"


def parse_maps_line(line: str, *, where: str) -> Mapping:
    fields = line.split(maxsplit=5)
    if len(fields) < 5:
        raise BadInput(
            "malformed line in a maps file",
            where=where,
            expected="start-end perms offset major:minor inode [path]",
            found=repr(line),
        )
    try:
        start_text, end_text = fields[0].split("-")
        major_text, minor_text = fields[3].split(":")
        start, end = int(start_text, 16), int(end_text, 16)
        offset, inode = int(fields[2], 16), int(fields[4])
        device = os.makedev(int(major_text, 16), int(minor_text, 16))
    except ValueError as error:
        raise BadInput(
            "malformed line in a maps file",
            where=where,
            expected="hexadecimal addresses, offset and device, a decimal inode",
            found=repr(line),
        ) from error
    path = fields[5].rstrip("\n") if len(fields) == 6 else None
    deleted = path is not None and path.endswith(DELETED_SUFFIX)
    if path is not None and deleted:
        path = path.removesuffix(DELETED_SUFFIX)
    file_backed = inode != 0 and path is not None and path.startswith("/")
    return Mapping(
        start=start,
        end=end,
        perms=fields[1],
        offset=offset,
        file_id=FileId(device, inode) if file_backed else None,
        path=path,
        deleted=deleted,
    )


def parse_maps(text: str, *, where: str) -> tuple[Mapping, ...]:
    return tuple(parse_maps_line(line, where=where) for line in text.splitlines() if line.strip())


def file_mappings(mappings: tuple[Mapping, ...]) -> dict[FileId, tuple[Mapping, ...]]:
    """Group file-backed mappings by file identity, in order of first appearance."""
    grouped: dict[FileId, list[Mapping]] = {}
    for mapping in mappings:
        if mapping.file_id is not None:
            grouped.setdefault(mapping.file_id, []).append(mapping)
    return {file_id: tuple(group) for file_id, group in grouped.items()}
