"""The repro that runs, as a bundle carries it: its wheel and its pinned runtime dependencies.

A bundle carries the exact repro that sealed it (`tools/`, `builder.sealing.bundle`), so that its
launcher can install it where repro never was. The wheel is built by `pip wheel --no-deps` from a
copy of the source tree the running repro is imported from (pyproject.toml, the README it names
and the packages it lists), with SOURCE_DATE_EPOCH fixed, so that the same source gives the same
bytes. A repro installed from a wheel has no source tree: its installed files, each checked
against the RECORD pip wrote, are packed again into its wheel (`builder.observe.installed`).
Either way the wheel's version is the labelled one of the repro that runs
(`builder.observe.release`), naming the files it packs.

Its dependencies are the closure of the running repro's `Requires-Dist` (each marker evaluated
for this interpreter, no extra), at the versions installed here, each resolved to its wheel
through the package index pip is configured with exactly as the serving venv's are
(`builder.observe.artifacts`): the index must serve the bytes that are installed here. They are
written as `tools/requirements.txt` (`ToolRequirements`), for pip's hash-checking mode, with the
interpreter release series and platform they were resolved for.

What the running repro requires is read from the one place that owns it (`own_stated`): a
checkout's pyproject.toml, written as setuptools writes it into the wheel's METADATA, or an
installed repro's METADATA. `builder.handoff.tools` holds a bundle's wheel to it.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from email.parser import HeaderParser
from importlib import metadata
from pathlib import Path
from typing import Final

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict

from repro_serving import DISTRIBUTION
from repro_serving.builder.errors import BadInput, NotObservable
from repro_serving.builder.observe.artifacts import resolve_artifacts
from repro_serving.builder.observe.installed import pack_installed
from repro_serving.builder.observe.python import Distribution, distributions, normalize
from repro_serving.builder.observe.release import (
    files_digest,
    is_package_member,
    labelled,
    repro_version,
    source_tree,
)
from repro_serving.builder.sealing.bundle import REQUIREMENTS_FILE, wheel_filename

PROJECT: Final = DISTRIBUTION
WHEEL_TIMEOUT_S: Final = 600.0
SOURCE_DATE_EPOCH: Final = "315532800"
"""1980-01-01, the earliest time a zip entry can hold: every wheel entry is stamped with it."""
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Pin(_Frozen):
    name: str
    version: str
    sha256: str


_HEADER = (
    "# The runtime dependencies of repro {repro}, each pinned by version and sha256, for pip's\n"
    "# hash-checking mode: pip install --require-hashes --no-deps -r requirements.txt\n"
    "# python: {python}\n"
    "# platform: {platform}\n"
)
_HEADER_LINE = re.compile(
    r"# The runtime dependencies of repro (?P<repro>\S+), each pinned by version and sha256, "
    r"for pip's"
)
_FIELD = re.compile(r"# (?P<key>python|platform): (?P<value>[A-Za-z0-9._-]+)")
_PIN = re.compile(
    r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)"
    r" --hash=sha256:(?P<sha256>[0-9a-f]{64})"
)


class ToolRequirements(_Frozen):
    """`tools/requirements.txt`: repro's runtime dependencies for one interpreter release series
    (`3.11`) and platform (`linux-x86_64`, as `sysconfig.get_platform()` says), sorted by name."""

    repro: str
    python: str
    platform: str
    pins: tuple[Pin, ...]

    def to_bytes(self) -> bytes:
        header = _HEADER.format(repro=self.repro, python=self.python, platform=self.platform)
        lines = [f"{p.name}=={p.version} --hash=sha256:{p.sha256}\n" for p in self.pins]
        return (header + "".join(lines)).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str) -> ToolRequirements:
        """The file in exactly the form `to_bytes` writes, else `BadInput` naming the line."""
        try:
            lines = data.decode("utf-8").split("\n")
        except UnicodeDecodeError as error:
            raise BadInput(f"{REQUIREMENTS_FILE} is not UTF-8", where=where) from error
        head = _HEADER_LINE.fullmatch(lines[0])
        fields = [_FIELD.fullmatch(line) for line in lines[2:4]]
        if head is None or None in fields or lines[-1] != "":
            raise BadInput(
                f"{REQUIREMENTS_FILE} does not begin as repro writes it",
                where=where,
                expected="the header naming repro's version, python and platform",
            )
        values = {m["key"]: m["value"] for m in fields if m is not None}
        pins = []
        for number, line in enumerate(lines[4:-1], start=5):
            match = _PIN.fullmatch(line)
            if match is None:
                raise BadInput(
                    f"a line of {REQUIREMENTS_FILE} is not a pin",
                    where=f"{where}:{number}",
                    expected="<name>==<version> --hash=sha256:<64 lowercase hex>",
                    found=repr(line[:200]),
                )
            pins.append(Pin(name=match["name"], version=match["version"], sha256=match["sha256"]))
        found = cls(
            repro=head["repro"],
            python=values.get("python", ""),
            platform=values.get("platform", ""),
            pins=tuple(pins),
        )
        if found.to_bytes() != data or sorted(pins, key=_pin_key) != pins:
            raise BadInput(
                f"{REQUIREMENTS_FILE} is not in the one form repro writes",
                where=where,
                expected="its header, then one pin per distribution sorted by normalised name",
            )
        if len({normalize(p.name) for p in pins}) != len(pins):
            raise BadInput(f"{REQUIREMENTS_FILE} pins a distribution twice", where=where)
        return found

    def pinned(self) -> dict[str, Pin]:
        """Normalised name → pin."""
        return {normalize(p.name): p for p in self.pins}


def _pin_key(pin: Pin) -> str:
    return normalize(pin.name)


def this_interpreter() -> tuple[str, str]:
    """The release series and platform of the running interpreter: ('3.11', 'linux-x86_64')."""
    return f"{sys.version_info[0]}.{sys.version_info[1]}", sysconfig.get_platform()


@dataclass(frozen=True)
class ReproTools:
    """The running repro, as files ready to seal under tools/."""

    wheel: Path
    requirements: Path


def build_tools(directory: Path) -> ReproTools:
    """The running repro's wheel and its pinned dependencies, written into `directory`; refused,
    saying why, when either cannot be made."""
    directory.mkdir(parents=True, exist_ok=True)
    version = repro_version()
    source = source_tree()
    if source is not None:
        wheel = build_wheel(source, directory / "wheel", version)
    else:
        wheel = pack_installed(PROJECT, version, directory / "wheel" / wheel_filename(version))
    python, platform = this_interpreter()
    pins = pinned_dependencies(wheel_requires(wheel))
    requirements = ToolRequirements(repro=version, python=python, platform=platform, pins=pins)
    path = directory / REQUIREMENTS_FILE
    path.write_bytes(requirements.to_bytes())
    return ReproTools(wheel, path)


def build_wheel(source: Path, out: Path, version: str) -> Path:
    """`pip wheel --no-deps` of a copy of `source`'s packaging files, deterministic, as the
    wheel of `version`: the labelled version of those files (`builder.observe.release`), which
    the copy of pyproject.toml states instead of the release alone."""
    staging = out / "source"
    shutil.rmtree(out, ignore_errors=True)
    text = (source / "pyproject.toml").read_text("utf-8")
    project = tomllib.loads(text)
    staging.mkdir(parents=True)
    (staging / "pyproject.toml").write_text(_stating(text, project, version, source), "utf-8")
    readme = project.get("project", {}).get("readme")
    if isinstance(readme, str) and (source / readme).is_file():
        shutil.copy2(source / readme, staging / readme)
    for directory in _package_dirs(project):
        # the links of a checkout's repro_serving/ are not copied: package-dir maps the folders
        shutil.copytree(source / directory, staging / directory, ignore=_ignored)
    for name in project.get("project", {}).get("license-files", []):
        shutil.copy2(source / name, staging / name)
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--quiet",
        "--disable-pip-version-check",
        "--wheel-dir",
        str(out),
        str(staging),
    ]
    env = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=WHEEL_TIMEOUT_S, check=False, env=env
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise _no_wheel(source, str(error)) from error
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise _no_wheel(source, f"exit {done.returncode}: {lines[-1] if lines else 'no output'}")
    expected = out / wheel_filename(version)
    built = sorted(p.name for p in out.glob("*.whl"))
    if built != [expected.name]:
        raise _no_wheel(source, f"pip built {', '.join(built) or 'nothing'}, not {expected.name}")
    packed = _package_digest(expected)
    if labelled(_release(version), packed) != version:
        # the files setuptools packed are not those the label digests: the two disagree on
        # what the package is, and the wheel would name another source than its own
        raise _no_wheel(source, f"its files digest to g{packed}, not to the label of {version}")
    return expected


def _release(version: str) -> str:
    return version.split("+", 1)[0]


def _stating(text: str, project: dict[str, object], version: str, source: Path) -> str:
    """pyproject.toml's text with its project version written as `version`."""
    table = project.get("project", {})
    release = table.get("version") if isinstance(table, dict) else None
    line = re.compile(rf'^version = "{re.escape(str(release))}"$', re.MULTILINE)
    if len(line.findall(text)) != 1:
        raise _no_wheel(source, f'pyproject.toml has not one line version = "{release}"')
    return line.sub(f'version = "{version}"', text)


