"""The tamper matrix at the integrity layer: every change to a sealed bundle is refused with a
finding that names the file, and an untouched bundle passes every time."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from bundle_assets import BUNDLE_NAME, example_key, example_trust, seal_example
from drifts import drift_of

from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.errors import BadInput
from repro_serving.builder.hashing import sha256_bytes, sha256_file
from repro_serving.builder.sealing import dsse
from repro_serving.builder.sealing.bundle import (
    ENVELOPE,
    LOCK,
    SHA256SUMS,
    STATEMENT,
    render_sha256sums,
)
from repro_serving.builder.sealing.integrity import verify_bundle
from repro_serving.builder.sealing.keys import SigningKey, TrustedKeys
from repro_serving.builder.sealing.statement import Statement, statement_for

ORACLE_FILE = "oracle/teacher-text-sha256-v1.json"
EVIDENCE_FILE = "evidence/idle-interval/prestart-03.json"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seal_example(tmp_path_factory.mktemp("template") / "repro").path


@pytest.fixture
def bundle(template: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "repro" / BUNDLE_NAME
    shutil.copytree(template, copy, symlinks=True)
    return copy


_signature = drift_of(DriftKind.SIGNATURE, subject=ENVELOPE)


def _changed(bundle: Path, name: str, sealed: str, why: str) -> Drift:
    """The finding for `name`, sealed with digest `sealed`, now holding other bytes."""
    return Drift(
        kind=DriftKind.FILE_DIGEST,
        subject=name,
        expected=f"sha256 {sealed}",
        observed=f"sha256 {sha256_file(bundle / name)}",
        why=why,
    )


def _kinds(bundle: Path, trusted: TrustedKeys | None = None) -> list[tuple[str, str]]:
    report = verify_bundle(bundle, trusted or example_trust())
    return [(finding.kind.value, finding.subject) for finding in report.findings]


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _other_base64(path: Path, offset: int) -> None:
    """Another character of the base64 alphabet at `offset`: the text still decodes, so what is
    refused is the changed bytes, never the encoding (a bit flipped in '/' or '+' would not)."""
    data = bytearray(path.read_bytes())
    data[offset] = ord("B") if data[offset] == ord("A") else ord("A")
    path.write_bytes(bytes(data))


def _resign(bundle: Path, key: SigningKey) -> None:
    payload = (bundle / STATEMENT).read_bytes()
    (bundle / ENVELOPE).write_bytes(dsse.sign(payload, key).to_json())


def test_an_untouched_bundle_passes_twenty_times_in_a_row(bundle: Path) -> None:
    for _ in range(20):
        report = verify_bundle(bundle, example_trust())
        assert report.ok
        assert report.key_ids == (example_key().key_id,)
        assert sorted(report.digests) == sorted(
            path.relative_to(bundle).as_posix()
            for path in bundle.rglob("*")
            if path.is_file() and path.name not in (STATEMENT, ENVELOPE)
        )


@pytest.mark.parametrize(
    "name", ["manifest.toml", LOCK, ORACLE_FILE, EVIDENCE_FILE, "evidence/server.log"]
)
def test_a_byte_changed_in_a_sealed_file_is_refused_naming_both_digests(
    bundle: Path, name: str
) -> None:
    sealed = sha256_file(bundle / name)
    _flip(bundle / name, 10)
    report = verify_bundle(bundle, example_trust())
    assert report.findings == (
        _changed(bundle, name, sealed, "the file differs from the one that was sealed"),
    )


def test_a_byte_changed_in_sha256sums_is_refused_with_the_line_it_broke(bundle: Path) -> None:
    lines = (bundle / SHA256SUMS).read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if line.endswith("  lock.json"))
    offset = sum(len(line) + 1 for line in lines[:index])
    signed = lines[index][:64]
    _flip(bundle / SHA256SUMS, offset)
    written = (bundle / SHA256SUMS).read_text().splitlines()[index][:64]
    report = verify_bundle(bundle, example_trust())
    assert [(f.kind, f.subject) for f in report.findings] == [
        (DriftKind.FILE_DIGEST, SHA256SUMS),
        (DriftKind.CHECKSUMS, SHA256SUMS),
    ]
    assert report.findings[1].observed == (
        f"its line for lock.json says {written}, the signed statement {signed}"
    )


def test_a_byte_changed_in_the_statement_is_refused(bundle: Path) -> None:
    signed = sha256_file(bundle / STATEMENT)
    _flip(bundle / STATEMENT, 100)
    why = "statement.json is not the statement signed in statement.dsse.json"
    assert verify_bundle(bundle, example_trust()).findings == (
        _changed(bundle, STATEMENT, signed, why),
    )


def test_every_byte_changed_in_the_envelope_is_refused_but_in_the_key_id_hint(
    bundle: Path,
) -> None:
    """DSSE: the key id is an unauthenticated hint, and a field a consumer does not know is
    ignored, so a byte changed in the key id or in its name leaves a signature by the trusted
    key that verifies; any other byte changed is refused."""
    envelope = (bundle / ENVELOPE).read_bytes()
    field = envelope.index(b'"keyid":"')
    value = field + len(b'"keyid":"')
    hint = {*range(field + 1, field + 6), *range(value, envelope.index(b'"', value))}
    for offset in range(0, len(envelope), 13):
        _flip(bundle / ENVELOPE, offset)
        findings = verify_bundle(bundle, example_trust()).findings
        if offset in hint:
            assert findings == (), offset
        else:
            assert [(f.kind, f.subject) for f in findings] == [(DriftKind.SIGNATURE, ENVELOPE)], (
                offset
            )
        (bundle / ENVELOPE).write_bytes(envelope)


@pytest.mark.parametrize(
    ("marker", "observed"),
    [
        (b'"sig":"', "a signature that does not match the payload and its type"),
        (b'"payload":"', "a signature that does not match the payload and its type"),
        (b'"keyid":"', None),
    ],
    ids=["signature", "payload", "keyid"],
)
def test_a_byte_changed_in_the_envelope_names_why(
    bundle: Path, marker: bytes, observed: str | None
) -> None:
    envelope = (bundle / ENVELOPE).read_bytes()
    _other_base64(bundle / ENVELOPE, envelope.index(marker) + len(marker) + 3)
    findings = verify_bundle(bundle, example_trust()).findings
    if observed is None:  # the key id is a hint: the trusted key is tried all the same
        assert findings == ()
        return
    (finding,) = findings
    assert (finding.kind, finding.subject) == (DriftKind.SIGNATURE, ENVELOPE)
    assert finding.observed == observed
    assert finding.why == "a signature does not verify: none of the bundle's files can be trusted"


def test_a_file_added_is_refused(bundle: Path) -> None:
    (bundle / "evidence" / "extra.txt").write_text("added\n")
    (bundle / "notes.txt").write_text("added\n")
    (bundle / "oracle" / "empty").mkdir()
    assert _kinds(bundle) == [
        ("extra-file", "evidence/extra.txt"),
        ("extra-file", "notes.txt"),
        ("extra-file", "oracle/empty/"),
    ]


def test_a_file_removed_is_refused(bundle: Path) -> None:
    sealed = sha256_file(bundle / "evidence/server.log")
    (bundle / "evidence/server.log").unlink()
    missing = Drift(
        kind=DriftKind.MISSING_FILE,
        subject="evidence/server.log",
        expected=f"sha256 {sealed}",
        observed="no such file",
        why="a sealed file is missing",
    )
    assert verify_bundle(bundle, example_trust()).findings == (missing,)


def test_a_file_renamed_is_refused_by_both_names(bundle: Path) -> None:
    (bundle / "evidence/server.log").rename(bundle / "evidence/server.log.1")
    assert _kinds(bundle) == [
        ("missing-file", "evidence/server.log"),
        ("extra-file", "evidence/server.log.1"),
    ]


def test_a_symlink_pointing_outside_is_refused_naming_it_and_its_target(bundle: Path) -> None:
    (bundle / "evidence/server.log").unlink()
    (bundle / "evidence/server.log").symlink_to("/etc/hostname")
    (bundle / "evidence/escape").symlink_to("../../../outside")
    report = verify_bundle(bundle, example_trust())
    assert [(f.kind.value, f.subject, f.observed) for f in report.findings[:2]] == [
        (
            "not-regular-file",
            "evidence/escape",
            "a symlink to ../../../outside (outside the bundle)",
        ),
        (
            "not-regular-file",
            "evidence/server.log",
            "a symlink to /etc/hostname (outside the bundle)",
        ),
    ]
    assert [(f.kind.value, f.subject) for f in report.findings[2:]] == [
        ("missing-file", "evidence/server.log")
    ]


def test_a_fifo_in_the_bundle_is_refused(bundle: Path) -> None:
    os.mkfifo(bundle / "evidence" / "pipe")
    (finding,) = verify_bundle(bundle, example_trust()).findings
    assert (finding.subject, finding.observed) == ("evidence/pipe", "a FIFO")


def test_a_file_name_that_is_not_utf8_is_refused(bundle: Path) -> None:
    with open(os.path.join(os.fsencode(bundle / "evidence"), b"bad-\xff"), "wb") as stream:  # noqa: PTH118, PTH123
        stream.write(b"x")
    (finding,) = verify_bundle(bundle, example_trust()).findings
    assert (finding.kind, finding.subject) == (DriftKind.UNSAFE_PATH, "evidence/bad-\\udcff")
    assert finding.observed == "bytes that are not UTF-8"


def test_a_signature_from_another_key_is_refused_naming_the_key(bundle: Path) -> None:
    other = SigningKey.generate()
    _resign(bundle, other)
    (finding,) = verify_bundle(bundle, example_trust()).findings
    assert finding == _signature(
        f"a signature by a trusted key: {example_key().key_id}",
        f"signed by unknown key {other.key_id}",
        "the envelope is signed by no trusted key: none of the bundle's files can be trusted",
    )


def test_another_key_verifies_once_it_is_trusted(bundle: Path, tmp_path: Path) -> None:
    other = SigningKey.generate()
    _resign(bundle, other)
    trusted_dir = tmp_path / "trusted"
    trusted_dir.mkdir()
    (trusted_dir / "other.pub").write_bytes(other.public.pem())
    report = verify_bundle(bundle, TrustedKeys.from_directory(trusted_dir))
    assert report.ok
    assert report.key_ids == (other.key_id,)


def test_an_unsigned_bundle_is_refused(bundle: Path) -> None:
    (bundle / ENVELOPE).unlink()
    assert verify_bundle(bundle, example_trust()).findings == (
        _signature(
            "a DSSE envelope signed by a trusted key",
            "no such file",
            "the bundle is unsigned: none of its files can be trusted",
        ),
    )


def test_an_envelope_without_signatures_is_refused(bundle: Path) -> None:
    envelope = dsse.Envelope.from_json((bundle / ENVELOPE).read_bytes(), where=ENVELOPE)
    (bundle / ENVELOPE).write_bytes(envelope.model_copy(update={"signatures": ()}).to_json())
    (finding,) = verify_bundle(bundle, example_trust()).findings
    assert (finding.subject, finding.observed) == (ENVELOPE, "no signature")


def test_a_statement_replayed_from_another_bundle_is_refused(bundle: Path, tmp_path: Path) -> None:
    other = seal_example(tmp_path / "other", tag="other").path
    for name in (STATEMENT, ENVELOPE):
        shutil.copyfile(other / name, bundle / name)
    assert _kinds(bundle) == [
        ("file-digest", "SHA256SUMS"),
        ("file-digest", LOCK),
        ("checksums", SHA256SUMS),
    ]


def test_a_statement_replayed_from_a_bundle_of_another_name_is_refused(
    bundle: Path, tmp_path: Path
) -> None:
    other = seal_example(tmp_path / "other", name="other-record").path
    for name in (STATEMENT, ENVELOPE):
        shutil.copyfile(other / name, bundle / name)
    (finding,) = verify_bundle(bundle, example_trust()).findings
    assert finding.kind == DriftKind.STATEMENT
    assert (finding.expected, finding.observed) == (
        "a directory named other-record",
        f"a directory named {BUNDLE_NAME}",
    )


def test_a_bundle_copied_under_another_name_is_refused(bundle: Path) -> None:
    renamed = bundle.with_name("laguna-mini-copy")
    bundle.rename(renamed)
    assert _kinds(renamed) == [("statement", str(renamed))]


def test_a_lock_edited_and_rehashed_without_resigning_is_refused(bundle: Path) -> None:
    lock = json.loads((bundle / LOCK).read_bytes())
    lock["tag"] = "edited"
    (bundle / LOCK).write_bytes(
        (json.dumps(lock, sort_keys=True, separators=(",", ":")) + "\n").encode()
    )
    digests = Statement.from_json((bundle / STATEMENT).read_bytes(), where=STATEMENT).digests()
    digests[LOCK] = sha256_file(bundle / LOCK)
    del digests[SHA256SUMS]
    (bundle / SHA256SUMS).write_bytes(render_sha256sums(digests))
    digests[SHA256SUMS] = sha256_file(bundle / SHA256SUMS)
    statement = statement_for(BUNDLE_NAME, "tests/manifests/minimal.toml", digests).to_json()
    (bundle / STATEMENT).write_bytes(statement)
    assert _kinds(bundle) == [
        ("file-digest", STATEMENT),
        ("file-digest", SHA256SUMS),
        ("file-digest", LOCK),
        ("checksums", SHA256SUMS),
    ]


def test_a_signed_statement_with_a_path_escaping_the_bundle_is_refused(bundle: Path) -> None:
    document = json.loads((bundle / STATEMENT).read_bytes())
    document["subject"].insert(0, {"name": "../outside", "digest": {"sha256": "0" * 64}})
    payload = (json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n").encode()
    (bundle / STATEMENT).write_bytes(payload)
    _resign(bundle, example_key())
    (finding,) = verify_bundle(bundle, example_trust()).findings
    assert (finding.kind, finding.subject) == (DriftKind.STATEMENT, ENVELOPE)
    assert finding.observed == (
        "key subject[0].name: not a path inside a bundle: a '..' part, which escapes the bundle "
        '(expected a value the check accepts, found a string "../outside")'
    )


def test_a_signed_statement_that_leaves_out_the_lock_is_refused(bundle: Path) -> None:
    digests = Statement.from_json((bundle / STATEMENT).read_bytes(), where=STATEMENT).digests()
    del digests[LOCK]
    statement = statement_for(BUNDLE_NAME, "m", digests).to_json()
    (bundle / STATEMENT).write_bytes(statement)
    _resign(bundle, example_key())
    assert _kinds(bundle) == [
        ("statement", LOCK),
        ("extra-file", LOCK),
        ("checksums", SHA256SUMS),
    ]
    assert sha256_bytes(statement) == sha256_file(bundle / STATEMENT)


def test_a_path_that_is_not_a_directory_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as refused:
        verify_bundle(tmp_path / "missing", example_trust())
    assert refused.value.diagnostics() == (
        "error: not a bundle directory\n"
        f"  where:    {tmp_path / 'missing'}\n"
        "  hint:     name a directory written by `repro build`, such as repro/<name>"
    )


def test_a_symlink_loop_is_refused_without_following_it(bundle: Path) -> None:
    (bundle / "evidence" / "loop").symlink_to("loop")
    (finding,) = verify_bundle(bundle, example_trust()).findings
    assert (finding.subject, finding.observed) == ("evidence/loop", "a symlink to loop")
