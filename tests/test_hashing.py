"""Hashing: one digest per file in the caller's order, whatever the order they finish in."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from repro_serving.builder import hashing
from repro_serving.builder.errors import NotObservable
from repro_serving.builder.hashing import (
    BATCH_BYTES,
    BATCH_FILES,
    READ_SIZE,
    file_size,
    over_cores,
    sha256_file,
    sha256_files,
)


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


@pytest.mark.parametrize("cores", [1, 2, 7])
def test_over_cores_keeps_the_callers_order_across_batches_and_single_large_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int
) -> None:
    monkeypatch.setattr(hashing, "_usable_cores", lambda: cores)
    sizes = [0, 1, READ_SIZE - 1, READ_SIZE, READ_SIZE + 1, BATCH_BYTES + 3]
    sizes += [index % 97 for index in range(2 * BATCH_FILES + 5)]  # more than two batches
    paths, expected = [], []
    for index, size in enumerate(sizes):
        data = hashlib.sha256(str(index).encode()).digest() * (size // 32 + 1)
        path = tmp_path / f"f{index}"
        path.write_bytes(data[:size])
        paths.append(str(path))
        expected.append(hashlib.sha256(data[:size]).hexdigest())
    assert over_cores(paths, sha256_file, file_size) == expected
    assert sha256_files(paths) == expected


def test_over_cores_raises_what_the_first_failing_item_in_order_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hashing, "_usable_cores", lambda: 2)

    def work(item: int) -> int:
        if item % 100 == 99:
            raise ValueError(f"item {item}")
        return item * 2

    items = list(range(1000))
    with pytest.raises(ValueError, match=r"^item 99$"):
        over_cores(items, work, lambda item: 1000 - item)  # the last items run first
    assert over_cores(items[:99], work, lambda item: item) == [i * 2 for i in range(99)]


def test_small_files_share_a_batch_and_large_ones_run_alone() -> None:
    sizes = [BATCH_BYTES * 2, 10, BATCH_BYTES, 20, 30]
    batches = hashing._batches(sizes)
    assert batches == [[0], [2], [4, 3, 1]]
    assert len(hashing._batches([1] * (BATCH_FILES * 2 + 1))) == 3
