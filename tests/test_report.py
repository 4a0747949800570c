"""`repro report`: a verified bundle or sealed run as one self-contained page, checked in a
real browser.

The committed bundles (`repro/tiny-cpu`, `repro/laguna-102tps`) and a fresh `repro launch` run
are reported and each page opened in headless Chromium (`tests/browser.py`): every chart is drawn
where the page places it (a region of the screenshot with ink and colours), and the page asked
for nothing but itself and its own `data:` images. The Laguna report shows the record's numbers,
computed from its sealed evidence: a copy whose arrival offsets are changed and sealed again
shows the rates those offsets give, and a copy changed after sealing shows the verdict alone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from browser import ChartBox, open_page
from bundle_assets import resealed
from conftest import REPO_ROOT, SERVE_VENV
from PIL import Image

from repro_serving.builder.build import build
from repro_serving.builder.cli import main
from repro_serving.builder.documents.audit import AuditDocument
from repro_serving.builder.documents.evidence import VerdictStatus
from repro_serving.builder.documents.manifest import ThroughputGate
from repro_serving.builder.documents.rundir import read_rows
from repro_serving.builder.drift import Drift, DriftKind
from repro_serving.builder.errors import BadInput
from repro_serving.builder.report.compute import audit_start, rate_problem
from repro_serving.builder.report.gather import read_report
from repro_serving.builder.report.model import (
    AuditStart,
    Native,
    Report,
    Subject,
    SubjectKind,
    Verdict,
)
from repro_serving.builder.report.page import CONTENT_SECURITY_POLICY, render
from repro_serving.builder.report.write import beside, write_page
from repro_serving.builder.sealing.keys import SigningKey, TrustedKeys
from repro_serving.builder.verify import verify
from repro_serving.launch.historical import load_record
from repro_serving.launch.throughput import measure

PUB = REPO_ROOT / "keys" / "example.pub"
KEY_FILE = REPO_ROOT / "keys" / "example.key"
KEY = SigningKey.from_path(KEY_FILE)
TRUSTED = TrustedKeys.from_key_file(PUB)
LAGUNA_MANIFEST = REPO_ROOT / "manifests" / "laguna-102tps.toml"
COMMITTED_LAGUNA = REPO_ROOT / "repro" / "laguna-102tps"
COMMITTED_TINY = REPO_ROOT / "repro" / "tiny-cpu"
BENCH = "evidence/run/bench.json"
INK = 0.02
"""Share of a chart's region that must be drawn (darker than light grey)."""
COLOURS = 8
"""Distinct colours a drawn chart has at least (a blank or one-colour box has one or two)."""


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Laguna bundle sealed again from its manifest and the record's evidence (imported:
    no server), by this repro: the same evidence as the committed one."""
    root = tmp_path_factory.mktemp("laguna")
    return build(LAGUNA_MANIFEST, KEY, root, root / "work").sealed.path


def _laguna(which: str, rebuilt: Path) -> Path:
    return COMMITTED_LAGUNA if which == "committed" else rebuilt


# --- what a page must be: drawn, offline ------------------------------------------------------


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.tags: list[str] = []
        self.policy: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        values = dict(attrs)
        self.urls += [v or "" for k, v in attrs if k in ("src", "href", "action", "srcset")]
        if tag == "meta" and values.get("http-equiv") == "Content-Security-Policy":
            self.policy.append(values.get("content") or "")


def assert_self_contained(html: Path) -> None:
    """No script, no address to fetch in any attribute, and a policy that forbids fetching."""
    links = _Links()
    links.feed(html.read_text(encoding="utf-8"))
    assert "script" not in links.tags and "link" not in links.tags
    assert all(url.startswith("data:image/svg+xml;base64,") for url in links.urls), links.urls
    assert links.policy == [CONTENT_SECURITY_POLICY]


def drawn(image: Image.Image, box: ChartBox) -> bool:
    """The box holds a chart: enough ink, and more than a couple of colours."""
    region = image.crop(
        (round(box.x), round(box.y), round(box.x + box.width), round(box.y + box.height))
    ).convert("RGB")
    dark = region.convert("L").point(lambda v: 255 if v < 200 else 0).histogram()[255]
    colours = region.getcolors(maxcolors=1 << 20) or []
    return dark / (region.width * region.height) >= INK and len(colours) >= COLOURS


def assert_renders_offline(html: Path, shots: Path, charts: set[str]) -> None:
    """Open the page in headless Chromium: each of `charts` drawn where the page places it,
    and no request but the page itself and its `data:` images."""
    assert_self_contained(html)
    page = open_page(html, shots / f"{html.name}.png")
    assert {box.id for box in page.charts} == {f"chart-{name}" for name in charts}
    image = Image.open(page.screenshot)
    for box in page.charts:
        assert box.loaded, box.id
        assert box.width >= 300 and box.height >= 100, box
        assert drawn(image, box), box.id
    assert page.requests[0] == page.url
    assert [url for url in page.requests if url != page.url and not url.startswith("data:")] == []


def test_the_drawn_check_fails_on_a_blank_chart_and_the_recorder_sees_a_request(
    rebuilt: Path, tmp_path: Path
) -> None:
    """The browser checks can fail: a page whose charts are blank images is not drawn, and a
    page that asks for an address is seen asking."""
    html = write_page(rebuilt, TRUSTED, out=tmp_path / "page.html").html
    blank = "data:image/svg+xml;base64,PHN2ZyB4bWxucz0naHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmcnLz4="
    text = re.sub(r"data:image/svg\+xml;base64,[A-Za-z0-9+/=]+", blank, html.read_text())
    (tmp_path / "blank.html").write_text(text)
    page = open_page(tmp_path / "blank.html", tmp_path / "blank.png")
    assert page.charts and not any(drawn(Image.open(page.screenshot), b) for b in page.charts)

    fetching = text.replace(CONTENT_SECURITY_POLICY, "default-src *").replace(
        "<main>", '<main><img src="http://repro.invalid/pixel.png">', 1
    )
    (tmp_path / "fetching.html").write_text(fetching)
    page = open_page(tmp_path / "fetching.html", tmp_path / "fetching.png")
    assert "http://repro.invalid/pixel.png" in page.requests


# --- the Laguna record --------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["committed", "rebuilt"])
def test_the_laguna_report_shows_the_record_computed_from_its_evidence(
    which: str, rebuilt: Path, tmp_path: Path
) -> None:
    written = write_page(_laguna(which, rebuilt), TRUSTED, out=tmp_path / "laguna.html")
    report = written.report
    assert report.verdict.ok, report.verdict.failures
    assert report.subject.kind is SubjectKind.IMPORTED
    throughput = report.throughput
    assert throughput is not None and throughput.tokens == 100 and throughput.gated
    assert f"{throughput.historical_median:.2f}" == "102.97"
    assert f"{throughput.conventional_median:.2f}" == "101.94"
    gates = {g.gate: g for g in report.gates}
    assert gates["exact_token_ids"].measured == "13/13 rows equal"
    assert gates["throughput"].status is VerdictStatus.PASS
    acceptance = report.acceptance
    assert acceptance is not None
    assert acceptance.per_position == (1171, 847, 631, 497, 397, 328, 248, 204, 172, 140, 112)
    assert (acceptance.accepted, acceptance.draft_tokens) == (4747, 17699)
    assert acceptance.threshold == 1171 * acceptance.ratio_max
    text = _text(written.html)
    for shown in ("102.97 tok/s", "101.94 tok/s", "13/13", "1171 … 112", "4747/17699"):
        assert shown in text, shown
    assert report.native is not None and report.native.evidence == "declared"
    assert "No live audit is sealed" in text


def test_the_rates_shown_are_those_the_sealed_offsets_give(rebuilt: Path, tmp_path: Path) -> None:
    """Every arrival offset of the record doubled and the bundle sealed again: the signature
    holds, the lock's rate no longer does, and the report shows the recomputed rate, half."""

    def slower(root: Path) -> None:
        path = root / BENCH
        document = json.loads(path.read_text())
        for row in document["rows"]:
            row["token_id_offsets_s"] = [2 * t for t in row["token_id_offsets_s"]]
        path.write_text(json.dumps(document))

    changed = resealed(rebuilt, tmp_path, slower, "manifests/laguna-102tps.toml")
    report = write_page(changed, TRUSTED, out=tmp_path / "slower.html").report
    assert not report.verdict.ok and report.verdict.intact
    assert any("throughput" in failure for failure in report.verdict.failures)
    original = read_report(rebuilt, TRUSTED).throughput
    assert original is not None and report.throughput is not None
    assert report.throughput.conventional_median == pytest.approx(original.conventional_median / 2)
    assert "50.97 tok/s" in _text(tmp_path / "slower.html")
    # an imported record's floor scales its own rate: the gate measures the new one
    assert {g.gate: g.measured for g in report.gates}["throughput"] == (
        "50.97 tok/s over 100 tokens"
    )


