"""The ELF facts the dynamic loader acts on, read with `struct` from a few pread()s.

This module owns reading one file into an `ElfInfo`: class, byte order, machine, type,
interpreter (PT_INTERP) and, from the dynamic segment, DT_SONAME, DT_NEEDED (in order),
DT_RPATH, DT_RUNPATH and DT_FLAGS_1. Only what the loader reads is read: the ELF header, the
program headers, the interpreter's bytes, the dynamic segment and the strings it names. The
strings are found as the loader finds them: DT_STRTAB is a virtual address, turned into a file
offset by the first PT_LOAD segment whose file part holds it (as pyelftools does), and every
string must end inside DT_STRSZ. No section header is ever read.

A file that is missing, unreadable, not ELF, truncated or malformed raises a `BadInput`
subclass naming the path, the offsets and what was expected there: `TruncatedElf` when the
file ends before a structure its headers place in it, `MalformedElf` when the values do not
fit together. Every offset and count is checked before it is used, so no read is larger than
the file. Where pyelftools reads on, the loader's limits hold here: e_phnum is taken as ld.so
takes it (no PN_XNUM) with e_phentsize exactly a program header, the dynamic array must end
with DT_NULL inside p_filesz, a string inside DT_STRSZ, the interpreter inside PT_INTERP, and
a name that is not UTF-8 is refused rather than replaced, and only the last PT_DYNAMIC is read,
as ld.so reads only it (tests/test_elf_differential.py).

`decode_elf` is the pure core, over any `read_at(offset, length)`; `parse_elf` gives it a file
descriptor (pread), `read_elf` a path opened through `builder.readers.open_regular`: a FIFO or
a device is refused as unreadable, never waited on.

Names: `machine` and `e_type` are pyelftools' names ("EM_X86_64", "ET_DYN"); a machine outside
the table below is named from pyelftools' own table, imported only then; a number neither
knows is its decimal text, as pyelftools gives it.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, NamedTuple

from repro_serving.builder.errors import BadInput, NotObservable
from repro_serving.builder.readers import NoSuchFile, open_regular

ELF_MAGIC = b"\x7fELF"
DF_1_NODEFLIB = 0x800
DF_1_PIE = 0x08000000

PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ = 0, 1, 5, 10
DT_SONAME, DT_RPATH, DT_RUNPATH, DT_FLAGS_1 = 14, 15, 29, 0x6FFFFFFB
_STRING_TAGS = {
    DT_NEEDED: "DT_NEEDED",
    DT_SONAME: "DT_SONAME",
    DT_RPATH: "DT_RPATH",
    DT_RUNPATH: "DT_RUNPATH",
}

_E_TYPES = {
    0: "ET_NONE",
    1: "ET_REL",
    2: "ET_EXEC",
    3: "ET_DYN",
    4: "ET_CORE",
    0xFF00: "ET_LOPROC",
    0xFFFF: "ET_HIPROC",
}
_MACHINES = {  # the machines of Linux distributions; the rest: `_machine_name`
    0: "EM_NONE",
    2: "EM_SPARC",
    3: "EM_386",
    8: "EM_MIPS",
    20: "EM_PPC",
    21: "EM_PPC64",
    22: "EM_S390",
    40: "EM_ARM",
    43: "EM_SPARCV9",
    62: "EM_X86_64",
    183: "EM_AARCH64",
    243: "EM_RISCV",
    258: "EM_LOONGARCH",
}

_FIRST_READ = 4096  # the ELF header and, in every linker's layout, the program headers
_CHUNK = 4096  # the dynamic segment and long strings are read this much at a time
_NAME_READ = 256  # a string's first read: library names and search paths are short
_PATH_MAX = 4096  # the kernel refuses a longer PT_INTERP

ReadAt = Callable[[int, int], bytes]
"""(offset, length) -> the bytes there; fewer only at the end of the file."""


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
    """Read an open file by its descriptor; `path` only names it in errors and in the result.

    An `OSError` of the reads (EISDIR, EIO) is left to the caller."""
    fd = stream.fileno()
    size = os.fstat(fd).st_size
    return decode_elf(lambda offset, length: os.pread(fd, length, offset), size, path)


def decode_elf(read_at: ReadAt, size: int, path: str) -> ElfInfo:
    """The `ElfInfo` of a file of `size` bytes whose bytes `read_at` gives (no other I/O)."""
    file = _File(read_at, size, path)
    head = file.read_up_to(0, _FIRST_READ)
    layout = _header_layout(head, size, path)
    e_type, e_machine, phoff, phentsize, phnum = layout.header.unpack_from(head)
    segments = _program_headers(file, head, layout, (phoff, phentsize, phnum))
    loads = [(offset, vaddr, filesz) for kind, offset, vaddr, filesz in segments if kind == PT_LOAD]
    interpreter: str | None = None
    for kind, offset, _, filesz in segments:
        if kind == PT_INTERP:
            interpreter = _interpreter(file, offset, filesz)
    # ld.so keeps the last PT_DYNAMIC it meets (each one overwrites l_ld in
    # _dl_map_object_from_fd): an earlier one is never read, so it is not read here either.
    dynamic = _Dynamic()
    last = [(offset, filesz) for kind, offset, _, filesz in segments if kind == PT_DYNAMIC]
    if last and last[-1][1]:
        _read_dynamic(file, layout, last[-1], loads, dynamic)
    return ElfInfo(
        path=path,
        elf_class=32 if layout.bits == 1 else 64,
        little_endian=layout.little_endian,
        machine=_machine_name(e_machine),
        e_type=_E_TYPES.get(e_type, str(e_type)),
        interpreter=interpreter,
        soname=dynamic.soname,
        needed=tuple(dynamic.needed),
        rpath=dynamic.rpath,
        runpath=dynamic.runpath,
        flags_1=dynamic.flags_1,
    )


# --- layouts ---------------------------------------------------------------------------------


class _Layout(NamedTuple):
    """The structs of one ELF class and byte order, reduced to the fields read here."""

    bits: int  # e_ident[EI_CLASS]: 1 or 2
    little_endian: bool
    header: struct.Struct  # e_type, e_machine, e_phoff, e_phentsize, e_phnum
    phdr: struct.Struct  # p_type, p_offset, p_vaddr, p_filesz
    dyn: struct.Struct  # d_tag, d_val


def _layout(bits: int, little_endian: bool) -> _Layout:
    order = "<" if little_endian else ">"
    formats = (
        ("16xHH8xI10xHH6x", "III4xI12x", "iI")  # Elf32_Ehdr, Elf32_Phdr, Elf32_Dyn
        if bits == 1
        else ("16xHH12xQ14xHH6x", "I4xQQ8xQ16x", "qQ")  # Elf64_Ehdr, Elf64_Phdr, Elf64_Dyn
    )
    header, phdr, dyn = (struct.Struct(order + f) for f in formats)
    return _Layout(bits, little_endian, header, phdr, dyn)


_LAYOUTS = {(bits, data): _layout(bits, data == 1) for bits in (1, 2) for data in (1, 2)}


def _ident_byte(head: bytes, offset: int, name: str, expected: str, path: str) -> int:
    """The byte of `e_ident` at `offset`, which must be 1 or 2 (class, data encoding)."""
    value = head[offset] if len(head) > offset else None
    if value is None or value not in (1, 2):
        raise MalformedElf(
            "malformed ELF file",
            where=path,
            expected=f"{expected} at offset {offset}",
            found=f"{name} byte {'missing' if value is None else value}",
        )
    return value


def _header_layout(head: bytes, size: int, path: str) -> _Layout:
    if head[:4] != ELF_MAGIC:
        raise NotElf(
            "not an ELF file",
            where=path,
            expected="ELF magic 7f 45 4c 46",
            found=f"{head[:4].hex(' ') or 'an empty file'} ({size} bytes)",
        )
    bits = _ident_byte(head, 4, "class", "ELF class 1 (32-bit) or 2 (64-bit)", path)
    data = _ident_byte(
        head, 5, "data", "ELF data encoding 1 (little-endian) or 2 (big-endian)", path
    )
    layout = _LAYOUTS[(bits, data)]
    if size < layout.header.size:
        raise TruncatedElf(
            "truncated ELF file",
            where=path,
            expected=f"at least {layout.header.size} bytes for the ELF header",
            found=f"{size} bytes",
        )
    return layout


# --- reading ---------------------------------------------------------------------------------


class _File:
    """Bounded reads of one file: nothing past its end is ever asked of `read_at`."""

    def __init__(self, read_at: ReadAt, size: int, path: str) -> None:
        self.read_at = read_at
        self.size = size
        self.path = path

    def read_up_to(self, offset: int, length: int) -> bytes:
        """At most `length` bytes at `offset`, fewer at the end of the file."""
        length = max(0, min(length, self.size - offset))
        return self.read_at(offset, length) if length else b""

    def read(self, offset: int, length: int, what: str) -> bytes:
        """Exactly `length` bytes at `offset`, or `TruncatedElf` naming `what`."""
        if offset + length > self.size:
            raise self.truncated(offset, length, what, f"the file ends at byte {self.size}")
        data = self.read_at(offset, length) if length else b""
        if len(data) != length:
            raise self.truncated(offset, length, what, f"{len(data)} bytes there: it shrank")
        return data

    def truncated(self, offset: int, length: int, what: str, found: str) -> TruncatedElf:
        return TruncatedElf(
            "truncated ELF file",
            where=self.path,
            expected=f"{what} at bytes {offset}..{offset + length}",
            found=found,
        )

    def malformed(self, expected: str, found: str) -> MalformedElf:
        return MalformedElf("malformed ELF file", where=self.path, expected=expected, found=found)


Segment = tuple[int, int, int, int]  # p_type, p_offset, p_vaddr, p_filesz


def _program_headers(
    file: _File, head: bytes, layout: _Layout, table_at: tuple[int, int, int]
) -> list[Segment]:
    """The program header table (e_phoff, e_phentsize, e_phnum) as glibc reads it: e_phnum
    taken as it is (no PN_XNUM), entries of exactly the size of this class's header."""
    phoff, phentsize, phnum = table_at
    if phnum == 0:
        return []
    if phentsize != layout.phdr.size:
        raise file.malformed(
            f"e_phentsize {layout.phdr.size} (the size of a {32 * layout.bits}-bit program "
            "header) at offset " + ("42" if layout.bits == 1 else "54"),
            f"{phentsize}",
        )
    length = phnum * phentsize
    what = f"{phnum} program headers of {phentsize} bytes"
    if phoff + length <= len(head):
        table = head[phoff : phoff + length]
    else:
        table = file.read(phoff, length, what)
    return list(layout.phdr.iter_unpack(table))


