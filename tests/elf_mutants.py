"""Real gcc-built ELF files, and the broken or foreign files made from them byte by byte.

`gcc_objects` compiles a small family of objects: a 64-bit shared object with two DT_NEEDED,
a DT_SONAME, a DT_RUNPATH and DF_1_NODEFLIB, a PIE executable with PT_INTERP and DT_RPATH,
and, gcc targeting i386 (`-m32 -nostdlib` needs no 32-bit C library), the same two in
32-bit. The mutations take the bytes of a 64-bit little-endian file as gcc wrote it, read its
headers with their own struct formats (independent of the reader under test) and return new
bytes: one field changed, the section headers dropped (so pyelftools, too, finds the strings
through DT_STRTAB as the loader does), or the whole file re-encoded in another class or byte
order (big-endian files cannot be built here: there is no big-endian toolchain).
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path
from typing import Any

EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
PHDR = struct.Struct("<IIQQQQQQ")
DYN = struct.Struct("<qQ")
EHDR_FIELDS = [
    "e_ident",
    "e_type",
    "e_machine",
    "e_version",
    "e_entry",
    "e_phoff",
    "e_shoff",
    "e_flags",
    "e_ehsize",
    "e_phentsize",
    "e_phnum",
    "e_shentsize",
    "e_shnum",
    "e_shstrndx",
]
PHDR_FIELDS = [
    "p_type",
    "p_flags",
    "p_offset",
    "p_vaddr",
    "p_paddr",
    "p_filesz",
    "p_memsz",
    "p_align",
]
PT_LOAD, PT_DYNAMIC, PT_INTERP, PT_PHDR = 1, 2, 3, 6
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME = 0, 1, 5, 10, 14

_SOURCE = "int answer(void) { return 42; }\n"


def gcc(tmp: Path, name: str, *flags: str) -> Path:
    """`tmp/name` linked by gcc from a one-function source with `flags`."""
    source = tmp / "answer.c"
    source.write_text(_SOURCE)
    target = tmp / name
    subprocess.run(["gcc", "-o", str(target), str(source), *flags], check=True)
    return target


def gcc_objects(tmp: Path) -> dict[str, Path]:
    """The family described above, by name; the 32-bit pair only where gcc can build it."""
    made = {
        "libdep.so": gcc(tmp, "libdep.so", "-shared", "-fPIC", "-Wl,-soname,libdep.so.3"),
    }
    made["libx.so"] = gcc(
        tmp,
        "libx.so",
        "-shared",
        "-fPIC",
        "-Wl,-soname,libx.so.1",
        "-Wl,--no-as-needed",
        f"-L{tmp}",
        "-l:libdep.so",
        "-lm",
        "-Wl,--enable-new-dtags,-rpath,$ORIGIN/a:/b",
        "-Wl,-z,nodefaultlib",
    )
    main = tmp / "main.c"
    main.write_text("int main(void) { return 0; }\n")
    made["app"] = tmp / "app"
    subprocess.run(
        ["gcc", "-o", str(made["app"]), str(main), "-Wl,--disable-new-dtags,-rpath,/opt/x"],
        check=True,
    )
    i386 = ["-m32", "-nostdlib", "-fPIC"]
    # -nostdlib: gcc targets i386 with no 32-bit C library installed, on every machine here
    made["libdep32.so"] = gcc(tmp, "libdep32.so", *i386, "-shared", "-Wl,-soname,libd.so.1")
    needs = ["-Wl,--no-as-needed", f"-L{tmp}", "-l:libdep32.so"]
    made["libx32.so"] = gcc(
        tmp, "libx32.so", *i386, "-shared", "-Wl,-soname,libx.so", *needs, "-Wl,-rpath,/r32"
    )
    made["app32"] = gcc(tmp, "app32", *i386, "-Wl,-e,answer", *needs)
    return made


# --- reading the 64-bit little-endian layout gcc writes ---------------------------------------


def header(data: bytes) -> dict[str, Any]:
    return dict(zip(EHDR_FIELDS, EHDR.unpack_from(data), strict=True))


def segments(data: bytes) -> list[dict[str, int]]:
    top = header(data)
    return [
        dict(zip(PHDR_FIELDS, PHDR.unpack_from(data, top["e_phoff"] + i * PHDR.size), strict=True))
        for i in range(top["e_phnum"])
    ]


def segment(data: bytes, p_type: int) -> tuple[int, dict[str, int]]:
    """The index and fields of the first segment of `p_type`."""
    return next((i, s) for i, s in enumerate(segments(data)) if s["p_type"] == p_type)


def dynamic(data: bytes) -> tuple[int, list[tuple[int, int]]]:
    """The file offset of the dynamic segment and its entries up to and including DT_NULL."""
    _, dyn = segment(data, PT_DYNAMIC)
    entries = []
    for start in range(dyn["p_offset"], dyn["p_offset"] + dyn["p_filesz"], DYN.size):
        entries.append(DYN.unpack_from(data, start))
        if entries[-1][0] == DT_NULL:
            break
    return dyn["p_offset"], entries


def dynamic_value(data: bytes, tag: int) -> int:
    return next(value for t, value in dynamic(data)[1] if t == tag)


def strtab_offset(data: bytes) -> int:
    """DT_STRTAB as a file offset, through the PT_LOAD segment that holds it."""
    address = dynamic_value(data, DT_STRTAB)
    load = next(
        s
        for s in segments(data)
        if s["p_type"] == PT_LOAD and s["p_vaddr"] <= address < s["p_vaddr"] + s["p_filesz"]
    )
    return address - load["p_vaddr"] + load["p_offset"]


# --- mutations ---------------------------------------------------------------------------------


def with_header(data: bytes, **fields: Any) -> bytes:
    values = header(data) | fields
    out = bytearray(data)
    EHDR.pack_into(out, 0, *(values[name] for name in EHDR_FIELDS))
    return bytes(out)


def with_segment(data: bytes, kind: int, **fields: int) -> bytes:
    """The first segment of type `kind` with `fields` changed."""
    index, values = segment(data, kind)
    out = bytearray(data)
    at = header(data)["e_phoff"] + index * PHDR.size
    PHDR.pack_into(out, at, *((values | fields)[name] for name in PHDR_FIELDS))
    return bytes(out)


def with_dynamic(
    data: bytes, tag: int, *, value: int | None = None, new_tag: int | None = None
) -> bytes:
    """The first entry of `tag` with its value and/or its tag changed."""
    offset, entries = dynamic(data)
    index = next(i for i, (t, _) in enumerate(entries) if t == tag)
    old_tag, old_value = entries[index]
    out = bytearray(data)
    DYN.pack_into(
        out,
        offset + index * DYN.size,
        old_tag if new_tag is None else new_tag,
        old_value if value is None else value,
    )
    return bytes(out)


def with_bytes(data: bytes, offset: int, replacement: bytes) -> bytes:
    return data[:offset] + replacement + data[offset + len(replacement) :]


def without_sections(data: bytes) -> bytes:
    """No section header table: what `strip --strip-section-headers` leaves, as the loader
    sees every file anyway."""
    return with_header(data, e_shoff=0, e_shnum=0, e_shentsize=0, e_shstrndx=0)


def transcode(data: bytes, *, bits: int, little: bool, machine: int) -> bytes:
    """The file re-encoded as an ELF`bits` file of that byte order and machine, every offset,
    address and string where it was; the section headers dropped (they stay 64-bit LE)."""
    order = "<" if little else ">"
    top = header(data)
    out = bytearray(data)
    ident = b"\x7fELF" + bytes([bits // 32, 1 if little else 2]) + top["e_ident"][6:]
    ehdr = "16sHHIQQQIHHHHHH" if bits == 64 else "16sHHIIIIIHHHHHH"
    phdr_size = 56 if bits == 64 else 32
    struct.pack_into(
        order + ehdr,
        out,
        0,
        ident,
        top["e_type"],
        machine,
        top["e_version"],
        top["e_entry"],
        top["e_phoff"],
        0,
        top["e_flags"],
        64 if bits == 64 else 52,
        phdr_size,
        top["e_phnum"],
        0,
        0,
        0,
    )
    table = bytearray(len(segments(data)) * PHDR.size)
    for index, s in enumerate(segments(data)):
        if bits == 64:
            fields = [s[name] for name in PHDR_FIELDS]
            struct.pack_into(order + "IIQQQQQQ", table, index * phdr_size, *fields)
        else:
            names = [
                "p_type",
                "p_offset",
                "p_vaddr",
                "p_paddr",
                "p_filesz",
                "p_memsz",
                "p_flags",
                "p_align",
            ]
            struct.pack_into(order + "8I", table, index * phdr_size, *(s[n] for n in names))
    out[top["e_phoff"] : top["e_phoff"] + len(table)] = table
    offset, entries = dynamic(data)
    _, dyn = segment(data, PT_DYNAMIC)
    encoded = bytearray(dyn["p_filesz"])  # zeros: DT_NULL after the re-encoded entries
    entry = struct.Struct(order + ("qQ" if bits == 64 else "iI"))
    for index, (tag, value) in enumerate(entries):
        entry.pack_into(encoded, index * entry.size, tag, value)
    out[offset : offset + len(encoded)] = encoded
    return bytes(out)
