"""DSSE envelopes v1 (github.com/secure-systems-lab/dsse, envelope.md and protocol.md 1.0.2).

A signature covers the pre-authentication encoding PAE(type, payload) =
"DSSEv1" SP LEN(type) SP type SP LEN(payload) SP payload, where LEN is the byte length in ASCII
decimal without leading zeros and SP one space: the payload type is authenticated with the
payload.

What repro writes: the JSON envelope {"payload": base64(payload), "payloadType": type,
"signatures": [{"keyid", "sig": base64}]} as canonical JSON (`builder.canonical`), base64 in
its standard alphabet with padding, one Ed25519 signature whose keyid is the signing key's id:
the same payload signed by the same key gives the same bytes.

What repro accepts, from any producer, as the spec tells a consumer to:
- any JSON formatting (whitespace, indentation, key order), once `readers.parse_json` has
  bounded it: an envelope larger than `readers.ENVELOPE_LIMIT`, nested deeper than
  `readers.MAX_DEPTH`, holding an integer too long, a duplicate key or bytes that are not UTF-8
  is refused before any signature is looked at;
- `payload`, `payloadType`, `signatures` and each signature's `sig` must be set (strings, and
  an array of objects); `keyid` may be unset, null or empty, all alike; every other field, of
  the envelope or of a signature, is ignored;
- base64 (RFC 4648) in the standard or the URL-safe alphabet, with or without `=` padding.
  Refused: a character of neither alphabet (whitespace and line breaks included), characters of
  both alphabets in one value, padding that is misplaced or of the wrong length, and pad bits
  that are not zero (RFC 4648 section 3.5): every accepted value has one meaning;
- at most `MAX_SIGNATURES` signatures, refused beyond before any is verified (each may cost one
  verification per trusted key).

Verifying (protocol.md, a threshold of one trusted key): each signature is decoded (a value
that does not decode refuses the envelope) and tried against the trusted keys, the key its
keyid names first: the keyid is an unauthenticated hint and never decides. The payload is
accepted when at least one signature verifies with a trusted key; a signature that no trusted
key verifies (by an unknown key, altered, or without a keyid and by no trusted key) is skipped
and never counts. Refused: an envelope without a signature, and one none of whose signatures
verifies. Which payload types to accept is the caller's decision (repro: only
`PAYLOAD_TYPE`, `builder.sealing.integrity`), made after the signature, as protocol.md orders.
The verified payload is handed on as the bytes verified, never parsed again from the envelope.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Final, NoReturn

from pydantic import BaseModel, ConfigDict, Field, field_validator

from repro_serving.builder.canonical import canonical_json
from repro_serving.builder.documents import validate_document
from repro_serving.builder.errors import BadInput, ReproError
from repro_serving.builder.readers import ENVELOPE_LIMIT, parse_json
from repro_serving.builder.sealing.keys import PublicKey, SigningKey, TrustedKeys

PAYLOAD_TYPE: Final = "application/vnd.in-toto+json"
MAX_SIGNATURES: Final = 64
"""Signatures an envelope may carry: DSSE sets no bound; a threshold of a few signers is what
multi-signature envelopes carry, and each signature may cost a verification per trusted key."""
ED25519_SIGNATURE_BYTES: Final = 64

_BASE64: Final = re.compile(r"[A-Za-z0-9+/_-]*(={0,2})")
_BASE64_CHAR: Final = re.compile(r"[A-Za-z0-9+/_=-]")
_URLSAFE_TO_STANDARD: Final = str.maketrans("-_", "+/")
_BASE64_FORM: Final = (
    "base64 (RFC 4648) in the standard or the URL-safe alphabet, with or without '=' padding"
)


class SignatureRefused(ReproError):
    """The envelope is unsigned, or none of its signatures verifies with a trusted key."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """The DSSE v1 pre-authentication encoding: exactly the bytes that are signed."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


