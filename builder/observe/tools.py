"""The repro that runs, as a bundle carries it: its wheel and its pinned runtime dependencies.

A bundle carries the exact repro that sealed it (`tools/`, `builder.sealing.bundle`), so that its
launcher can install it where repro never was. The wheel is built by `pip wheel --no-deps` from a
copy of the source tree the running repro is imported from (pyproject.toml, the README it names
and the packages it lists), with SOURCE_DATE_EPOCH fixed, so that the same source gives the same
bytes. A repro installed from a wheel has no source tree: its installed files, each checked
against the RECORD pip wrote, are packed again into its wheel (`builder.own.installed`).
Either way the wheel's version is the labelled one of the repro that runs
(`builder.own.release`), naming the files it packs.

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

from packaging.requirements import InvalidRequirement, Requirement

from repro_serving import DISTRIBUTION
from repro_serving.builder.documents.python import Distribution, normalize
from repro_serving.builder.documents.tools import Pin, ToolRequirements, pin_key
from repro_serving.builder.errors import BadInput, NotObservable
from repro_serving.builder.observe.artifacts import resolve_artifacts
from repro_serving.builder.observe.python import distributions
from repro_serving.builder.own.installed import pack_installed
from repro_serving.builder.own.release import (
    files_digest,
    is_package_member,
    labelled,
    package_dir,
    repro_version,
    source_tree,
)
from repro_serving.builder.sealing.bundle import REQUIREMENTS_FILE, wheel_filename

WHEEL_TIMEOUT_S: Final = 600.0
SOURCE_DATE_EPOCH: Final = "315532800"
"""1980-01-01, the earliest time a zip entry can hold: every wheel entry is stamped with it."""
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


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
        wheel = pack_installed(DISTRIBUTION, version, directory / "wheel" / wheel_filename(version))
    python, platform = this_interpreter()
    pins = pinned_dependencies(wheel_requires(wheel))
    requirements = ToolRequirements(repro=version, python=python, platform=platform, pins=pins)
    path = directory / REQUIREMENTS_FILE
    path.write_bytes(requirements.to_bytes())
    return ReproTools(wheel, path)


def build_wheel(source: Path, out: Path, version: str) -> Path:
    """`pip wheel --no-deps` of a copy of `source`'s packaging files, deterministic, as the
    wheel of `version`: the labelled version of those files (`builder.own.release`), which
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
    mapping = package_dir(project)
    for directory in sorted(set(mapping.values())):
        # links are not copied: package-dir maps the folders
        shutil.copytree(source / directory, staging / directory, ignore=_ignored)
    for package in sorted(mapping):
        # ... but setuptools discovers the subpackages through the links of the checkout's
        # repro_serving/, each the mapped folder of its package: made again in the copy
        link = Path(*package.split("."))
        if (source / link).is_symlink():
            (staging / link).symlink_to((source / link).readlink())
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
    return tuple(sorted(pins, key=pin_key))


def dependency_closure(requires: Sequence[str]) -> dict[str, Path]:
    """Normalised name → site directory of every installed distribution `requires` needs here,
    followed transitively through each one's `Requires-Dist`, markers evaluated with no extra."""
    found: dict[str, Path] = {}
    pending = _needed(requires, DISTRIBUTION)
    while pending:
        name = pending.pop()
        if normalize(name) in found or normalize(name) == DISTRIBUTION:
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
