"""Write a bundle as one file: a deterministic tar whose sha256 names it.

`repro pack repro/tiny-cpu` writes `tiny-cpu.tar` (or `--out FILE`): the bundle's directory and
every file in it, in a fixed order with fixed owners, modes and times, so one bundle always
gives the same bytes. `repro verify` and `repro launch` take the archive as they take the
directory; `repro unpack` restores the directory.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Literal

from repro_serving.builder.errors import ExitCode
from repro_serving.builder.render import Report, console, write_report
from repro_serving.builder.sealing.archive import pack
from repro_serving.builder.sealing.integrity import bundle_path


class PackOutput(Report):
    """`repro pack --json`: the archive written."""

    ok: Literal[True] = True
    archive: str
    sha256: str


REPORT = PackOutput
"""The document `--json` prints (its schema: `repro schema pack`)."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", metavar="BUNDLE", help="a bundle directory")
    parser.add_argument("--out", type=Path, help="the archive to write (default: NAME.tar)")
    parser.add_argument("--json", action="store_true", help="print the archive and its sha256")


def execute(args: argparse.Namespace) -> int:
    bundle = bundle_path(args.bundle)
    name = Path(os.path.abspath(bundle)).name  # noqa: PTH100 - the name as given
    archive = args.out or Path(f"{name}.tar")
    digest = pack(bundle, archive)
    if args.json:
        write_report(PackOutput(archive=str(archive), sha256=digest))
    else:
        console().print(f"packed {bundle} into {archive} (sha256 {digest})")
    return ExitCode.PASS
