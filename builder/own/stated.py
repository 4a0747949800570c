"""What the repro that runs states of itself besides its name and version: what it requires to
run and the license files it carries, read from the one place that owns it (`own_stated`): a
checkout's pyproject.toml, written as setuptools writes it into the wheel's METADATA, or an
installed repro's METADATA. `builder.handoff.tools` holds a bundle's wheel to it."""

from __future__ import annotations

import glob
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from repro_serving import DISTRIBUTION
from repro_serving.builder.errors import BadInput, NotObservable
from repro_serving.builder.own.release import source_tree


@dataclass(frozen=True)
class Stated:
    """What the repro that runs states of itself in its wheel's METADATA besides its name and
    version: what it requires to run and the license files it carries."""

    requires_dist: tuple[str, ...]
    """Its `Requires-Dist` lines, extras' included, as its wheel writes them."""
    requires_python: str | None
    license_files: tuple[str, ...]
    """The files under its dist-info's licenses/, by their path there."""


def own_stated() -> Stated:
    """What the repro that runs requires, from the one place that owns it: a checkout's
    pyproject.toml (as setuptools writes it into the wheel `build_wheel` makes of it), an
    installed repro's METADATA (which the wheel `pack_installed` makes of it holds)."""
    root = source_tree()
    if root is not None:
        return _stated_by_pyproject(root)
    try:
        headers = metadata.distribution(DISTRIBUTION).metadata
    except metadata.PackageNotFoundError as error:
        raise NotObservable(
            f"{DISTRIBUTION} is neither a checkout nor installed: what it requires is unknown",
            found=str(error),
        ) from error
    python = headers.get_all("Requires-Python") or []
    requires = tuple(map(str, headers.get_all("Requires-Dist") or ()))
    try:
        for text in requires:
            Requirement(text)
    except InvalidRequirement as error:
        raise BadInput(
            f"the installed {DISTRIBUTION} states a malformed requirement", found=str(error)
        ) from error
    return Stated(
        requires_dist=requires,
        requires_python=str(python[0]) if python else None,
        license_files=tuple(map(str, headers.get_all("License-File") or ())),
    )


def _stated_by_pyproject(root: Path) -> Stated:
    """pyproject.toml's requirements as setuptools writes them: each of `dependencies` as it
    reads, each of `optional-dependencies` with `extra == "<name>"` joined to its marker."""
    project = tomllib.loads((root / "pyproject.toml").read_text("utf-8")).get("project", {})
    try:
        requires = [str(Requirement(text)) for text in project.get("dependencies", [])]
        for extra, texts in project.get("optional-dependencies", {}).items():
            requires += [str(_of_extra(Requirement(text), extra)) for text in texts]
    except InvalidRequirement as error:
        raise BadInput(
            "pyproject.toml states a malformed requirement", where=str(root), found=str(error)
        ) from error
    python = project.get("requires-python")
    licenses = sorted(
        {
            Path(found).as_posix()
            for pattern in project.get("license-files", [])
            for found in glob.glob(pattern, root_dir=root, recursive=True)  # noqa: PTH207
            if (root / found).is_file()
        }
    )
    return Stated(
        requires_dist=tuple(requires),
        requires_python=None if python is None else str(python),
        license_files=tuple(licenses),
    )


def _of_extra(requirement: Requirement, extra: str) -> Requirement:
    """A requirement of `extra`, its marker written as setuptools writes it."""
    parts = [f"({requirement.marker})"] if requirement.marker else []
    parts.append(f"extra == {canonicalize_name(extra)!r}")
    requirement.marker = Marker(" and ".join(parts))
    return requirement
