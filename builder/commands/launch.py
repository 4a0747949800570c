"""Replay a sealed bundle: preflight (= verify --host), start as locked, judge, seal the run.

Nothing starts unless the bundle verifies and this host holds every pin; then the candidate
profile runs once against the sealed teacher, every process audited live, every gate applied,
teardown proven. The run directory is sealed under `--runs` when `--signing-key` is given,
with its report (`repro report`, against the bundle) beside it, `RUN.report.html`; its path is
printed. BUNDLE is a bundle's directory or the one file `repro pack` makes of it, replayed from a
private unpacked copy. Exit 0 only when every gate passes.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Literal

from repro_serving.builder.commands._keys import (
    add_signing_key_argument,
    add_trust_arguments,
    signing_key_path,
    trusted,
)
from repro_serving.builder.commands._shared import (
    Verification,
    difference_table,
    print_report,
)
from repro_serving.builder.commands.run import RunSummary, print_summary, run_report_error
from repro_serving.builder.drift import Difference
from repro_serving.builder.errors import ExitCode
from repro_serving.builder.progress import say
from repro_serving.builder.render import Report, console, write_report
from repro_serving.builder.replay import PreflightRefused, launch
from repro_serving.builder.sealing.archive import bundle_directory
from repro_serving.builder.sealing.integrity import bundle_path
from repro_serving.builder.sealing.keys import SigningKey


class PreflightOutput(Report):
    """Nothing started: the bundle does not verify, or this host does not hold a pin."""

    ok: Literal[False] = False
    preflight: Verification
    """`verify --host` of the bundle on this host."""


class LaunchOutput(Report):
    """The candidate replayed (`ok`: every gate passed), and where its run was sealed."""

    run: RunSummary
    differences: tuple[Difference, ...] = ()
    """What this host had other than the bundle where the manifest allows it (sealed with the
    run, in `evidence/replay.json`)."""
    sealed: str | None
    """The sealed run directory; null without `--signing-key`."""


REPORT = LaunchOutput | PreflightOutput
"""The document `--json` prints (its schema: `repro schema launch`)."""


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
    # a bundle packed as one file (`repro pack`) is replayed from a private unpacked copy
    with bundle_directory(bundle_path(args.bundle)) as directory:
        return _launch(directory, args, key)


def _launch(directory: Path, args: argparse.Namespace, key: SigningKey | None) -> int:
    try:
        replay = launch(
            directory,
            trusted(args),
            runs=args.runs,
            signing_key=key,
            profile=args.profile,
            anchor=args.anchor,
        )
    except PreflightRefused as refused:
        # the bundle as the user named it: the archive, where one was named
        report = dataclasses.replace(refused.report, bundle=bundle_path(args.bundle))
        if args.json:
            write_report(PreflightOutput(preflight=Verification.of(report)))
        else:
            print_report(report)
            console().print(refused.diagnostics())
        return int(ExitCode.CHECK_FAILED)
    sealed = str(replay.sealed.path) if replay.sealed else None
    if args.json:
        write_report(
            LaunchOutput(
                ok=replay.run.exit_code == ExitCode.PASS,
                error=run_report_error(replay.run),
                run=RunSummary.of(replay.run),
                differences=replay.preflight.differences,
                sealed=sealed,
            )
        )
    else:
        print_summary(replay.run, None)
        if replay.preflight.differences:
            console().print(difference_table(replay.preflight.differences))
        console().print(f"run sealed at {sealed}" if sealed else "run not sealed (no key)")
    if replay.sealed is not None and key is not None:
        _report_beside(replay.sealed.path, directory, args, key, json=args.json)
    return int(replay.run.exit_code)


def _report_beside(
    run: Path, bundle: Path, args: argparse.Namespace, key: SigningKey, *, json: bool
) -> None:
    """The sealed run's report (`repro report`) beside it, against the bundle it replayed; its
    path printed, on stderr under `--json` (stdout holds the one document)."""
    from repro_serving.builder.report.write import report_run  # matplotlib: only when drawn

    line = report_run(run, trusted(args), key, against=bundle)
    if json:
        say(line)
    else:
        console().print(line)
