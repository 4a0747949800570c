"""DSSE envelopes v1 (github.com/secure-systems-lab/dsse): signing and verifying a payload.

The signature covers the pre-authentication encoding PAE(type, payload) =
"DSSEv1" SP LEN(type) SP type SP LEN(payload) SP payload, where LEN is the byte length in ASCII
decimal without leading zeros and SP one space. The envelope is the JSON object
{"payload": base64(payload), "payloadType": type, "signatures": [{"keyid", "sig": base64}]},
base64 in its standard alphabet with padding, written as canonical JSON; an envelope that is not
canonical is refused, so no byte of it can change unnoticed.

An envelope is read as untrusted input: larger than `readers.ENVELOPE_LIMIT`, nested deeper than
`readers.MAX_DEPTH` or holding an integer too long, it is refused before it is parsed, and so
before any signature is looked at.

A key id in a signature only says which trusted key to try; nothing else is tried. An envelope
verifies when at least one signature is by a trusted key and every signature by a trusted key
verifies; signatures by keys that are not trusted are ignored.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from repro_serving.builder.canonical import canonical_json, parse_canonical
from repro_serving.builder.documents import validate_document
from repro_serving.builder.errors import BadInput, ReproError
from repro_serving.builder.readers import ENVELOPE_LIMIT
from repro_serving.builder.sealing.keys import SigningKey, TrustedKeys

PAYLOAD_TYPE = "application/vnd.in-toto+json"


class SignatureRefused(ReproError):
    """The envelope is unsigned, signed by no trusted key, or a signature does not verify."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """The DSSE v1 pre-authentication encoding: exactly the bytes that are signed."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str, *, what: str, where: str) -> bytes:
    """Standard base64 with padding, in its one canonical spelling."""
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as error:
        raise BadInput(f"{what} is not base64", where=where, found=str(error)) from error
    if b64encode(data) != text:
        raise BadInput(
            f"{what} is not canonical base64",
            where=where,
            expected="the standard alphabet with '=' padding",
        )
    return data


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Signature(_Frozen):
    keyid: str
    sig: str
    """Base64 of the 64-byte Ed25519 signature over `pae(payloadType, payload)`."""


class Envelope(_Frozen):
    payload: str
    """Base64 of the signed payload bytes."""
    payload_type: str = Field(alias="payloadType")
    signatures: tuple[Signature, ...]

    @classmethod
    def from_json(cls, data: bytes, *, where: str) -> Envelope:
        if len(data) > ENVELOPE_LIMIT:
            raise BadInput(
                "the envelope is too large",
                where=where,
                expected=f"at most {ENVELOPE_LIMIT} bytes",
                found=f"{len(data)} bytes",
            )
        document = parse_canonical(data, where=where)
        return validate_document(
            cls, document, where=where, what="the envelope", refusal="not a DSSE envelope"
        )

    def to_json(self) -> bytes:
        return canonical_json(self.model_dump(mode="json", by_alias=True))

    def payload_bytes(self, *, where: str) -> bytes:
        return b64decode(self.payload, what="the envelope's payload", where=where)


def sign(payload: bytes, key: SigningKey, payload_type: str = PAYLOAD_TYPE) -> Envelope:
    """An envelope of `payload` with one signature by `key`."""
    signature = Signature(keyid=key.key_id, sig=b64encode(key.sign(pae(payload_type, payload))))
    return Envelope(payload=b64encode(payload), payload_type=payload_type, signatures=(signature,))


@dataclass(frozen=True)
class Verified:
    """A payload whose signature verified, and the trusted keys that signed it."""

    payload: bytes
    payload_type: str
    key_ids: tuple[str, ...]


def verify(envelope: Envelope, trusted: TrustedKeys, *, where: str) -> Verified:
    """The verified payload of `envelope`, or `SignatureRefused` naming the key ids involved."""
    payload = envelope.payload_bytes(where=where)
    if not envelope.signatures:
        raise SignatureRefused(
            "the envelope is unsigned",
            where=where,
            expected="a signature by a trusted key: " + ", ".join(trusted.key_ids()),
            found="no signature",
        )
    message = pae(envelope.payload_type, payload)
    by_trusted = [s for s in envelope.signatures if s.keyid in trusted.by_id]
    if not by_trusted:
        raise SignatureRefused(
            "the envelope is signed by no trusted key",
            where=where,
            expected="a signature by a trusted key: " + ", ".join(trusted.key_ids()),
            found="signed by unknown key " + ", ".join(s.keyid for s in envelope.signatures),
            hint="trust the signer's .pub only if you know whose key it is",
        )
    for signature in by_trusted:
        raw = b64decode(signature.sig, what="a signature", where=where)
        if not trusted.by_id[signature.keyid].verifies(raw, message):
            raise SignatureRefused(
                "a signature does not verify",
                where=where,
                expected=f"a valid Ed25519 signature by key {signature.keyid}",
                found="a signature that does not match the payload and its type",
                hint="the envelope was altered after signing",
            )
    return Verified(
        payload=payload,
        payload_type=envelope.payload_type,
        key_ids=tuple(s.keyid for s in by_trusted),
    )
