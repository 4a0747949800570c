"""Prove a bundle intact and recompute every claim of its lock from the sealed evidence.

Offline by default: the DSSE signature against a trusted key, every file's sha256, no file
missing or extra, then each claim recomputed with its evidence class printed beside it. BUNDLE
is a directory, or an archive of one written by `repro pack` (unpacked into a temporary
directory for the verification).
`--host` also observes this machine and compares it with the manifest and the lock, starting
nothing. Exit 0 when everything holds, 1 on any drift or failed claim.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from pathlib import Path

from repro_serving.builder.commands._keys import add_trust_arguments, trusted
from repro_serving.builder.commands._shared import Verification, print_report
from repro_serving.builder.errors import ExitCode
from repro_serving.builder.render import Report, write_report
from repro_serving.builder.sealing.archive import bundle_directory
from repro_serving.builder.sealing.integrity import bundle_path
from repro_serving.builder.verify import verify


class VerifyOutput(Verification, Report):
    """`repro verify --json`: the envelope, then the verification."""


REPORT = VerifyOutput
"""The document `--json` prints (its schema: `repro schema verify`)."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", metavar="BUNDLE")  # a string: Path("") would be "."
    add_trust_arguments(parser)
    parser.add_argument("--host", action="store_true", help="also re-observe this machine")
    parser.add_argument(
        "--anchor",
        type=Path,
        help="directory the manifest's relative paths resolve against on this host "
        "(default: that of the manifest as the build was given it)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable report")
    parser.add_argument(
        "--details", action="store_true", help="list every claim, not only those that fail"
    )


def execute(args: argparse.Namespace) -> int:
    what = "hashing every file, recomputing every claim" + (
        ", observing this host" if args.host else ""
    )
    bundle = bundle_path(args.bundle)
    shown: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if not args.json and sys.stderr.isatty():
        from rich.console import Console  # the spinner, only where someone watches it
        from rich.status import Status

        shown = Status(f"verifying {bundle}: {what}", console=Console(stderr=True))
    with shown, bundle_directory(bundle) as directory:
        if args.host:
            from repro_serving.builder.hostcheck import verify_here  # observes this host

            report = verify_here(directory, trusted(args), anchor=args.anchor)
        else:
            report = verify(directory, trusted(args), anchor=args.anchor)
    report = dataclasses.replace(report, bundle=bundle)  # the archive, where one was named
    if args.json:
        write_report(VerifyOutput.of(report))
    else:
        print_report(report, details=args.details)
    return int(ExitCode.PASS if report.ok else ExitCode.CHECK_FAILED)
