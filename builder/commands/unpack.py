"""Restore a bundle's directory from an archive written by `repro pack`.

The archive must hold one top-level directory of directories and regular files only (no link,
no absolute path, no `..`); it is unpacked beside its destination and renamed into place whole,
never over an existing directory. Verify the bundle afterwards: an archive is only a way to
carry it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Literal

from repro_serving.builder.errors import BadInput, ExitCode
from repro_serving.builder.render import Report, console, write_report
from repro_serving.builder.sealing.archive import unpack


class UnpackOutput(Report):
    """`repro unpack --json`: the bundle's directory written."""

    ok: Literal[True] = True
    bundle: str


REPORT = UnpackOutput
"""The document `--json` prints (its schema: `repro schema unpack`)."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("archive", type=Path, metavar="ARCHIVE", help="a tar from repro pack")
    parser.add_argument(
        "--into", type=Path, default=Path(), help="the directory to unpack into (default: .)"
    )
    parser.add_argument("--json", action="store_true", help="print the bundle's directory")


def execute(args: argparse.Namespace) -> int:
    if not args.archive.is_file():
        raise BadInput("no archive", where=str(args.archive), hint="name a file from repro pack")
    if not args.into.is_dir():
        raise BadInput("not a directory to unpack into", where=str(args.into))
    bundle = unpack(args.archive, args.into)
    if args.json:
        write_report(UnpackOutput(bundle=str(bundle)))
    else:
        console().print(f"unpacked {args.archive} into {bundle}; verify it: repro verify {bundle}")
    return ExitCode.PASS
