"""sha256 of files and byte streams, and git blob ids: the one place repro hashes content."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

from builder.errors import NotObservable


def sha256_stream(stream: io.BufferedIOBase) -> str:
    return hashlib.file_digest(stream, "sha256").hexdigest()


def sha256_file(path: Path | str) -> str:
    try:
        with Path(path).open("rb") as stream:
            return sha256_stream(stream)
    except OSError as error:
        raise NotObservable(
            "cannot read a file to hash it",
            where=str(path),
            found=error.strerror or type(error).__name__,
            hint="check that the file exists and is readable by this user",
        ) from error


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