def _package_digest(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        files = {name: archive.read(name) for name in archive.namelist() if is_package_member(name)}
    return files_digest(files)


def _package_dirs(project: dict[str, object]) -> list[str]:
    """The source folders pyproject.toml's `tool.setuptools.package-dir` maps packages to."""
    tool = project.get("tool", {})
    setuptools = tool.get("setuptools", {}) if isinstance(tool, dict) else {}
    mapping = setuptools.get("package-dir", {}) if isinstance(setuptools, dict) else {}
    return sorted({str(folder) for folder in mapping.values()}) if isinstance(mapping, dict) else []


def _ignored(directory: str, names: list[str]) -> set[str]:
    links = {name for name in names if Path(directory, name).is_symlink()}
    return set(_IGNORED(directory, names)) | links


def _no_wheel(source: Path, found: str) -> NotObservable:
    return NotObservable(
        "cannot build the wheel of the repro that runs",
        where=str(source),
        found=found,
        hint="`pip wheel` needs setuptools from the package index pip is configured with",
    )


def wheel_requires(wheel: Path) -> tuple[str, ...]:
    """The `Requires-Dist` lines of a wheel's METADATA, as written."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        if len(names) != 1:
            raise BadInput("a wheel without one METADATA", where=str(wheel))
        text = archive.read(names[0]).decode("utf-8", errors="replace")
    headers = HeaderParser().parsestr(text.split("\n\n", 1)[0])
    return tuple(headers.get_all("Requires-Dist") or ())


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
        headers = metadata.distribution(PROJECT).metadata
    except metadata.PackageNotFoundError as error:
        raise NotObservable(
            f"{PROJECT} is neither a checkout nor installed: what it requires is unknown",
            found=str(error),
        ) from error
    python = headers.get_all("Requires-Python") or []
    requires = tuple(map(str, headers.get_all("Requires-Dist") or ()))
    try:
        for text in requires:
            Requirement(text)
    except InvalidRequirement as error:
        raise BadInput(
            f"the installed {PROJECT} states a malformed requirement", found=str(error)
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


def pinned_dependencies(requires: Sequence[str]) -> tuple[Pin, ...]:
    """Every distribution `requires` needs to run here, pinned to the wheel it was installed
    from."""
    closure = dependency_closure(requires)
    by_site: dict[Path, list[Distribution]] = defaultdict(list)
    for key in sorted(closure):
        site = closure[key]
        found = [d for d in distributions(site, {}) if d.key == key]
        if not found:
            raise _unpinnable(key, f"no dist-info of it in {site}")
        by_site[site].append(found[0])
    pins: list[Pin] = []
    for site, wanted in sorted(by_site.items()):
        facts = resolve_artifacts(Path(sys.executable), site, wanted)
        if facts.unresolved:
            key, why = next(iter(facts.unresolved.items()))
            raise _unpinnable(key, why)
        pins += [
            Pin(name=a.name, version=a.version, sha256=a.sha256) for a in facts.artifacts.values()
        ]
    return tuple(sorted(pins, key=_pin_key))


def dependency_closure(requires: Sequence[str]) -> dict[str, Path]:
    """Normalised name → site directory of every installed distribution `requires` needs here,
    followed transitively through each one's `Requires-Dist`, markers evaluated with no extra."""
    found: dict[str, Path] = {}
    pending = _needed(requires, PROJECT)
    while pending:
        name = pending.pop()
        if normalize(name) in found or normalize(name) == PROJECT:
            continue
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError as error:
            raise _unpinnable(normalize(name), "not installed beside repro") from error
        found[normalize(name)] = Path(str(distribution.locate_file(""))).resolve()
        pending += _needed(distribution.requires or (), normalize(name))
    return found


def _needed(requires: Sequence[str], by: str) -> list[str]:
    needed = []
    for text in requires:
        try:
            requirement = Requirement(text)
        except InvalidRequirement as error:
            raise _unpinnable(by, f"its requirement {text!r} is malformed") from error
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            needed.append(requirement.name)
    return needed


def _unpinnable(name: str, why: str) -> NotObservable:
    return NotObservable(
        "a runtime dependency of repro cannot be pinned to a wheel",
        where=name,
        found=why,
        hint="a bundle pins repro's own dependencies by sha256: install them from the package "
        "index pip is configured with",
    )
