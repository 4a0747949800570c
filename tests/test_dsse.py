"""DSSE envelopes: PAE per the spec, checked both ways against securesystemslib's implementation,
and the exact refusals of an unsigned, unknown-key or altered envelope."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bundle_assets import EXAMPLE_KEY, example_key, example_trust, seal_example
from cryptography.hazmat.primitives import serialization
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import CryptoSigner, SSlibKey  # type: ignore[attr-defined]

from repro_serving.builder.errors import BadInput
from repro_serving.builder.sealing import dsse
from repro_serving.builder.sealing.bundle import ENVELOPE, STATEMENT
from repro_serving.builder.sealing.keys import SigningKey

PAYLOAD = b'{"_type":"https://in-toto.io/Statement/v1"}\n'


def _sslib_key(key: SigningKey) -> SSlibKey:
    public = serialization.load_pem_public_key(key.public.pem())
    return SSlibKey.from_crypto(public, keyid=key.key_id)


def test_pae_is_the_spec_s_encoding() -> None:
    # The worked example of the DSSE protocol document.
    assert (
        dsse.pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_pae_counts_bytes_not_characters() -> None:
    assert dsse.pae("t/é", "é".encode()) == b"DSSEv1 4 t/\xc3\xa9 2 \xc3\xa9"
    assert dsse.pae("", b"") == b"DSSEv1 0  0 "


def test_securesystemslib_verifies_a_sealed_bundle_s_envelope(tmp_path: Path) -> None:
    bundle = seal_example(tmp_path / "repro").path
    document = json.loads((bundle / ENVELOPE).read_bytes())
    envelope = SslibEnvelope.from_dict(document)
    verified = envelope.verify([_sslib_key(example_key())], threshold=1)
    assert list(verified) == [example_key().key_id]
    assert envelope.payload_type == "application/vnd.in-toto+json"
    assert envelope.payload == (bundle / STATEMENT).read_bytes()
    assert envelope.pae() == dsse.pae(dsse.PAYLOAD_TYPE, envelope.payload)


def test_securesystemslib_refuses_an_altered_payload() -> None:
    document = json.loads(dsse.sign(PAYLOAD, example_key()).to_json())
    document["payload"] = dsse.b64encode(PAYLOAD.replace(b"v1", b"v2"))
    with pytest.raises(VerificationError):
        SslibEnvelope.from_dict(document).verify([_sslib_key(example_key())], threshold=1)


def test_repro_verifies_what_securesystemslib_signs() -> None:
    private = serialization.load_pem_private_key(EXAMPLE_KEY.read_bytes(), password=None)
    signer = CryptoSigner(private, _sslib_key(example_key()))
    theirs = SslibEnvelope(PAYLOAD, dsse.PAYLOAD_TYPE, {})
    theirs.sign(signer)
    text = json.dumps(theirs.to_dict(), sort_keys=True, separators=(",", ":")) + "\n"
    envelope = dsse.Envelope.from_json(text.encode(), where="theirs")
    verified = dsse.verify(envelope, example_trust(), where="theirs")
    assert (verified.payload, verified.key_ids) == (PAYLOAD, (example_key().key_id,))
    assert envelope.to_json() == text.encode()


def test_an_envelope_is_canonical_json_and_reads_back_equal() -> None:
    envelope = dsse.sign(PAYLOAD, example_key())
    text = envelope.to_json()
    assert text == (
        json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")).encode() + b"\n"
    )
    assert list(json.loads(text)) == ["payload", "payloadType", "signatures"]
    assert dsse.Envelope.from_json(text, where="e") == envelope


def test_an_unsigned_envelope_is_refused() -> None:
    envelope = dsse.sign(PAYLOAD, example_key()).model_copy(update={"signatures": ()})
    with pytest.raises(dsse.SignatureRefused) as refused:
        dsse.verify(envelope, example_trust(), where=ENVELOPE)
    assert refused.value.diagnostics() == (
        "error: the envelope is unsigned\n"
        "  where:    statement.dsse.json\n"
        f"  expected: a signature by a trusted key: {example_key().key_id}\n"
        "  found:    no signature"
    )


def test_a_signature_by_an_unknown_key_is_refused_naming_the_key() -> None:
    stranger = SigningKey.generate()
    with pytest.raises(dsse.SignatureRefused) as refused:
        dsse.verify(dsse.sign(PAYLOAD, stranger), example_trust(), where=ENVELOPE)
    assert refused.value.what == "the envelope is signed by no trusted key"
    assert refused.value.found == f"signed by unknown key {stranger.key_id}"


def test_a_signature_that_does_not_match_is_refused() -> None:
    envelope = dsse.sign(PAYLOAD, example_key()).model_copy(
        update={"payload_type": "application/json"}
    )
    with pytest.raises(dsse.SignatureRefused) as refused:
        dsse.verify(envelope, example_trust(), where=ENVELOPE)
    assert refused.value.what == "a signature does not verify"
    assert refused.value.expected == f"a valid Ed25519 signature by key {example_key().key_id}"


@pytest.mark.parametrize(
    ("text", "what", "found"),
    [
        (b'{"payload":"","signatures":[]}\n', "not a DSSE envelope", "payloadType: Field required"),
        (b"{}", "a JSON document is not in canonical form", "other bytes for the same value"),
        (b'{"payload":"x","payload":"y"}\n', "a JSON document does not parse", None),
    ],
    ids=["missing-field", "not-canonical", "duplicate-key"],
)
def test_a_malformed_envelope_is_refused(text: bytes, what: str, found: str | None) -> None:
    with pytest.raises(BadInput) as refused:
        dsse.Envelope.from_json(text, where=ENVELOPE)
    assert (refused.value.what, refused.value.where) == (what, ENVELOPE)
    if found is not None:
        assert refused.value.found == found


def test_a_payload_in_non_canonical_base64_is_refused() -> None:
    envelope = dsse.sign(b"ab", example_key())
    assert envelope.payload == "YWI="
    with pytest.raises(BadInput, match=r"^the envelope's payload is not canonical base64$"):
        envelope.model_copy(update={"payload": "YWJ="}).payload_bytes(where=ENVELOPE)
    with pytest.raises(BadInput, match=r"^the envelope's payload is not base64$"):
        envelope.model_copy(update={"payload": "YWI"}).payload_bytes(where=ENVELOPE)