def test_a_rate_that_is_a_lower_bound_is_marked_and_named(tmp_path: Path) -> None:
    """The first two tokens of one row of the tiny bundle put in one read (as a client read
    late): its window opens at the read before, and the page marks its rates with `≥` and
    names why."""
    rows_file = "evidence/start-1/rows.json"

    def read_late(root: Path) -> None:
        path = root / rows_file
        rows = json.loads(path.read_text())
        row = rows[0]
        row["token_offsets_s"][0] = row["token_offsets_s"][1]
        row["ttft_s"] = row["token_offsets_s"][0]
        row["token_reads"][0] = row["token_reads"][1]
        path.write_text(json.dumps(rows))

    changed = resealed(COMMITTED_TINY, tmp_path, read_late, "manifests/tiny-cpu.toml")
    report = write_page(changed, TRUSTED, out=tmp_path / "late.html").report
    assert report.throughput is not None
    late = json.loads((changed / rows_file).read_text())[0]
    after_ms = late["first_token_after_s"] * 1000
    sealed = read_rows(COMMITTED_TINY / rows_file)
    before = measure(sealed, len(sealed[0].token_ids)).lower_bounds
    assert late["prompt_id"] not in before
    assert report.throughput.lower_bounds == {
        **before,
        late["prompt_id"]: "token 0 came in a read of 2 tokens, so the window opens at the read "
        f"before ({after_ms:.1f} ms)",
    }
    text = _text(tmp_path / "late.html")
    assert "Lower bounds, not arrivals, in the medians: " + late["prompt_id"] in text
    (timing,) = [t for t in report.timings if t.prompt_id == late["prompt_id"]]
    assert timing.conventional is not None and f"≥ {timing.conventional:.2f}" in text
    assert text.count("≥ ") == 2 * len(report.throughput.lower_bounds), "both conventions of each"


