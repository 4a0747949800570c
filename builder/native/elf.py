"""The ELF facts the dynamic loader acts on, read with pyelftools.

This module owns reading one file into an `ElfInfo`: class, byte order, machine, type,
interpreter (PT_INTERP) and, from the dynamic segment, DT_SONAME, DT_NEEDED (in order),
DT_RPATH, DT_RUNPATH and DT_FLAGS_1. A file that is missing, unreadable, not ELF, truncated or
malformed raises a `BadInput` subclass naming the path; nothing else is interpreted here. A file
named to be read is opened through `builder.readers.open_regular`: a FIFO or a device is refused
as unreadable, never waited on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import IO, Any

from elftools.elf.elffile import ELFFile

from builder.errors import BadInput, NotObservable
from builder.readers import NoSuchFile, open_regular

ELF_MAGIC = b"\x7fELF"
DF_1_NODEFLIB = 0x800
DF_1_PIE = 0x08000000
_HEADER_SIZE = {1: 52, 2: 64}  # e_ident[EI_CLASS] -> sizeof(ElfN_Ehdr)


class ElfError(BadInput):
    """A file the loader would refuse to read as ELF (the path is in `where`)."""


class MissingFile(ElfError):
    pass


class UnreadableFile(ElfError):
    pass


class NotElf(ElfError):
    pass


class TruncatedElf(ElfError):
    pass


class MalformedElf(ElfError):
    pass


@dataclass(frozen=True)
class ElfInfo:
    path: str
    elf_class: int  # 32 or 64
    little_endian: bool
    machine: str  # pyelftools' e_machine name, e.g. "EM_X86_64"
    e_type: str  # "ET_DYN", "ET_EXEC", …
    interpreter: str | None
    soname: str | None
    needed: tuple[str, ...]
    rpath: str | None
    runpath: str | None
    flags_1: int

    @property
    def nodeflib(self) -> bool:
        return bool(self.flags_1 & DF_1_NODEFLIB)

    @property
    def pie(self) -> bool:
        return bool(self.flags_1 & DF_1_PIE)


def read_elf(path: str) -> ElfInfo:
    """Read `path`; raise a specific `ElfError` saying what was expected and found."""
    try:
        stream = open_regular(path, what="an ELF file")
    except NoSuchFile as error:
        raise MissingFile("no such file", where=path, found=error.found) from error
    except (BadInput, NotObservable) as error:
        raise UnreadableFile("cannot read file", where=path, found=error.found) from error
    try:
        with stream:
            return parse_elf(stream, path)
    except OSError as error:
        raise UnreadableFile(
            "cannot read file", where=path, found=error.strerror or str(error)
        ) from error


def is_elf(path: str) -> bool:
    """True when `path` is a readable file that starts with the ELF magic."""
    try:
        with open_regular(path, what="a file") as stream:
            return stream.read(4) == ELF_MAGIC
    except (BadInput, NotObservable, OSError):
        return False


def parse_elf(stream: IO[bytes], path: str) -> ElfInfo:
    """Read an open file; `path` only names it in errors and in the result."""
    _check_header(stream, path)
    try:
        return _info(ELFFile(stream), path)
    except ElfError:
        raise
    except Exception as error:  # pyelftools raises ELFError, struct and construct errors alike
        raise MalformedElf(
            "malformed ELF file",
            where=path,
            expected="ELF headers and dynamic segment inside the file",
            found=f"{type(error).__name__}: {error}",
        ) from error


def _check_header(stream: IO[bytes], path: str) -> None:
    head = stream.read(64)
    size = os.fstat(stream.fileno()).st_size
    stream.seek(0)
    if head[:4] != ELF_MAGIC:
        raise NotElf(
            "not an ELF file",
            where=path,
            expected="ELF magic 7f 45 4c 46",
            found=f"{head[:4].hex(' ') or 'an empty file'} ({size} bytes)",
        )
    needed = _HEADER_SIZE.get(head[4], 0) if len(head) > 4 else 0
    if not needed:
        raise MalformedElf(
            "malformed ELF file",
            where=path,
            expected="ELF class 1 (32-bit) or 2 (64-bit)",
            found=f"class byte {head[4] if len(head) > 4 else 'missing'}",
        )
    if size < needed:
        raise TruncatedElf(
            "truncated ELF file",
            where=path,
            expected=f"at least {needed} bytes for the ELF header",
            found=f"{size} bytes",
        )


def _info(elf: Any, path: str) -> ElfInfo:
    dynamic: dict[str, Any] = {"needed": []}
    interpreter: str | None = None
    for segment in elf.iter_segments():
        kind = segment["p_type"]
        if kind == "PT_INTERP":
            interpreter = segment.get_interp_name()
        elif kind == "PT_DYNAMIC":
            _read_dynamic(segment, dynamic)
    return ElfInfo(
        path=path,
        elf_class=int(elf.elfclass),
        little_endian=bool(elf.little_endian),
        machine=str(elf.header["e_machine"]),
        e_type=str(elf.header["e_type"]),
        interpreter=interpreter,
        soname=dynamic.get("soname"),
        needed=tuple(dynamic["needed"]),
        rpath=dynamic.get("rpath"),
        runpath=dynamic.get("runpath"),
        flags_1=int(dynamic.get("flags_1", 0)),
    )


def _read_dynamic(segment: Any, into: dict[str, Any]) -> None:
    for tag in segment.iter_tags():
        kind = tag.entry.d_tag
        if kind == "DT_NEEDED":
            into["needed"].append(tag.needed)
        elif kind == "DT_SONAME":
            into["soname"] = tag.soname
        elif kind == "DT_RPATH":
            into["rpath"] = tag.rpath
        elif kind == "DT_RUNPATH":
            into["runpath"] = tag.runpath
        elif kind == "DT_FLAGS_1":
            into["flags_1"] = tag.entry.d_val
