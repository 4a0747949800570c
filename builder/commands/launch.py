"""Replay a sealed bundle: preflight (= verify --host), start as locked, judge, seal the run.

Nothing starts unless the bundle verifies and this host holds every pin; then the candidate
profile runs once against the sealed teacher, every process audited live, every gate applied,
teardown proven. The run directory is sealed under `--runs` when `--signing-key` is given.
Exit 0 only when every gate passes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from repro_serving.builder.commands._keys import (
    add_signing_key_argument,
    add_trust_arguments,
    signing_key_path,
    trusted,
)
from repro_serving.builder.commands._shared import print_report, report_document
from repro_serving.builder.commands.run import print_summary
from repro_serving.builder.errors import ExitCode
from repro_serving.builder.render import console, write_json
from repro_serving.builder.replay import PreflightRefused, launch
from repro_serving.builder.sealing.integrity import bundle_path
from repro_serving.builder.sealing.keys import SigningKey


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", metavar="BUNDLE")  # a string: Path("") would be "."
    add_trust_arguments(parser)
    add_signing_key_argument(parser, "seal the run with")
    parser.add_argument("--runs", type=Path, default=Path("runs"), help="default: runs/")
    parser.add_argument("--profile", help="default: candidate, else the teacher profile")
    parser.add_argument("--anchor", type=Path, help="as for verify")
    parser.add_argument("--json", action="store_true", help="machine-readable report")


def execute(args: argparse.Namespace) -> int:
    key_path = signing_key_path(args)
    key = SigningKey.from_path(key_path) if key_path else None
    try:
        replay = launch(
            bundle_path(args.bundle),
            trusted(args),
            runs=args.runs,
            signing_key=key,
            profile=args.profile,
            anchor=args.anchor,
        )
    except PreflightRefused as refused:
        if args.json:
            write_json({"ok": False, "preflight": report_document(refused.report)})
        else:
            print_report(refused.report)
            console().print(refused.diagnostics())
        return int(ExitCode.CHECK_FAILED)
    sealed = str(replay.sealed.path) if replay.sealed else None
    if args.json:
        write_json({"ok": replay.run.passed, "run": replay.run.summary(), "sealed": sealed})
    else:
        print_summary(replay.run, None)
        console().print(f"run sealed at {sealed}" if sealed else "run not sealed (no key)")
    return int(replay.run.exit_code)
