"""sha256 of files and byte streams, and git blob ids: the one place repro hashes content.

`sha256_files` hashes the many large files of a sealed bundle as fast as the cores can hash:
one file per core at a time (SHA-256 of one file is sequential; hashlib releases the GIL while
it hashes), each file hashed in place through a read-only memory map, since copying it out of
the page cache adds 10-20% to the time of the hash itself. The price of a map is that a file
truncated or failing to read while mapped kills the process (SIGBUS) instead of raising, so
only files that nothing rewrites in place are hashed that way: a bundle is only ever replaced
whole, by a rename. Every other file is read, in chunks that stay in the core's cache.
"""

from __future__ import annotations

import hashlib
import io
import mmap
import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from builder.errors import NotObservable

READ_SIZE = 1 << 20


def sha256_stream(stream: io.BufferedIOBase) -> str:
    return hashlib.file_digest(stream, "sha256").hexdigest()


def sha256_file(path: Path | str) -> str:
    try:
        with Path(path).open("rb", buffering=0) as stream:
            digest = hashlib.sha256()
            buffer = bytearray(READ_SIZE)
            view = memoryview(buffer)
            while size := stream.readinto(buffer):
                digest.update(view[:size])
    except OSError as error:
        raise _unreadable(path, error) from error
    return digest.hexdigest()


def sha256_files(paths: Sequence[Path | str]) -> list[str]:
    """The sha256 of each of `paths`, in their order, hashed concurrently, one file per core.

    For files nothing rewrites in place (see above). The largest files start first, so that the
    cores finish together. A file that cannot be opened raises what `sha256_file` raises, for
    the first such file in order, as hashing them one after another would; files not started
    yet are then left alone."""
    workers = min(len(paths), _usable_cores())
    if workers <= 1:
        return [_sha256_mapped(path) for path in paths]
    largest_first = sorted(range(len(paths)), key=lambda index: -_size(paths[index]))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sha256")
    try:
        hashing: dict[int, Future[str]] = {
            index: pool.submit(_sha256_mapped, paths[index]) for index in largest_first
        }
        return [hashing[index].result() for index in range(len(paths))]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


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


def _size(path: Path | str) -> int:
    try:
        return Path(path).stat().st_size
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
