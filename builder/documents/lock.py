"""Lock v1: every fact a bundle pins, each with its evidence class.

`lock.json` is canonical JSON (`builder.canonical`) of a `Lock`. Every claim says how it is
known: `live` (observed by repro on the build host), `sealed` (recomputed offline from the
bundle's evidence by `repro verify`), `declared` (asserted by the manifest's author, not
checked). Paths are in placeholder form (`{site}/torch/lib/libc10.so`,
`{model.target}/config.json`), so the same bytes under another root verify and other bytes
never do. Host facts have one vocabulary, `HostFacts`, for built and imported locks alike: a
key means the same in every lock, and a fact a lock does not state is absent (never null, which
states "none"). This module owns the shapes, and the lock's JSON Schema (`schema_document`,
shipped as builder/schemas/lock.v1.json); builders and verifiers fill and read them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar, Final, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from repro_serving.builder.canonical import canonical_json, parse_canonical
from repro_serving.builder.documents import validate_document
from repro_serving.builder.documents.manifest import Host
from repro_serving.builder.errors import BadInput
from repro_serving.builder.schemadoc import schema_document as _schema_document

LOCK_SCHEMA: Final = "repro.lock/v1"
SCHEMA_FILE: Final = "lock.v1.json"
"""The lock's JSON Schema, shipped in builder/schemas/ (`schema_document` makes it)."""


class EvidenceClass(StrEnum):
    LIVE = "live"
    SEALED = "sealed"
    DECLARED = "declared"


class _Frozen(BaseModel):
    # Every field is written (`Lock.to_bytes`), so the schema requires each, defaults too.
    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )


class _Claim(_Frozen):
    evidence: EvidenceClass


