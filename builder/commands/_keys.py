"""The keys a command is given: on its command line, else in the environment.

`--key FILE` / `--trusted-keys DIR` (the trust of a verifying command) and `--signing-key KEY`
(the key a command seals with) may instead come from `REPRO_KEY`, `REPRO_TRUSTED_KEYS` and
`REPRO_SIGNING_KEY`: a CI job or a shell profile names its keys once. A path on the command line
always wins over the environment; an empty variable is unset; two sources of trust at one level
(both options, or both variables) are refused as the options are.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Final

from repro_serving.builder.errors import BadInput
from repro_serving.builder.sealing.keys import TrustedKeys, trusted_keys

KEY_VARIABLE: Final = "REPRO_KEY"
TRUSTED_KEYS_VARIABLE: Final = "REPRO_TRUSTED_KEYS"
SIGNING_KEY_VARIABLE: Final = "REPRO_SIGNING_KEY"


def add_trust_arguments(parser: argparse.ArgumentParser) -> None:
    trust = parser.add_mutually_exclusive_group()
    trust.add_argument(
        "--key", type=Path, metavar="PUB", help=f"the one trusted public key (${KEY_VARIABLE})"
    )
    trust.add_argument(
        "--trusted-keys",
        type=Path,
        metavar="DIR",
        help=f"a directory of trusted *.pub keys (${TRUSTED_KEYS_VARIABLE})",
    )


def add_signing_key_argument(parser: argparse.ArgumentParser, purpose: str) -> None:
    parser.add_argument(
        "--signing-key",
        type=Path,
        metavar="KEY",
        help=f"Ed25519 private key to {purpose} (${SIGNING_KEY_VARIABLE})",
    )


def trusted(args: argparse.Namespace) -> TrustedKeys:
    if args.key is not None or args.trusted_keys is not None:
        return trusted_keys(args.key, args.trusted_keys)
    return trusted_keys(_variable(KEY_VARIABLE), _variable(TRUSTED_KEYS_VARIABLE))


def signing_key_path(args: argparse.Namespace) -> Path | None:
    """`--signing-key`, else `REPRO_SIGNING_KEY`, else None."""
    path: Path | None = args.signing_key or _variable(SIGNING_KEY_VARIABLE)
    return path


def required_signing_key_path(args: argparse.Namespace) -> Path:
    """`signing_key_path`, bad input when there is none."""
    path = signing_key_path(args)
    if path is None:
        raise BadInput(
            "no signing key was given",
            expected=f"--signing-key KEY or ${SIGNING_KEY_VARIABLE}",
            found="neither",
            hint="`repro keygen --out keys/signer` makes a key pair",
        )
    return path


def _variable(name: str) -> Path | None:
    value = os.environ.get(name, "")
    return Path(value) if value else None
