"""sha256 of files and byte streams: the one place repro hashes content."""

from __future__ import annotations

import hashlib
import io
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
