"""Ed25519 keys: generation, PEM files, key ids and the set of keys a verifier trusts.

A private key is a PKCS#8 PEM file without encryption (`PREFIX.key`, mode 0600), a public key a
SubjectPublicKeyInfo PEM file (`PREFIX.pub`). A key id is the sha256, in lowercase hex, of the 32
raw bytes of the public key, so anyone can recompute it from the `.pub` file. Trust is explicit:
one public key file, or a directory whose `*.pub` files are the trusted keys. A key file is read
through `builder.readers`: a regular file of at most `readers.KEY_LIMIT` bytes, never a FIFO or
a device. A key pair is written to `PREFIX.key` and `PREFIX.pub`, where PREFIX must name a file:
not empty, not ending in '/', '.' or '..'.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from repro_serving.builder.errors import BadInput, NotObservable
from repro_serving.builder.hashing import sha256_bytes
from repro_serving.builder.readers import KEY_LIMIT, read_bytes

PRIVATE_SUFFIX = ".key"
PUBLIC_SUFFIX = ".pub"
PRIVATE_MODE = 0o600
PUBLIC_MODE = 0o644


def key_id_of(raw_public_key: bytes) -> str:
    """The key id: sha256 of the raw public key bytes, lowercase hex."""
    return sha256_bytes(raw_public_key)


def _read(path: Path, what: str) -> bytes:
    return read_bytes(path, limit=KEY_LIMIT, what=what)


def _not_ed25519(key: object, which: str, where: str) -> BadInput:
    """The refusal of a PEM key that is not an Ed25519 key (`which`: public or private)."""
    return BadInput(
        f"not an Ed25519 {which} key", where=where, expected="Ed25519", found=type(key).__name__
    )


@dataclass(frozen=True)
class PublicKey:
    """An Ed25519 public key, by its 32 raw bytes."""

    raw: bytes

    @property
    def key_id(self) -> str:
        return key_id_of(self.raw)

    @classmethod
    def from_pem(cls, data: bytes, *, where: str) -> PublicKey:
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, UnsupportedAlgorithm) as error:
            hint = (
                "this is a private key: trust its .pub file instead"
                if b"PRIVATE KEY" in data
                else "a public key file is written by `repro keygen --out PREFIX` as PREFIX.pub"
            )
            raise BadInput(
                "not a PEM public key",
                where=where,
                expected="-----BEGIN PUBLIC KEY----- (Ed25519)",
                hint=hint,
            ) from error
        if not isinstance(key, Ed25519PublicKey):
            raise _not_ed25519(key, "public", where)
        return cls(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))

    @classmethod
    def from_path(cls, path: Path) -> PublicKey:
        return cls.from_pem(_read(path, "a public key file"), where=str(path))

    def pem(self) -> bytes:
        return Ed25519PublicKey.from_public_bytes(self.raw).public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def verifies(self, signature: bytes, message: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.raw).verify(signature, message)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True)
class SigningKey:
    """An Ed25519 private key; it signs, and names itself by its public key's id."""

    _private: Ed25519PrivateKey = field(repr=False)

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, data: bytes, *, where: str) -> SigningKey:
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except TypeError as error:
            raise BadInput(
                "the private key is encrypted",
                where=where,
                hint="repro reads unencrypted PKCS#8 keys, as `repro keygen` writes them",
            ) from error
        except (ValueError, UnsupportedAlgorithm) as error:
            raise BadInput(
                "not a PEM private key",
                where=where,
                expected="-----BEGIN PRIVATE KEY----- (Ed25519, PKCS#8)",
                hint="a private key file is written by `repro keygen --out PREFIX` as PREFIX.key",
            ) from error
        if not isinstance(key, Ed25519PrivateKey):
            raise _not_ed25519(key, "private", where)
        return cls(key)

    @classmethod
    def from_path(cls, path: Path) -> SigningKey:
        return cls.from_pem(_read(path, "a private key file"), where=str(path))

    @property
    def public(self) -> PublicKey:
        return PublicKey(
            self._private.public_key().public_bytes(
                serialization.Encoding.Raw, serialization.PublicFormat.Raw
            )
        )

    @property
    def key_id(self) -> str:
        return self.public.key_id

    def sign(self, message: bytes) -> bytes:
        return self._private.sign(message)

    def pem(self) -> bytes:
        return self._private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


