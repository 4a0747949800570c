"""The version of the repro that runs: its release, labelled with a digest of its package's files.

A version names the source it was built from: `<release>+g<12 hex>` (a PEP 440 local version
label), the hex being the first 12 digits of the sha256 of a listing of every file of the import
package `repro_serving` as a wheel holds it, one line `<sha256 hex>  repro_serving/<path>` per
file, sorted by path in code point order, each ending with a line feed (`files_digest`). Two
trees that differ in a file of the package never write the same version. It is computed the
same way from a wheel's members, from a checkout (the files setuptools packs from it: the
modules and package data of each package it finds, as pyproject.toml says; links left out, as the
wheel `repro build` makes leaves them out) and from a repro pip installed (the files its RECORD
lists under repro_serving/). Bytecode (`__pycache__/`, `*.pyc`) is never part of it. The
release is pyproject.toml's version in a checkout and the public part of the installed
distribution's version otherwise. Anyone can recompute the label from an unpacked wheel:

    find repro_serving -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12

The label names the files; it does not vouch for them (12 hex digits are no defence against a
forger who searches for a match): `builder.handoff.tools` compares the files themselves when the
verifying repro has the version a bundle's tools state. This module imports nothing of repro
but its error root, as `repro --version` reads it.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any, Final

from repro_serving import DISTRIBUTION
from repro_serving.builder.errors import NotObservable

PACKAGE: Final = "repro_serving"
"""The import package whose files the label digests, as wheel members name its folder."""
LABEL_DIGITS: Final = 12
_LABELLED = re.compile(r"(?P<release>[0-9][0-9A-Za-z.!_-]*)\+g(?P<digest>[0-9a-f]{12})")


@dataclass(frozen=True)
class RunningPackage:
    """The files of the repro that runs, by the member name a wheel gives each."""

    release: str
    files: Mapping[str, Path]
    checkout: Path | None
    """The source tree it is imported from; None for a repro pip installed."""


def labelled(release: str, digest: str) -> str:
    return f"{release}+g{digest}"


def parse_label(version: str) -> tuple[str, str] | None:
    """(release, digest) of a labelled version; None when `version` carries no label."""
    match = _LABELLED.fullmatch(version)
    return None if match is None else (match["release"], match["digest"])


def files_digest(files: Mapping[str, bytes]) -> str:
    """The label's digest of `files` (member name → bytes, those under repro_serving/)."""
    listing = "".join(
        f"{hashlib.sha256(files[name]).hexdigest()}  {name}\n" for name in sorted(files)
    )
    return hashlib.sha256(listing.encode("utf-8")).hexdigest()[:LABEL_DIGITS]


def is_package_member(name: str) -> bool:
    """Whether the wheel member `name` is a file of the package the label digests."""
    path = PurePosixPath(name)
    return (
        name.startswith(f"{PACKAGE}/") and "__pycache__" not in path.parts and path.suffix != ".pyc"
    )


@functools.cache
def repro_version() -> str:
    """The version of the repro that runs, labelled with the digest of its files as they were
    when first asked: the code this process loaded, read once however often it is named."""
    package = running_package()
    return labelled(package.release, files_digest(read_files(package.files)))


def read_files(files: Mapping[str, Path]) -> dict[str, bytes]:
    contents = {}
    for name, path in files.items():
        try:
            contents[name] = path.read_bytes()
        except OSError as error:
            raise NotObservable(
                "a file of the repro that runs cannot be read",
                where=str(path),
                found=str(error),
            ) from error
    return contents


def running_package() -> RunningPackage:
    """The release and files of the repro that runs: a checkout's or an installed one's."""
    root = source_tree()
    if root is not None:
        project = tomllib.loads((root / "pyproject.toml").read_text("utf-8"))
        version = str(project["project"]["version"])
        return RunningPackage(_public(version), checkout_files(root, project), root)
    try:
        installed = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError as error:
        raise NotObservable(
            f"{DISTRIBUTION} is neither a checkout nor installed: its files cannot be named",
            found=str(error),
        ) from error
    files = {
        str(file): Path(str(installed.locate_file(file)))
        for file in installed.files or ()
        if is_package_member(str(file))
    }
    return RunningPackage(_public(installed.version), files, None)


def _public(version: str) -> str:
    return version.split("+", 1)[0]


