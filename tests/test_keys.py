"""Keys: `repro keygen`, PEM loading with exact refusals, key ids, trust, the example pair."""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

import pytest
from bundle_assets import EXAMPLE_KEY, EXAMPLE_PUB, REPO_ROOT
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from diagnostics import diagnostic, refusal
from schemas import assert_valid

from repro_serving.builder.cli import main
from repro_serving.builder.errors import BadInput
from repro_serving.builder.sealing.keys import PublicKey, SigningKey, TrustedKeys, trusted_keys

EXAMPLE_KEY_ID = "41a75b1e796d4f6bbe32a85114bfe620916545f66815052db2a72ba0edfa475f"


def _raw_public(pem: bytes) -> bytes:
    key = serialization.load_pem_public_key(pem)
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def test_keygen_writes_a_private_key_readable_by_its_owner_only_and_a_public_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keygen", "--out", str(tmp_path / "signer"), "--json"]) == 0
    report = assert_valid("keygen", capsys.readouterr().out)
    private, public = tmp_path / "signer.key", tmp_path / "signer.pub"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE(public.stat().st_mode) == 0o644
    assert private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----\n")
    assert public.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----\n")
    assert report == {
        "version": 1,
        "ok": True,
        "error": None,
        "key_id": hashlib.sha256(_raw_public(public.read_bytes())).hexdigest(),
        "private_key": str(private),
        "public_key": str(public),
    }
    assert SigningKey.from_path(private).key_id == report["key_id"]


def test_a_generated_key_signs_what_its_public_key_verifies(tmp_path: Path) -> None:
    assert main(["keygen", "--out", str(tmp_path / "k")]) == 0
    signer = SigningKey.from_path(tmp_path / "k.key")
    public = PublicKey.from_path(tmp_path / "k.pub")
    signature = signer.sign(b"record")
    assert public.verifies(signature, b"record")
    assert not public.verifies(signature, b"recorD")


@pytest.mark.parametrize("existing", ["k.key", "k.pub"])
def test_keygen_never_overwrites_a_key_file(
    tmp_path: Path, existing: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / existing).write_bytes(b"precious")
    assert main(["keygen", "--out", str(tmp_path / "k")]) == 2
    assert capsys.readouterr().err == (
        "error: a key file already exists\n"
        f"  where:    {tmp_path / existing}\n"
        "  hint:     keys are never overwritten: choose another --out prefix or move it away\n"
    )
    assert (tmp_path / existing).read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == [existing]


def test_the_key_id_is_the_sha256_of_the_raw_public_key() -> None:
    raw = _raw_public(EXAMPLE_PUB.read_bytes())
    assert len(raw) == 32
    assert PublicKey.from_path(EXAMPLE_PUB).key_id == hashlib.sha256(raw).hexdigest()
    assert PublicKey.from_path(EXAMPLE_PUB).key_id == EXAMPLE_KEY_ID


def test_the_example_key_pair_is_one_pair_and_says_it_is_an_example() -> None:
    assert SigningKey.from_path(EXAMPLE_KEY).public == PublicKey.from_path(EXAMPLE_PUB)
    readme = (REPO_ROOT / "keys" / "README.md").read_text()
    assert "example key pair, not for real records" in readme
    assert EXAMPLE_KEY_ID in readme


def _rsa_public_pem() -> bytes:
    key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


@pytest.mark.parametrize(
    ("data", "what", "found", "hint"),
    [
        (
            EXAMPLE_KEY.read_bytes(),
            "not a PEM public key",
            None,
            "this is a private key: trust its .pub file instead",
        ),
        (
            b"ssh-ed25519 AAAA",
            "not a PEM public key",
            None,
            "a public key file is written by `repro keygen --out PREFIX` as PREFIX.pub",
        ),
        (_rsa_public_pem(), "not an Ed25519 public key", "RSAPublicKey", None),
    ],
    ids=["private-key", "not-pem", "rsa"],
)
def test_a_public_key_file_is_refused_with_the_reason(
    data: bytes, what: str, found: str | None, hint: str | None
) -> None:
    with pytest.raises(BadInput) as refused:
        PublicKey.from_pem(data, where="trusted.pub")
    assert (refused.value.what, refused.value.where) == (what, "trusted.pub")
    assert refused.value.hint == hint
    if found is not None:
        assert refused.value.found is not None and found in refused.value.found


def test_an_encrypted_private_key_is_refused() -> None:
    encrypted = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    with pytest.raises(BadInput) as refused:
        SigningKey.from_pem(encrypted, where="signer.key")
    assert refused.value.diagnostics() == (
        "error: the private key is encrypted\n"
        "  where:    signer.key\n"
        "  hint:     repro reads unencrypted PKCS#8 keys, as `repro keygen` writes them"
    )


def test_a_public_key_is_not_a_private_key() -> None:
    with pytest.raises(BadInput, match="not a PEM private key"):
        SigningKey.from_pem(EXAMPLE_PUB.read_bytes(), where="example.pub")


def test_a_trusted_keys_directory_trusts_its_pub_files_only(tmp_path: Path) -> None:
    other = SigningKey.generate()
    (tmp_path / "example.pub").write_bytes(EXAMPLE_PUB.read_bytes())
    (tmp_path / "other.pub").write_bytes(other.public.pem())
    (tmp_path / "other.key").write_bytes(other.pem())
    (tmp_path / "README").write_text("not a key")
    trusted = TrustedKeys.from_directory(tmp_path)
    assert trusted.key_ids() == tuple(sorted((EXAMPLE_KEY_ID, other.key_id)))
    assert trusted.sources[other.key_id] == str(tmp_path / "other.pub")


def test_an_empty_trusted_keys_directory_is_refused(tmp_path: Path) -> None:
    assert refusal(BadInput, TrustedKeys.from_directory, tmp_path) == diagnostic(
        "the trusted-keys directory holds no public key",
        tmp_path,
        expected="one or more *.pub files",
        hint="copy the .pub file of each key you trust into it",
    )


def test_trust_is_one_key_file_or_one_directory(tmp_path: Path) -> None:
    assert trusted_keys(EXAMPLE_PUB, None).key_ids() == (EXAMPLE_KEY_ID,)
    with pytest.raises(BadInput, match=r"^no trusted key was given$"):
        trusted_keys(None, None)
    with pytest.raises(BadInput, match=r"^both a key file and a trusted-keys directory"):
        trusted_keys(EXAMPLE_PUB, tmp_path)
    with pytest.raises(BadInput, match=r"^a public key file does not exist$"):
        trusted_keys(tmp_path / "missing.pub", None)