@dataclass(frozen=True)
class TrustedKeys:
    """The public keys a verifier accepts signatures from, by key id, each with its file."""

    by_id: Mapping[str, PublicKey]
    sources: Mapping[str, str]

    @classmethod
    def of(cls, keys: Iterable[tuple[PublicKey, str]]) -> TrustedKeys:
        pairs = list(keys)
        return cls(
            MappingProxyType({key.key_id: key for key, _ in pairs}),
            MappingProxyType({key.key_id: source for key, source in pairs}),
        )

    @classmethod
    def from_key_file(cls, path: Path) -> TrustedKeys:
        return cls.of([(PublicKey.from_path(path), str(path))])

    @classmethod
    def from_directory(cls, directory: Path) -> TrustedKeys:
        if not directory.is_dir():
            raise BadInput("the trusted-keys directory does not exist", where=str(directory))
        files = sorted(directory.glob(f"*{PUBLIC_SUFFIX}"))
        if not files:
            raise BadInput(
                "the trusted-keys directory holds no public key",
                where=str(directory),
                expected=f"one or more *{PUBLIC_SUFFIX} files",
                hint="copy the .pub file of each key you trust into it",
            )
        return cls.of((PublicKey.from_path(path), str(path)) for path in files)

    def key_ids(self) -> tuple[str, ...]:
        return tuple(sorted(self.by_id))


def trusted_keys(key_file: Path | None, directory: Path | None) -> TrustedKeys:
    """The trust a verifying command was given: `--key FILE` or `--trusted-keys DIR`, not both."""
    if key_file is not None and directory is not None:
        raise BadInput(
            "both a key file and a trusted-keys directory were given",
            hint="trust one public key with --key FILE, or a directory of *.pub with "
            "--trusted-keys DIR",
        )
    if key_file is not None:
        return TrustedKeys.from_key_file(key_file)
    if directory is not None:
        return TrustedKeys.from_directory(directory)
    raise BadInput(
        "no trusted key was given",
        hint="trust one public key with --key FILE, or a directory of *.pub with "
        "--trusted-keys DIR",
    )


def key_prefix(text: str) -> Path:
    """The prefix `keygen --out` names, as it was typed: `Path` would drop the trailing '/' of
    `dir/` and make `dir.key` beside the directory, and turn '' into '.'."""
    last = text.rpartition("/")[2]
    if last in ("", ".", ".."):
        raise BadInput(
            "the key prefix names no file",
            where=repr(text),
            expected="a path whose last part names the key files: keys/signer writes "
            "keys/signer.key and keys/signer.pub",
            found="an empty path" if not text else "a directory",
        )
    return Path(text)


def key_pair_paths(prefix: Path) -> tuple[Path, Path]:
    """Where `write_key_pair(prefix)` puts the private and the public key."""
    if prefix.name in ("", ".."):
        raise BadInput(
            "the key prefix names no file",
            where=str(prefix),
            expected="a path whose last part names the key files",
            found="a directory",
        )
    return (
        prefix.with_name(prefix.name + PRIVATE_SUFFIX),
        prefix.with_name(prefix.name + PUBLIC_SUFFIX),
    )


def _create(path: Path, data: bytes, mode: int) -> None:
    """Write a new file with `mode` from its creation on; an existing file is never replaced."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(descriptor, "wb") as stream:
        os.fchmod(descriptor, mode)  # os.open's mode passes through the umask
        stream.write(data)
        stream.flush()
        os.fsync(descriptor)


def write_key_pair(prefix: Path) -> SigningKey:
    """Write `PREFIX.key` (0600) and `PREFIX.pub` (0644) of a new key; refuse if either exists,
    leaving both untouched."""
    private_path, public_path = key_pair_paths(prefix)
    for path in (private_path, public_path):
        if path.exists() or path.is_symlink():
            raise BadInput(
                "a key file already exists",
                where=str(path),
                hint="keys are never overwritten: choose another --out prefix or move it away",
            )
    key = SigningKey.generate()
    try:
        _create(private_path, key.pem(), PRIVATE_MODE)
        try:
            _create(public_path, key.public.pem(), PUBLIC_MODE)
        except BaseException:
            private_path.unlink()
            raise
    except FileExistsError as error:
        raise BadInput("a key file already exists", where=error.filename) from error
    except OSError as error:
        raise NotObservable(
            "cannot write a key file",
            where=error.filename or str(prefix),
            found=error.strerror or type(error).__name__,
        ) from error
    return key