def _interpreter(file: _File, offset: int, filesz: int) -> str:
    """PT_INTERP: the path up to its NUL, which must lie inside the segment."""
    expected = (
        f"a NUL-terminated path of at most {_PATH_MAX} bytes in the PT_INTERP segment at bytes "
        f"{offset}..{offset + filesz}"
    )
    if filesz > _PATH_MAX:
        raise file.malformed(expected, f"a segment of {filesz} bytes")
    data = file.read(offset, filesz, "the PT_INTERP segment")
    end = data.find(b"\0")
    if end < 0:
        raise file.malformed(expected, f"{filesz} bytes without a NUL")
    return _text(file, data[:end], f"the PT_INTERP path at byte {offset}")


class _Dynamic:
    """The tags read so far; a later tag of the same kind wins, as in glibc's l_info."""

    def __init__(self) -> None:
        self.needed: list[str] = []
        self.soname: str | None = None
        self.rpath: str | None = None
        self.runpath: str | None = None
        self.flags_1 = 0


def _read_dynamic(
    file: _File,
    layout: _Layout,
    segment: tuple[int, int],
    loads: list[tuple[int, int, int]],
    into: _Dynamic,
) -> None:
    """One PT_DYNAMIC segment (p_offset, p_filesz): its tags, in order, into `into`."""
    entries = _dynamic_entries(file, layout, *segment)
    strtab = next((value for tag, value in entries if tag == DT_STRTAB), None)
    strsz = next((value for tag, value in entries if tag == DT_STRSZ), None)
    strings = None
    for tag, value in entries:
        if tag == DT_FLAGS_1:
            into.flags_1 = value
        elif tag in _STRING_TAGS:
            if strings is None:
                strings = _StringTable.locate(file, strtab, strsz, loads, _STRING_TAGS[tag])
            text = strings.get(value, _STRING_TAGS[tag])
            if tag == DT_NEEDED:
                into.needed.append(text)
            elif tag == DT_SONAME:
                into.soname = text
            elif tag == DT_RPATH:
                into.rpath = text
            else:
                into.runpath = text


