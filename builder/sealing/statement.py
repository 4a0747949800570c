"""The in-toto Statements v1 repro signs: SLSA provenance v1 of a bundle or sealed run, and the
in-toto test-result v0.1 of a sealed run's gates.

Provenance (`Statement`, in statement.json): one subject per sealed file (every file of the
bundle but the seal files, `builder.sealing.bundle.SEAL_FILES`), named by its path in the
bundle, with its sha256, and a typed document with its format tag in `annotations`
(`builder.documents.formats`). The predicate says only what repro knows:
- `buildDefinition.buildType`: `BUILD_TYPE` (a bundle made by `repro build`) or
  `RUN_BUILD_TYPE` (a replay's run sealed by `repro launch`, which carries no launcher: evidence
  to verify, not a bundle to hand over);
- `externalParameters`: the bundle name and the manifest it was built from (the path it was read
  from and its sha256, which equals manifest.toml's);
- `resolvedDependencies` (`resolved_dependencies`): every file of every locked model, as
  `pkg:huggingface/<owner>/<name>@<revision>#<file>` with its sha256; every locked wheel as
  `pkg:pypi/<name>@<version>`, named by its file name, with its sha256; every locked
  distribution without a wheel (an imported record's) as its purl alone; every source by its
  name with its `gitCommit`, and each of its patches by its path with its sha256;
- `runDetails.builder`: `BUILDER_ID` and the version of repro that sealed.
No timestamps: sealing the same files with the same key gives the same bytes.

Gate results (`GateResultsStatement`, signed in test-result.dsse.json of a sealed run): the same
subjects; `result` PASSED when at least one gate passed and none failed, FAILED otherwise;
`passedTests` and `failedTests` the gates by name (`n/a` verdicts, gates that judged nothing,
are in neither), `warnedTests` empty; `configuration` what the gates were configured by:
manifest.toml, every file under oracle/ (suite, teacher) and kernels/ (kernel sets and their
markers), each by its bundle path and sha256.

The build types and the builder are documents shipped in the repro-serving distribution
(docs/attestation/ of the source tree, `repro_serving/attestation/` once installed), named by a
package URL with a subpath: `pkg:pypi/repro-serving#repro_serving/attestation/<document>`.
Each names its major version in its file name; the version of repro that sealed is in
`runDetails.builder.version`, and a bundle carries that very release in tools/.

Reading follows in-toto's parsing rules (unrecognised fields are ignored; unset, null and empty
alike) and is strict where a field carries meaning:
- refused: `_type` other than in-toto Statement v1; a `predicateType` other than the
  statement's; no subject; a subject without a bundle path for `name`, or whose digest set is not
  exactly {sha256} (a digest repro does not recompute would be vouched for unchecked); two
  subjects of one name; a `buildType` or `builder.id` other than repro's;
  `externalParameters` missing a field, or holding any field it does not define, at any depth
  (SLSA: verifiers reject unrecognised external parameters); a `result` other than PASSED,
  WARNED or FAILED; a test name or configuration entry that is not of its type;
- ignored: every other field, such as `runDetails.metadata`, `runDetails.byproducts`,
  `internalParameters`, `builder.builderDependencies`, a resource descriptor's
  `downloadLocation`, `mediaType`, `annotations` or `content` (but a subject's format tag,
  which `builder.verify` compares with what this repro reads), a test result's `url`.
Any JSON formatting is read (bounded as `readers.parse_json` bounds every document); repro
writes canonical JSON. What the dependencies and gate results must hold is recomputed by
`builder.verify` from the sealed lock and gate evidence, never taken from here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Annotated, Final, Literal, Self
from urllib.parse import quote

from packaging.utils import canonicalize_name
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, field_validator

from repro_serving import DISTRIBUTION
from repro_serving.builder.canonical import canonical_json
from repro_serving.builder.documents import validate_document
from repro_serving.builder.documents.formats import ANNOTATION, tags
from repro_serving.builder.documents.lock import Lock
from repro_serving.builder.errors import BadInput
from repro_serving.builder.hashing import is_sha256_hex
from repro_serving.builder.own import release
from repro_serving.builder.readers import parse_json
from repro_serving.builder.sealing.bundle import (
    KERNEL_SETS_DIR,
    MANIFEST,
    ORACLE_DIR,
    path_problem,
)

STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE: Final = "https://slsa.dev/provenance/v1"
TEST_RESULT_TYPE: Final = "https://in-toto.io/attestation/test-result/v0.1"
DOCUMENTS: Final = f"pkg:pypi/{DISTRIBUTION}#repro_serving/attestation/"
"""Where repro's attestation documents are: a subpath of the repro-serving distribution."""
BuildType = Literal[
    "pkg:pypi/repro-serving#repro_serving/attestation/build-type-bundle-v1.md",
    "pkg:pypi/repro-serving#repro_serving/attestation/build-type-run-v1.md",
]
BUILD_TYPE: Final[BuildType] = (
    "pkg:pypi/repro-serving#repro_serving/attestation/build-type-bundle-v1.md"
)
RUN_BUILD_TYPE: Final[BuildType] = (
    "pkg:pypi/repro-serving#repro_serving/attestation/build-type-run-v1.md"
)
BuilderId = Literal["pkg:pypi/repro-serving#repro_serving/attestation/builder-v1.md"]
BUILDER_ID: Final[BuilderId] = "pkg:pypi/repro-serving#repro_serving/attestation/builder-v1.md"
Result = Literal["PASSED", "WARNED", "FAILED"]


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


