"""Generate an Ed25519 signing key pair: PREFIX.key (mode 0600) and PREFIX.pub.

The private key signs bundles (`repro build --signing-key PREFIX.key`); the public key is what
a verifier trusts (`repro verify --key PREFIX.pub`, or a trusted-keys directory holding it).
Existing files are never overwritten. The key id printed is the sha256 of the raw public key.
"""

from __future__ import annotations

import argparse
from typing import Literal

from repro_serving.builder.errors import ExitCode
from repro_serving.builder.render import Report, console, write_report
from repro_serving.builder.sealing.keys import key_pair_paths, key_prefix, write_key_pair


class KeygenOutput(Report):
    """`repro keygen --json`: the key pair written."""

    ok: Literal[True] = True
    key_id: str
    """The sha256 of the raw Ed25519 public key."""
    private_key: str
    public_key: str


REPORT = KeygenOutput
"""The document `--json` prints (its schema: `repro schema keygen`)."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        required=True,
        metavar="PREFIX",
        help="write PREFIX.key and PREFIX.pub (neither may exist)",
    )
    parser.add_argument("--json", action="store_true", help="print the key id and files as JSON")


def execute(args: argparse.Namespace) -> int:
    prefix = key_prefix(args.out)  # the text as typed: a trailing '/' names no file
    key = write_key_pair(prefix)
    private_path, public_path = key_pair_paths(prefix)
    if args.json:
        write_report(
            KeygenOutput(
                key_id=key.key_id, private_key=str(private_path), public_key=str(public_path)
            )
        )
    else:
        out = console()
        out.print(f"key id       {key.key_id}")
        out.print(f"private key  {private_path}  (keep it secret; mode 0600)")
        out.print(f"public key   {public_path}  (give it to verifiers)")
    return ExitCode.PASS