class _OmitsEmpty(BaseModel):
    """A model some of whose fields are written only when they hold something: a lock written
    before they existed reads back as the same bytes, and the schema does not require them."""

    OMITTED_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_empty(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        document: dict[str, Any] = handler(self)
        for name in self.OMITTED_WHEN_EMPTY:
            if not getattr(self, name):
                del document[name]
        return document


class BundleClaim(_Frozen):
    name: str
    description: str
    manifest_sha256: str
    manifest_path: str
    """The manifest as `repro build` was given it: where its relative paths were anchored."""
    repro_version: str


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def _unstated() -> Any:
    """A fact's field: absent from the lock when not stated (no default shown in the schema)."""
    return Field(default=None, json_schema_extra=_no_default)


class _Stated(_Frozen):
    """Facts of which a lock holds exactly those stated: a field never set is absent from the
    JSON (not null), and a field set to null means "none" (no driver bound, no model name
    given). Two sets of facts are equal when they state the same facts with the same values."""

    # Not every field is written (the serializer drops unset ones): none is required.
    model_config = ConfigDict(json_schema_serialization_defaults_required=False)

    _NEVER_NULL: ClassVar[tuple[str, ...]] = ()
    """The fields for which null has no meaning: a fact the host always has."""

    @model_serializer(mode="wrap")
    def _stated_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        document: dict[str, Any] = handler(self)
        return {key: value for key, value in document.items() if key in self.model_fields_set}

    @model_validator(mode="after")
    def _no_null_where_none_has_no_meaning(self) -> Self:
        stated_null = [
            name
            for name in self._NEVER_NULL
            if name in self.model_fields_set and getattr(self, name) is None
        ]
        if stated_null:
            raise ValueError(
                f"{', '.join(stated_null)}: null, a fact that is stated or absent, never null"
            )
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self.model_dump(mode="json") == other.model_dump(mode="json")

    def __hash__(self) -> int:
        return hash(canonical_json(self.model_dump(mode="json")))


class AcceleratorFacts(_Stated):
    """One PCI accelerator (a display controller or processing accelerator of a compute
    vendor): as `repro build` observed it in sysfs (every field but `name`, null where the host
    has none), or as an imported record states it (only what it states)."""

    _NEVER_NULL: ClassVar[tuple[str, ...]] = ("address", "vendor_device", "pci_class", "name")

    address: str | SkipJsonSchema[None] = _unstated()
    """Its PCI address, domain:bus:device.function (`0000:23:00.0`)."""
    vendor_device: str | SkipJsonSchema[None] = _unstated()
    """PCI vendor and device ids in lowercase hex (`8086:e223`)."""
    pci_class: str | SkipJsonSchema[None] = _unstated()
    """Its PCI class code as sysfs gives it (`0x030000`)."""
    driver: str | None = _unstated()
    """The kernel driver bound to it; null: none is bound."""
    driver_version: str | None = _unstated()
    """That driver module's version; null: no driver, or its module states none."""
    name: str | SkipJsonSchema[None] = _unstated()
    """The product name a record gives (`Intel(R) Arc(TM) Pro B70 Graphics`); sysfs has none,
    so a built lock never states it."""

    @property
    def vendor(self) -> str | None:
        return None if self.vendor_device is None else self.vendor_device.partition(":")[0]


class HostFacts(_Stated):
    """The one vocabulary of host facts, for built and imported locks alike: a key means the
    same in every lock. A built lock states every fact `builder.observe.host` observes; an
    imported one states only what the record's identity states, and the rest is absent."""

    _NEVER_NULL: ClassVar[tuple[str, ...]] = (
        "arch",
        "os",
        "os_release",
        "kernel",
        "cpu_flags",
        "cpu_count",
        "accelerators",
    )

    arch: str | SkipJsonSchema[None] = _unstated()
    """The machine architecture, as `uname -m` names it (`x86_64`)."""
    os: str | SkipJsonSchema[None] = _unstated()
    """The operating system, as Python's `platform.system()` names it, lowercase (`linux`)."""
    os_release: dict[str, str] | SkipJsonSchema[None] = _unstated()
    """`/etc/os-release`, key to value; a record states its distribution's name alone, which is
    the `PRETTY_NAME` of that file (`Ubuntu 24.04.4 LTS`)."""
    kernel: str | SkipJsonSchema[None] = _unstated()
    """The kernel release, as `uname -r` gives it."""
    cpu_model: str | None = _unstated()
    """The first processor's model name in `/proc/cpuinfo`; null: it gives none."""
    cpu_flags: tuple[str, ...] | SkipJsonSchema[None] = _unstated()
    """The first processor's flags in `/proc/cpuinfo`, sorted."""
    cpu_count: int | SkipJsonSchema[None] = _unstated()
    """Logical CPUs."""
    memory_bytes: int | None = _unstated()
    """`MemTotal` of `/proc/meminfo`, in bytes; null: it gives none."""
    accelerators: tuple[AcceleratorFacts, ...] | SkipJsonSchema[None] = _unstated()
    """Every PCI accelerator, in address order; empty: none."""


class HostClaim(_Claim):
    facts: HostFacts
    """The host the record ran on: observed by `repro build` (`live`), or as an imported
    record's identity states it (`declared`)."""
    enforced: Host = Host()
    """The manifest's `[host]`: the facts it enforces, and those it only records."""


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


class JitFiles(_Frozen):
    """The files of one name a process compiled at run time and mapped (Triton launchers, an
    Inductor kernel), counted in the kernel set's JIT place they lie in. Each one's path and
    bytes are in the sealed audit of its start, but neither is the same on two fresh starts:
    the path holds the start's own HOME and the runtime's cache keys, and Triton's cuda_utils
    built twice are not the same bytes."""

    place: str
    """The kernel set's JIT glob they matched (`{home}/.triton/cache/**`)."""
    name: str
    """Their file name."""
    files: int
    """How many distinct files of that name."""


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


class NativeClaim(_Claim, _OmitsEmpty):
    kernel_sets: tuple[str, ...]
    modules: dict[str, str]
    """Declared extension module → the file a process mapped it from."""
    roles: dict[str, tuple[MappedObject, ...]]
    """Process role → every ELF a process of that role mapped, in placeholder form, but for
    what it compiled at run time (`jit`)."""
    jit: dict[str, tuple[JitFiles, ...]] = Field(default_factory=dict)
    """Process role → every file a process of that role compiled at run time and mapped;
    absent where none did."""
    OMITTED_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("jit",)
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


class NodeClaim(_Claim, _OmitsEmpty):
    """One node of a stack served across nodes (`[[node]]`), as its Ray actor observed it and
    its rank's live audit of the first start found it."""

    rank: int
    address: str
    """The address its Ray node was started with."""
    hostname: str
    host: HostFacts
    argv: tuple[str, ...]
    """What the rank started, as `launch.argv`: the manifest's, placeholders unexpanded."""
    env: dict[str, str]
    """The manifest's variables of the rank's environment (beside PATH, HOME and TMPDIR)."""
    roles: dict[str, tuple[MappedObject, ...]]
    """Every ELF each role's processes mapped on that node, as `native.roles`."""
    jit: dict[str, tuple[JitFiles, ...]] = Field(default_factory=dict)
    """What they compiled at run time and mapped, as `native.jit`."""
    OMITTED_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("jit",)
    environments: dict[str, dict[str, str]] = Field(default_factory=dict)
    dispatch: tuple[DispatchClaim, ...] = ()
    """Each choice of code on that node, from its host's facts, its audit and its probes."""


class Lock(_Frozen, _OmitsEmpty):
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
    nodes: tuple[NodeClaim, ...] = ()
    """Every node by rank, for a stack served across nodes; absent (never empty): one host,
    `host` and `native` alone."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        populate_by_name=True,
        json_schema_serialization_defaults_required=True,
    )

    OMITTED_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("nodes",)
    """Sections written only when they hold something (the schema does not require them)."""

    def sections(self) -> tuple[str, ...]:
        """The sections the lock writes: `nodes` only for a stack served across nodes."""
        empty = {name for name in self.OMITTED_WHEN_EMPTY if not getattr(self, name)}
        return tuple(name for name in type(self).model_fields if name not in empty)

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


def schema_document() -> str:
    """The text of the lock's JSON Schema (`SCHEMA_FILE`), from the models above."""
    return _schema_document(Lock, title=LOCK_SCHEMA)
