"""Arguments and output several commands share: output directories, a verification report and
a refusal listing drifts, for people and as `--json` (the keys are `_keys`')."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Self

from pydantic import Field, JsonValue

from repro_serving.builder.documents.lock import EvidenceClass
from repro_serving.builder.drift import Difference, Drift
from repro_serving.builder.errors import BadInput, ExitCode, NotObservable
from repro_serving.builder.readers import describe_mode
from repro_serving.builder.render import (
    Output,
    Report,
    console,
    drift_table,
    say,
    table,
    write_report,
)
from repro_serving.builder.verify import VerifyReport

if TYPE_CHECKING:
    from rich.table import Table


def output_directory(path: Path, *, option: str) -> Path:
    """`path` as a directory to write into, made with its parents where absent; a file, or a
    symlink to nothing, in its place is bad input naming it."""
    if path.is_symlink() and not path.exists():
        raise BadInput(
            f"{option} is a dangling symlink",
            where=str(path),
            expected="a directory, or a path where nothing is yet",
            found=f"a symlink to {path.readlink()}, which does not exist",
        )
    if path.exists() and not path.is_dir():
        raise BadInput(
            f"{option} is not a directory",
            where=str(path),
            expected="a directory, or a path where nothing is yet",
            found=describe_mode(path.stat().st_mode),
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as error:  # a part of the path is a file
        raise BadInput(
            f"{option} cannot be made a directory",
            where=str(path),
            found=f"{error.filename}: {error.strerror}",
        ) from error
    except OSError as error:
        raise NotObservable(
            f"cannot make the {option} directory",
            where=str(path),
            found=error.strerror or type(error).__name__,
        ) from error
    return path


class ClaimOutput(Output):
    """One claim of the lock, recomputed, with its evidence class."""

    claim: str
    evidence: EvidenceClass
    value: str
    """The value a person checks."""
    ok: bool
    detail: str
    """Why it failed, or what it leaves unchecked."""
    figures: dict[str, JsonValue] = Field(default_factory=dict)
    """The numbers behind `value`, as numbers, each unit in its key (`..._tok_s`, `..._s`,
    `..._ms`): what a gate measured, recomputed from the sealed evidence."""


class Verification(Output):
    """A bundle verified (`builder.verify`): its signers, every claim recomputed, every drift."""

    bundle: str
    ok: bool
    """No drift, and every claim holds."""
    signed_by: tuple[str, ...]
    """The id of each trusted key whose signature holds."""
    claims: tuple[ClaimOutput, ...]
    drifts: tuple[Drift, ...]
    differences: tuple[Difference, ...] = ()
    """What `--host` found other than sealed where the manifest allows it."""
    stopped: str | None
    """Why `--host` observed no more than it did (a host that selects other code), or null."""

    @classmethod
    def of(cls, report: VerifyReport) -> Self:
        return cls(
            bundle=str(report.bundle),
            ok=report.ok,
            signed_by=report.key_ids,
            claims=tuple(
                ClaimOutput(
                    claim=c.claim,
                    evidence=c.evidence,
                    value=c.value,
                    ok=c.ok,
                    detail=c.detail,
                    figures=dict(c.figures),
                )
                for c in report.checks
            ),
            drifts=report.findings,
            differences=report.differences,
            stopped=report.stopped or None,
        )


class RefusedOutput(Report):
    """A build refused before anything was sealed: every drift at once."""

    ok: Literal[False] = False
    drifts: tuple[Drift, ...]


def refused_build(drifts: Sequence[Drift], what: str, *, as_json: bool) -> int:
    """A build refused (`BuildRefused`): every drift, as `RefusedOutput` with --json, else as a
    table headed `what`; the exit code."""
    if as_json:
        write_report(RefusedOutput(drifts=tuple(drifts)))
    else:
        console().print(drift_table(drifts, what))
    return int(ExitCode.CHECK_FAILED)


def print_report(report: VerifyReport, *, details: bool = False) -> None:
    """The verdict on one screen: how many claims were recomputed and of which class, a table
    of those that do not hold (of every claim with `details`), each finding and difference,
    and the verdict line."""
    numbered = list(enumerate(report.checks, start=1))
    shown = numbered if details else [(n, c) for n, c in numbered if not c.ok]
    if report.checks:
        classes = Counter(c.evidence.value for c in report.checks)
        failed = sum(not c.ok for c in report.checks)
        say(
            f"{report.bundle}: {len(report.checks)} claims recomputed from the sealed evidence ("
            + ", ".join(f"{count} {name}" for name, count in sorted(classes.items()))
            + ("), every one holds" if not failed else f"), {failed} do not hold")
            + ("" if details or failed else "; --details lists them")
        )
    if shown:
        console().print(
            table(
                f"{report.bundle}: claims recomputed from the sealed evidence"
                + ("" if details else ", those that do not hold"),
                ("#", "claim", "class", "value", "ok", "detail"),
                (
                    (str(n), c.claim, c.evidence.value, c.value, "yes" if c.ok else "NO", c.detail)
                    for n, c in shown
                ),
            )
        )
    if report.findings:
        console().print(drift_table(report.findings))
    if report.differences:
        console().print(difference_table(report.differences))
    if report.stopped:
        say(report.stopped)
    signers = ", ".join(k[:16] for k in report.key_ids) or "no key you trust"
    verdict = "PASS" if report.ok else "FAIL"
    differing = f", {len(report.differences)} difference(s) the manifest allows" * (
        bool(report.differences)
    )
    say(f"{verdict}: {report.bundle} signed by {signers}{differing}")


def difference_table(differences: tuple[Difference, ...]) -> Table:
    """What differs from the record where the manifest allows it, one row each."""
    return table(
        "differences from the record that the manifest allows",
        ("fact", "sealed", "here", "allowed by", "so"),
        ((d.subject, d.sealed, d.here, d.accepted_by, d.consequence) for d in differences),
    )
