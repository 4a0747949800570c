"""The serving environment, restored from the wheel artifacts its lock pins.

Made in a temporary sibling of the venv's final path: an interpreter of exactly the locked
version makes an empty venv; every locked wheel is fetched through the package index this
machine's pip is configured with and checked against its locked file name and sha256 by repro
itself before anything is installed; pip then installs exactly those files, `--no-deps`, in
hash-checking mode, from that directory alone. A venv names its own path in a few places (the
shebang of each console script and its RECORD hash, `activate`, `pyvenv.cfg`): those are written
for the final path, as pip would have written them there. The result is observed like any
serving venv (`builder.observe.python`): every distribution and version equal to the lock, every
RECORD hash holding, no file no RECORD owns. Only then is it renamed into place.
"""

from __future__ import annotations

import base64
import csv
import io
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from repro_serving.builder.documents.lock import PythonClaim, WheelArtifact
from repro_serving.builder.documents.manifest import Python
from repro_serving.builder.documents.python import PythonFacts, compare, normalize, version_matches
from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.errors import ReproError
from repro_serving.builder.hashing import sha256_bytes, sha256_file
from repro_serving.builder.observe.artifacts import download, pip_command, requirement_lines
from repro_serving.builder.observe.python import interpreter_version, observe_python
from repro_serving.builder.placeholders import Venv, venv_values
from repro_serving.builder.restore.step import Action, Progress, StepResult, no_progress
from repro_serving.builder.sealing.atomic import move_into_place

INSTALL_TIMEOUT_S: Final = 1800.0
KIND: Final = "python"


class _Refused(Exception):
    def __init__(self, *drifts: Drift) -> None:
        super().__init__(drifts[0].why if drifts else "refused")
        self.drifts = drifts


def restore_python(
    claim: PythonClaim,
    python: Python,
    venv: Path,
    *,
    force: bool = False,
    interpreter: Path | None = None,
    progress: Progress = no_progress,
) -> StepResult:
    """Make `venv` hold exactly what `claim` pins (`python` is the manifest's `[python]`), made
    with `interpreter` when given (`base_interpreter` chooses one otherwise)."""
    subject = str(venv)
    if venv.exists() or venv.is_symlink():
        found, version = _drifts_of(claim, python, venv)
        if not found:
            return StepResult(KIND, subject, subject, Action.ALREADY, _summary(claim, version))
        if not force:
            return StepResult(
                KIND,
                subject,
                subject,
                Action.REFUSED,
                f"{venv} exists and differs from the lock ({len(found)} drift(s)); "
                "--force replaces it",
                tuple(found),
            )
    try:
        base = base_interpreter(claim.interpreter, python.interpreter, interpreter)
        missing = _unrestorable(claim)
        if missing:
            raise _Refused(*missing)
        _build(claim, python, venv, base.path, progress)
    except _Refused as refused:
        return StepResult(KIND, subject, subject, Action.REFUSED, str(refused), refused.drifts)
    return StepResult(KIND, subject, subject, Action.RESTORED, _summary(claim, base.version))


def _summary(claim: PythonClaim, version: str | None) -> str:
    """The interpreter and the distributions; a release other than the sealed one, said."""
    release = f"Python {claim.interpreter}"
    if version is not None and version != claim.interpreter:
        release = f"Python {version} (sealed with {claim.interpreter}, which the manifest admits)"
    return f"{release}, {len(claim.packages)} distributions"


def _drifts_of(claim: PythonClaim, python: Python, venv: Path) -> tuple[list[Drift], str | None]:
    """Every way the venv at `venv` differs from the lock (none when it holds exactly that),
    and the release of its interpreter when it could be observed."""
    try:
        facts = _observe(python, venv)
    except ReproError as error:
        found = error.found or error.what
        drift = _drift(DriftKind.NOT_OBSERVABLE, str(venv), "a serving venv", found, error.what)
        return [drift], None
    return _versus_lock(claim, python, facts, str(venv)), facts.version


def _observe(python: Python, venv: Path) -> PythonFacts:
    located = Venv.at(venv)
    return observe_python(
        python.model_copy(update={"check_record": True}), located, venv_values(located)
    )


def _versus_lock(claim: PythonClaim, python: Python, facts: PythonFacts, where: str) -> list[Drift]:
    """The manifest's `[python]` (its interpreter pin among it), then every locked distribution
    at its locked version. The interpreter may be another release than the sealed one where the
    pin admits it: the launch names that difference."""
    found = compare(python.model_copy(update={"check_record": True}), facts)
    installed = {d.name: d.version for d in facts.distributions}
    for name in sorted(set(installed) | set(claim.packages)):
        if installed.get(name) != claim.packages.get(name):
            found.append(
                _drift(
                    DriftKind.PACKAGE_VERSION,
                    f"{where}: package {name}",
                    claim.packages.get(name, "not installed"),
                    installed.get(name, "not installed"),
                    "the environment is not the locked set of distributions",
                )
            )
    return found


