"""Lock v1: every fact a bundle pins, each with its evidence class.

`lock.json` is canonical JSON (`builder.canonical`) of a `Lock`. Every claim says how it is
known: `live` (observed by repro on the build host), `sealed` (recomputed offline from the
bundle's evidence by `repro verify`), `declared` (asserted by the manifest's author, not
checked). Paths are in placeholder form (`{site}/torch/lib/libc10.so`,
`{model.target}/config.json`), so the same bytes under another root verify and other bytes
never do. This module owns the shapes; builders and verifiers fill and read them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from repro_serving.builder.canonical import canonical_json, parse_canonical
from repro_serving.builder.documents import validate_document
from repro_serving.builder.errors import BadInput

LOCK_SCHEMA: Final = "repro.lock/v1"


class EvidenceClass(StrEnum):
    LIVE = "live"
    SEALED = "sealed"
    DECLARED = "declared"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Claim(_Frozen):
    evidence: EvidenceClass


class BundleClaim(_Frozen):
    name: str
    description: str
    manifest_sha256: str
    manifest_path: str
    """The manifest as `repro build` was given it: where its relative paths were anchored."""
    repro_version: str


class HostClaim(_Claim):
    facts: dict[str, Any]
    """The host observer's facts at build time (`builder.observe.host.HostFacts.to_json`)."""
    enforced: dict[str, Any] = Field(default_factory=dict)
    """The facts the manifest enforces, as it states them."""


class ModelClaim(_Claim):
    role: str
    repo: str
    revision: str
    location: str
    files: dict[str, str]
    """Release file name → sha256."""


class SourceClaim(_Claim):
    name: str
    location: str
    commit: str
    clean: bool
    patches: dict[str, str] = Field(default_factory=dict)


class WheelArtifact(_Frozen):
    """The wheel a distribution was installed from (`builder.observe.artifacts`)."""

    name: str
    version: str
    filename: str
    sha256: str


class PythonClaim(_Claim):
    interpreter: str
    packages: dict[str, str]
    """Distribution (PEP 503 name) → exact installed version."""
    record_checked: tuple[str, ...] = ()
    """Distributions whose every installed file matched its RECORD hash at build time."""
    artifacts: dict[str, WheelArtifact] = Field(default_factory=dict)
    """Normalised distribution name → the wheel it was installed from, what restore installs."""
    unrestorable: dict[str, str] = Field(default_factory=dict)
    """Normalised distribution name → why no artifact is pinned for it."""


class MappedObject(_Frozen):
    path: str
    sha256: str | None
    rule: str
    reason: str
    requester: str | None = None
    """The object whose need the loader resolved to this one (a dependency), placeholder form."""


class DispatchClaim(_Frozen):
    """The code a host capability selected when the record ran (`builder.native.dispatch`)."""

    name: str
    """What was chosen: a declared module (`vllm._C`) or a code path's owner."""
    kernel_set: str
    """The kernel set whose rule says how the stack chooses."""
    variant: str
    """The variant that was live: the module mapped, or the code path the stack reported."""
    facts: dict[str, bool | str]
    """Only the facts that select code (`cpu:<flag>`, `arch`, `env:<VAR>`), as they were."""
    path: str | None = None
    """For a module: the file mapped, in placeholder form."""
    sha256: str | None = None


class NativeClaim(_Claim):
    kernel_sets: tuple[str, ...]
    modules: dict[str, str]
    """Declared extension module → the file a process mapped it from."""
    roles: dict[str, tuple[MappedObject, ...]]
    """Process role → every ELF a process of that role mapped, in placeholder form."""
    environments: dict[str, dict[str, str]] = Field(default_factory=dict)
    """Process role → the loader's variables it started with (LD_LIBRARY_PATH, LD_PRELOAD),
    each path element in placeholder form: vLLM and its imports set some for their children."""
    dispatch: tuple[DispatchClaim, ...] = ()
    """Each run-time choice of code the kernel sets declare, as it was made."""


class LaunchClaim(_Claim):
    profile: str
    argv: tuple[str, ...]
    env: dict[str, str]


class OracleRowClaim(_Frozen):
    prompt_id: str
    prompt_index: int
    token_ids_sha256: str
    text_sha256: str
    completion_tokens: int


class ThroughputClaim(_Frozen):
    tokens: int
    conventional_median: float
    """Median over rows of (N-1)/span."""
    historical_median: float | None = None
    """Median over rows of N/span: the historical, mislabelled convention, only as a label."""


class OracleClaim(_Claim):
    suite: str
    suite_sha256: str
    teacher_sha256: str
    rows: tuple[OracleRowClaim, ...]
    throughput: ThroughputClaim | None = None


class RecordClaim(_Claim):
    """What an imported record's own files prove, recomputed by repro: exactness against its
    teacher, cold prompts, log markers per rank, speculative-decoding counters, cleanup and
    idle snapshots, and the verdict of each of the manifest's gates over them."""

    suite: str
    rows: int
    exact_token_ids: int
    exact_text_sha256: int
    cached_tokens: tuple[int | None, ...]
    markers: dict[str, dict[str, int]]
    """Marker name → rank label (or the marker's name, counted over the whole log) → lines."""
    spec_decode_drafts: float | None
    spec_decode_draft_tokens: float | None
    spec_decode_accepted: float | None
    spec_decode_accepted_per_position: tuple[float, ...]
    prefix_cache_hits: float | None
    generation_tokens: float | None
    cleanup: dict[str, int]
    idle_prestart: int
    idle_poststop: int
    idle_all_passed: bool
    verdicts: dict[str, str]
    """Gate → pass, fail or n/a."""


class Lock(_Frozen):
    schema_: Literal["repro.lock/v1"] = Field(default=LOCK_SCHEMA, alias="schema")
    bundle: BundleClaim
    host: HostClaim
    models: tuple[ModelClaim, ...]
    sources: tuple[SourceClaim, ...]
    python: PythonClaim
    native: NativeClaim
    launch: LaunchClaim
    oracle: OracleClaim
    record: RecordClaim | None = None
    """Set for a bundle sealed from imported evidence (`[evidence]`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str) -> Lock:
        """A lock in its one form: canonical JSON of exactly what the model writes, so two
        different byte strings never carry the same lock (a key left at its default omitted,
        say, is refused rather than read as the same claim)."""
        document = parse_canonical(data, where=where)
        lock = validate_document(
            cls,
            document,
            where=where,
            what="the lock",
            refusal="the lock does not follow repro.lock/v1",
        )
        if lock.to_bytes() != data:
            raise BadInput(
                "the lock is not in its one form",
                where=where,
                expected="canonical JSON of every field of repro.lock/v1, as repro writes it",
                found="other bytes for the same values (a field omitted or added at its default)",
            )
        return lock

    def to_bytes(self) -> bytes:
        return canonical_json(self.model_dump(mode="json", by_alias=True))