def test_a_teacher_rate_other_than_its_rows_give_is_named() -> None:
    """The floor of a replay scales the teacher's stated rate: the report recomputes it from
    the rows it was captured from and says when they disagree."""
    record = load_record(REPO_ROOT / "records" / "laguna-102tps")
    gate = ThroughputGate(tokens=100, floor=0.95)
    measured = measure(record.bench.rows, 100).conventional_median
    honest = record.teacher.model_copy(update={"conventional_tok_s": measured})
    assert rate_problem(honest, record.bench.rows, gate) is None
    lowered = record.teacher.model_copy(update={"conventional_tok_s": 1.0})
    problem = rate_problem(lowered, record.bench.rows, gate)
    assert problem is not None and "states a conventional rate of 1.0 tok/s" in problem
    assert rate_problem(record.teacher, record.bench.rows, gate) is not None, "none stated"


def test_a_drift_of_the_live_audit_marks_the_process_it_names() -> None:
    audit = COMMITTED_TINY / "evidence" / "start-1" / "audit"
    processes = [
        process
        for role in ("api_server", "worker")
        for process in AuditDocument.from_bytes(
            (audit / f"{role}.json").read_bytes(), where=role
        ).processes
    ]
    worker = next(p for p in processes if p.role == "worker")
    drift = Drift(
        kind=DriftKind.UNEXPECTED_MAPPING,
        subject=f"pid {worker.pid} (worker): /tmp/libinjected.so",
        expected="no such mapping",
        observed="mapped",
        why="not explained by any loader rule",
    )
    start = audit_start(1, processes, 152, [drift])
    assert [(p.role, p.drifted) for p in start.processes] == [
        ("api_server", False), ("worker", True),
    ]  # fmt: skip
    for process in start.processes:
        rules = {c.rule: c.objects for c in start.by_rule if c.role == process.role}
        assert rules == process.rules and sum(rules.values()) == process.objects
    page = render(_report_with(start), ())
    assert page.count('<tr class="drift">') == 2, "the process row and the drift row"