@functools.cache
def source_tree() -> Path | None:
    """The directory holding the pyproject.toml of the repro that runs (a checkout); None for a
    repro installed from a wheel, which has none. Asked once: the code this process runs came
    from one place."""
    import repro_serving

    # a checkout's repro_serving/ is a folder of the source tree, beside pyproject.toml
    root = Path(repro_serving.__file__).parents[1]
    project = root / "pyproject.toml"
    name = None
    if project.is_file():
        try:
            name = tomllib.loads(project.read_text("utf-8")).get("project", {}).get("name")
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            name = None
    return root if name == DISTRIBUTION else None


def checkout_files(root: Path, project: Mapping[str, object]) -> dict[str, Path]:
    """Member name → file of every file setuptools packs from the checkout at `root`: the
    modules of each of its packages (`checkout_packages`; `*.py` of its folder, as setuptools
    globs them) and its package data (pyproject's patterns), links left out."""
    setuptools = _table(_table(project, "tool"), "setuptools")
    folders = package_dir(project)
    data = _table(setuptools, "package-data")
    files: dict[str, Path] = {}
    for package in checkout_packages(root, setuptools):
        folder = root / _folder(package, folders)
        patterns = ["*.py", *data.get(package, []), *data.get("*", []), *data.get("", [])]
        for pattern in patterns:
            # glob.glob as setuptools globs: names beginning with a dot are never matched
            for found in glob.glob(pattern, root_dir=folder, recursive=True):  # noqa: PTH207
                path = folder / found
                if path.is_file() and not path.is_symlink():
                    files[f"{package.replace('.', '/')}/{Path(found).as_posix()}"] = path
    return files


def checkout_packages(root: Path, setuptools: Mapping[str, object]) -> list[str]:
    """The packages setuptools packs from the checkout at `root`, as `tool.setuptools` says:
    its `packages` list, or those `packages.find` discovers as setuptools does (a walk of each
    `where` folder that follows links; a folder whose name holds a dot and `__pycache__` are
    never packages; with namespaces, the default, every other folder is one, else only those
    holding `__init__.py`; the names `include` matches and `exclude` does not)."""
    listed = setuptools.get("packages", [])
    if isinstance(listed, list):
        return [str(package) for package in listed]
    find = _table(_table(setuptools, "packages"), "find")
    include = [str(p) for p in find.get("include", ["*"])]
    exclude = [str(p) for p in find.get("exclude", [])]
    namespaces = find.get("namespaces", True) is not False
    found: list[str] = []
    for where in find.get("where", ["."]):
        base = root / str(where)
        for top in _tops(base, include):
            for folder, subfolders, _ in os.walk(base / top, followlinks=True):
                subfolders[:] = sorted(s for s in subfolders if "." not in s and s != "__pycache__")
                name = ".".join(Path(folder).relative_to(base).parts)
                wanted = any(fnmatchcase(name, p) for p in include) and not any(
                    fnmatchcase(name, p) for p in exclude
                )
                if wanted and (namespaces or (Path(folder) / "__init__.py").is_file()):
                    found.append(name)
    return sorted(found)


def _tops(base: Path, include: list[str]) -> list[str]:
    """The top-level folders of `base` a package that `include` matches can lie in: the first
    name of each pattern, every folder where a pattern begins with a wildcard."""
    firsts = {pattern.split(".", 1)[0] for pattern in include}
    if any(any(c in first for c in "*?[") for first in firsts):
        return sorted(p.name for p in base.iterdir() if p.is_dir() and "." not in p.name)
    return sorted(first for first in firsts if (base / first).is_dir())


def _table(table: Mapping[str, object], key: str) -> dict[str, Any]:
    """`table[key]` when it is a table of pyproject.toml, else an empty one."""
    value = table.get(key, {})
    return value if isinstance(value, dict) else {}


def package_dir(project: Mapping[str, object]) -> dict[str, str]:
    """pyproject.toml's `tool.setuptools.package-dir`: package → the source folder it maps to."""
    mapping = _table(_table(_table(project, "tool"), "setuptools"), "package-dir")
    return {str(package): str(folder) for package, folder in mapping.items()}


def _folder(package: str, folders: Mapping[str, str]) -> str:
    """The source folder of `package`: package-dir's entry of its longest mapped prefix."""
    parts = package.split(".")
    for cut in range(len(parts), 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in folders:
            return "/".join([folders[prefix], *parts[cut:]])
    return "/".join(parts)