def _unrestorable(claim: PythonClaim) -> list[Drift]:
    return [
        _drift(
            DriftKind.ARTIFACT,
            f"package {name}",
            f"{name}=={version} from a pinned wheel",
            claim.unrestorable.get(normalize(name), "no wheel artifact in the lock"),
            "restore installs only locked wheels, by sha256",
        )
        for name, version in sorted(claim.packages.items())
        if normalize(name) not in claim.artifacts
    ]


# --- the interpreter --------------------------------------------------------------------------


@dataclass(frozen=True)
class Interpreter:
    """The interpreter a venv is made with, and the release it reports."""

    path: Path
    version: str


def base_interpreter(
    release: str,
    pin: str,
    chosen: Path | None = None,
    search: Sequence[Path] | None = None,
) -> Interpreter:
    """The interpreter the serving venv is made with. `chosen` (`--python`) when given, which
    the manifest's `pin` must admit; else the locked `release` wherever it is found (repro's
    own base, `python3.X` and `python3` on PATH, then pyenv's and uv's installations of that
    release); else the newest release found that `pin` admits ('3.11': any 3.11.x). Refused,
    naming every candidate and how to get an interpreter, when none holds."""
    if chosen is not None:
        version = _version(chosen)
        if version is not None and version_matches(pin, version):
            return Interpreter(chosen, version)
        found = f"{chosen}: " + (f"Python {version}" if version else "does not run")
        raise _Refused(_interpreter_drift(release, pin, found))
    major_minor = ".".join(release.split(".")[:2])
    candidates = list(search) if search is not None else _candidates(major_minor, release)
    seen: dict[Path, str] = {}
    for candidate in candidates:
        version = _version(candidate)
        if version is None or candidate in seen:
            continue
        if version == release:
            return Interpreter(candidate, version)
        seen[candidate] = version
    admitted = [(p, v) for p, v in seen.items() if version_matches(pin, v)]
    if admitted:
        path, version = max(admitted, key=lambda pv: _release_key(pv[1]))
        return Interpreter(path, version)
    found = "; ".join(f"{p}: Python {v}" for p, v in seen.items()) or "no python3 found"
    raise _Refused(_interpreter_drift(release, pin, found))


def _version(python: Path) -> str | None:
    try:
        return interpreter_version(python)[0]
    except ReproError:
        return None


def _release_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))


def _interpreter_drift(release: str, pin: str, found: str) -> Drift:
    exact = len(pin.split(".")) > 2
    if exact:
        why = (
            f'the manifest pins Python {pin} exactly ([python] interpreter = "{pin}"), which '
            f"restore cannot install: install it (for instance `pyenv install {pin}` or "
            f"`uv python install {pin}`) and name it with --python PATH"
        )
    else:
        why = (
            f'the manifest admits any Python {pin} ([python] interpreter = "{pin}"; the '
            f"bundle was sealed with {release}), which restore cannot install: install one "
            f"(Debian and Ubuntu: `apt install python{pin} python{pin}-venv`; or "
            f"`pyenv install {release}`) or name one with --python PATH"
        )
    return _drift(DriftKind.PYTHON_INTERPRETER, "interpreter", f"Python {pin}", found, why)


def _candidates(major_minor: str, release: str) -> Iterator[Path]:
    """Where an interpreter is looked for, each by its real path, in order of preference."""
    home = Path(os.environ.get("HOME", "/nonexistent"))
    places = [Path(sys.base_prefix) / "bin" / f"python{major_minor}"]
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if directory:
            places += [Path(directory) / f"python{major_minor}", Path(directory) / "python3"]
    places.append(home / ".pyenv" / "versions" / release / "bin" / f"python{major_minor}")
    places += sorted(
        (home / ".local" / "share" / "uv" / "python").glob(f"cpython-{release}-*/bin/python3")
    )
    for place in places:
        if place.is_file():
            yield place.resolve()


# --- building the venv beside its final path ----------------------------------------------------