def _dynamic_entries(
    file: _File, layout: _Layout, offset: int, filesz: int
) -> list[tuple[int, int]]:
    """The (d_tag, d_val) pairs up to DT_NULL, which must lie inside the segment."""
    if offset + filesz > file.size:
        raise file.truncated(
            offset, filesz, "the PT_DYNAMIC segment", f"the file ends at byte {file.size}"
        )
    entries: list[tuple[int, int]] = []
    step = _CHUNK - _CHUNK % layout.dyn.size
    usable = filesz - filesz % layout.dyn.size
    for start in range(offset, offset + usable, step):
        chunk = file.read(start, min(step, offset + usable - start), "the PT_DYNAMIC segment")
        for entry in layout.dyn.iter_unpack(chunk):
            if entry[0] == DT_NULL:
                return entries
            entries.append(entry)
    raise file.malformed(
        f"a DT_NULL entry ending the dynamic segment at bytes {offset}..{offset + filesz}",
        f"{len(entries)} entries and no DT_NULL",
    )


class _StringTable:
    """DT_STRTAB as a file range: [start, end) holds every string a tag may name."""

    def __init__(self, file: _File, start: int, end: int) -> None:
        self.file = file
        self.start = start
        self.end = end

    @classmethod
    def locate(
        cls,
        file: _File,
        strtab: int | None,
        strsz: int | None,
        loads: list[tuple[int, int, int]],
        user: str,
    ) -> _StringTable:
        if strtab is None:
            raise file.malformed(f"a DT_STRTAB entry for {user}", "none in the dynamic segment")
        for offset, vaddr, filesz in loads:
            if vaddr <= strtab < vaddr + filesz:
                start = offset + strtab - vaddr
                end = offset + filesz if strsz is None else start + strsz
                if end > offset + filesz:
                    raise file.malformed(
                        f"DT_STRTAB {strtab:#x} + DT_STRSZ {strsz} inside the file part of the "
                        f"PT_LOAD segment at virtual address {vaddr:#x} ({filesz} bytes)",
                        f"the string table ends {end - offset - filesz} bytes past it",
                    )
                return cls(file, start, end)
        raise file.malformed(
            f"DT_STRTAB {strtab:#x} inside the file part of a PT_LOAD segment",
            "PT_LOAD segments at "
            + (", ".join(f"{v:#x}..{v + n:#x}" for _, v, n in loads) or "none"),
        )

    def get(self, index: int, tag: str) -> str:
        """The NUL-terminated string at `index`, which must end inside the table."""
        start = at = self.start + index
        if index >= self.end - self.start:
            raise self.file.malformed(
                f"{tag} string offset inside DT_STRSZ ({self.end - self.start} bytes)",
                f"offset {index}",
            )
        pieces: list[bytes] = []
        length = _NAME_READ
        while at < self.end:
            chunk = self.file.read(at, min(length, self.end - at), f"the {tag} string")
            cut = chunk.find(b"\0")
            if cut >= 0:
                pieces.append(chunk[:cut])
                return _text(self.file, b"".join(pieces), f"the {tag} string at byte {start}")
            pieces.append(chunk)
            at += len(chunk)
            length = _CHUNK
        raise self.file.malformed(
            f"a NUL ending the {tag} string at offset {index} inside DT_STRSZ "
            f"({self.end - self.start} bytes)",
            "no NUL before the end of the string table",
        )


def _text(file: _File, data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise file.malformed(
            f"UTF-8 text in {what}", f"byte {data[error.start]:#04x} at position {error.start}"
        ) from error


def _machine_name(number: int) -> str:
    known = _MACHINES.get(number)
    if known is not None:
        return known
    from elftools.elf.enums import ENUM_E_MACHINE  # the long tail, imported only when met

    names = {value: name for name, value in ENUM_E_MACHINE.items() if name != "_default_"}
    return str(names.get(number, number))
