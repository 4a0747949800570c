"""Write a bundle's or sealed run's report: one self-contained HTML page of what it seals.

The bundle or run is verified first (offline, as `repro verify`, with `--key` or
`--trusted-keys`); the page opens with that verdict (PASS or FAIL, the signer, the evidence
classes, every gate with its measured value and bound), then the token arrivals per prompt,
TTFT and rates against the throughput floor, the acceptance per draft position, the native
truth (processes, ELF objects by loader rule, the dispatch variant, drifts), and with
`--against BUNDLE` what differs from it, by section first. A FAIL still writes the page, saying
why; when the files are not those the signer sealed it shows the verdict alone. The page has no
script and fetches nothing: it opens in any browser, offline. `--png` also writes one image per
chart beside it. Exit 0 when the verification passes, 1 when it fails.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from repro_serving.builder.commands._keys import add_trust_arguments, trusted
from repro_serving.builder.errors import ExitCode
from repro_serving.builder.render import Report, console, write_report
from repro_serving.builder.report.model import Comparison
from repro_serving.builder.report.model import Report as RunReport
from repro_serving.builder.sealing.integrity import bundle_path


class ReportOutput(Report):
    """The page written (`ok`: the bundle or run verified), its chart images, and the report
    it shows."""

    html: str
    """The page's path."""
    images: tuple[str, ...]
    """One PNG per chart, with `--png`."""
    report: RunReport


REPORT = ReportOutput
"""The document `--json` prints (its schema: `repro schema report`)."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", metavar="BUNDLE_OR_RUN")  # a string: Path("") would be "."
    add_trust_arguments(parser)
    parser.add_argument(
        "--out", type=Path, metavar="FILE.html", help="default: BUNDLE_OR_RUN.report.html beside it"
    )
    parser.add_argument(
        "--against", metavar="BUNDLE", help="a reference bundle or run to compare with"
    )
    parser.add_argument("--png", action="store_true", help="also one PNG per chart beside it")
    parser.add_argument("--json", action="store_true", help="machine-readable report")


def execute(args: argparse.Namespace) -> int:
    from repro_serving.builder.report.write import write_page  # matplotlib: only when drawn

    against = bundle_path(args.against) if args.against is not None else None
    written = write_page(
        bundle_path(args.bundle), trusted(args), out=args.out, against=against, png=args.png
    )
    ok = written.report.verdict.ok
    if args.json:
        write_report(
            ReportOutput(
                ok=ok,
                html=str(written.html),
                images=tuple(str(image) for image in written.images),
                report=written.report,
            )
        )
    else:
        out = console()
        verdict = "PASS" if ok else "FAIL"
        out.print(f"{verdict}: report of {written.report.subject.path} written to {written.html}")
        for image in written.images:
            out.print(f"chart image {image}")
        if written.report.comparison is not None:
            _print_comparison(written.report.comparison)
    return int(ExitCode.PASS if ok else ExitCode.CHECK_FAILED)


def _print_comparison(comparison: Comparison) -> None:
    """The headline of the comparison: what changed among the figures, and the exactness."""
    out = console()
    if not comparison.reference_intact:
        why = comparison.reference_failures[0] if comparison.reference_failures else None
        out.print(
            f"against {comparison.reference}: not compared: its signature or its files do not "
            "hold for the keys you trust (another signer, or files changed since sealing)"
            + (f": {why}" if why else "")
        )
        return
    changed = [f for f in comparison.figures if f.change != "same"]
    out.print(f"against {comparison.reference}: {len(changed)} headline figure(s) differ")
    for figure in changed:
        out.print(
            f"  {figure.figure}: {figure.subject} here, {figure.reference} there ({figure.change})"
        )
    if comparison.exactness is not None:
        out.print(f"  {comparison.exactness}")
