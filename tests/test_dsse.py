"""DSSE envelopes: PAE per the spec, checked both ways against securesystemslib's implementation;
what a consumer must accept (any JSON formatting, either base64 alphabet with or without
padding, a keyid that is missing, empty or unknown, fields it does not know) and what it never
does (an altered payload or type, a signature no trusted key made, malformed base64)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

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


def _sslib_key(key: SigningKey, keyid: str | None = None) -> SSlibKey:
    public = serialization.load_pem_public_key(key.public.pem())
    return SSlibKey.from_crypto(public, keyid=key.key_id if keyid is None else keyid)


def _signed_by_securesystemslib(keyid: str | None = None, payload: bytes = PAYLOAD) -> Any:
    """The envelope securesystemslib writes for `payload`, signed with the example key under
    `keyid` (the example key's own id by default), as a dict."""
    private = serialization.load_pem_private_key(EXAMPLE_KEY.read_bytes(), password=None)
    signer = CryptoSigner(private, _sslib_key(example_key(), keyid or None))
    theirs = SslibEnvelope(payload, dsse.PAYLOAD_TYPE, {})
    theirs.sign(signer)
    document = theirs.to_dict()
    if keyid == "":  # securesystemslib names every key: an empty key id is written by hand
        document["signatures"][0]["keyid"] = ""
    return document


def _verified(document: object, text: bytes | None = None) -> dsse.Verified:
    data = text if text is not None else json.dumps(document).encode()
    return dsse.verify(dsse.Envelope.from_json(data, where="e"), example_trust(), where="e")


def _urlsafe(value: str, *, padded: bool) -> str:
    text = value.translate(str.maketrans("+/", "-_"))
    return text if padded else text.rstrip("=")


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
    document = _signed_by_securesystemslib()
    text = json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n"
    envelope = dsse.Envelope.from_json(text.encode(), where="theirs")
    verified = dsse.verify(envelope, example_trust(), where="theirs")
    assert (verified.payload, verified.key_ids) == (PAYLOAD, (example_key().key_id,))
    assert envelope.to_json() == text.encode()


def test_repro_writes_canonical_json_that_reads_back_equal() -> None:
    envelope = dsse.sign(PAYLOAD, example_key())
    text = envelope.to_json()
    assert text == (
        json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")).encode() + b"\n"
    )
    assert list(json.loads(text)) == ["payload", "payloadType", "signatures"]
    assert json.loads(text)["payload"] == base64.standard_b64encode(PAYLOAD).decode()
    assert dsse.Envelope.from_json(text, where="e") == envelope
    assert dsse.sign(PAYLOAD, example_key()).to_json() == text


@pytest.mark.parametrize(
    "layout",
    [
        {"indent": 4},
        {"indent": "\t", "sort_keys": True},
        {"separators": (" ,  ", " :  ")},
    ],
    ids=["indented", "tabs-sorted", "spaced"],
)
def test_an_envelope_in_any_json_formatting_verifies(layout: dict[str, Any]) -> None:
    document = _signed_by_securesystemslib()
    reordered = {key: document[key] for key in ("signatures", "payloadType", "payload")}
    text = ("\n" + json.dumps(reordered, **layout) + "\n\n").encode()
    assert _verified(reordered, text).payload == PAYLOAD


@pytest.mark.parametrize("keyid", ["", "sha256:0123", "another key's name"])
def test_a_signature_whose_keyid_is_empty_or_unknown_verifies_with_a_trusted_key(
    keyid: str,
) -> None:
    document = _signed_by_securesystemslib(keyid)
    assert document["signatures"][0]["keyid"] == keyid
    assert _verified(document).key_ids == (example_key().key_id,)


def test_a_signature_without_keyid_or_with_a_null_one_verifies() -> None:
    document = _signed_by_securesystemslib()
    del document["signatures"][0]["keyid"]
    assert _verified(document).payload == PAYLOAD
    document["signatures"][0]["keyid"] = None
    assert _verified(document).payload == PAYLOAD


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
def test_url_safe_base64_verifies_padded_or_not(padded: bool) -> None:
    # a payload and a signature whose base64 holds '+' and '/', so the alphabet shows
    payload = b'{"x":"\xfb\xff\xbe"}\n'
    document = _signed_by_securesystemslib(payload=payload)
    assert set("+/") & set(document["payload"])
    document["payload"] = _urlsafe(document["payload"], padded=padded)
    for signature in document["signatures"]:
        signature["sig"] = _urlsafe(signature["sig"], padded=padded)
    assert _verified(document).payload == payload


def test_standard_base64_without_padding_verifies() -> None:
    document = _signed_by_securesystemslib()
    assert document["payload"].endswith("=")
    document["payload"] = document["payload"].rstrip("=")
    assert _verified(document).payload == PAYLOAD


def test_fields_the_spec_does_not_define_are_ignored() -> None:
    document = _signed_by_securesystemslib()
    document["x-producer"] = {"name": "another tool", "nested": [1, 2, 3]}
    document["signatures"][0]["cert"] = "-----BEGIN CERTIFICATE-----"
    assert _verified(document).payload == PAYLOAD


def test_one_signature_by_a_trusted_key_is_enough_among_others() -> None:
    stranger = SigningKey.generate()
    theirs = json.loads(dsse.sign(PAYLOAD, stranger).to_json())["signatures"][0]
    garbage = {"keyid": example_key().key_id, "sig": dsse.b64encode(bytes(64))}
    document = _signed_by_securesystemslib("")
    document["signatures"] = [theirs, garbage, *document["signatures"]]
    assert _verified(document).key_ids == (example_key().key_id,)


def test_an_altered_payload_never_verifies_whatever_its_form() -> None:
    document = _signed_by_securesystemslib("")
    altered = PAYLOAD.replace(b"v1", b"v2")
    for encoded in (dsse.b64encode(altered), _urlsafe(dsse.b64encode(altered), padded=False)):
        document["payload"] = encoded
        with pytest.raises(dsse.SignatureRefused) as refused:
            _verified(document, json.dumps(document, indent=2).encode())
        assert refused.value.what == "the envelope is signed by no trusted key"
        assert refused.value.found == "signed by unknown key (no key id)"


def test_a_signature_by_a_key_not_trusted_never_verifies_even_under_a_trusted_keyid() -> None:
    stranger = SigningKey.generate()
    document = json.loads(dsse.sign(PAYLOAD, stranger).to_json())
    document["signatures"][0]["keyid"] = example_key().key_id
    with pytest.raises(dsse.SignatureRefused) as refused:
        _verified(document)
    assert refused.value.what == "a signature does not verify"
    assert refused.value.expected == f"a valid Ed25519 signature by key {example_key().key_id}"


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


def test_a_payload_type_changed_after_signing_is_refused() -> None:
    envelope = dsse.sign(PAYLOAD, example_key()).model_copy(
        update={"payload_type": "application/json"}
    )
    with pytest.raises(dsse.SignatureRefused) as refused:
        dsse.verify(envelope, example_trust(), where=ENVELOPE)
    assert refused.value.what == "a signature does not verify"
    assert refused.value.expected == f"a valid Ed25519 signature by key {example_key().key_id}"


def test_more_signatures_than_the_bound_are_refused_before_any_is_verified() -> None:
    document = json.loads(dsse.sign(PAYLOAD, example_key()).to_json())
    document["signatures"] *= dsse.MAX_SIGNATURES + 1
    with pytest.raises(BadInput) as refused:
        dsse.Envelope.from_json(json.dumps(document).encode(), where=ENVELOPE)
    assert (refused.value.what, refused.value.found) == (
        "the envelope carries too many signatures",
        f"{dsse.MAX_SIGNATURES + 1} signatures",
    )


@pytest.mark.parametrize(
    ("text", "what", "found"),
    [
        (
            b'{"payload":"","signatures":[]}\n',
            "not a DSSE envelope",
            "key payloadType: missing key (expected a string, found nothing)",
        ),
        (
            b'{"payload":"","payloadType":"t","signatures":[{"keyid":"k"}]}',
            "not a DSSE envelope",
            "key signatures[0].sig: missing key (expected a string, found nothing)",
        ),
        (b'{"payload":"x","payload":"y"}\n', "a JSON document does not parse", None),
        (b'{"payload":' + b"[" * 100 + b"]" * 100 + b"}", "a document nests too deep", None),
    ],
    ids=["missing-field", "missing-sig", "duplicate-key", "too-deep"],
)
def test_a_malformed_envelope_is_refused(text: bytes, what: str, found: str | None) -> None:
    with pytest.raises(BadInput) as refused:
        dsse.Envelope.from_json(text, where=ENVELOPE)
    assert (refused.value.what, refused.value.where) == (what, ENVELOPE)
    if found is not None:
        assert refused.value.found == found


@pytest.mark.parametrize(
    ("text", "decoded"),
    [
        ("YWI=", b"ab"),
        ("YWI", b"ab"),
        ("YQ==", b"a"),
        ("YQ", b"a"),
        ("", b""),
        ("-_8", b"\xfb\xff"),
    ],
)
def test_base64_of_either_alphabet_decodes_padded_or_not(text: str, decoded: bytes) -> None:
    assert dsse.b64decode(text, what="v", where="w") == decoded


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("YWJ=", "pad bits that are not zero (RFC 4648 section 3.5)"),
        ("YWI==", "3 characters and 2 '=': no base64 length"),
        ("Y", "1 characters and 0 '=': no base64 length"),
        ("+_8=", "characters of both the standard and URL-safe alphabets"),
        ("YW I=", "the character ' '"),
        ("YWI=\n", "the character '\\n'"),
        ("=YWI", "'=' that is misplaced or too long"),
    ],
    ids=["pad-bits", "too-much-padding", "bad-length", "mixed", "space", "newline", "leading-pad"],
)
def test_base64_with_more_than_one_meaning_or_none_is_refused(text: str, found: str) -> None:
    envelope = dsse.sign(b"ab", example_key()).model_copy(update={"payload": text})
    with pytest.raises(BadInput) as refused:
        envelope.payload_bytes(where=ENVELOPE)
    assert (refused.value.what, refused.value.found) == (
        "the envelope's payload is not base64",
        found,
    )
    assert refused.value.expected == (
        "base64 (RFC 4648) in the standard or the URL-safe alphabet, with or without '=' padding"
    )


def test_a_signature_that_does_not_decode_refuses_the_envelope() -> None:
    document = _signed_by_securesystemslib()
    document["signatures"].append({"keyid": "", "sig": "not base64!"})
    with pytest.raises(BadInput, match=r"^a signature is not base64$"):
        _verified(document)
