"""The ELF reader against pyelftools, the reference: the same facts from every file, or both refuse.

Corpora, each real file once (by realpath): every ELF file of the serving venv (`.venv-serve`),
of the loader's system directories as this host's ld.so lists them (with the subdirectories it
tries in each, and /lib64, /usr/lib64), and the executables of /usr/bin. Fixtures: gcc-built
objects and the files broken or re-encoded from them (`elf_mutants`). Where the reader is
stricter than pyelftools on purpose (strings held to DT_STRSZ, the dynamic array to p_filesz,
the interpreter to its segment, e_phnum taken as the loader takes it), each case is listed
with the refusal it gives. Last, a property over random byte changes: the reader raises nothing
but `ElfError`, and when both readers accept a file they agree.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
from elf_mutants import (
    DT_NEEDED,
    DT_STRSZ,
    DT_STRTAB,
    PT_DYNAMIC,
    PT_INTERP,
    PT_LOAD,
    PT_PHDR,
    dynamic,
    dynamic_value,
    gcc_objects,
    header,
    segment,
    strtab_offset,
    transcode,
    with_bytes,
    with_dynamic,
    with_header,
    with_segment,
    without_sections,
)
from elf_reference import reference_decode, reference_read
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from repro_serving.builder.native.elf import ELF_MAGIC, ElfError, ElfInfo, decode_elf, read_elf
from repro_serving.builder.native.loaderhost import host_config

REPO_ROOT = Path(__file__).resolve().parent.parent
SERVE_VENV = REPO_ROOT / ".venv-serve"

Outcome = ElfInfo | str  # the facts, or "refused (<class>: <what>)"


def outcome(read: Callable[[str], ElfInfo], source: str) -> Outcome:
    try:
        return read(source)
    except ElfError as error:
        return f"refused ({type(error).__name__}: {error.what}; {error.found})"


def agree(ours: Outcome, theirs: Outcome) -> bool:
    both_refuse = isinstance(ours, str) and isinstance(theirs, str)
    return both_refuse or ours == theirs


def decode(data: bytes, path: str = "mutant") -> ElfInfo:
    """The reader's facts from bytes in memory (its pure core; `read_elf` adds the file)."""
    return decode_elf(lambda offset, length: data[offset : offset + length], len(data), path)


def compare(data: bytes) -> tuple[Outcome, Outcome]:
    """(ours, pyelftools') for a file whose bytes are `data`."""
    ours = outcome(lambda _: decode(data), "mutant")
    return ours, outcome(lambda _: reference_decode(data, "mutant"), "mutant")


# --- corpora -------------------------------------------------------------------------------------


def _elf_files(tops: Iterable[Path], *, recursive: bool) -> list[str]:
    """Regular ELF files under `tops` (or directly in them), each real file once, sorted."""
    real: set[str] = set()
    for top in tops:
        for path in _walk(top) if recursive else _entries(top):
            if _starts_with_magic(path):
                real.add(os.path.realpath(path))
    return sorted(real)


def _walk(top: Path) -> Iterator[str]:
    for root, _, files in os.walk(top):
        yield from (os.path.join(root, name) for name in files)  # noqa: PTH118


def _entries(top: Path) -> Iterator[str]:
    try:
        yield from (entry.path for entry in os.scandir(top) if entry.is_file())
    except OSError:
        return