def _build(claim: PythonClaim, python: Python, venv: Path, base: Path, progress: Progress) -> None:
    token = secrets.token_hex(6)
    workdir = venv.parent / f".{venv.name}.restoring-{token}"
    wheels = venv.parent / f".{venv.name}.wheels-{token}"
    venv.parent.mkdir(parents=True, exist_ok=True)
    for leftover in _leftovers(venv):
        progress(f"removing {leftover.name}, left by a restore that did not finish")
        shutil.rmtree(leftover, ignore_errors=True)
    try:
        progress(f"making an empty venv with {base}")
        command = [str(base), "-m", "venv", "--without-pip", "--prompt", venv.name, str(workdir)]
        _run(command, "python -m venv")
        target = workdir / "bin" / "python"
        progress(f"fetching {len(claim.artifacts)} wheels through the configured package index")
        _fetch(claim.artifacts, target, wheels)
        progress(f"installing {len(claim.artifacts)} wheels, each checked by sha256")
        _install(claim.artifacts, target, wheels)
        relocate(workdir, venv)
        progress("checking every installed file against its RECORD and the lock")
        found = _versus_lock(claim, python, _observe(python, workdir), str(venv))
        if found:
            raise _Refused(*found)
        replaced = move_into_place(workdir, venv, progress, what="venv")
        if replaced is not None:
            shutil.rmtree(replaced, ignore_errors=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(wheels, ignore_errors=True)


def _leftovers(venv: Path) -> list[Path]:
    """Work directories of an earlier restore of `venv` that was killed before it finished."""
    patterns = (f".{venv.name}.restoring-*", f".{venv.name}.wheels-*")
    return sorted(p for pattern in patterns for p in venv.parent.glob(pattern) if p.is_dir())


def _fetch(artifacts: Mapping[str, WheelArtifact], python: Path, wheels: Path) -> None:
    """Every locked wheel, fetched and checked by repro before pip installs anything."""
    requirements = [f"{a.name}=={a.version}" for _, a in sorted(artifacts.items())]
    done = download(python, requirements, wheels)
    problems = []
    for _, artifact in sorted(artifacts.items()):
        path = wheels / artifact.filename
        found = sha256_file(path) if path.is_file() else None
        if found != artifact.sha256:
            problems.append(
                _drift(
                    DriftKind.ARTIFACT,
                    f"wheel {artifact.filename}",
                    f"sha256 {artifact.sha256}",
                    f"sha256 {found}" if found else _not_fetched(wheels, artifact, done.stderr),
                    "the package index serves other bytes than the lock pins",
                )
            )
    if problems:
        raise _Refused(*problems)


def _not_fetched(wheels: Path, artifact: WheelArtifact, stderr: str) -> str:
    stem = artifact.filename.split("-")[0].lower()
    others = sorted(p.name for p in wheels.glob("*.whl") if p.name.lower().startswith(stem + "-"))
    if others:
        return f"the index served {', '.join(others)} instead"
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return "not served by the package index" + (f": {lines[-1].strip()}" if lines else "")


def _install(artifacts: Mapping[str, WheelArtifact], python: Path, wheels: Path) -> None:
    listing = wheels / "hashed-requirements.txt"
    listing.write_text("".join(f"{line}\n" for line in requirement_lines(artifacts)))
    command = pip_command(
        python,
        "install",
        "--quiet",
        "--no-deps",
        "--no-index",
        "--no-compile",
        "--only-binary=:all:",
        "--require-hashes",
        "--disable-pip-version-check",
        "--find-links",
        str(wheels),
        "-r",
        str(listing),
    )
    _run(command, "pip install", timeout=INSTALL_TIMEOUT_S)


def _run(command: list[str], what: str, timeout: float = 300.0) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        problem = _drift(
            DriftKind.NOT_OBSERVABLE, what, "exit 0", str(error), f"{what} could not run"
        )
        raise _Refused(problem) from error
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        last = lines[-1].strip() if lines else "no output"
        found = f"exit {done.returncode}: {last}"
        raise _Refused(_drift(DriftKind.NOT_OBSERVABLE, what, "exit 0", found, f"{what} failed"))


# --- a venv made at one path, written for another --------------------------------------------


def relocate(workdir: Path, final: Path) -> None:
    """Write the venv built at `workdir` for `final`: each console script's shebang (and its
    RECORD row, as pip writes it), `bin/activate*` and `pyvenv.cfg`. Nothing else of a venv made
    with `--without-pip` and installed with `--no-compile` names its path."""
    old, new = str(workdir), str(final)
    site_packages = list((workdir / "lib").glob("python*/site-packages"))
    scripts: dict[Path, bytes] = {}
    for script in sorted((workdir / "bin").iterdir()):
        if script.is_symlink() or not script.is_file():
            continue
        data = script.read_bytes()
        if old.encode() not in data[:4096]:
            continue
        if script.name.startswith("activate") or data.startswith(b"#!"):
            head, _, rest = data.partition(b"\n")
            if script.name.startswith("activate"):
                fixed = data.replace(old.encode(), new.encode())
            else:
                # A shebang, or pip's /bin/sh trampoline for long paths, in its first lines.
                second, _, body = rest.partition(b"\n")
                fixed = b"\n".join(
                    (head.replace(old.encode(), new.encode()),
                     second.replace(old.encode(), new.encode()), body)
                )  # fmt: skip
            script.write_bytes(fixed)
            scripts[script] = fixed
    config = workdir / "pyvenv.cfg"
    config.write_text(config.read_text().replace(old, new))
    for site in site_packages:
        for record in site.glob("*.dist-info/RECORD"):
            _rewrite_record(record, site, scripts)


def _rewrite_record(record: Path, site: Path, scripts: Mapping[Path, bytes]) -> None:
    rows = list(csv.reader(io.StringIO(record.read_text(encoding="utf-8"))))
    changed = False
    for row in rows:
        if not row:
            continue
        path = Path(os.path.normpath(site / row[0]))
        if path in scripts:
            data = scripts[path]
            digest = base64.urlsafe_b64encode(bytes.fromhex(sha256_bytes(data))).rstrip(b"=")
            row[1:] = [f"sha256={digest.decode('ascii')}", str(len(data))]
            changed = True
    if changed:
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(rows)
        record.write_text(out.getvalue(), encoding="utf-8")


def _drift(kind: DriftKind, subject: str, expected: str, observed: str, why: str) -> Drift:
    return Drift(kind=kind, subject=subject, expected=expected, observed=observed, why=why)
