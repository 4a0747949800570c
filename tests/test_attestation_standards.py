"""repro's attestations speak their standards: in-toto Statement v1 with SLSA provenance v1 and
the in-toto test-result predicate, in DSSE envelopes.

Three real sealed directories, made once per module: the Laguna record built again from its
manifest and evidence (an imported record: model files, distributions without wheels, source
commits, all in its lock), a run sealed from the committed tiny-cpu bundle's evidence (149
wheels in its lock, gate evidence to recompute), and the small test bundle of `bundle_assets`.
Every statement repro writes is checked by the in-toto-attestation reference package; statements
other producers may write (other formatting, other key ids, URL-safe base64, SLSA's optional
fields) are accepted; what carries meaning is refused or recomputed: an unknown external
parameter, a dependency or a gate result other than the sealed lock and evidence give.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import shutil
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from bundle_assets import (
    EXAMPLE_KEY,
    REPO_ROOT,
    as_its_sealer,
    example_key,
    example_trust,
    seal_example,
)
from cryptography.hazmat.primitives import serialization
from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
from in_toto_attestation.v1 import resource_descriptor_pb2, statement_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor as ReferenceDescriptor
from in_toto_attestation.v1.statement import Statement as ReferenceStatement
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.signer import CryptoSigner, SSlibKey  # type: ignore[attr-defined]

import repro_serving
from repro_serving.builder.build import build
from repro_serving.builder.documents.lock import Lock
from repro_serving.builder.drift import DriftKind
from repro_serving.builder.sealing import bundle, dsse
from repro_serving.builder.sealing.bundle import ENVELOPE, STATEMENT, TEST_RESULT_ENVELOPE
from repro_serving.builder.sealing.integrity import verify_bundle
from repro_serving.builder.sealing.keys import SigningKey
from repro_serving.builder.sealing.seal import BundleContent, seal
from repro_serving.builder.sealing.statement import (
    BUILD_TYPE,
    BUILDER_ID,
    DOCUMENTS,
    PREDICATE_TYPE,
    RUN_BUILD_TYPE,
    TEST_RESULT_TYPE,
    GateResultsStatement,
    Statement,
    resolved_dependencies,
)
from repro_serving.builder.verify import (
    JudgedBundle,
    VerifyReport,
    gate_outcome,
    recompute_verdicts,
    verify,
)

LAGUNA_MANIFEST = REPO_ROOT / "manifests" / "laguna-102tps.toml"
TINY = REPO_ROOT / "repro" / "tiny-cpu"
DEPENDENCIES_CLAIM = "statement.json = the sealed lock"
GATES_CLAIM = "test-result.dsse.json = the gates recomputed"
HANDOFF = ("tools", bundle.LAUNCHER, bundle.README)
DOCS = REPO_ROOT / "docs" / "attestation"


# --- the sealed directories ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def laguna(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Laguna record built again by `repro build` from its manifest and evidence."""
    parent = tmp_path_factory.mktemp("laguna")
    return build(LAGUNA_MANIFEST, example_key(), parent, parent / "work").sealed.path


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed tiny-cpu bundle's evidence sealed as `repro launch` seals a run: its lock
    in the one form this repro writes, its gates recomputed from that evidence."""
    parent = tmp_path_factory.mktemp("tiny-run")
    staging = parent / "staging" / "tiny-cpu-run"
    shutil.copytree(TINY, staging, ignore=shutil.ignore_patterns(*HANDOFF, *bundle.SEAL_FILES))
    lock = Lock.model_validate_json((staging / bundle.LOCK).read_bytes())
    (staging / bundle.LOCK).write_bytes(lock.to_bytes())
    verdicts = recompute_verdicts(JudgedBundle.read(staging))

    def files(directory: str) -> dict[str, Path]:
        root = staging / directory
        return {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}

    content = BundleContent(
        name=staging.name,
        manifest=staging / bundle.MANIFEST,
        manifest_source="repro/tiny-cpu/manifest.toml",
        lock=lock.model_dump(mode="json", by_alias=True),
        oracle=files(bundle.ORACLE_DIR),
        evidence=files(bundle.EVIDENCE_DIR),
        kernels=files(bundle.KERNEL_SETS_DIR),
        run=True,
        dependencies=resolved_dependencies(lock),
        gates=gate_outcome(verdicts),
    )
    (parent / "runs").mkdir()
    with as_its_sealer(staging):
        return seal(content, example_key(), parent / "runs").path


@pytest.fixture
def copy_of(tmp_path: Path) -> Callable[[Path], Path]:
    """A copy of a sealed directory under its own name, to tamper with."""

    def copied(source: Path) -> Path:
        target = tmp_path / "copy" / source.name
        shutil.copytree(source, target)
        return target

    return copied


def check(report: VerifyReport, claim: str) -> tuple[bool, str]:
    (found,) = [c for c in report.checks if c.claim == claim]
    return found.ok, found.detail


def payload(directory: Path, envelope: str = ENVELOPE) -> bytes:
    read = dsse.Envelope.from_json((directory / envelope).read_bytes(), where=envelope)
    return dsse.verify(read, example_trust(), where=envelope).payload


def resign(directory: Path, document: object, envelope: str = ENVELOPE) -> None:
    """Sign `document` as canonical JSON with the example key (public: anyone can)."""
    data = (json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n").encode()
    if envelope == ENVELOPE:
        (directory / STATEMENT).write_bytes(data)
    (directory / envelope).write_bytes(dsse.sign(data, example_key()).to_json())


@contextmanager
def resigned_dependencies(directory: Path) -> Iterator[list[dict[str, Any]]]:
    """The resolved dependencies the statement of `directory` lists, to change in the block;
    the statement signed again after it."""
    document = json.loads(payload(directory))
    yield document["predicate"]["buildDefinition"]["resolvedDependencies"]
    resign(directory, document)


def signed_by_securesystemslib(data: bytes, keyid: str) -> dict[str, Any]:
    private = serialization.load_pem_private_key(EXAMPLE_KEY.read_bytes(), password=None)
    public = serialization.load_pem_public_key(example_key().public.pem())
    signer = CryptoSigner(private, SSlibKey.from_crypto(public, keyid=keyid))
    envelope = SslibEnvelope(data, dsse.PAYLOAD_TYPE, {})
    envelope.sign(signer)
    document: dict[str, Any] = envelope.to_dict()
    return document


# --- the in-toto-attestation reference package ------------------------------------------------

_HEX_LENGTHS = {"sha256": (64,), "gitCommit": (40, 64)}
"""Hex lengths of the digest algorithms repro writes, as the reference Go validator checks them
(go/v1/resource_descriptor.go); the Python package checks only that a descriptor names something."""


def _reference_descriptor(descriptor: resource_descriptor_pb2.ResourceDescriptor) -> None:
    ReferenceDescriptor.copy_from_pb(descriptor).validate()
    for algorithm, value in descriptor.digest.items():
        if algorithm in _HEX_LENGTHS:
            assert re.fullmatch(r"[0-9a-f]+", value) and len(value) in _HEX_LENGTHS[algorithm]


def reference_validate(data: bytes) -> str:
    """The statement parsed by the reference package into its protobuf Statement (an unknown
    field refused) and validated, its predicate parsed into the predicate's protobuf message,
    with the reference validators' checks of it; the predicate type."""
    parsed = json_format.Parse(data, statement_pb2.Statement())
    ReferenceStatement.copy_from_pb(parsed).validate()
    predicate = json.loads(data)["predicate"]
    if parsed.predicate_type == PREDICATE_TYPE:
        provenance = json_format.ParseDict(predicate, provenance_pb2.Provenance())
        # the checks of go/predicates/provenance/v1/provenance.go (Python has no such validator)
        definition, builder = provenance.build_definition, provenance.run_details.builder
        assert definition.build_type and definition.external_parameters and builder.id
        for descriptor in (
            *definition.resolved_dependencies,
            *provenance.run_details.byproducts,
            *builder.builder_dependencies,
        ):
            _reference_descriptor(descriptor)
    else:
        assert parsed.predicate_type == TEST_RESULT_TYPE
        result = json_format.ParseDict(predicate, test_result_pb2.TestResult())
        assert result.result in ("PASSED", "WARNED", "FAILED")
        for descriptor in result.configuration:
            _reference_descriptor(descriptor)
    for subject in parsed.subject:
        _reference_descriptor(subject)
    return parsed.predicate_type


