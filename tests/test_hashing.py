"""Hashing: one digest per file in the caller's order, whatever the order they finish in."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from builder.errors import NotObservable
from builder.hashing import sha256_file, sha256_files


def test_digests_come_back_in_the_callers_order_for_empty_small_and_large_files(
    tmp_path: Path,
) -> None:
    contents = [b"", b"a", bytes(range(256)) * 40_000, b"\x00" * (3 * 1024 * 1024 + 7)]
    paths = []
    for index, data in enumerate(contents):
        path = tmp_path / f"f{index}"
        path.write_bytes(data)
        paths.append(path)
    expected = [hashlib.sha256(data).hexdigest() for data in contents]
    assert sha256_files(paths) == expected
    assert sha256_files(list(reversed(paths))) == list(reversed(expected))
    assert [sha256_file(p) for p in paths] == expected


def test_the_first_unreadable_file_in_the_callers_order_is_the_error(tmp_path: Path) -> None:
    present = tmp_path / "present"
    present.write_bytes(b"x" * 10)
    with pytest.raises(NotObservable) as refused:
        sha256_files([present, tmp_path / "first-missing", tmp_path / "second-missing"])
    assert refused.value.where == str(tmp_path / "first-missing")
    assert refused.value.what == "cannot read a file to hash it"
