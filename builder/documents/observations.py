"""What a build (or a replay's preflight) observed of a host, as sealed in
`evidence/observations.json`, and `drifts`, every way it disagrees with a manifest: the one
judgement `repro build`, `repro verify --host` and the preflight of `repro launch` share.
Observed by `builder.observations`."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict

from repro_serving.builder.canonical import canonical_json
from repro_serving.builder.documents import parse_document
from repro_serving.builder.documents.host import HostFacts
from repro_serving.builder.documents.host import compare as compare_host
from repro_serving.builder.documents.lock import HostFacts as HostFactsClaim
from repro_serving.builder.documents.lock import WheelArtifact
from repro_serving.builder.documents.manifest import Manifest, normal_path, placeholder_path
from repro_serving.builder.documents.models import ModelFacts
from repro_serving.builder.documents.models import compare as compare_model
from repro_serving.builder.documents.python import PythonFacts
from repro_serving.builder.documents.python import compare as compare_python
from repro_serving.builder.documents.sources import SourceFacts
from repro_serving.builder.documents.sources import compare as compare_source
from repro_serving.builder.drift import Drift, DriftKind


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


def drifts(manifest: Manifest, observed: Observations) -> list[Drift]:
    """Every disagreement of this host with the manifest, host facts first."""
    found = [*observed.unobservable, *compare_host(manifest.host, observed.host)]
    for model, model_facts in zip(manifest.models, observed.models, strict=True):
        found.extend(compare_model(model, model_facts))
    for source, source_facts in zip(manifest.sources, observed.sources, strict=True):
        found.extend(compare_source(source, source_facts))
    if observed.python is not None:
        base = manifest.resolve(".")
        locations = {
            s.name: placeholder_path(normal_path(base / s.path), observed.values)
            for s in manifest.sources
        }
        found.extend(compare_python(manifest.python, observed.python, locations))
    return found