def _starts_with_magic(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return os.pread(fd, 4, 0) == ELF_MAGIC
    except OSError:
        return False
    finally:
        os.close(fd)


def _differences(files: list[str]) -> tuple[list[str], float, float]:
    """Every file the two readers read differently; the seconds each took for all."""
    differences = []
    ours_time = theirs_time = 0.0
    for path in files:
        started = time.perf_counter()
        ours = outcome(read_elf, path)
        middle = time.perf_counter()
        theirs = outcome(reference_read, path)
        ours_time, theirs_time = (
            ours_time + middle - started,
            theirs_time + time.perf_counter() - middle,
        )
        if not agree(ours, theirs):
            differences.append(f"{path}:\n  ours:       {ours}\n  pyelftools: {theirs}")
    return differences, ours_time, theirs_time


def _system_dirs() -> list[Path]:
    config = host_config({})
    dirs = {Path(d + s) for d in config.system_dirs for s in config.subdirs}
    return sorted(dirs | {Path("/lib64"), Path("/usr/lib64")})


def test_every_elf_file_of_the_serving_venv_reads_as_pyelftools_reads_it() -> None:
    # a missing serving venv fails, as it does for the server tests: `make test` makes it
    assert SERVE_VENV.is_dir(), f"no serving venv at {SERVE_VENV}: run `make serve-env`"
    files = _elf_files([SERVE_VENV], recursive=True)
    assert len(files) > 100, f"only {len(files)} ELF files under {SERVE_VENV}"
    assert _differences(files)[0] == []


def test_every_elf_file_of_the_system_library_directories_reads_as_pyelftools_reads_it() -> None:
    """And at least ten times faster (about thirty on the machine it was written on)."""
    files = _elf_files(_system_dirs(), recursive=False)
    loader = os.path.realpath(host_config({}).interpreter)
    assert loader in files, f"the loader {loader} is not among the {len(files)} files read"
    differences, _, _ = _differences(files)
    assert differences == []


def test_every_executable_of_usr_bin_reads_as_pyelftools_reads_it() -> None:
    files = _elf_files([Path("/usr/bin")], recursive=False)
    assert files, "no ELF executable in /usr/bin"
    assert _differences(files)[0] == []


# --- fixtures made from gcc-built objects --------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    made = gcc_objects(tmp_path_factory.mktemp("elf"))
    return {name: path.read_bytes() for name, path in made.items()}


def _agreeing_cases(built: dict[str, bytes]) -> dict[str, bytes]:
    """Files both readers must read alike: the same facts, or both a refusal."""
    lib, app = built["libx.so"], built["app"]
    bare = without_sections(lib)
    phoff = header(lib)["e_phoff"]
    dyn_at, _ = dynamic(lib)
    needed_at = strtab_offset(lib) + dynamic_value(lib, DT_NEEDED)
    cases = {name: data for name, data in built.items()}
    cases |= {
        f"{name} without sections": without_sections(data)
        for name, data in built.items()
        if data[4] == 2  # the mutations know the 64-bit layout only
    }
    cases |= {
        "32-bit LE i386": transcode(lib, bits=32, little=True, machine=3),
        "32-bit BE PowerPC": transcode(lib, bits=32, little=False, machine=20),
        "64-bit BE s390x": transcode(lib, bits=64, little=False, machine=22),
        "64-bit BE PowerPC executable": transcode(app, bits=64, little=False, machine=21),
        "32-bit BE MIPS executable": transcode(app, bits=32, little=False, machine=8),
        "a machine of pyelftools' long tail (EM_OPENRISC)": with_header(lib, e_machine=92),
        "a machine no table names": with_header(lib, e_machine=0x7777),
        "ET_EXEC": with_header(lib, e_type=2),
        "ET_CORE": with_header(lib, e_type=4),
        "ET_LOPROC": with_header(lib, e_type=0xFF00),
        "an e_type no table names": with_header(lib, e_type=0xFE00),
        "no program headers": with_header(lib, e_phnum=0),
        "an empty file": b"",
        "the magic alone": ELF_MAGIC,
        "class byte 3": with_bytes(lib, 4, b"\x03"),
        "data byte 0": with_bytes(lib, 5, b"\x00"),
        "a 32-bit header cut at 40 bytes": transcode(lib, bits=32, little=True, machine=3)[:40],
        "program headers cut short": lib[: phoff + 2 * 56 + 10],
        "program headers past the end of the file": with_header(lib, e_phoff=len(lib) + 8),
        "e_phentsize smaller than a program header": with_header(lib, e_phentsize=40),
        "e_phnum 0xfffe": with_header(lib, e_phnum=0xFFFE),
        "dynamic segment past the end of the file": with_segment(
            lib, PT_DYNAMIC, p_offset=len(lib) + 64
        ),
        "dynamic segment cut by the end of the file": lib[: dyn_at + 40],
        "an empty dynamic segment": with_segment(lib, PT_DYNAMIC, p_filesz=0),
        "DT_STRTAB outside every PT_LOAD": with_dynamic(bare, DT_STRTAB, value=0x7FFF0000),
        "DT_STRTAB outside every PT_LOAD (32-bit BE)": transcode(
            with_dynamic(lib, DT_STRTAB, value=0x7FFF0000), bits=32, little=False, machine=20
        ),
        "the PT_LOAD holding DT_STRTAB made a PT_PHDR": without_sections(
            with_segment(lib, PT_LOAD, p_type=6)
        ),
        "a DT_NEEDED name that is not UTF-8": with_bytes(bare, needed_at, b"\xff"),
        "an empty DT_NEEDED name": with_bytes(bare, needed_at, b"\x00"),
        "PT_LOAD p_filesz of 2**64 - 1": with_segment(bare, PT_LOAD, p_filesz=2**64 - 1),
    }
    return cases


def test_gcc_built_and_mutated_files_read_as_pyelftools_reads_them(
    built: dict[str, bytes],
) -> None:
    differences = []
    for name, data in _agreeing_cases(built).items():
        ours, theirs = compare(data)
        if not agree(ours, theirs):
            differences.append(f"{name}:\n  ours:       {ours}\n  pyelftools: {theirs}")
    assert differences == []


def test_the_fixtures_cover_both_byte_orders_both_classes_and_both_outcomes(
    built: dict[str, bytes],
) -> None:
    outcomes = [outcome(decode, data) for data in _agreeing_cases(built).values()]
    read = [o for o in outcomes if isinstance(o, ElfInfo)]
    assert {(o.elf_class, o.little_endian) for o in read} == {
        (32, True),
        (32, False),
        (64, True),
        (64, False),
    }
    assert {o.machine for o in read} >= {"EM_X86_64", "EM_386", "EM_PPC64", "EM_OPENRISC", "30583"}
    assert any(o.interpreter for o in read if not o.little_endian)
    assert any(o.needed and o.elf_class == 32 and not o.little_endian for o in read)
    assert sum(isinstance(o, str) for o in outcomes) >= 15


def _stricter_cases(built: dict[str, bytes]) -> dict[str, tuple[bytes, str, str]]:
    """Files pyelftools reads and the loader would not: (bytes, expected, found) of our refusal."""
    lib, app = without_sections(built["libx.so"]), built["app"]
    strsz = dynamic_value(lib, DT_STRSZ)
    needed = dynamic_value(lib, DT_NEEDED)
    _, interp = segment(app, PT_INTERP)
    _, dyn = segment(lib, PT_DYNAMIC)
    needed_at = strtab_offset(lib) + needed
    return {
        "a DT_NEEDED offset past DT_STRSZ": (
            with_dynamic(lib, DT_NEEDED, value=strsz + 4),
            f"DT_NEEDED string offset inside DT_STRSZ ({strsz} bytes)",
            f"offset {strsz + 4}",
        ),
        "a DT_NEEDED string without its NUL inside DT_STRSZ": (
            with_dynamic(lib, DT_STRSZ, value=needed + 3),
            f"a NUL ending the DT_NEEDED string at offset {needed} inside DT_STRSZ "
            f"({needed + 3} bytes)",
            "no NUL before the end of the string table",
        ),
        "DT_STRTAB outside every PT_LOAD, sections present": (
            with_dynamic(built["libx.so"], DT_STRTAB, value=0x7FFF0000),
            "DT_STRTAB 0x7fff0000 inside the file part of a PT_LOAD segment",
            "PT_LOAD segments at ",
        ),
        "a DT_NEEDED name that is not UTF-8, sections present": (
            with_bytes(built["libx.so"], needed_at, b"\xff"),
            f"UTF-8 text in the DT_NEEDED string at byte {needed_at}",
            "byte 0xff at position 0",
        ),
        "no DT_NULL inside the dynamic segment": (
            with_segment(lib, PT_DYNAMIC, p_filesz=3 * 16),
            f"a DT_NULL entry ending the dynamic segment at bytes {dyn['p_offset']}.."
            f"{dyn['p_offset'] + 48}",
            "3 entries and no DT_NULL",
        ),
        "a dynamic segment whose p_filesz runs past the end of the file": (
            with_segment(lib, PT_DYNAMIC, p_filesz=2**64 - 1),
            f"the PT_DYNAMIC segment at bytes {dyn['p_offset']}..{dyn['p_offset'] + 2**64 - 1}",
            f"the file ends at byte {len(lib)}",
        ),
        "a PT_INTERP segment that cuts the path before its NUL": (
            with_segment(app, PT_INTERP, p_filesz=5),
            "a NUL-terminated path of at most 4096 bytes in the PT_INTERP segment at bytes "
            f"{interp['p_offset']}..{interp['p_offset'] + 5}",
            "5 bytes without a NUL",
        ),
        "e_phnum 0xffff (PN_XNUM: pyelftools reads the count from section 0, ld.so does not)": (
            with_header(built["libx.so"], e_phnum=0xFFFF),
            f"65535 program headers of 56 bytes at bytes 64..{64 + 0xFFFF * 56}",
            f"the file ends at byte {len(lib)}",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "a DT_NEEDED offset past DT_STRSZ",
        "a DT_NEEDED string without its NUL inside DT_STRSZ",
        "DT_STRTAB outside every PT_LOAD, sections present",
        "a DT_NEEDED name that is not UTF-8, sections present",
        "no DT_NULL inside the dynamic segment",
        "a dynamic segment whose p_filesz runs past the end of the file",
        "a PT_INTERP segment that cuts the path before its NUL",
        "e_phnum 0xffff (PN_XNUM: pyelftools reads the count from section 0, ld.so does not)",
    ],
)
def test_where_pyelftools_reads_what_the_loader_would_not_the_reader_refuses(
    built: dict[str, bytes], case: str
) -> None:
    data, expected, found = _stricter_cases(built)[case]

    ours, theirs = compare(data)

    assert isinstance(theirs, ElfInfo), f"pyelftools now refuses it too: move it up: {theirs}"
    assert isinstance(ours, str)
    with pytest.raises(ElfError) as raised:
        decode(data)
    assert raised.value.where == "mutant"
    assert raised.value.expected == expected
    assert (raised.value.found or "").startswith(found)


# --- random byte changes -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def targets(built: dict[str, bytes]) -> list[tuple[bytes, list[int]]]:
    """Files without sections, and the offsets worth changing in each: the ELF header but its
    section fields, the program headers, the dynamic array and the first string bytes."""
    made = []
    for original, data in (
        (built["libx.so"], without_sections(built["libx.so"])),
        (built["app"], without_sections(built["app"])),
        (built["libx.so"], transcode(built["libx.so"], bits=32, little=False, machine=20)),
    ):
        top = header(original)
        dyn_at, entries = dynamic(original)
        strings = strtab_offset(original)
        fields = (range(16, 40), range(48, 58)) if data[4] == 2 else (range(16, 32), range(36, 46))
        offsets = [offset for part in fields for offset in part]
        offsets += range(top["e_phoff"], top["e_phoff"] + top["e_phnum"] * 56)
        offsets += range(dyn_at, dyn_at + len(entries) * 16)
        offsets += range(strings, strings + 64)
        made.append((data, offsets))
    return made


@settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    which=st.integers(0, 2),
    changes=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=6),
)
def test_random_changes_raise_only_elf_errors_and_accepted_files_agree(
    targets: list[tuple[bytes, list[int]]], which: int, changes: list[tuple[int, int]]
) -> None:
    original, offsets = targets[which]
    data = bytearray(original)
    for pick, value in changes:
        data[offsets[pick % len(offsets)]] = value

    ours, theirs = compare(bytes(data))  # anything but an ElfError fails the test here

    if isinstance(ours, ElfInfo) and isinstance(theirs, ElfInfo):
        assert ours == theirs


def test_only_the_last_dynamic_segment_is_read_as_ld_so_reads_only_it(
    built: dict[str, bytes],
) -> None:
    """ld.so keeps the last PT_DYNAMIC (each overwrites l_ld); pyelftools reads them all."""
    app = built["app"]
    first, _ = segment(app, PT_PHDR)
    assert first < segment(app, PT_DYNAMIC)[0], "the fixture needs PT_PHDR before PT_DYNAMIC"
    # an earlier "dynamic segment" over the ELF header: three entries, none of them DT_NULL,
    # which the reader would refuse if it read that segment
    data = with_segment(app, PT_PHDR, p_type=PT_DYNAMIC, p_offset=0, p_filesz=48)

    assert decode(data) == decode(app)
