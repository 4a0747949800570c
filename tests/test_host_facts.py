"""One vocabulary of host facts for built and imported locks (`builder.documents.lock.HostFacts`).

A built lock states every fact the host observer reads, null where the host has none; an
imported one states only what the record's identity states, under the same names, and nothing
else: a fact it does not state is absent, never invented, and a lock that adds one is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bundle_assets import resealed
from hosts import h200_host
from jsonschema import Draft202012Validator
from schemas import assert_valid

from repro_serving.builder import imported
from repro_serving.builder.build import build
from repro_serving.builder.canonical import canonical_json
from repro_serving.builder.cli import main
from repro_serving.builder.documents.host import Accelerator
from repro_serving.builder.documents.lock import AcceleratorFacts, HostFacts, Lock
from repro_serving.builder.documents.manifest import Manifest
from repro_serving.builder.documents.observations import ObservationsDocument
from repro_serving.builder.errors import BadInput
from repro_serving.builder.imported import Identity, IdentityHost, describe_host
from repro_serving.builder.observe.host import observe_host
from repro_serving.builder.schemadoc import shipped
from repro_serving.builder.sealing import bundle
from repro_serving.builder.sealing.keys import SigningKey, TrustedKeys
from repro_serving.builder.verify import verify

REPO = Path(__file__).resolve().parent.parent
MANIFEST = REPO / "manifests" / "laguna-102tps.toml"
IDENTITY = REPO / "records" / "laguna-102tps" / "manifests" / "runtime-lock.json"
KEY = SigningKey.from_path(REPO / "keys" / "example.key")
TRUSTED = TrustedKeys.from_key_file(REPO / "keys" / "example.pub")
LOCKED = "lock = the sealed manifest, identity and record"


def laguna_identity() -> Identity:
    return Identity.model_validate_json(IDENTITY.read_bytes())


def lock_validator() -> Draft202012Validator:
    return Draft202012Validator(json.loads(shipped("lock.v1.json")))


# --- imported: what the record states, and nothing else ------------------------------------------


def test_an_imported_host_states_exactly_what_the_record_states_under_the_locks_names() -> None:
    facts = laguna_identity().host.facts(where="runtime-lock.json: host")
    cards = [
        {"address": bdf, "vendor_device": "8086:e223", "name": "Intel(R) Arc(TM) Pro B70 Graphics"}
        for bdf in ("0000:23:00.0", "0000:27:00.0", "0000:43:00.0", "0000:47:00.0")
    ]
    assert facts.model_dump(mode="json") == {
        "arch": "x86_64",
        "os_release": {"PRETTY_NAME": "Ubuntu 24.04.4 LTS"},
        "kernel": "7.0.0-28-generic",
        "accelerators": cards,
    }


def test_the_manifests_enforced_host_reads_the_same_keys_in_an_imported_lock() -> None:
    """What `[host]` enforces (`builder.documents.host.compare` reads a built host the same way)
    is found under the same names in the imported facts."""
    host = Manifest.from_path(MANIFEST).host
    facts = laguna_identity().host.facts(where="identity")
    assert facts.accelerators is not None and facts.os_release is not None
    (enforced,) = host.accelerators
    assert (host.arch, host.kernel, host.os_release) == (
        facts.arch,
        facts.kernel,
        facts.os_release["PRETTY_NAME"],
    )
    assert sorted(enforced.addresses) == [a.address for a in facts.accelerators]
    assert {a.vendor_device for a in facts.accelerators} == {enforced.vendor_device}


@pytest.mark.parametrize(
    ("host", "where", "expected", "found"),
    [
        (
            {"gpu_count": 8, "gpu_bdfs": ["0000:23:00.0", "0000:27:00.0"]},
            "identity: host.gpu_count",
            "2, the number of gpu_bdfs",
            "8",
        ),
        (
            {"gpu_vendor_device": "8086:e223"},
            "identity: host",
            "gpu_bdfs or gpu_count beside gpu_vendor_device and gpu_name",
            "neither",
        ),
    ],
    ids=["count-against-addresses", "card-without-count"],
)
def test_an_identity_that_cannot_say_its_cards_one_way_is_refused_naming_both_sides(
    host: dict[str, Any], where: str, expected: str, found: str
) -> None:
    with pytest.raises(BadInput) as refused:
        IdentityHost.model_validate(host).facts(where="identity: host")
    assert (refused.value.where, refused.value.expected, refused.value.found) == (
        where,
        expected,
        found,
    )


def test_a_count_alone_lists_that_many_cards_with_no_address() -> None:
    facts = IdentityHost.model_validate({"gpu_count": 2, "gpu_vendor_device": "10de:2335"})
    dumped = facts.facts(where="identity").model_dump(mode="json")
    assert dumped == {"accelerators": [{"vendor_device": "10de:2335"}] * 2}


def test_an_identity_without_a_host_states_no_fact() -> None:
    assert Identity().host.facts(where="identity").model_dump(mode="json") == {}


# --- built: every fact the observer reads --------------------------------------------------------


def test_a_built_host_states_every_fact_with_null_where_the_host_has_none() -> None:
    facts = h200_host().locked().model_dump(mode="json")
    assert set(facts) == set(HostFacts.model_fields)
    (card,) = facts["accelerators"]
    assert set(card) == set(AcceleratorFacts.model_fields) - {"name"}, "sysfs gives no name"
    assert (facts["arch"], card["vendor_device"], card["driver"]) == (
        "x86_64",
        "10de:2335",
        "nvidia",
    )
    unbound = Accelerator("0000:00:02.0", "0x030000", "8086", "56a0", "Intel", None, None)
    assert unbound.locked().model_dump(mode="json")["driver"] is None, "stated: none bound"


def test_the_built_lock_states_its_sealed_observations_host_in_the_locks_vocabulary() -> None:
    """What `repro verify` recomputes `host.facts` of a built lock from."""
    tiny = REPO / "repro" / "tiny-cpu"
    path = tiny / "evidence" / "observations.json"
    observed = ObservationsDocument.from_bytes(path.read_bytes(), where=str(path))
    locked = json.loads((tiny / bundle.LOCK).read_bytes())["host"]["facts"]
    assert observed.host_facts().model_dump(mode="json") == locked
    assert set(locked) == set(HostFacts.model_fields)


def test_repro_host_json_prints_this_host_in_the_locks_vocabulary(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["host", "--json"]) == 0
    document = assert_valid("host", capsys.readouterr().out)
    assert HostFacts.model_validate(document["host"]) == observe_host().locked()


# --- absent is not null --------------------------------------------------------------------------


def test_a_fact_stated_as_null_is_another_fact_than_one_not_stated() -> None:
    absent, null = HostFacts(arch="x86_64"), HostFacts(arch="x86_64", cpu_model=None)
    assert absent.model_dump(mode="json") == {"arch": "x86_64"}
    assert null.model_dump(mode="json") == {"arch": "x86_64", "cpu_model": None}
    assert absent != null
    assert HostFacts.model_validate(null.model_dump(mode="json")) == null


@pytest.fixture(scope="module")
def imported_lock() -> Lock:
    """The lock of the Laguna record, assembled from its evidence (no bundle)."""
    manifest = Manifest.from_path(MANIFEST)
    assert manifest.evidence is not None
    files = imported.ImportedFiles.of_manifest(manifest, manifest.evidence)
    return imported.assemble_lock(
        manifest,
        str(MANIFEST),
        files,
        imported.load_record(files),
        suite=manifest.load_suite(),
        suite_sha256="0" * 64,
        teacher_sha256="0" * 64,
        manifest_sha256="0" * 64,
    )


@pytest.mark.parametrize("fact", ["arch", "kernel", "cpu_flags", "accelerators"])
def test_a_fact_the_host_always_has_is_never_null_for_the_model_nor_the_schema(
    imported_lock: Lock, fact: str
) -> None:
    document = json.loads(imported_lock.to_bytes())
    assert lock_validator().is_valid(document)
    document["host"]["facts"][fact] = None
    assert not lock_validator().is_valid(document)
    with pytest.raises(BadInput, match=r"^the lock does not follow repro\.lock/v1$"):
        Lock.from_bytes(canonical_json(document), where="lock.json")


# --- a sealed imported bundle --------------------------------------------------------------------


@pytest.fixture(scope="module")
def laguna(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Laguna record sealed now from its evidence, by this repro."""
    parent = tmp_path_factory.mktemp("laguna")
    return build(MANIFEST, KEY, parent, parent / "work").sealed.path


