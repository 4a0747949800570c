"""`/proc/<pid>/maps` parsing against real maps of this process and exact refusals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from repro_serving.builder.errors import BadInput
from repro_serving.builder.native.procmaps import FileId, file_mappings, parse_maps, parse_maps_line


def test_every_file_backed_mapping_of_this_process_has_the_identity_stat_gives() -> None:
    mappings = parse_maps(Path("/proc/self/maps").read_text(), where="/proc/self/maps")
    grouped = file_mappings(mappings)
    assert grouped, "a Python process maps at least its interpreter"
    for file_id, group in grouped.items():
        path = group[0].path
        assert path is not None
        status = Path(path).stat()
        assert FileId(status.st_dev, status.st_ino) == file_id, path


def test_anonymous_and_pseudo_mappings_have_no_identity() -> None:
    heap = parse_maps_line("55d0c0a0-55d0c0c1 rw-p 00000000 00:00 0  [heap]", where="t")
    anonymous = parse_maps_line("7f0000000000-7f0000001000 rw-p 00000000 00:00 0", where="t")
    assert heap.file_id is None and heap.path == "[heap]"
    assert anonymous.file_id is None and anonymous.path is None


def test_deleted_suffix_is_stripped_and_flagged() -> None:
    line = "7f01-7f02 r-xp 00001000 fd:01 4242  /tmp/lib with space.so (deleted)"
    mapping = parse_maps_line(line, where="t")
    assert mapping.deleted
    assert mapping.path == "/tmp/lib with space.so"
    assert mapping.file_id == FileId(os.makedev(0xFD, 0x01), 4242)
    assert mapping.offset == 0x1000
    assert mapping.range_name == "7f01-7f02"


@pytest.mark.parametrize(
    ("line", "found"),
    [
        ("7f01-7f02 r-xp 0 fd:01", "'7f01-7f02 r-xp 0 fd:01'"),
        ("7f01 r-xp 0 fd:01 12 /x", "'7f01 r-xp 0 fd:01 12 /x'"),
        ("7f01-7f02 r-xp 0 fd01 12 /x", "'7f01-7f02 r-xp 0 fd01 12 /x'"),
        ("7f01-7f02 r-xp 0 fd:01 twelve /x", "'7f01-7f02 r-xp 0 fd:01 twelve /x'"),
    ],
)
def test_malformed_line_is_refused_naming_file_and_line(line: str, found: str) -> None:
    with pytest.raises(BadInput) as caught:
        parse_maps_line(line, where="/proc/7/maps")
    assert caught.value.where == "/proc/7/maps"
    assert caught.value.found == found
    assert "malformed line" in caught.value.diagnostics()
