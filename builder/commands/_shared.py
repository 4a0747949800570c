"""Arguments and output several commands share: output directories and a verification report
(the keys are `_keys`')."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from repro_serving.builder.errors import BadInput, NotObservable
from repro_serving.builder.readers import describe_mode
from repro_serving.builder.render import console, drift_table, table
from repro_serving.builder.verify import VerifyReport


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


def report_document(report: VerifyReport) -> dict[str, Any]:
    return {
        "bundle": str(report.bundle),
        "ok": report.ok,
        "signed_by": list(report.key_ids),
        "claims": [
            {
                "claim": c.claim,
                "evidence": c.evidence.value,
                "value": c.value,
                "ok": c.ok,
                "detail": c.detail,
            }
            for c in report.checks
        ],
        "drifts": [d.model_dump(mode="json") for d in report.findings],
        "stopped": report.stopped or None,
    }


def print_report(report: VerifyReport) -> None:
    out = console()
    if report.checks:
        out.print(
            table(
                f"{report.bundle}: claims recomputed from the sealed evidence",
                ("claim", "class", "value", "ok", "detail"),
                (
                    (c.claim, c.evidence.value, c.value, "yes" if c.ok else "NO", c.detail)
                    for c in report.checks
                ),
            )
        )
    if report.findings:
        out.print(drift_table(report.findings))
    if report.stopped:
        out.print(report.stopped)
    signers = ", ".join(k[:16] for k in report.key_ids) or "nobody"
    verdict = "PASS" if report.ok else "FAIL"
    out.print(f"{verdict}: {report.bundle} signed by {signers}")