def test_a_sealed_imported_lock_follows_the_lock_schema_and_verifies(laguna: Path) -> None:
    lock = (laguna / bundle.LOCK).read_bytes()
    assert_valid("lock", json.loads(lock))
    assert Lock.from_bytes(lock, where="lock.json").host.facts == laguna_identity().host.facts(
        where="identity"
    )
    report = verify(laguna, TRUSTED)
    assert report.ok, [(c.claim, c.detail) for c in report.checks if not c.ok]
    host = next(c for c in report.checks if c.claim == "host")
    assert host.value == describe_host(laguna_identity().host.facts(where="identity"))
    assert host.value == (
        "x86_64, Ubuntu 24.04.4 LTS, kernel 7.0.0-28-generic, "
        "4 x 8086:e223 (Intel(R) Arc(TM) Pro B70 Graphics)"
    )


def _lie(change: Any) -> Any:
    def edit(root: Path) -> None:
        lock = json.loads((root / bundle.LOCK).read_text())
        change(lock["host"]["facts"])
        (root / bundle.LOCK).write_text(json.dumps(lock))

    return edit


HOST_LIES = {
    "a fact the record never states, as null": lambda facts: facts.update(cpu_model=None),
    "a fact the record never states, invented": lambda facts: facts.update(cpu_count=128),
    "a driver for each card": lambda facts: [a.update(driver="xe") for a in facts["accelerators"]],
    "a card dropped": lambda facts: facts["accelerators"].pop(),
}


@pytest.mark.parametrize("case", HOST_LIES, ids=list(HOST_LIES))
def test_a_resealed_lock_that_states_other_host_facts_than_the_record_is_refused(
    laguna: Path, tmp_path: Path, case: str
) -> None:
    source = "manifests/laguna-102tps.toml"
    lying = resealed(laguna, tmp_path, _lie(HOST_LIES[case]), source)
    report = verify(lying, TRUSTED)
    assert report.findings == (), "the signature and every digest hold"
    check = next(c for c in report.checks if c.claim == LOCKED)
    assert not check.ok
    assert "host" in check.detail


def test_diff_tells_a_fact_stated_as_null_from_one_not_stated(
    laguna: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = "manifests/laguna-102tps.toml"
    lying = resealed(
        laguna, tmp_path, _lie(HOST_LIES["a fact the record never states, as null"]), source
    )
    assert main(["diff", str(laguna), str(lying), "--json"]) == 1
    document = assert_valid("diff", capsys.readouterr().out)
    assert document["ok"] is False
    assert document["differences"] == [{"key": "host.facts.cpu_model", "b": None}]
