"""Make on this machine what a verified bundle pins, so that `repro launch` can run it.

The bundle is verified offline first (nothing unverified is run); then the serving environment
is made from the locked wheels (fetched through the package index pip is configured with, each
checked by sha256 before install), each model regenerated or fetched at its revision and each
source cloned at its commit, every file checked against the lock. Idempotent: what already holds
is left alone and said so. Atomic: each is built beside its final path and renamed into place.
Exit 0 when everything holds, 1 when something cannot be made to hold.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Literal

from rich.console import Console

from repro_serving.builder.commands._keys import add_trust_arguments, trusted
from repro_serving.builder.commands._shared import Verification, print_report
from repro_serving.builder.drift import Drift
from repro_serving.builder.errors import ExitCode
from repro_serving.builder.progress import showing
from repro_serving.builder.render import (
    Output,
    Report,
    console,
    drift_table,
    table,
    write_report,
)
from repro_serving.builder.restore.run import RestoreRefused, RestoreReport, restore
from repro_serving.builder.restore.step import Action
from repro_serving.builder.sealing.integrity import bundle_path


class StepOutput(Output):
    """One thing the bundle pins, made to hold on this host or found holding."""

    kind: str
    """python, model or source."""
    subject: str
    target: str
    """Where it is on this host."""
    action: Action
    detail: str
    drifts: tuple[Drift, ...]
    """Why it cannot be made to hold (`refused`)."""


class RestoreOutput(Report):
    """Every step (`ok`: everything the bundle pins holds here now)."""

    bundle: str
    changed: bool
    """Something was made (a step `restored`)."""
    signed_by: tuple[str, ...]
    steps: tuple[StepOutput, ...]

    @classmethod
    def of(cls, report: RestoreReport) -> RestoreOutput:
        return cls(
            ok=report.ok,
            bundle=str(report.bundle),
            changed=report.changed,
            signed_by=report.key_ids,
            steps=tuple(
                StepOutput(
                    kind=step.kind,
                    subject=step.subject,
                    target=step.target,
                    action=step.action,
                    detail=step.detail,
                    drifts=tuple(step.drifts),
                )
                for step in report.steps
            ),
        )


class RestoreUnverifiedOutput(Report):
    """Nothing made: the bundle does not verify."""

    ok: Literal[False] = False
    verify: Verification
    steps: tuple[()] = ()
    """None taken."""


REPORT = RestoreOutput | RestoreUnverifiedOutput
"""The document `--json` prints (its schema: `repro schema restore`)."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", metavar="BUNDLE")  # a string: Path("") would be "."
    add_trust_arguments(parser)
    parser.add_argument(
        "--anchor",
        type=Path,
        help="directory the manifest's relative paths resolve against on this host, as for "
        "verify and launch (default: that of the manifest as the build was given it)",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace what exists and differs (atomically)"
    )
    parser.add_argument(
        "--python",
        type=Path,
        metavar="PATH",
        help="the interpreter to make the serving venv with (default: the sealed release where "
        "it is found, else the newest release the manifest's [python] interpreter admits)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable report")


def execute(args: argparse.Namespace) -> int:
    quiet = args.json or not showing() or not sys.stderr.isatty()
    err = Console(stderr=True, quiet=quiet)
    try:
        report = restore(
            bundle_path(args.bundle),
            trusted(args),
            anchor=args.anchor,
            force=args.force,
            interpreter=args.python,
            progress=lambda message: err.print(f"repro restore: {message}"),
        )
    except RestoreRefused as refused:
        if args.json:
            write_report(RestoreUnverifiedOutput(verify=Verification.of(refused.report)))
        else:
            print_report(refused.report)
            console().print(refused.diagnostics())
        return int(ExitCode.CHECK_FAILED)
    if args.json:
        write_report(RestoreOutput.of(report))
    else:
        print_restore(report)
    return int(ExitCode.PASS if report.ok else ExitCode.CHECK_FAILED)


def print_restore(report: RestoreReport) -> None:
    out = console()
    out.print(
        table(
            f"{report.bundle}: restored on this host",
            ("kind", "subject", "where", "action", "detail"),
            ((s.kind, s.subject, s.target, s.action.value, s.detail) for s in report.steps),
        )
    )
    drifts = [d for step in report.steps for d in step.drifts]
    if drifts:
        out.print(drift_table(drifts))
    if not report.ok:
        out.print(f"FAIL: {report.bundle} cannot be restored here")
    elif report.changed:
        out.print(f"RESTORED: {report.bundle}")
    else:
        out.print(f"NOTHING TO DO: everything {report.bundle} pins already holds here")