def _report_with(start: AuditStart) -> Report:
    verdict = Verdict(
        ok=False, intact=True, signers=(), classes={}, failures=(), claims=(), drifts=()
    )
    native = Native(
        evidence="live", kernel_sets=(), modules={}, starts=(start,), dispatch=(), problems=()
    )
    subject = Subject(
        path="x", name="x", description="", kind=SubjectKind.RUN, repro_version="0.1.0"
    )
    return Report(
        subject=subject, verdict=verdict, gates=(), timings=(), throughput=None,
        acceptance=None, native=native, comparison=None, unreadable=(),
    )  # fmt: skip


def test_a_bundle_changed_after_sealing_is_reported_by_its_verdict_alone(
    rebuilt: Path, tmp_path: Path
) -> None:
    copy = tmp_path / rebuilt.name
    shutil.copytree(rebuilt, copy)
    bench = copy / BENCH
    bench.write_text(bench.read_text().replace('"ttft_s": 10.', '"ttft_s": 11.', 1))
    written = write_page(copy, TRUSTED, out=tmp_path / "changed.html")
    report = written.report
    assert (report.verdict.ok, report.verdict.intact) == (False, False)
    assert report.timings == () and report.native is None and report.gates == ()
    assert any("bench.json" in failure for failure in report.verdict.failures)
    text = _text(written.html)
    assert "FAIL" in text and "nothing of their evidence is shown" in text
    assert "101.94" not in text and "<figure" not in written.html.read_text()


def test_a_report_gives_the_latency_percentiles_of_every_start(rebuilt: Path) -> None:
    """The Laguna record's one run: TTFT, ITL and TPOT over its 13 prompts, recomputed from the
    bench's token times by `launch.latency`."""
    report = read_report(rebuilt, TRUSTED)
    lines = {line.figure: line for line in report.latency}
    assert set(lines) == {"TTFT", "ITL", "TPOT"}
    assert {line.start for line in report.latency} == {"record run"}
    assert lines["TTFT"].count == 13 and lines["TPOT"].count == 13
    for line in report.latency:
        assert 0 < line.p50_ms <= line.p90_ms <= line.p99_ms <= line.max_ms
    assert (
        "<h2>Latency</h2>"
        in write_page(rebuilt, TRUSTED, out=rebuilt.parent / "l.html").html.read_text()
    )


def test_a_report_against_a_reference_says_what_differs_by_section_first(
    rebuilt: Path, tmp_path: Path
) -> None:
    same = read_report(rebuilt, TRUSTED, against=rebuilt).comparison
    assert same is not None and same.reference_ok
    assert [s.total for s in same.sections] == [0] * len(same.sections)

    def other_kernel(root: Path) -> None:
        lock = json.loads((root / "lock.json").read_text())
        lock["host"]["facts"]["kernel"] = "7.0.1-generic"
        (root / "lock.json").write_text(json.dumps(lock))

    reference = resealed(rebuilt, tmp_path, other_kernel, "manifests/laguna-102tps.toml")
    compared = read_report(rebuilt, TRUSTED, against=reference).comparison
    assert compared is not None and compared.reference_intact and not compared.reference_ok
    totals = {s.section: s.total for s in compared.sections}
    assert totals == {s: (1 if s == "host" else 0) for s in totals}
    assert [d.key for d in compared.differences] == ["host.facts.kernel"]
    rate = next(f for f in compared.figures if f.figure.startswith("decode rate"))
    assert (rate.subject, rate.change) == (rate.reference, "same")
    assert compared.exactness is not None and "13 of 13 prompts" in compared.exactness


