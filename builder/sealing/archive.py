"""A bundle as one file: a deterministic tar (`repro pack`), and its safe unpacking.

The archive holds one top-level directory, named as the bundle, and under it every directory and
file of the bundle in code point order of their paths: directories with mode 0755, regular files
0644, or 0755 where the bundle's owner may execute them (the launcher); owner and group 0 with no
names; mtime 0; the POSIX ustar format. The same bundle always gives the same bytes, so the
archive's sha256 names it, and packing an unpacked archive gives that archive again.

Unpacking takes only such an archive: one top-level directory of a plain name, every member a
regular file or a directory below it, no absolute path, no `..`, no link or device, no name
twice, at most `MEMBERS_LIMIT` members and `SIZE_LIMIT` bytes. It is written beside the
destination and renamed into place whole; an existing destination is never replaced. What the
bundle then proves is `repro verify`'s to say: an archive is only a way to carry the directory.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Final

from repro_serving.builder.errors import BadInput
from repro_serving.builder.hashing import sha256_file

SIZE_LIMIT: Final = 8 << 30
"""Bytes of file content an archive may unpack to: far above any bundle (its models are not in
it), far below a disk."""
MEMBERS_LIMIT: Final = 100_000
_FORMAT: Final = tarfile.USTAR_FORMAT


def pack(bundle: Path, archive: Path) -> str:
    """Write `bundle` (a directory) as the deterministic tar `archive`, which must not exist;
    return its sha256. A link or a special file in the bundle is refused: a bundle has none."""
    if not bundle.is_dir():
        raise BadInput("not a bundle directory", where=str(bundle), hint="name repro/<name>")
    name = Path(os.path.abspath(bundle)).name  # noqa: PTH100 - the name as given, not resolved
    if archive.exists():
        raise BadInput("the archive exists", where=str(archive), hint="name a new file")
    staged = archive.with_name(f".{archive.name}.partial")
    try:
        with staged.open("xb") as out, tarfile.open(fileobj=out, mode="w", format=_FORMAT) as tar:
            tar.addfile(_entry(name, tarfile.DIRTYPE, 0o755))
            for path in _walk(bundle):
                relative = path.relative_to(bundle).as_posix()
                member = f"{name}/{relative}"
                if path.is_dir():
                    tar.addfile(_entry(member, tarfile.DIRTYPE, 0o755))
                    continue
                executable = path.stat().st_mode & stat.S_IXUSR
                entry = _entry(member, tarfile.REGTYPE, 0o755 if executable else 0o644)
                entry.size = path.stat().st_size
                with path.open("rb") as data:
                    tar.addfile(entry, data)
        staged.rename(archive)
    except ValueError as error:  # a name ustar cannot hold
        raise BadInput("the bundle cannot be packed", where=str(bundle), found=str(error)) from None
    finally:
        staged.unlink(missing_ok=True)
    return sha256_file(archive)


def _entry(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    entry = tarfile.TarInfo(name)
    entry.type, entry.mode, entry.mtime = kind, mode, 0
    entry.uid = entry.gid = 0
    entry.uname = entry.gname = ""
    return entry


def _walk(root: Path) -> list[Path]:
    """Every directory and regular file below `root`, in code point order of their paths."""
    found = []
    for path in root.rglob("*"):
        if path.is_symlink() or not (path.is_dir() or path.is_file()):
            raise BadInput(
                "the bundle cannot be packed",
                where=str(path),
                expected="directories and regular files only",
                found="a link or a special file",
            )
        found.append(path)
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def unpack(archive: Path, into: Path) -> Path:
    """Unpack `archive` into the directory `into`: the bundle's directory, returned."""
    try:
        with tarfile.open(archive, mode="r:") as tar:
            members = tar.getmembers()[: MEMBERS_LIMIT + 1]
            name = _top(members, archive)
            destination = into / name
            if destination.exists() or destination.is_symlink():
                raise BadInput(
                    "the bundle's directory exists", where=str(destination), hint="unpack elsewhere"
                )
            staged = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=into))
            try:
                for member in members:
                    _extract(tar, member, staged, archive)
                (staged / name).rename(destination)
            finally:
                shutil.rmtree(staged, ignore_errors=True)
    except (tarfile.TarError, EOFError) as error:
        raise BadInput(
            "not a bundle archive", where=str(archive), expected="a tar written by repro pack",
            found=f"{type(error).__name__}: {error}",
        ) from None  # fmt: skip
    return destination


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, root: Path, archive: Path) -> None:
    """One member judged safe by `_top` written below `root`."""
    target = root / member.name
    try:
        if member.isdir():
            target.mkdir(mode=0o755, parents=True, exist_ok=True)
            return
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        source = tar.extractfile(member)
        if source is None:  # not a regular file: refused by _top already
            raise BadInput("an archive member has no content", where=f"{archive}: {member.name}")
        with source, target.open("xb") as out:
            shutil.copyfileobj(source, out)
        target.chmod(0o755 if member.mode & stat.S_IXUSR else 0o644)
    except OSError as error:  # a file where a directory is named, or the other way round
        raise BadInput(
            "not a bundle archive", where=f"{archive}: {member.name}",
            found=f"{type(error).__name__}: {error.strerror}",
        ) from None  # fmt: skip


def _top(members: list[tarfile.TarInfo], archive: Path) -> str:
    """The one top-level directory every member lies in; every member judged safe."""

    def refuse(found: str, where: str = str(archive)) -> BadInput:
        expected = (
            "one top-level directory holding only directories and regular files, no absolute "
            f"path, no '..', no name twice, at most {MEMBERS_LIMIT} members and {SIZE_LIMIT} bytes"
        )
        return BadInput("not a bundle archive", where=where, expected=expected, found=found)

    if not members:
        raise refuse("an empty archive")
    if len(members) > MEMBERS_LIMIT:
        raise refuse(f"more than {MEMBERS_LIMIT} members")
    first = PurePosixPath(members[0].name)
    if not members[0].isdir() or len(first.parts) != 1 or first.name in ("", ".", ".."):
        raise refuse(f"first member {members[0].name!r}: expected the bundle's directory")
    name, seen, size = first.name, set(), 0
    for member in members:
        path = PurePosixPath(member.name)
        where = f"{archive}: {member.name}"
        if path.is_absolute() or ".." in path.parts or path.parts[0] != name:
            raise refuse(f"a member outside {name}/", where)
        if not (member.isdir() or member.isreg()):
            raise refuse("a link or a special file", where)
        if member.name in seen:
            raise refuse("a name twice", where)
        seen.add(member.name)
        size += member.size
        if size > SIZE_LIMIT:
            raise refuse(f"more than {SIZE_LIMIT} bytes", where)
    return name


@contextmanager
def bundle_directory(path: Path) -> Iterator[Path]:
    """The bundle `path` names: the directory itself, or a tar of one unpacked into a temporary
    directory for as long as the block runs."""
    if not path.is_file():
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="repro-unpacked-") as scratch:
        yield unpack(path, Path(scratch))
