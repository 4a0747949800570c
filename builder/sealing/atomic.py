"""Putting a directory in place all at once: a temporary sibling renamed over the final path.

The directory is made complete beside its final path (same file system), then renamed into
place with renameat2 RENAME_NOREPLACE; an existing one is replaced only when asked, by one
atomic exchange (RENAME_EXCHANGE), or where the file system cannot exchange, by two renames
between which the final path is briefly absent, never half-written. The parent is fsynced after.
Used by the sealer (bundles) and by restore (environments, models, source trees).
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from repro_serving.builder.errors import BadInput

Progress = Callable[[str], None]


def fsync_dir(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2


def renameat2(source: Path, target: Path, flags: int) -> None:
    """Linux renameat2(2); OSError(EINVAL) where the C library or file system lacks it."""
    libc = ctypes.CDLL(None, use_errno=True)
    function = getattr(libc, "renameat2", None)
    if function is None:
        raise OSError(errno.EINVAL, "renameat2 is not in this C library")
    result = function(
        _AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), ctypes.c_uint(flags)
    )
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number), str(target))


def move_into_place(workdir: Path, final: Path, progress: Progress, *, what: str) -> Path | None:
    """Rename `workdir` to `final`; return where the `what` it replaced now is, if any."""
    try:
        if final.exists():
            return _exchange(workdir, final, progress)
        _rename_no_replace(workdir, final)
    except FileExistsError as error:
        raise BadInput(
            f"the {what} appeared while it was being written",
            where=str(final),
            hint=f"another run wrote the same {what} at the same time; run this one again",
        ) from error
    fsync_dir(final.parent)
    progress("renamed into place")
    return None


def _rename_no_replace(workdir: Path, final: Path) -> None:
    try:
        renameat2(workdir, final, _RENAME_NOREPLACE)
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.ENOSYS):
            raise
        if final.exists():
            raise FileExistsError(errno.EEXIST, "exists", str(final)) from error
        workdir.rename(final)


def _exchange(workdir: Path, final: Path, progress: Progress) -> Path:
    try:
        renameat2(workdir, final, _RENAME_EXCHANGE)
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.ENOSYS):
            raise
        aside = final.parent / f".{final.name}.replaced-{secrets.token_hex(8)}"
        final.rename(aside)
        workdir.rename(final)
        fsync_dir(final.parent)
        progress("renamed into place")
        return aside
    fsync_dir(final.parent)
    progress("renamed into place")
    return workdir
