"""The ELF reader: the loader's facts from gcc-built objects, and the exact refusals."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from diagnostics import diagnostic, refusal
from elf_mutants import (
    DT_STRSZ,
    DT_STRTAB,
    PT_LOAD,
    dynamic,
    dynamic_value,
    gcc_objects,
    header,
    segment,
    with_dynamic,
    with_header,
    without_sections,
)

from repro_serving.builder.native import elf
from repro_serving.builder.native.elf import (
    ElfInfo,
    MalformedElf,
    MissingFile,
    NotElf,
    TruncatedElf,
    UnreadableFile,
    decode_elf,
    is_elf,
    read_elf,
)

DT_DEBUG = 21


def decode(data: bytes) -> ElfInfo:
    return decode_elf(lambda offset, length: data[offset : offset + length], len(data), "mutant")


def gcc_lib(tmp_path: Path, name: str, *flags: str) -> Path:
    source = tmp_path / f"{name}.c"
    source.write_text("int answer(void) { return 42; }\n")
    target = tmp_path / name
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(target), str(source), *flags], check=True)
    return target


def test_reads_soname_needed_rpath_runpath_and_nodeflib(tmp_path: Path) -> None:
    gcc_lib(tmp_path, "libdep.so", "-Wl,-soname,libdep.so.3")
    lib = gcc_lib(
        tmp_path,
        "libx.so",
        "-Wl,-soname,libx.so.1",
        "-Wl,--no-as-needed",
        f"-L{tmp_path}",
        "-l:libdep.so",
        "-lm",
        "-Wl,--enable-new-dtags,-rpath,$ORIGIN/a:/b",
        "-Wl,-z,nodefaultlib",
    )

    info = read_elf(str(lib))

    assert info.soname == "libx.so.1"
    assert info.needed[:2] == ("libdep.so.3", "libm.so.6")
    assert (info.rpath, info.runpath) == (None, "$ORIGIN/a:/b")
    assert info.nodeflib
    assert (info.elf_class, info.machine, info.e_type) == (64, "EM_X86_64", "ET_DYN")
    assert info.interpreter is None


def test_reads_rpath_and_interpreter_of_an_executable(tmp_path: Path) -> None:
    source = tmp_path / "main.c"
    source.write_text("int main(void) { return 0; }\n")
    exe = tmp_path / "app"
    subprocess.run(
        ["gcc", "-o", str(exe), str(source), "-Wl,--disable-new-dtags,-rpath,/opt/x"], check=True
    )

    info = read_elf(str(exe))

    assert (info.rpath, info.runpath) == ("/opt/x", None)
    assert info.interpreter == "/lib64/ld-linux-x86-64.so.2"
    assert info.needed == ("libc.so.6",)
    assert info.pie and not info.nodeflib


def test_truncated_file_names_the_sizes(tmp_path: Path) -> None:
    target = tmp_path / "short.so"
    target.write_bytes(Path("/bin/true").read_bytes()[:20])
    assert refusal(TruncatedElf, read_elf, str(target)) == diagnostic(
        "truncated ELF file",
        target,
        expected="at least 64 bytes for the ELF header",
        found="20 bytes",
    )


@pytest.mark.parametrize(
    ("content", "found"),
    [(b"#!/bin/sh\necho\n", "23 21 2f 62 (15 bytes)"), (b"", "an empty file (0 bytes)")],
)
def test_non_elf_file_names_its_first_bytes(tmp_path: Path, content: bytes, found: str) -> None:
    target = tmp_path / "script"
    target.write_bytes(content)
    assert refusal(NotElf, read_elf, str(target)) == diagnostic(
        "not an ELF file", target, expected="ELF magic 7f 45 4c 46", found=found
    )
    assert not is_elf(str(target))


def test_unreadable_file_says_why(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFile) as raised:
        read_elf(str(tmp_path))
    assert raised.value.diagnostics() == (
        f"error: cannot read file\n  where:    {tmp_path}\n  found:    a directory"
    )


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(MissingFile) as raised:
        read_elf(str(tmp_path / "nothing.so"))
    assert raised.value.diagnostics() == (
        f"error: no such file\n  where:    {tmp_path / 'nothing.so'}\n"
        "  found:    No such file or directory"
    )


def test_program_headers_past_the_end_of_the_file_name_the_bytes_needed(tmp_path: Path) -> None:
    whole = gcc_lib(tmp_path, "libwhole.so").read_bytes()
    target = tmp_path / "cut.so"
    target.write_bytes(whole[:200])
    top = header(whole)
    table_end = top["e_phoff"] + top["e_phnum"] * 56

    with pytest.raises(TruncatedElf) as raised:
        read_elf(str(target))

    assert raised.value.diagnostics() == (
        "error: truncated ELF file\n"
        f"  where:    {target}\n"
        f"  expected: {top['e_phnum']} program headers of 56 bytes at bytes "
        f"{top['e_phoff']}..{table_end}\n"
        "  found:    the file ends at byte 200"
    )
    assert raised.value.exit_code == 2


def test_a_program_header_size_other_than_the_loaders_is_malformed(tmp_path: Path) -> None:
    lib = gcc_lib(tmp_path, "libx.so").read_bytes()
    with pytest.raises(MalformedElf) as raised:
        decode(with_header(lib, e_phentsize=64))
    assert (raised.value.where, raised.value.found) == ("mutant", "64")
    assert raised.value.expected == (
        "e_phentsize 56 (the size of a 64-bit program header) at offset 54"
    )


def test_a_string_table_reaching_past_its_segment_is_malformed(tmp_path: Path) -> None:
    lib = without_sections(gcc_lib(tmp_path, "libx.so", "-Wl,-soname,libx.so.1").read_bytes())
    strtab = dynamic_value(lib, DT_STRTAB)
    _, load = segment(lib, PT_LOAD)
    beyond = load["p_vaddr"] + load["p_filesz"] - strtab + 1
    with pytest.raises(MalformedElf) as raised:
        decode(with_dynamic(lib, DT_STRSZ, value=beyond))
    assert raised.value.expected == (
        f"DT_STRTAB {strtab:#x} + DT_STRSZ {beyond} inside the file part of the PT_LOAD segment "
        f"at virtual address {load['p_vaddr']:#x} ({load['p_filesz']} bytes)"
    )
    assert raised.value.found == "the string table ends 1 bytes past it"


def test_a_name_without_a_string_table_is_malformed(tmp_path: Path) -> None:
    lib = gcc_lib(tmp_path, "libx.so", "-Wl,-soname,libx.so.1").read_bytes()
    with pytest.raises(MalformedElf) as raised:
        decode(with_dynamic(lib, DT_STRTAB, new_tag=DT_DEBUG))
    assert (raised.value.expected, raised.value.found) == (
        "a DT_STRTAB entry for DT_SONAME",
        "none in the dynamic segment",
    )


def test_a_file_that_shrinks_while_read_is_truncated(tmp_path: Path) -> None:
    lib = gcc_lib(tmp_path, "libx.so", "-Wl,-soname,libx.so.1").read_bytes()
    dyn_at, _ = dynamic(lib)

    def shrunk(offset: int, length: int) -> bytes:
        return lib[offset : min(offset + length, dyn_at)]

    with pytest.raises(TruncatedElf) as raised:
        decode_elf(shrunk, len(lib), "shrinking")
    assert raised.value.expected is not None
    assert raised.value.expected.startswith(f"the PT_DYNAMIC segment at bytes {dyn_at}..")
    assert raised.value.found == "0 bytes there: it shrank"


def test_only_the_headers_the_dynamic_segment_and_its_strings_are_read(tmp_path: Path) -> None:
    """Never a section header, and a few small reads: what the loader reads, no more."""
    lib = gcc_lib(tmp_path, "libx.so", "-Wl,--no-as-needed", "-lm").read_bytes()
    reads: list[tuple[int, int]] = []

    def recorded(offset: int, length: int) -> bytes:
        reads.append((offset, length))
        return lib[offset : offset + length]

    info = decode_elf(recorded, len(lib), "recorded")

    top = header(lib)
    sections = range(top["e_shoff"], top["e_shoff"] + top["e_shnum"] * top["e_shentsize"])
    assert info.needed == ("libm.so.6", "libc.so.6")
    assert not [r for r in reads if r[0] < sections.stop and sections.start < r[0] + r[1]]
    assert len(reads) <= 6
    assert sum(length for _, length in reads) <= 4096 + 2048 + 3 * 256


def test_32_bit_objects_built_by_gcc(tmp_path: Path) -> None:
    made = gcc_objects(tmp_path)

    lib, exe = read_elf(str(made["libx32.so"])), read_elf(str(made["app32"]))

    assert (lib.elf_class, lib.little_endian, lib.machine, lib.e_type) == (
        32,
        True,
        "EM_386",
        "ET_DYN",
    )
    assert (lib.soname, lib.needed, lib.rpath, lib.runpath) == (
        "libx.so",
        ("libd.so.1",),
        None,
        "/r32",
    )
    assert (exe.interpreter, exe.needed) == ("/lib/ld-linux.so.2", ("libd.so.1",))


def test_machine_and_type_names_are_pyelftools_names() -> None:
    from elftools.elf.enums import ENUM_E_MACHINE, ENUM_E_TYPE

    machines = {value: name for name, value in ENUM_E_MACHINE.items() if name != "_default_"}
    types = {value: name for name, value in ENUM_E_TYPE.items() if name != "_default_"}
    assert {n: machines[n] for n in elf._MACHINES} == elf._MACHINES
    assert types == elf._E_TYPES
    assert elf._machine_name(92) == machines[92] == "EM_OPENRISC"
    assert elf._machine_name(0x7777) == "30583"
