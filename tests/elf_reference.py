"""The reference ELF reader: pyelftools, as `builder.native.elf` used it before it read the
file itself. Tests only: the differential test holds the fast reader to this one.

pyelftools finds the dynamic strings through the section headers (the SHT_DYNAMIC section at
the segment's offset and its sh_link string table) and, when a file has none, through DT_STRTAB
and the PT_LOAD segments, as the loader does. It reads a string up to its NUL wherever that is,
with no regard for DT_STRSZ, and a dynamic segment up to DT_NULL with no regard for p_filesz.
"""

from __future__ import annotations

import io
import os
from typing import IO, Any

from elftools.elf.elffile import ELFFile

from repro_serving.builder.native.elf import (
    ELF_MAGIC,
    ElfError,
    ElfInfo,
    MalformedElf,
    NotElf,
    TruncatedElf,
)

_HEADER_SIZE = {1: 52, 2: 64}  # e_ident[EI_CLASS] -> sizeof(ElfN_Ehdr)


def reference_read(path: str) -> ElfInfo:
    """The facts of the file at `path`, or an `ElfError`."""
    with open(path, "rb") as stream:  # noqa: PTH123
        return reference_parse(stream, path)


def reference_decode(data: bytes, path: str) -> ElfInfo:
    """The facts of a file whose bytes are `data`, or an `ElfError`."""
    return reference_parse(io.BytesIO(data), path)


def reference_parse(stream: IO[bytes], path: str) -> ElfInfo:
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
    size = stream.seek(0, os.SEEK_END)
    stream.seek(0)
    if head[:4] != ELF_MAGIC:
        raise NotElf("not an ELF file", where=path, found=head[:4].hex(" "))
    needed = _HEADER_SIZE.get(head[4], 0) if len(head) > 4 else 0
    if not needed:
        raise MalformedElf("malformed ELF file", where=path, found="class byte")
    if size < needed:
        raise TruncatedElf("truncated ELF file", where=path, found=f"{size} bytes")


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