def test_the_reference_package_accepts_every_statement_repro_writes(
    laguna: Path, tiny_run: Path, tmp_path: Path
) -> None:
    small = seal_example(tmp_path / "repro").path
    written = {
        "bundle": payload(laguna),
        "small bundle": payload(small),
        "run": payload(tiny_run),
        "run test result": payload(tiny_run, TEST_RESULT_ENVELOPE),
    }
    assert {name: reference_validate(data) for name, data in written.items()} == {
        "bundle": PREDICATE_TYPE,
        "small bundle": PREDICATE_TYPE,
        "run": PREDICATE_TYPE,
        "run test result": TEST_RESULT_TYPE,
    }
    assert json.loads(written["run"])["predicate"]["buildDefinition"]["buildType"] == (
        RUN_BUILD_TYPE
    )


# --- what is sealed, and verified -------------------------------------------------------------


def _sealed_lock(directory: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((directory / bundle.LOCK).read_bytes())
    return document


def _listed(directory: Path) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads(payload(directory))["predicate"]["buildDefinition"][
        "resolvedDependencies"
    ]
    return entries


def test_resolved_dependencies_list_every_locked_model_file_distribution_and_commit(
    laguna: Path,
) -> None:
    lock = _sealed_lock(laguna)
    expected = [
        {
            "name": file,
            "uri": f"pkg:huggingface/{model['repo']}@{model['revision']}#{file}",
            "digest": {"sha256": sha256},
        }
        for model in lock["models"]
        for file, sha256 in sorted(model["files"].items())
    ]
    assert lock["python"]["artifacts"] == {}, "an imported record knows no wheel"
    expected += [
        {"uri": f"pkg:pypi/{name}@{version}"}
        for name, version in sorted(lock["python"]["packages"].items())
    ]
    expected += [
        {"name": source["name"], "digest": {"gitCommit": source["commit"]}}
        for source in lock["sources"]
    ]
    listed = [
        {**entry, "uri": urllib.parse.unquote(entry["uri"])} if "uri" in entry else entry
        for entry in _listed(laguna)
    ]
    assert listed == expected
    assert sum(len(model["files"]) for model in lock["models"]) == 32
    assert len(lock["sources"]) == 5


def test_resolved_dependencies_list_every_locked_wheel_by_purl_file_name_and_sha256(
    tiny_run: Path,
) -> None:
    artifacts = _sealed_lock(tiny_run)["python"]["artifacts"]
    wheels = [entry for entry in _listed(tiny_run) if entry["uri"].startswith("pkg:pypi/")]
    assert len(wheels) == len(artifacts) == 149
    for entry, (_, wheel) in zip(wheels, sorted(artifacts.items()), strict=True):
        name = wheel["name"].lower().replace("_", "-")
        assert entry == {
            "name": wheel["filename"],
            "uri": f"pkg:pypi/{name}@{urllib.parse.quote(wheel['version'])}",
            "digest": {"sha256": wheel["sha256"]},
        }
    assert "pkg:pypi/torch@2.13.0%2Bcpu" in [entry["uri"] for entry in wheels]


def test_verify_recomputes_the_dependencies_and_the_gate_results(
    laguna: Path, tiny_run: Path
) -> None:
    for directory in (laguna, tiny_run):
        report = verify(directory, example_trust())
        assert report.findings == ()
        assert check(report, DEPENDENCIES_CLAIM) == (True, "")
    assert check(verify(tiny_run, example_trust()), GATES_CLAIM) == (True, "")


def test_the_gate_results_are_the_sealed_verdicts(tiny_run: Path) -> None:
    verdicts = json.loads((tiny_run / "evidence" / "verdicts.json").read_bytes())
    predicate = json.loads(payload(tiny_run, TEST_RESULT_ENVELOPE))["predicate"]
    assert predicate["passedTests"] == [v["gate"] for v in verdicts if v["status"] == "pass"]
    assert predicate["failedTests"] == [v["gate"] for v in verdicts if v["status"] == "fail"]
    assert predicate["result"] == "PASSED"
    assert {entry["name"] for entry in predicate["configuration"]} == {
        "manifest.toml",
        *(
            path.relative_to(tiny_run).as_posix()
            for directory in ("oracle", "kernels")
            for path in (tiny_run / directory).iterdir()
        ),
    }


def test_a_statement_listing_another_wheel_hash_than_its_lock_is_refused_naming_it(
    tiny_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run = copy_of(tiny_run)
    with resigned_dependencies(run) as entries:
        (torch,) = [e for e in entries if e["uri"] == "pkg:pypi/torch@2.13.0%2Bcpu"]
        locked = torch["digest"]["sha256"]
        torch["digest"]["sha256"] = "0" * 64
    report = verify(run, example_trust())
    assert report.findings == (), "signature and files hold: only the recomputation refuses"
    assert check(report, DEPENDENCIES_CLAIM) == (
        False,
        f"{torch['name']} (pkg:pypi/torch@2.13.0%2Bcpu): the statement lists sha256 {'0' * 64}, "
        f"the sealed lock sha256 {locked}",
    )


def test_a_statement_leaving_out_a_commit_or_adding_a_file_is_refused(
    laguna: Path, copy_of: Callable[[Path], Path]
) -> None:
    target = copy_of(laguna)
    with resigned_dependencies(target) as entries:
        vllm = next(e for e in entries if e.get("name") == "vllm")
        entries.remove(vllm)
        entries.append({"name": "extra.bin", "digest": {"sha256": "1" * 64}})
    ok, detail = check(verify(target, example_trust()), DEPENDENCIES_CLAIM)
    assert not ok
    assert detail == (
        f"extra.bin: the statement lists sha256 {'1' * 64}, the sealed lock nothing; "
        "vllm: the statement lists nothing, the sealed lock gitCommit "
        + vllm["digest"]["gitCommit"]
    )


def test_a_statement_naming_another_bundle_or_manifest_than_its_lock_is_refused(
    laguna: Path, copy_of: Callable[[Path], Path]
) -> None:
    """The bundle the statement names must be in a directory of that name; the lock names it
    too, and the manifest's path: a re-signed statement that says otherwise is refused."""
    target = copy_of(laguna)
    locked = json.loads((target / bundle.LOCK).read_text())["bundle"]["manifest_path"]
    document = json.loads(payload(target))
    parameters = document["predicate"]["buildDefinition"]["externalParameters"]
    parameters["bundle"] = "another-record"
    parameters["manifest"]["path"] = "manifests/another.toml"
    resign(target, document)
    renamed = target.rename(target.with_name("another-record"))
    report = verify(renamed, example_trust())
    assert report.findings == (), "signature, files and directory name hold"
    assert check(report, DEPENDENCIES_CLAIM) == (
        False,
        "externalParameters.manifest.path: the statement says 'manifests/another.toml', the "
        f"lock {locked!r}; externalParameters.bundle: the statement says 'another-record', "
        "the lock 'laguna-102tps'",
    )


def test_gate_results_other_than_the_recomputed_are_refused(
    tiny_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run = copy_of(tiny_run)
    document = json.loads(payload(run, TEST_RESULT_ENVELOPE))
    moved = document["predicate"]["passedTests"].pop()
    document["predicate"]["failedTests"].append(moved)
    document["predicate"]["result"] = "FAILED"
    resign(run, document, TEST_RESULT_ENVELOPE)
    report = verify(run, example_trust())
    assert report.findings == ()
    ok, detail = check(report, GATES_CLAIM)
    assert not ok
    assert detail.startswith("result: the statement says 'FAILED', recomputed 'PASSED'; ")
    assert f"failedTests: the statement says ['{moved}'], recomputed []" in detail


def test_a_sealed_run_without_its_test_result_or_with_one_about_other_files_is_refused(
    tiny_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run = copy_of(tiny_run)
    document = json.loads(payload(run, TEST_RESULT_ENVELOPE))
    document["subject"] = document["subject"][1:]
    resign(run, document, TEST_RESULT_ENVELOPE)
    (finding,) = verify_bundle(run, example_trust()).findings
    assert (finding.kind, finding.subject) == (DriftKind.STATEMENT, TEST_RESULT_ENVELOPE)
    assert finding.why == "the run's gate results are about other files than the run sealed"
    (run / TEST_RESULT_ENVELOPE).unlink()
    (finding,) = verify_bundle(run, example_trust()).findings
    assert (finding.kind, finding.subject) == (DriftKind.MISSING_FILE, TEST_RESULT_ENVELOPE)


def test_a_test_result_signed_by_a_key_not_trusted_is_refused(
    tiny_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run = copy_of(tiny_run)
    data = payload(run, TEST_RESULT_ENVELOPE)
    (run / TEST_RESULT_ENVELOPE).write_bytes(dsse.sign(data, SigningKey.generate()).to_json())
    (finding,) = verify_bundle(run, example_trust()).findings
    assert (finding.kind, finding.subject) == (DriftKind.SIGNATURE, TEST_RESULT_ENVELOPE)
    assert finding.why == (
        "the envelope is signed by no trusted key: the run's gate results cannot be trusted"
    )


def test_a_bundle_carrying_a_test_result_is_refused(
    laguna: Path, tiny_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    target = copy_of(laguna)
    shutil.copyfile(tiny_run / TEST_RESULT_ENVELOPE, target / TEST_RESULT_ENVELOPE)
    (finding,) = verify_bundle(target, example_trust()).findings
    assert (finding.kind, finding.subject) == (DriftKind.EXTRA_FILE, TEST_RESULT_ENVELOPE)


# --- what other producers write ---------------------------------------------------------------


def _as_another_producer_writes_it(document: dict[str, Any]) -> dict[str, Any]:
    """The statement with what SLSA and in-toto let a producer add: build metadata, byproducts,
    internal parameters, builder dependencies, descriptor fields, extension fields."""
    extended = copy.deepcopy(document)
    predicate = extended["predicate"]
    predicate["runDetails"]["metadata"] = {
        "invocationId": "run-2026-08-01-42",
        "startedOn": "2026-08-01T12:00:00Z",
        "finishedOn": "2026-08-01T12:05:00Z",
    }
    predicate["runDetails"]["byproducts"] = [
        {"name": "build.log", "digest": {"sha256": "2" * 64}, "mediaType": "text/plain"}
    ]
    predicate["runDetails"]["builder"]["builderDependencies"] = [
        {"uri": "pkg:pypi/pip@24.0", "digest": {"sha256": "3" * 64}}
    ]
    predicate["runDetails"]["builder"]["version"]["python"] = "3.11.7"
    predicate["buildDefinition"]["internalParameters"] = {"workers": 4}
    for entry in predicate["buildDefinition"]["resolvedDependencies"]:
        entry["annotations"] = {"exampleproducer_reviewed": True}
        entry["downloadLocation"] = "https://example.org/mirror"
    extended["subject"][0]["annotations"] = {"exampleproducer_kind": "checksums"}
    extended["subject"].reverse()
    extended["exampleproducer_note"] = "extension fields are ignored"
    return extended


def _written_elsewhere(directory: Path, document: dict[str, Any], keyid: str) -> None:
    """`document` pretty-printed, signed by securesystemslib under `keyid`, its envelope
    indented, in other key order and in URL-safe base64 without padding."""
    data = json.dumps(document, indent=2, ensure_ascii=False).encode()
    (directory / STATEMENT).write_bytes(data)
    envelope = signed_by_securesystemslib(data, keyid)

    def urlsafe(value: str) -> str:
        return base64.urlsafe_b64encode(base64.b64decode(value)).decode().rstrip("=")

    envelope["payload"] = urlsafe(envelope["payload"])
    for signature in envelope["signatures"]:
        signature["sig"] = urlsafe(signature["sig"])
    reordered = {key: envelope[key] for key in ("signatures", "payloadType", "payload")}
    (directory / ENVELOPE).write_text(json.dumps(reordered, indent=4) + "\n")


@pytest.mark.parametrize("keyid", ["", "another-tool's-key-name"], ids=["no-keyid", "other-keyid"])
def test_a_statement_another_producer_writes_and_signs_verifies(
    laguna: Path, copy_of: Callable[[Path], Path], keyid: str
) -> None:
    target = copy_of(laguna)
    _written_elsewhere(target, _as_another_producer_writes_it(json.loads(payload(laguna))), keyid)
    report = verify(target, example_trust())
    assert report.ok, [(c.claim, c.detail) for c in report.checks if not c.ok] + list(
        report.findings
    )
    assert report.key_ids == (example_key().key_id,)


def _statement_finding(directory: Path, document: dict[str, Any]) -> tuple[str, str]:
    resign(directory, document)
    (finding,) = verify_bundle(directory, example_trust()).findings
    assert (finding.kind, finding.subject) == (DriftKind.STATEMENT, ENVELOPE)
    return finding.why, finding.observed


REFUSED_STATEMENTS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "unknown external parameter": (
        lambda d: d["predicate"]["buildDefinition"]["externalParameters"].update(ref="main"),
        "key predicate.buildDefinition.externalParameters.ref: unknown key "
        "(expected one of the keys bundle, manifest, found key ref)",
    ),
    "unknown field inside an external parameter": (
        lambda d: d["predicate"]["buildDefinition"]["externalParameters"]["manifest"].update(
            url="https://example.org/m.toml"
        ),
        "key predicate.buildDefinition.externalParameters.manifest.url: unknown key "
        "(expected one of the keys path, sha256, found key url)",
    ),
    "missing external parameter": (
        lambda d: d["predicate"]["buildDefinition"]["externalParameters"].pop("bundle"),
        "key predicate.buildDefinition.externalParameters.bundle: missing key "
        "(expected a string, found nothing)",
    ),
    "other build type": (
        lambda d: d["predicate"]["buildDefinition"].update(
            buildType="https://slsa-framework.github.io/github-actions-buildtypes/workflow/v1"
        ),
        "key predicate.buildDefinition.buildType: invalid value "
        f'(expected one of "{BUILD_TYPE}", "{RUN_BUILD_TYPE}", '
        'found a string "https://slsa-framework.github.io/github-actions-buildtypes/workflow/v1")',
    ),
    "other builder": (
        lambda d: d["predicate"]["runDetails"]["builder"].update(id="https://example.org/ci"),
        f'key predicate.runDetails.builder.id: invalid value (expected one of "{BUILDER_ID}", '
        'found a string "https://example.org/ci")',
    ),
    "other predicate type": (
        lambda d: d.update(predicateType="https://slsa.dev/provenance/v0.2"),
        'key predicateType: invalid value (expected one of "https://slsa.dev/provenance/v1", '
        'found a string "https://slsa.dev/provenance/v0.2")',
    ),
    "subject digest beyond sha256": (
        lambda d: d["subject"][0]["digest"].update(sha512="4" * 128),
        "key subject[0].digest.sha512: unknown key "
        "(expected one of the keys sha256, found key sha512 (did you mean sha256?))",
    ),
    "no subject": (
        lambda d: d.update(subject=[]),
        "key subject: invalid value (expected at least 1 item, found an array [])",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED_STATEMENTS))
def test_a_signed_statement_is_refused_where_a_field_carries_meaning(
    laguna: Path, copy_of: Callable[[Path], Path], case: str
) -> None:
    change, found = REFUSED_STATEMENTS[case]
    target = copy_of(laguna)
    document = json.loads(payload(target))
    change(document)
    why, observed = _statement_finding(target, document)
    assert why == "not a repro statement: the signed payload seals nothing"
    assert observed == found


def test_a_subject_named_twice_is_refused(laguna: Path, copy_of: Callable[[Path], Path]) -> None:
    target = copy_of(laguna)
    document = json.loads(payload(target))
    document["subject"].append(dict(document["subject"][0]))
    why, observed = _statement_finding(target, document)
    assert why == "the statement names a subject twice: the signed payload seals nothing"
    assert observed == document["subject"][0]["name"]


def test_an_envelope_of_another_payload_type_is_refused(
    laguna: Path, copy_of: Callable[[Path], Path]
) -> None:
    target = copy_of(laguna)
    data = payload(target)
    (target / ENVELOPE).write_bytes(dsse.sign(data, example_key(), "application/json").to_json())
    (finding,) = verify_bundle(target, example_trust()).findings
    assert (finding.kind, finding.expected, finding.observed) == (
        DriftKind.STATEMENT,
        "payloadType application/vnd.in-toto+json",
        "payloadType application/json",
    )


# --- the documents the URIs name ----------------------------------------------------------------


def _document(uri: str) -> Path:
    """The file a `pkg:pypi/repro-serving#<subpath>` URI names, where this repro is imported
    from (in a checkout, repro_serving/attestation is a link to docs/attestation)."""
    assert uri.startswith(DOCUMENTS)
    return Path(repro_serving.__file__).parent.parent / uri.partition("#")[2]


@pytest.mark.parametrize("uri", [BUILD_TYPE, RUN_BUILD_TYPE, BUILDER_ID])
def test_the_build_types_and_builder_name_documents_that_exist(uri: str) -> None:
    path = _document(uri)
    assert path.resolve() == (DOCS / path.name).resolve()
    assert f"`{uri}`" in path.read_text().split("\n\n")[1]


def _examples(name: str) -> Iterator[bytes]:
    text = (DOCS / name).read_text()
    for block in re.findall(r"```json\n(.*?)```", text, re.DOTALL):
        yield block.encode()


@pytest.mark.parametrize(
    ("name", "build_type"),
    [("build-type-bundle-v1.md", BUILD_TYPE), ("build-type-run-v1.md", RUN_BUILD_TYPE)],
)
def test_a_build_type_s_example_is_a_statement_of_that_type(name: str, build_type: str) -> None:
    (example,) = _examples(name)
    statement = Statement.from_json(example, where=name)
    assert statement.predicate.build_definition.build_type == build_type
    assert reference_validate(example) == PREDICATE_TYPE


def test_the_test_result_document_s_example_is_a_gate_results_statement() -> None:
    (example,) = _examples("test-result-v1.md")
    assert GateResultsStatement.from_json(example, where="test-result-v1.md").predicate.result
    assert reference_validate(example) == TEST_RESULT_TYPE