def test_a_reference_that_does_not_hold_is_said_not_compared(rebuilt: Path, tmp_path: Path) -> None:
    """A reference whose files are not what its signer sealed (here a renamed copy): the page
    is headed "not compared", never "0 difference(s)", and shows none of its figures."""
    renamed = tmp_path / "renamed"
    shutil.copytree(rebuilt, renamed)
    written = write_page(rebuilt, TRUSTED, out=tmp_path / "page.html", against=renamed)
    compared = written.report.comparison
    assert compared is not None and not compared.reference_intact
    assert compared.figures == () and compared.exactness is None
    text = _text(written.html)
    assert "Against" in text and "not compared" in text and "0 difference(s)" not in text


def test_the_same_bundle_gives_the_same_page_and_images(rebuilt: Path, tmp_path: Path) -> None:
    first = write_page(rebuilt, TRUSTED, out=tmp_path / "a" / "page.html", png=True)
    again = write_page(rebuilt, TRUSTED, out=tmp_path / "b" / "page.html", png=True)
    assert first.html.read_bytes() == again.html.read_bytes()
    assert [p.name for p in first.images] == [
        "page.timeline.png", "page.rates.png", "page.acceptance.png",
    ]  # fmt: skip
    for one, other in zip(first.images, again.images, strict=True):
        assert one.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert one.read_bytes() == other.read_bytes()


def test_a_report_is_never_written_into_the_directory_it_reports(
    rebuilt: Path, tmp_path: Path
) -> None:
    with pytest.raises(BadInput, match="into the directory it reports on"):
        write_page(rebuilt, TRUSTED, out=rebuilt / "evidence" / "report.html")
    assert verify(rebuilt, TRUSTED).ok
    assert beside(rebuilt) == rebuilt.with_name(f"{rebuilt.name}.report.html")


