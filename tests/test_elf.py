"""The ELF reader: the loader's facts from gcc-built objects, and the exact refusals."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from builder.native.elf import (
    MalformedElf,
    MissingFile,
    NotElf,
    TruncatedElf,
    UnreadableFile,
    is_elf,
    read_elf,
)


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
    with pytest.raises(TruncatedElf) as raised:
        read_elf(str(target))
    assert raised.value.diagnostics() == (
        "error: truncated ELF file\n"
        f"  where:    {target}\n"
        "  expected: at least 64 bytes for the ELF header\n"
        "  found:    20 bytes"
    )


@pytest.mark.parametrize(
    ("content", "found"),
    [(b"#!/bin/sh\necho\n", "23 21 2f 62 (15 bytes)"), (b"", "an empty file (0 bytes)")],
)
def test_non_elf_file_names_its_first_bytes(tmp_path: Path, content: bytes, found: str) -> None:
    target = tmp_path / "script"
    target.write_bytes(content)
    with pytest.raises(NotElf) as raised:
        read_elf(str(target))
    assert raised.value.diagnostics() == (
        "error: not an ELF file\n"
        f"  where:    {target}\n"
        "  expected: ELF magic 7f 45 4c 46\n"
        f"  found:    {found}"
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


def test_headers_pointing_outside_the_file_are_malformed(tmp_path: Path) -> None:
    target = tmp_path / "cut.so"
    target.write_bytes(Path("/bin/true").read_bytes()[:200])
    with pytest.raises(MalformedElf) as raised:
        read_elf(str(target))
    assert raised.value.what == "malformed ELF file"
    assert raised.value.where == str(target)
    assert raised.value.exit_code == 2
