"""The wheel each installed distribution came from, found through this machine's package index.

A venv does not remember which file it was installed from, so `repro build` asks the index the
machine is configured with (pip's own configuration: index URL, extra indexes, find-links) for
exactly that name and version, for the serving interpreter, wheels only, and accepts a wheel as
the distribution's artifact only when every file its RECORD lists (`.data/` aside, which pip
moves and rewrites) is installed with the same hash: the index then serves the bytes that were
installed. Each accepted artifact is pinned by file name and sha256, which is what `repro
restore` installs with hash checking on another machine. A distribution the index does not
serve, or serves with other bytes (a local build, an editable install, a yanked file), has no
artifact, and says why: restore refuses it by name rather than install something else.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from repro_serving.builder.documents.lock import WheelArtifact
from repro_serving.builder.documents.python import Distribution, normalize
from repro_serving.builder.hashing import sha256_file
from repro_serving.builder.observe.python import record_entries

DOWNLOAD_TIMEOUT_S: Final = 1800.0
DOWNLOAD_WORKERS: Final = min(8, os.cpu_count() or 1)
"""pip downloads run at once when each distribution is asked for alone."""


@dataclass(frozen=True)
class ArtifactFacts:
    artifacts: dict[str, WheelArtifact]
    """Normalised distribution name → the wheel it was installed from."""
    unresolved: dict[str, str]
    """Normalised distribution name → why no artifact is pinned for it."""


@dataclass(frozen=True)
class WheelName:
    """The parts of a wheel file name (PEP 427) that name its distribution."""

    name: str
    version: str

    @classmethod
    def parse(cls, filename: str) -> WheelName | None:
        if not filename.endswith(".whl"):
            return None
        parts = filename[: -len(".whl")].split("-")
        if len(parts) not in (5, 6):
            return None
        return cls(normalize(parts[0]), parts[1])


def pip_command(python: Path, *arguments: str) -> list[str]:
    """pip run for another interpreter (`pip --python`): repro's own pip, the target's tags."""
    return [sys.executable, "-m", "pip", "--python", str(python), *arguments]


def download(
    python: Path, requirements: Sequence[str], destination: Path
) -> subprocess.CompletedProcess[str]:
    """`pip download --no-deps` of `requirements` for `python`, wheels only, into
    `destination`, through the package index pip is configured with."""
    destination.mkdir(parents=True, exist_ok=True)
    # a listing of its own: several downloads may share `destination` at once
    handle, name = tempfile.mkstemp(prefix="requirements-", suffix=".txt", dir=destination)
    os.close(handle)
    listing = Path(name)
    listing.write_text("".join(f"{line}\n" for line in requirements))
    command = pip_command(
        python,
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--dest",
        str(destination),
        "-r",
        str(listing),
    )
    return subprocess.run(
        command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S, check=False
    )


def resolve_artifacts(
    python: Path, site: Path, distributions: Sequence[Distribution]
) -> ArtifactFacts:
    """The artifact of each of `distributions` (installed in `site`, run by `python`)."""
    wanted = {d.key: d for d in distributions}
    with tempfile.TemporaryDirectory(prefix="repro-artifacts-") as scratch:
        directory = Path(scratch)
        requirements = [f"{d.name}=={d.version}" for d in distributions]
        unresolved: dict[str, str] = {}
        if download(python, requirements, directory).returncode != 0:
            # One missing distribution fails the whole download: ask for each alone, several
            # at once (a venv of a few hundred distributions that an offline wheelhouse serves
            # only in part would otherwise wait for one pip start after another).
            def alone(distribution: Distribution) -> subprocess.CompletedProcess[str]:
                return download(python, [f"{distribution.name}=={distribution.version}"], directory)

            with ThreadPoolExecutor(max_workers=DOWNLOAD_WORKERS) as pool:
                answers = list(pool.map(alone, distributions))
            for distribution, done in zip(distributions, answers, strict=True):
                if done.returncode != 0:
                    unresolved[distribution.key] = "the package index serves no wheel of it: " + (
                        _last_line(done.stderr)
                    )
        artifacts: dict[str, WheelArtifact] = {}
        for wheel in sorted(directory.glob("*.whl")):
            parsed = WheelName.parse(wheel.name)
            if parsed is None or parsed.name not in wanted:
                continue
            distribution = wanted[parsed.name]
            problem = _installed_from(wheel, site, distribution)
            if problem is not None:
                unresolved[parsed.name] = problem
                continue
            artifacts[parsed.name] = WheelArtifact(
                name=distribution.name,
                version=distribution.version,
                filename=wheel.name,
                sha256=sha256_file(wheel),
            )
    for key in wanted:
        if key not in artifacts:
            unresolved.setdefault(key, "the package index served no wheel of it")
    return ArtifactFacts(artifacts, {k: unresolved[k] for k in sorted(unresolved)})


def _installed_from(wheel: Path, site: Path, distribution: Distribution) -> str | None:
    """None when every file the wheel's RECORD lists is installed with its hash; else why not."""
    installed = _installed_hashes(site, distribution)
    shipped = wheel_record(wheel)
    if shipped is None:
        return f"{wheel.name} has no RECORD"
    if WheelName.parse(wheel.name) != WheelName(distribution.key, distribution.version):
        return f"{wheel.name} is not {distribution.name} {distribution.version}"
    for path, digest in shipped.items():
        if installed.get(path) != digest:
            return (
                f"{wheel.name} from the package index ships {path} with {digest}, "
                f"installed: {installed.get(path) or 'no such entry'}"
            )
    return None


def wheel_record(wheel: Path) -> dict[str, str] | None:
    """Path → hash of every hashed entry of a wheel's RECORD, `.data/` aside; None without one."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith(".dist-info/RECORD")]
        if len(names) != 1:
            return None
        text = archive.read(names[0]).decode("utf-8")
    return _hashed_rows(csv.reader(io.StringIO(text)))


def _installed_hashes(site: Path, distribution: Distribution) -> dict[str, str]:
    """Path (relative to site-packages, as a wheel names it) → hash of the installed RECORD."""
    dist_info = site / Path(distribution.dist_info).name
    return {
        Path(entry.path).relative_to(site).as_posix(): str(entry.recorded)
        for entry in record_entries(dist_info)
        if entry.recorded is not None and Path(entry.path).is_relative_to(site)
    }


def _hashed_rows(rows: Iterable[list[str]]) -> dict[str, str]:
    return {
        row[0]: row[1]
        for row in rows
        if len(row) >= 2 and row[1] and ".data/" not in row[0] and not row[0].endswith(".pyc")
    }


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def requirement_lines(artifacts: Mapping[str, WheelArtifact]) -> list[str]:
    """`name==version --hash=sha256:…` for each artifact, for pip's hash-checking mode."""
    return [f"{a.name}=={a.version} --hash=sha256:{a.sha256}" for _, a in sorted(artifacts.items())]
