"""sha256 of files and byte streams, and git blob ids: the one place repro hashes content.

`over_cores` runs a per-file function over many files as fast as the cores allow: one file per
core at a time (SHA-256 of one file is sequential; hashlib releases the GIL while it hashes),
the largest first so that the cores finish together, and the small files in batches so that a
venv's tens of thousands of them cost hashing, not scheduling. `sha256_files` uses it to hash
the large files of a sealed bundle in place through a read-only memory map, since copying them
out of the page cache adds 10-20% to the time of the hash itself. The price of a map is that a
file truncated or failing to read while mapped kills the process (SIGBUS) instead of raising,
so only files that nothing rewrites in place are hashed that way: a bundle is only ever replaced
whole, by a rename. Every other file is read (`sha256_file`): a small one in one read, a large
one in chunks that stay in the core's cache.
"""

from __future__ import annotations

import hashlib
import io
import mmap
import os
import re
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Final, TypeVar

from repro_serving.builder.errors import NotObservable

READ_SIZE = 1 << 20
BATCH_BYTES = 8 << 20
"""Small files go to a core together up to this many bytes (or `BATCH_FILES` files)."""
BATCH_FILES = 256

_Item = TypeVar("_Item")
_Result = TypeVar("_Result")

SHA256_HEX: Final = "[0-9a-f]{64}"
"""A sha256 as every sealed file and pin writes it: 64 lowercase hex digits."""
_SHA256: Final = re.compile(SHA256_HEX)


def is_sha256_hex(text: str) -> bool:
    return _SHA256.fullmatch(text) is not None


def sha256_stream(stream: io.BufferedIOBase) -> str:
    return hashlib.file_digest(stream, "sha256").hexdigest()


def sha256_file(path: Path | str) -> str:
    """The sha256 of the bytes `path` names now, read (never mapped: it may change meanwhile)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        raise _unreadable(path, error) from error
    try:
        digest = hashlib.sha256()
        first = os.read(descriptor, READ_SIZE)
        digest.update(first)
        if len(first) == READ_SIZE:  # a large file: the rest in chunks through one buffer
            buffer = bytearray(READ_SIZE)
            view = memoryview(buffer)
            while size := os.readv(descriptor, [buffer]):
                digest.update(view[:size])
    except OSError as error:
        raise _unreadable(path, error) from error
    finally:
        os.close(descriptor)
    return digest.hexdigest()


def sha256_files(paths: Sequence[Path | str]) -> list[str]:
    """The sha256 of each of `paths`, in their order, hashed in place on every core.

    For files nothing rewrites in place (see above). A file that cannot be opened raises what
    `sha256_file` raises, for the first such file in order (`over_cores`)."""
    return over_cores(paths, _sha256_mapped, file_size)


def over_cores(
    items: Sequence[_Item], work: Callable[[_Item], _Result], size: Callable[[_Item], int]
) -> list[_Result]:
    """`work(item)` for each of `items` (files, or what names one), in their order, run on
    one thread per core.

    The largest files (by `size`) start first, each alone once it is at least `BATCH_BYTES`;
    smaller ones go in batches. What `work` raises is raised for the first such item in order,
    as running them one after another would; batches not started yet are then left alone."""
    workers = min(len(items), _usable_cores())
    if workers <= 1:
        return [work(item) for item in items]
    sizes = [size(item) for item in items]
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hash")
    try:
        running: list[tuple[list[int], Future[list[_Result | BaseException]]]] = [
            (batch, pool.submit(_run_batch, [items[index] for index in batch], work))
            for batch in _batches(sizes)
        ]
        outcomes: dict[int, _Result | BaseException] = {}
        for batch, future in running:
            outcomes.update(zip(batch, future.result(), strict=True))
        results: list[_Result] = []
        for index in range(len(items)):
            outcome = outcomes[index]
            if isinstance(outcome, BaseException):
                raise outcome
            results.append(outcome)
        return results
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _batches(sizes: Sequence[int]) -> list[list[int]]:
    """Indexes of `sizes`, largest first, grouped so that each group is worth a task."""
    batches: list[list[int]] = []
    current: list[int] = []
    current_bytes = 0
    for index in sorted(range(len(sizes)), key=lambda index: -sizes[index]):
        current.append(index)
        current_bytes += sizes[index]
        if current_bytes >= BATCH_BYTES or len(current) >= BATCH_FILES:
            batches.append(current)
            current, current_bytes = [], 0
    if current:
        batches.append(current)
    return batches


def _run_batch(
    items: Sequence[_Item], work: Callable[[_Item], _Result]
) -> list[_Result | BaseException]:
    outcomes: list[_Result | BaseException] = []
    for item in items:
        try:
            outcomes.append(work(item))
        except Exception as error:  # raised in the caller's order by `over_cores`
            outcomes.append(error)
    return outcomes


def _sha256_mapped(path: Path | str) -> str:
    """`sha256_file`, hashing the file's pages where they lie instead of copying them out."""
    try:
        with Path(path).open("rb", buffering=0) as stream:
            size = os.fstat(stream.fileno()).st_size
            try:
                mapped = mmap.mmap(stream.fileno(), size, access=mmap.ACCESS_READ)
            except (OSError, ValueError, OverflowError):
                return sha256_file(path)  # empty, or a file system that cannot map it
            with mapped, memoryview(mapped) as view:
                if hasattr(mmap, "MADV_SEQUENTIAL"):
                    mapped.madvise(mmap.MADV_SEQUENTIAL)
                digest = hashlib.sha256()
                for offset in range(0, size, READ_SIZE):
                    digest.update(view[offset : offset + READ_SIZE])
    except OSError as error:
        raise _unreadable(path, error) from error
    return digest.hexdigest()


def _unreadable(path: Path | str, error: OSError) -> NotObservable:
    return NotObservable(
        "cannot read a file to hash it",
        where=str(path),
        found=error.strerror or type(error).__name__,
        hint="check that the file exists and is readable by this user",
    )


def _usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def file_size(path: Path | str) -> int:
    """The size of `path`; 0 when it cannot be read (the work on it then says why)."""
    try:
        return os.stat(path).st_size  # noqa: PTH116 - tens of thousands of paths, no objects
    except OSError:
        return 0  # hashing it raises with the reason


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def git_blob_sha1_file(path: Path | str) -> str:
    """The id git gives `path`'s bytes as a blob: sha1 of `blob <size>\\0` followed by the bytes."""
    try:
        with Path(path).open("rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            digest = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
            while chunk := stream.read(1 << 20):
                digest.update(chunk)
    except OSError as error:
        raise _unreadable(path, error) from error
    return digest.hexdigest()