def test_the_command_writes_the_page_and_its_images_and_exits_by_the_verdict(
    rebuilt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "laguna.html"
    code = main(["report", str(rebuilt), "--key", str(PUB), "--out", str(out), "--png", "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0 and document["ok"] is True
    assert document["html"] == str(out) and out.is_file()
    assert [Path(p).name for p in document["images"]] == [
        "laguna.timeline.png", "laguna.rates.png", "laguna.acceptance.png",
    ]  # fmt: skip
    assert Report.model_validate(document["report"]).subject.name == "laguna-102tps"

    other = tmp_path / "other.pub"
    other.write_bytes(SigningKey.generate().public.pem())
    code = main(["report", str(rebuilt), "--key", str(other), "--out", str(tmp_path / "u.html")])
    assert code == 1
    assert capsys.readouterr().out.startswith("FAIL: report of")
    assert "nothing of their evidence is shown" in _text(tmp_path / "u.html")


def test_only_repro_report_pays_for_matplotlib(tmp_path: Path) -> None:
    probe = (
        "import json, sys\n"
        "from repro_serving.builder.cli import main\n"
        "main(sys.argv[1:])\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib')))\n"
    )
    for argv in (["--help"], ["report", "--help"], ["diff", "--help"]):
        done = subprocess.run(
            [sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=True
        )
        assert json.loads(done.stdout.splitlines()[-1]) == [], argv


# --- the three reports in a browser -------------------------------------------------------------


@pytest.mark.parametrize(
    ("bundle", "charts"),
    [
        (COMMITTED_TINY, {"timeline", "rates", "native"}),
        (COMMITTED_LAGUNA, {"timeline", "rates", "acceptance"}),
    ],
    ids=["tiny-cpu", "laguna-102tps"],
)
def test_a_committed_bundles_report_renders_in_a_browser_offline(
    bundle: Path, charts: set[str], tmp_path: Path
) -> None:
    written = write_page(bundle, TRUSTED, out=tmp_path / f"{bundle.name}.html")
    assert written.report.verdict.ok, written.report.verdict.failures
    assert_renders_offline(written.html, tmp_path, charts)


def test_the_rebuilt_laguna_report_renders_in_a_browser_offline(
    rebuilt: Path, tmp_path: Path
) -> None:
    written = write_page(rebuilt, TRUSTED, out=tmp_path / "laguna.html", against=rebuilt)
    assert_renders_offline(written.html, tmp_path, {"timeline", "rates", "acceptance"})


# --- a fresh run: `repro demo` and `repro launch` write theirs ----------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`repro demo` end to end on the real tiny stack: its output directory and what it
    printed."""
    out = tmp_path_factory.mktemp("demo")
    done = subprocess.run(
        [
            sys.executable, "-m", "repro_serving", "-q", "demo",
            "--out", str(out), "--serve-venv", str(SERVE_VENV),
        ],
        capture_output=True, text=True, check=False, cwd=REPO_ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out, done.stdout


def _printed_report(stdout: str) -> Path:
    lines = [line for line in stdout.splitlines() if line.startswith("report: ")]
    assert len(lines) == 1, stdout[-1500:]
    return Path(lines[0].removeprefix("report: "))


@pytest.mark.server
def test_demo_writes_the_runs_report_beside_it_and_prints_its_path(
    demo: tuple[Path, str], tmp_path: Path
) -> None:
    out, stdout = demo
    html = _printed_report(stdout)
    (run,) = [p for p in (out / "runs").iterdir() if p.is_dir() and p.name[0] != "."]
    assert html == beside(run) and html.is_file()
    umask = os.umask(0)
    os.umask(umask)
    assert html.stat().st_mode & 0o777 == 0o666 & ~umask, "a page to share, made as files are"
    bundle = out / "bundles" / "tiny-cpu"
    report = read_report(run, TRUSTED, against=bundle)
    assert report.verdict.ok and report.subject.kind is SubjectKind.RUN
    assert report.throughput is not None and report.throughput.gated
    labels = {s.label for t in report.timings for s in t.series}
    assert labels == {"start 1", "start 2", "tiny-cpu start 1"}
    assert all(t.teacher_exact for t in report.timings)
    comparison = report.comparison
    assert comparison is not None and comparison.reference_ok
    assert {s.section: s.total for s in comparison.sections}["launch"] > 0, "candidate, teacher"
    assert_renders_offline(html, tmp_path, {"timeline", "rates", "native", "differences"})


@pytest.mark.server
def test_launch_writes_the_runs_report_beside_it_and_prints_its_path(
    demo: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = demo[0] / "bundles" / "tiny-cpu"
    runs = tmp_path / "runs"
    argv = ["launch", str(bundle), "--key", str(PUB), "--signing-key", str(KEY_FILE)]
    code = main(["-q", *argv, "--runs", str(runs)])
    out = capsys.readouterr().out
    html = _printed_report(out)
    assert code == 0, out[-3000:]
    (run,) = [p for p in runs.iterdir() if p.is_dir() and p.name[0] != "."]
    assert html == beside(run) and html.is_file()
    text = _text(html)
    assert "PASS" in text and "sealed run at" in text
    assert_renders_offline(html, tmp_path, {"timeline", "rates", "native", "differences"})


def _text(html: Path) -> str:
    """The page's visible text, tags removed, entities as characters."""

    class Text(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.parts: list[str] = []

        def handle_data(self, data: str) -> None:
            self.parts.append(data)

    parser = Text()
    parser.feed(html.read_text(encoding="utf-8"))
    return " ".join(parser.parts)