class _Read(BaseModel):
    """A part of an attestation a consumer reads: unrecognised fields are ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


class _Exact(BaseModel):
    """A part that carries meaning in every field: an unrecognised field is refused."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


def _empty_if_null(value: object) -> object:
    return () if value is None else value


class Digest(_Exact):
    sha256: Sha256Hex


class Subject(_Read):
    name: BundlePath
    digest: Digest
    annotations: dict[str, JsonValue] | None = None
    """in-toto's free-form annotations; repro writes a typed document's format tag in them
    (`builder.documents.formats`)."""

    @property
    def format_tag(self) -> str | None:
        """The format tag the subject carries; a value that is not text is shown as text, so
        that it is refused as another tag."""
        if self.annotations is None or ANNOTATION not in self.annotations:
            return None
        value = self.annotations[ANNOTATION]
        return value if isinstance(value, str) else repr(value)


class ResourceDescriptor(_Read):
    """An in-toto ResourceDescriptor v1, as far as repro reads it: `name`, `uri`, `digest`."""

    name: str | None = None
    uri: str | None = None
    digest: dict[str, str] | None = None

    @field_validator("name", "uri", "digest", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value in ("", {}) else value

    @property
    def label(self) -> str:
        """How a person finds the entry: its name and its URI."""
        parts = [part for part in (self.name, self.uri and f"({self.uri})") if part]
        return " ".join(parts) or "an entry without name or URI"

    def digest_text(self) -> str:
        found = sorted((self.digest or {}).items())
        return ", ".join(f"{algorithm} {value}" for algorithm, value in found) or "no digest"


class ManifestParameter(_Exact):
    path: str
    """Where the build read the manifest from, as it was named to `repro build`."""
    sha256: Sha256Hex


class ExternalParameters(_Exact):
    bundle: str
    """The bundle's name: a bundle verifies only in a directory of this name."""
    manifest: ManifestParameter


class BuildDefinition(_Read):
    build_type: BuildType = Field(alias="buildType")
    external_parameters: ExternalParameters = Field(alias="externalParameters")
    resolved_dependencies: tuple[ResourceDescriptor, ...] = Field(
        default=(), alias="resolvedDependencies"
    )

    _null_dependencies = field_validator("resolved_dependencies", mode="before")(_empty_if_null)


class Builder(_Read):
    id: BuilderId
    version: dict[str, str] = Field(default_factory=dict)

    @field_validator("version", mode="before")
    @classmethod
    def _null_version(cls, value: object) -> object:
        return {} if value is None else value


class RunDetails(_Read):
    builder: Builder


class Provenance(_Read):
    build_definition: BuildDefinition = Field(alias="buildDefinition")
    run_details: RunDetails = Field(alias="runDetails")


class GateResults(_Read):
    """The in-toto test-result v0.1 predicate."""

    result: Result
    configuration: tuple[ResourceDescriptor, ...]
    passed_tests: tuple[str, ...] = Field(default=(), alias="passedTests")
    warned_tests: tuple[str, ...] = Field(default=(), alias="warnedTests")
    failed_tests: tuple[str, ...] = Field(default=(), alias="failedTests")

    _null_lists = field_validator(
        "configuration", "passed_tests", "warned_tests", "failed_tests", mode="before"
    )(_empty_if_null)


class GateOutcome(_Exact):
    """What a sealed run's gates gave, by gate name: what its test-result statement says."""

    passed: tuple[str, ...]
    failed: tuple[str, ...]


class _Statement(_Read):
    type: Literal["https://in-toto.io/Statement/v1"] = Field(alias="_type")
    subject: tuple[Subject, ...] = Field(min_length=1)

    @classmethod
    def _read(cls, data: bytes, *, where: str, what: str) -> Self:
        statement = validate_document(
            cls,
            parse_json(data, where=where),
            where=where,
            what=what,
            refusal=f"not a repro {what.removeprefix('the ')}",
        )
        names = [subject.name for subject in statement.subject]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise BadInput(
                f"{what} names a subject twice",
                where=where,
                expected="each sealed file once",
                found=", ".join(twice),
            )
        return statement

    def to_json(self) -> bytes:
        return canonical_json(self.model_dump(mode="json", by_alias=True, exclude_none=True))

    def digests(self) -> dict[str, str]:
        """Sealed path to sha256."""
        return {subject.name: subject.digest.sha256 for subject in self.subject}

    def format_tags(self) -> dict[str, str | None]:
        """Sealed path to the format tag its subject carries (None for none)."""
        return {subject.name: subject.format_tag for subject in self.subject}


class Statement(_Statement):
    """The provenance of a bundle or sealed run (statement.json)."""

    predicate_type: Literal["https://slsa.dev/provenance/v1"] = Field(alias="predicateType")
    predicate: Provenance

    @classmethod
    def from_json(cls, data: bytes, *, where: str) -> Statement:
        return cls._read(data, where=where, what="the statement")

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

    @property
    def dependencies(self) -> tuple[ResourceDescriptor, ...]:
        return self.predicate.build_definition.resolved_dependencies

    @property
    def repro_version(self) -> str | None:
        """The version of repro the builder says sealed, if it says."""
        return self.predicate.run_details.builder.version.get("repro")


class GateResultsStatement(_Statement):
    """The test-result statement of a sealed run's gates (test-result.dsse.json)."""

    predicate_type: Literal["https://in-toto.io/attestation/test-result/v0.1"] = Field(
        alias="predicateType"
    )
    predicate: GateResults

    @classmethod
    def from_json(cls, data: bytes, *, where: str) -> GateResultsStatement:
        return cls._read(data, where=where, what="the gate results statement")


def repro_version() -> str:
    """The version of the repro that runs, labelled with its files' digest (`observe.release`)."""
    return release.repro_version()


def _subjects(digests: Mapping[str, str]) -> tuple[Subject, ...]:
    """One subject a sealed file, a typed document's with its format tag."""
    tagged = tags(digests)
    return tuple(
        Subject(
            name=name,
            digest=Digest(sha256=digests[name]),
            annotations={ANNOTATION: tagged[name]} if name in tagged else None,
        )
        for name in sorted(digests)
    )


def statement_for(
    bundle_name: str,
    manifest_source: str,
    digests: Mapping[str, str],
    build_type: BuildType = BUILD_TYPE,
    dependencies: Iterable[ResourceDescriptor] = (),
) -> Statement:
    """The statement sealing `digests` (path in the bundle to sha256, manifest.toml among
    them), whose build resolved `dependencies` (`resolved_dependencies` of its lock)."""
    return Statement(
        type=STATEMENT_TYPE,
        subject=_subjects(digests),
        predicate_type=PREDICATE_TYPE,
        predicate=Provenance(
            build_definition=BuildDefinition(
                build_type=build_type,
                external_parameters=ExternalParameters(
                    bundle=bundle_name,
                    manifest=ManifestParameter(path=manifest_source, sha256=digests[MANIFEST]),
                ),
                resolved_dependencies=tuple(dependencies),
            ),
            run_details=RunDetails(
                builder=Builder(id=BUILDER_ID, version={"repro": repro_version()})
            ),
        ),
    )


# --- resolvedDependencies -----------------------------------------------------------------------


def _purl(text: str) -> str:
    """A purl component percent-encoded: letters, digits, '.', '-', '_', '~' and ':' stay."""
    return quote(text, safe=":")


def _segments(path: str) -> str:
    return "/".join(_purl(segment) for segment in path.split("/"))


def model_file_uri(repo: str, revision: str, file: str) -> str:
    """The purl of one release file of a model at its revision (purl type `huggingface`:
    namespace and name as the repository id spells them, the revision lowercased)."""
    return f"pkg:huggingface/{_segments(repo)}@{_purl(revision.lower())}#{_segments(file)}"


def pypi_uri(name: str, release: str) -> str:
    """The purl of a Python distribution at its version (type `pypi`: lowercase, '-' for '_')."""
    return f"pkg:pypi/{_purl(name.lower().replace('_', '-'))}@{_purl(release)}"


def resolved_dependencies(lock: Lock) -> tuple[ResourceDescriptor, ...]:
    """Every input the lock pins by digest, as resource descriptors, in a fixed order: model
    files, wheels, distributions without a wheel, sources and their patches."""
    models = [
        ResourceDescriptor(
            name=file,
            uri=model_file_uri(model.repo, model.revision, file),
            digest={"sha256": sha256},
        )
        for model in lock.models
        for file, sha256 in sorted(model.files.items())
    ]
    artifacts = lock.python.artifacts
    wheels = [
        ResourceDescriptor(
            name=wheel.filename,
            uri=pypi_uri(wheel.name, wheel.version),
            digest={"sha256": wheel.sha256},
        )
        for _, wheel in sorted(artifacts.items())
    ]
    wheeled = {canonicalize_name(name) for name in artifacts}
    bare = [
        ResourceDescriptor(uri=pypi_uri(name, release))
        for name, release in sorted(lock.python.packages.items())
        if canonicalize_name(name) not in wheeled
    ]
    sources = [
        descriptor
        for source in lock.sources
        for descriptor in (
            ResourceDescriptor(name=source.name, digest={"gitCommit": source.commit}),
            *(
                ResourceDescriptor(name=path, digest={"sha256": sha256})
                for path, sha256 in sorted(source.patches.items())
            ),
        )
    ]
    return (*models, *wheels, *bare, *sources)


def descriptor_differences(
    recomputed: Iterable[ResourceDescriptor], stated: Iterable[ResourceDescriptor], *, what: str
) -> list[str]:
    """Each entry (by name and URI) whose digests differ between what was recomputed and what a
    statement states, or that only one of them lists; empty when they hold the same entries."""

    def grouped(entries: Iterable[ResourceDescriptor]) -> dict[tuple[str, str], list[str]]:
        found: dict[tuple[str, str], list[str]] = defaultdict(list)
        for entry in entries:
            found[(entry.name or "", entry.uri or "")].append(entry.digest_text())
        return {key: sorted(digests) for key, digests in found.items()}

    ours, theirs = grouped(recomputed), grouped(stated)
    problems = []
    for key in sorted(ours.keys() | theirs.keys()):
        if ours.get(key) != theirs.get(key):
            label = ResourceDescriptor(name=key[0], uri=key[1]).label
            problems.append(
                f"{label}: the statement lists {_listed(theirs.get(key))}, "
                f"{what} {_listed(ours.get(key))}"
            )
    return problems


def _listed(digests: list[str] | None) -> str:
    return " and ".join(digests) if digests else "nothing"


# --- gate results -------------------------------------------------------------------------------


def configuration(digests: Mapping[str, str]) -> tuple[ResourceDescriptor, ...]:
    """What a run's gates were configured by, among the sealed files: the manifest, the oracle
    (suite and teacher) and the kernel sets."""
    return tuple(
        ResourceDescriptor(name=name, digest={"sha256": digests[name]})
        for name in sorted(digests)
        if name == MANIFEST or name.startswith((f"{ORACLE_DIR}/", f"{KERNEL_SETS_DIR}/"))
    )


def gate_results_statement(
    digests: Mapping[str, str], outcome: GateOutcome
) -> GateResultsStatement:
    """The test-result statement of a sealed run whose files are `digests` and whose gates gave
    `outcome`."""
    result: Result = "PASSED" if outcome.passed and not outcome.failed else "FAILED"
    return GateResultsStatement(
        type=STATEMENT_TYPE,
        subject=_subjects(digests),
        predicate_type=TEST_RESULT_TYPE,
        predicate=GateResults(
            result=result,
            configuration=configuration(digests),
            passed_tests=outcome.passed,
            warned_tests=(),
            failed_tests=outcome.failed,
        ),
    )