def b64encode(data: bytes) -> str:
    """What repro writes: the standard alphabet, with padding."""
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str, *, what: str, where: str) -> bytes:
    """The bytes of `text`, in either alphabet of RFC 4648, padded or not; `BadInput` naming
    `what` for anything else (see the module's docstring)."""
    match = _BASE64.fullmatch(text)
    if match is None:
        outside = [char for char in text if not _BASE64_CHAR.fullmatch(char)]
        _refuse_base64(
            what,
            where,
            f"the character {outside[0]!r}" if outside else "'=' that is misplaced or too long",
        )
    body = text[: match.start(1)]
    padding = len(match.group(1))
    urlsafe = bool(set(body) & set("-_"))
    if urlsafe and set(body) & set("+/"):
        _refuse_base64(what, where, "characters of both the standard and URL-safe alphabets")
    missing = -len(body) % 4
    if missing == 3 or (padding and padding != missing):
        _refuse_base64(what, where, f"{len(body)} characters and {padding} '=': no base64 length")
    try:
        data = base64.b64decode(
            body + "=" * missing, altchars=b"-_" if urlsafe else None, validate=True
        )
    except binascii.Error as error:  # the checks above leave none; refused all the same
        _refuse_base64(what, where, str(error))
    spelled = b64encode(data).rstrip("=")
    if spelled != (body.translate(_URLSAFE_TO_STANDARD) if urlsafe else body):
        _refuse_base64(what, where, "pad bits that are not zero (RFC 4648 section 3.5)")
    return data


def _refuse_base64(what: str, where: str, found: str) -> NoReturn:
    raise BadInput(f"{what} is not base64", where=where, expected=_BASE64_FORM, found=found)


class _Read(BaseModel):
    """A part of the envelope: unrecognised fields are ignored, as envelope.md requires."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


class Signature(_Read):
    keyid: str = ""
    """Which key signed, as a hint only; unset and null read as empty."""
    sig: str
    """Base64 of the signature over `pae(payloadType, payload)`."""

    @field_validator("keyid", mode="before")
    @classmethod
    def _unset_is_empty(cls, value: object) -> object:
        return "" if value is None else value


class Envelope(_Read):
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
        document = parse_json(data, where=where)
        signatures = document.get("signatures") if isinstance(document, dict) else None
        if isinstance(signatures, list) and len(signatures) > MAX_SIGNATURES:
            raise BadInput(
                "the envelope carries too many signatures",
                where=where,
                expected=f"at most {MAX_SIGNATURES}",
                found=f"{len(signatures)} signatures",
            )
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
    """A payload whose signature verified, and the trusted keys that verified it."""

    payload: bytes
    payload_type: str
    key_ids: tuple[str, ...]


def verify(envelope: Envelope, trusted: TrustedKeys, *, where: str) -> Verified:
    """The verified payload of `envelope`, or `SignatureRefused` naming the key ids involved."""
    payload = envelope.payload_bytes(where=where)
    expected = "a signature by a trusted key: " + ", ".join(trusted.key_ids())
    if not envelope.signatures:
        raise SignatureRefused(
            "the envelope is unsigned", where=where, expected=expected, found="no signature"
        )
    if len(envelope.signatures) > MAX_SIGNATURES:
        raise BadInput(
            "the envelope carries too many signatures",
            where=where,
            expected=f"at most {MAX_SIGNATURES}",
            found=f"{len(envelope.signatures)} signatures",
        )
    message = pae(envelope.payload_type, payload)
    raws = [b64decode(s.sig, what="a signature", where=where) for s in envelope.signatures]
    signers: list[str] = []
    for signature, raw in zip(envelope.signatures, raws, strict=True):
        signer = _signer(raw, message, trusted, hint=signature.keyid)
        if signer is not None and signer not in signers:
            signers.append(signer)
    if signers:
        return Verified(payload=payload, payload_type=envelope.payload_type, key_ids=tuple(signers))
    named = [s.keyid for s in envelope.signatures if s.keyid in trusted.by_id]
    if named:
        raise SignatureRefused(
            "a signature does not verify",
            where=where,
            expected=f"a valid Ed25519 signature by key {named[0]}",
            found="a signature that does not match the payload and its type",
            hint="the envelope was altered after signing",
        )
    raise SignatureRefused(
        "the envelope is signed by no trusted key",
        where=where,
        expected=expected,
        found="signed by unknown key "
        + ", ".join(s.keyid or "(no key id)" for s in envelope.signatures),
        hint="trust the signer's .pub only if you know whose key it is",
    )


def _signer(raw: bytes, message: bytes, trusted: TrustedKeys, *, hint: str) -> str | None:
    """The id of the trusted key `raw` is a signature of `message` by, trying the key `hint`
    names first; None when no trusted key made it."""
    if len(raw) != ED25519_SIGNATURE_BYTES:
        return None
    first = [trusted.by_id[hint]] if hint in trusted.by_id else []
    rest = [trusted.by_id[key_id] for key_id in trusted.key_ids() if key_id != hint]
    key: PublicKey
    for key in (*first, *rest):
        if key.verifies(raw, message):
            return key.key_id
    return None
