"""Resolve every pin of a manifest on this host, run the teacher, and seal `repro/<name>/`.

Any fact that cannot be established or disagrees refuses the build with a drift report and
writes no bundle; the teacher profile must pass its own gates; the bundle is written to a
temporary sibling and renamed into place, signed with `--signing-key`.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Literal

from repro_serving.builder.build import BuildRefused, build
from repro_serving.builder.commands._keys import add_signing_key_argument, required_signing_key_path
from repro_serving.builder.commands._shared import RefusedOutput, output_directory, refused_build
from repro_serving.builder.errors import ExitCode
from repro_serving.builder.progress import say
from repro_serving.builder.render import Report, console, write_report
from repro_serving.builder.sealing.keys import SigningKey


class SealedOutput(Report):
    """A bundle sealed: where, and by which key."""

    ok: Literal[True] = True
    bundle: str
    key_id: str
    """The sha256 of the raw Ed25519 public key that signed it."""


REPORT = SealedOutput | RefusedOutput
"""The document `--json` prints (its schema: `repro schema build`)."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path, metavar="MANIFEST")
    add_signing_key_argument(parser, "seal the bundle with")
    parser.add_argument("--out", type=Path, default=Path("repro"), help="default: repro/")
    parser.add_argument("--force", action="store_true", help="replace an existing bundle")
    parser.add_argument("--run-dir", type=Path, help="keep the teacher run here")
    parser.add_argument("--json", action="store_true", help="machine-readable result")


def execute(args: argparse.Namespace) -> int:
    key = SigningKey.from_path(required_signing_key_path(args))
    output_directory(args.out, option="--out")
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="repro-build-")) / "run"
    progress = None if args.json else say
    try:
        result = build(args.manifest, key, args.out, run_dir, force=args.force, progress=progress)
    except BuildRefused as refusal:
        return refused_build(refusal.drifts, refusal.what, as_json=args.json)
    if args.json:
        write_report(SealedOutput(bundle=str(result.sealed.path), key_id=result.sealed.key_id))
    else:
        console().print(f"sealed {result.sealed.path} (key {result.sealed.key_id[:16]})")
    return int(ExitCode.PASS)
