"""sha256 of files and byte streams, and git blob ids: the one place repro hashes content.

Many files are hashed at once on every core this process may run on (`sha256_files`): hashlib
releases the GIL while it hashes, so one thread per core is enough, each reading a file in
chunks large enough that system calls are a small share and small enough to stay in the core's
cache between the read and the hash. A single file is hashed on one core: SHA-256 is sequential.
"""

from __future__ import annotations

import hashlib
import io
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
        raise NotObservable(
            "cannot read a file to hash it",
            where=str(path),
            found=error.strerror or type(error).__name__,
            hint="check that the file exists and is readable by this user",
        ) from error
    return digest.hexdigest()


def sha256_files(paths: Sequence[Path | str]) -> list[str]:
    """The sha256 of each of `paths`, in their order, hashed concurrently, one file per core.

    The largest files start first, so that the cores finish together. A file that cannot be
    read raises what `sha256_file` raises, for the first such file in order, as hashing them
    one after another would; files not started yet are then left alone."""
    workers = min(len(paths), _usable_cores())
    if workers <= 1:
        return [sha256_file(path) for path in paths]
    largest_first = sorted(range(len(paths)), key=lambda index: -_size(paths[index]))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sha256")
    try:
        hashing: dict[int, Future[str]] = {
            index: pool.submit(sha256_file, paths[index]) for index in largest_first
        }
        return [hashing[index].result() for index in range(len(paths))]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


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
        raise NotObservable(
            "cannot read a file to hash it",
            where=str(path),
            found=error.strerror or type(error).__name__,
            hint="check that the file exists and is readable by this user",
        ) from error
    return digest.hexdigest()
