"""Everything a manifest pins, observed on this host, and every way it disagrees.

One place runs the observers (host, models, sources, Python) for `repro build`, `repro verify
--host` and the preflight of `repro launch`, so the three can never measure a fact differently.
A fact that cannot be observed (a venv, a model directory or a source tree that is not there)
is a drift in the same report as every other, so a refusal lists everything missing at once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict

from repro_serving.builder.canonical import canonical_json
from repro_serving.builder.documents import parse_document
from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.errors import NotObservable, ReproError
from repro_serving.builder.lock import HostFacts as HostFactsClaim
from repro_serving.builder.lock import WheelArtifact
from repro_serving.builder.manifest import Manifest, Model
from repro_serving.builder.observe import host as host_observer
from repro_serving.builder.observe import models as model_observer
from repro_serving.builder.observe import python as python_observer
from repro_serving.builder.observe import sources as source_observer
from repro_serving.builder.observe.host import HostFacts
from repro_serving.builder.observe.models import ModelFacts
from repro_serving.builder.observe.python import PythonFacts, Venv, placeholder_path, venv_values
from repro_serving.builder.observe.sources import SourceFacts


@dataclass(frozen=True)
class Observations:
    values: dict[str, str]
    """The placeholder values on this host (`{venv}`, `{site}`, `{model.target}`, …)."""
    host: HostFacts
    models: tuple[ModelFacts, ...]
    sources: tuple[SourceFacts, ...]
    python: PythonFacts | None
    """None when the venv could not be observed; `unobservable` says why."""
    unobservable: tuple[Drift, ...]


OBSERVATIONS_FILE = "observations.json"
"""Under evidence/: `ObservationsDocument`, what the build (or a replay's preflight) observed."""


class _Document(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SealedArtifacts(_Document):
    pinned: dict[str, WheelArtifact]
    """Normalised distribution name → the wheel it was installed from."""
    unresolved: dict[str, str]
    """Normalised distribution name → why no wheel is pinned for it."""


class ObservationsDocument(_Document):
    """`evidence/observations.json`: the observed facts a lock's live claims were taken from,
    written by `of` and read back by `from_bytes`, validated whole."""

    values: dict[str, str]
    host: HostFacts
    models: tuple[ModelFacts, ...]
    sources: tuple[SourceFacts, ...]
    python: PythonFacts | None
    artifacts: SealedArtifacts

    @classmethod
    def of(
        cls, observed: Observations, pinned: dict[str, WheelArtifact], unresolved: dict[str, str]
    ) -> ObservationsDocument:
        return cls(
            values=observed.values,
            host=observed.host,
            models=observed.models,
            sources=observed.sources,
            python=observed.python,
            artifacts=SealedArtifacts(pinned=pinned, unresolved=unresolved),
        )

    def to_bytes(self) -> bytes:
        document = self.model_dump(mode="json")
        document["host"] = self.host.to_json()
        return canonical_json(document)

    def host_facts(self) -> HostFactsClaim:
        """The host facts exactly as a lock records them."""
        return self.host.locked()

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str) -> ObservationsDocument:
        return parse_document(cls, data, where=where, what="the sealed observations")

    def contradictions(self) -> list[Drift]:
        """What this document says against itself: the interpreter's version against the
        venv's configuration and its site directory, the venv's paths against each other, each
        pinned wheel against the distribution it is pinned for."""
        if self.python is None:
            return []
        python, values = self.python, self.values
        found = []
        release = ".".join(python.version.split(".")[:2])
        if ".".join(python.configured_version.split(".")[:2]) != release:
            found.append(
                _contradiction("python.configured_version", release, python.configured_version)
            )
        venv = values.get("venv", "")
        expected = {
            "python": f"{venv}/bin/python",
            "site": f"{venv}/lib/python{release}/site-packages",
        }
        found += [
            _contradiction(f"values.{name}", path, values.get(name, "absent"))
            for name, path in expected.items()
            if values.get(name) != path
        ]
        installed: dict[str, str] = {
            canonicalize_name(d.name): d.version for d in python.distributions
        }
        found += [
            _contradiction(
                f"artifacts.pinned.{key}",
                f"the wheel of the installed {key} {installed.get(key, '(none)')}",
                f"{wheel.filename} ({wheel.name} {wheel.version})",
            )
            for key, wheel in self.artifacts.pinned.items()
            if not _wheel_of(wheel, key, installed.get(key))
        ]
        found += [
            _contradiction(f"artifacts.unresolved.{key}", "an installed distribution", "none")
            for key in self.artifacts.unresolved
            if key not in installed
        ]
        return found


def _contradiction(field: str, expected: str, found: str) -> Drift:
    return Drift(
        kind=DriftKind.CLAIM,
        subject=f"{OBSERVATIONS_FILE}: {field}",
        expected=expected,
        observed=found,
        why="the sealed observations contradict themselves",
    )


def _wheel_of(wheel: WheelArtifact, key: str, installed: str | None) -> bool:
    """`wheel` is named for the distribution `key` at its installed version, and its file
    name says the same."""
    try:
        name, version, _build, _tags = parse_wheel_filename(wheel.filename)
        named = (name, version) == (canonicalize_name(wheel.name), Version(wheel.version))
    except (InvalidWheelFilename, InvalidVersion):
        return False
    return named and canonicalize_name(wheel.name) == key and wheel.version == installed


def observe(manifest: Manifest) -> Observations:
    values, venv, problems = _values(manifest)
    base = manifest.resolve(".")
    python = None
    if venv is not None:
        try:
            python = python_observer.observe_python(manifest.python, venv, values)
        except ReproError as error:
            problems.append(_unobservable("python", error))
    return Observations(
        values=values,
        host=host_observer.observe_host(),
        models=tuple(
            model_observer.observe_model(m, Path(values[f"model.{m.role}"]), values)
            for m in manifest.models
        ),
        sources=tuple(source_observer.observe_source(s, base) for s in manifest.sources),
        python=python,
        unobservable=tuple(problems),
    )


def drifts(manifest: Manifest, observed: Observations) -> list[Drift]:
    """Every disagreement of this host with the manifest, host facts first."""
    found = [*observed.unobservable, *host_observer.compare(manifest.host, observed.host)]
    for model, model_facts in zip(manifest.models, observed.models, strict=True):
        found.extend(model_observer.compare(model, model_facts))
    for source, source_facts in zip(manifest.sources, observed.sources, strict=True):
        found.extend(source_observer.compare(source, source_facts))
    if observed.python is not None:
        base = manifest.resolve(".")
        locations = {
            s.name: placeholder_path(_normal(base / s.path), observed.values)
            for s in manifest.sources
        }
        found.extend(python_observer.compare(manifest.python, observed.python, locations))
    return found


def _values(manifest: Manifest) -> tuple[dict[str, str], Venv | None, list[Drift]]:
    """Placeholder values; without a venv, the lexical ones so every other fact still reads."""
    root = _normal(manifest.resolve(manifest.python.venv))
    problems: list[Drift] = []
    venv: Venv | None
    try:
        venv = Venv.at(root)
        values = venv_values(venv)
    except NotObservable as error:
        venv = None
        problems.append(_unobservable("python", error))
        version = manifest.python.interpreter
        values = {
            "python": str(root / "bin" / "python"),
            "venv": str(root),
            "site": str(root / "lib" / f"python{version}" / "site-packages"),
        }
    for model in manifest.models:
        values[f"model.{model.role}"] = str(model_directory(manifest, model))
    return values, venv, problems


def model_directory(manifest: Manifest, model: Model) -> Path:
    """Where `model` lives on this host: its path or hub snapshot against the manifest's
    directory, absolute and normalised (the value of `{model.<role>}`)."""
    return _normal(model.directory(manifest.resolve(".")))


def _unobservable(fact: str, error: ReproError) -> Drift:
    return Drift(
        kind=DriftKind.NOT_OBSERVABLE,
        subject=f"{fact}: {error.where}" if error.where else fact,
        expected=error.expected or "observable",
        observed=error.found or error.what,
        why=error.what,
    )


def _normal(path: Path) -> Path:
    return Path(os.path.normpath(path.absolute()))
