"""The in-toto Statement v1 of a bundle, with a SLSA provenance v1 predicate.

One subject per sealed file (every file of the bundle but statement.json and statement.dsse.json),
named by its path in the bundle, with its sha256. The predicate says only what repro knows:
the build type (a bundle made by `repro build`, or a replay's run sealed by `repro launch`, which
carries no launcher: it is evidence to verify, not a bundle to hand over), the bundle name and
the manifest it was built from (the path it was read from and its sha256, which equals
manifest.toml's), and which builder and version sealed it. It has no timestamps, so sealing the
same files with the same key gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import version
from typing import Annotated, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from repro_serving import DISTRIBUTION
from repro_serving.builder.canonical import canonical_json, parse_canonical
from repro_serving.builder.documents import validate_document
from repro_serving.builder.errors import BadInput
from repro_serving.builder.sealing.bundle import MANIFEST, is_sha256_hex, path_problem

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BuildType = Literal["https://repro.dev/buildtypes/bundle/v1", "https://repro.dev/buildtypes/run/v1"]
BUILD_TYPE: Final[BuildType] = "https://repro.dev/buildtypes/bundle/v1"
RUN_BUILD_TYPE: Final[BuildType] = "https://repro.dev/buildtypes/run/v1"
BUILDER_ID = "https://repro.dev/builder/v1"


def _sha256_hex(value: str) -> str:
    if not is_sha256_hex(value):
        raise ValueError("expected 64 lowercase hex digits")
    return value


def _bundle_path(value: str) -> str:
    problem = path_problem(value)
    if problem is not None:
        raise ValueError(f"not a path inside a bundle: {problem}")
    return value


Sha256Hex = Annotated[str, AfterValidator(_sha256_hex)]
BundlePath = Annotated[str, AfterValidator(_bundle_path)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Digest(_Frozen):
    sha256: Sha256Hex


class Subject(_Frozen):
    name: BundlePath
    digest: Digest


class ManifestParameter(_Frozen):
    path: str
    """Where the build read the manifest from, as it was named to `repro build`."""
    sha256: Sha256Hex


class ExternalParameters(_Frozen):
    bundle: str
    """The bundle's name: a bundle verifies only in a directory of this name."""
    manifest: ManifestParameter


class BuildDefinition(_Frozen):
    build_type: BuildType = Field(alias="buildType")
    external_parameters: ExternalParameters = Field(alias="externalParameters")


class Builder(_Frozen):
    id: Literal["https://repro.dev/builder/v1"]
    version: dict[str, str]


class RunDetails(_Frozen):
    builder: Builder


class Provenance(_Frozen):
    build_definition: BuildDefinition = Field(alias="buildDefinition")
    run_details: RunDetails = Field(alias="runDetails")


class Statement(_Frozen):
    type: Literal["https://in-toto.io/Statement/v1"] = Field(alias="_type")
    subject: tuple[Subject, ...]
    predicate_type: Literal["https://slsa.dev/provenance/v1"] = Field(alias="predicateType")
    predicate: Provenance

    @classmethod
    def from_json(cls, data: bytes, *, where: str) -> Statement:
        statement = validate_document(
            cls,
            parse_canonical(data, where=where),
            where=where,
            what="the statement",
            refusal="not a repro statement",
        )
        names = [subject.name for subject in statement.subject]
        if names != sorted(set(names)):
            raise BadInput(
                "the statement's subjects are not sorted by name, each once", where=where
            )
        return statement

    def to_json(self) -> bytes:
        return canonical_json(self.model_dump(mode="json", by_alias=True))

    @property
    def bundle_name(self) -> str:
        return self.predicate.build_definition.external_parameters.bundle

    @property
    def sealed_run(self) -> bool:
        """A replay's run directory, sealed by `repro launch`, rather than a bundle."""
        return self.predicate.build_definition.build_type == RUN_BUILD_TYPE

    @property
    def manifest(self) -> ManifestParameter:
        return self.predicate.build_definition.external_parameters.manifest

    def digests(self) -> dict[str, str]:
        """Sealed path to sha256."""
        return {subject.name: subject.digest.sha256 for subject in self.subject}


def repro_version() -> str:
    return version(DISTRIBUTION)


def statement_for(
    bundle_name: str,
    manifest_source: str,
    digests: Mapping[str, str],
    build_type: BuildType = BUILD_TYPE,
) -> Statement:
    """The statement sealing `digests` (path in the bundle to sha256, manifest.toml among them)."""
    return Statement(
        type=STATEMENT_TYPE,
        subject=tuple(
            Subject(name=name, digest=Digest(sha256=digests[name])) for name in sorted(digests)
        ),
        predicate_type=PREDICATE_TYPE,
        predicate=Provenance(
            build_definition=BuildDefinition(
                build_type=build_type,
                external_parameters=ExternalParameters(
                    bundle=bundle_name,
                    manifest=ManifestParameter(path=manifest_source, sha256=digests[MANIFEST]),
                ),
            ),
            run_details=RunDetails(
                builder=Builder(id=BUILDER_ID, version={"repro": repro_version()})
            ),
        ),
    )
