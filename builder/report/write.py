"""Put a report on disk: the HTML page, and with `png` one image per chart beside it.

The page of `DIR` goes beside it, `DIR.report.html`, unless another path is named: never into
a sealed directory, where any file more would break its seal. Every file is written through a
temporary sibling renamed into place, so a file that exists is whole.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from repro_serving.builder.errors import BadInput, NotObservable, ReproError
from repro_serving.builder.report.charts import draw
from repro_serving.builder.report.gather import read_report
from repro_serving.builder.report.model import Report
from repro_serving.builder.report.page import render
from repro_serving.builder.sealing.keys import SigningKey, TrustedKeys

SUFFIX: Final = ".report.html"


@dataclass(frozen=True)
class Written:
    report: Report
    html: Path
    images: tuple[Path, ...]
    """One PNG per chart, in page order, when they were asked for."""


def beside(directory: Path) -> Path:
    """Where the report of a bundle or sealed run goes by default: `DIR.report.html`."""
    resolved = directory.absolute()
    return resolved.with_name(resolved.name + SUFFIX)


def image_path(html: Path, chart_id: str) -> Path:
    """`X.report.html` → `X.report.<chart>.png`; `page.html` → `page.<chart>.png`."""
    return html.with_name(f"{html.name.removesuffix('.html')}.{chart_id}.png")


def write_page(
    path: Path,
    trusted: TrustedKeys,
    *,
    out: Path | None = None,
    against: Path | None = None,
    png: bool = False,
) -> Written:
    """Verify `path`, read its report and write it to `out` (default: `beside(path)`)."""
    html = out if out is not None else beside(path)
    if html.resolve().is_relative_to(path.resolve()):
        raise BadInput(
            "the report would be written into the directory it reports on",
            where=str(html),
            expected=f"a path outside {path}: a file more there breaks its seal",
            found="a path inside it",
            hint=f"leave --out out (the report goes to {beside(path)}) or name another path",
        )
    report = read_report(path, trusted, against=against)
    charts = draw(report, png=png)
    images = []
    _write(html, render(report, charts).encode("utf-8"))
    for chart in charts:
        if chart.png is not None:
            image = image_path(html, chart.id)
            _write(image, chart.png)
            images.append(image)
    return Written(report, html, tuple(images))


def _write(path: Path, data: bytes) -> None:
    if path.is_dir():
        raise BadInput("the report's path is a directory", where=str(path), expected="a file path")
    try:
        _replace(path, data)
    except OSError as error:
        raise NotObservable(
            "cannot write the report",
            where=str(path),
            found=error.strerror or type(error).__name__,
            hint="name a writable path with --out",
        ) from error


def _replace(path: Path, data: bytes) -> None:
    """`data` into a new sibling (made with the process's umask: a page is shared, not
    private), renamed over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with temporary.open("xb") as out:
            out.write(data)
        temporary.replace(path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def report_run(run: Path, trusted: TrustedKeys, key: SigningKey, *, against: Path) -> str:
    """The report of a run just sealed with `key`, beside it, compared with the bundle it
    replayed: the line that names its path, or says why it was not written. The run
    is verified again, trusting `key` beside `trusted` (it signed the run: the bundle's signer
    need not be the run's). A report that cannot be made leaves the run as it is."""
    own = [(key.public, "the key the run was sealed with")]
    others = [(public, trusted.sources[key_id]) for key_id, public in trusted.by_id.items()]
    try:
        written = write_page(run, TrustedKeys.of([*others, *own]), against=against)
    except ReproError as error:
        return f"report not written: {error.diagnostics()}"
    return f"report: {written.html}"
