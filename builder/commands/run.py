"""Run a launch profile of a manifest once: start, audit live, ask the suite, tear down, judge.

`repro run MANIFEST` starts the profile (default: the manifest's teacher profile) exactly as
declared, audits every process of it live, asks the oracle suite once, cold, tears the server
down with proof, repeats from a fresh start where the manifest asks, and applies the gates;
against a teacher with `--teacher FILE`. `--capture-teacher FILE` writes the teacher a passing
run of the teacher profile makes (what `repro build` seals). The evidence lies in the run
directory. Exit 0 when every gate passes, 1 when one fails, 2 for bad input, 3 when the
server did not start or could not be observed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from repro_serving.builder import tinymodel
from repro_serving.builder.documents.evidence import MetricsDelta, Teacher, Verdict
from repro_serving.builder.documents.manifest import Manifest, Suite
from repro_serving.builder.documents.rundir import TEACHER_FILE, RunStatus, atomic_write, json_bytes
from repro_serving.builder.errors import BadInput, ExitCode
from repro_serving.builder.progress import say
from repro_serving.builder.readers import EVIDENCE_LIMIT, parse_json, read_needed
from repro_serving.builder.render import (
    Output,
    Report,
    ReportError,
    console,
    table,
    write_report,
)
from repro_serving.launch.run import Event, RunPlan, RunRecord, capture_teacher, run_profile


class RowSummary(Output):
    prompt_id: str
    exact: bool | None
    """The row's token ids are the teacher's; null without a teacher."""
    tokens: int
    cached_tokens: int | None
    tok_s: float | None
    """The row's (N-1)/span over the gated window; null when it cannot be measured."""
    tok_s_lower_bound: bool
    """`tok_s` is a lower bound: token 0 came with later tokens, or the window's last token in a
    read of several events (`launch.throughput`)."""
    ttft_s: float


class AuditSummary(Output):
    passed: bool
    roles: dict[str, int]
    """Process role -> how many processes of it."""
    elf_files: int
    drifts: int


class TeardownSummary(Output):
    pids: tuple[int, ...]
    """Every process of the server's tree."""
    killed: tuple[int, ...]
    """Those that needed SIGKILL."""
    seconds: float


class Percentiles(Output):
    """Times in seconds (`launch.latency.Distribution`)."""

    count: int
    p50_s: float
    p90_s: float
    p99_s: float
    max_s: float


class RatePercentiles(Output):
    """Rates in tok/s, the unit in the key that holds them."""

    count: int
    p50: float
    p90: float
    p99: float
    max: float


class LoadSummary(Output):
    """What one start's rows under a load measure (`launch.latency.LoadFigures`)."""

    requests: int
    input_tokens: int
    output_tokens: int
    duration_s: float
    """From the first send to the last token read."""
    aggregate_tok_s: float | None
    request_tok_s: RatePercentiles | None
    ttft: Percentiles | None
    itl: Percentiles | None
    tpot: Percentiles | None


class StartSummary(Output):
    """One fresh start of the server."""

    start: int
    directory: str
    pid: int | None
    ready_after_s: float | None
    ready_at_monotonic: float | None
    phases_s: dict[str, float]
    audit: AuditSummary | None
    rows: tuple[RowSummary, ...]
    loads: dict[str, LoadSummary]
    """Each load's figures (`oracle.gates.loads`), by its name."""
    metrics: MetricsDelta | None
    acceptance: float | None
    """Accepted / draft tokens of speculative decoding; null without it."""
    teardown: TeardownSummary | None
    error: str | None
    """What stopped this start, as a person reads it."""


class RunSummary(Output):
    """One run of a launch profile (`launch.run.summary_document`), as its `summary.json`."""

    run_dir: str
    manifest: str
    bundle: str
    profile: str
    suite: str
    teacher: bool
    """Whether the run was judged against a teacher."""
    argv: tuple[str, ...]
    status: RunStatus
    passed: bool
    exit_code: int | None
    """Null when the run was interrupted."""
    error: str | None
    """What stopped the run, as a person reads it."""
    seconds: float
    starts: tuple[StartSummary, ...]
    verdicts: tuple[Verdict, ...]
    quality: tuple[Verdict, ...]
    """The quality checks: reported apart, they never decide the run."""

    @classmethod
    def of(cls, record: RunRecord) -> RunSummary:
        return cls.model_validate(record.summary())


def run_report_error(record: RunRecord) -> ReportError | None:
    """What stopped a run before it could be judged (its server did not start, say)."""
    return None if record.error is None else ReportError.of(record.error)


class RunOutput(Report):
    """`repro run --json`: the run (`ok`: every gate passed), and the teacher it captured."""

    run: RunSummary
    captured_teacher: str | None
    """Where `--capture-teacher` wrote the run's teacher; null when it wrote none."""


REPORT = RunOutput
"""The document `--json` prints (its schema: `repro schema run`)."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path, metavar="MANIFEST")
    parser.add_argument("--profile", help="launch profile; default: the manifest's teacher")
    parser.add_argument("--teacher", type=Path, metavar="FILE", help="judge against this Teacher")
    parser.add_argument("--run-dir", type=Path, metavar="DIR", help="default: a new temp dir")
    parser.add_argument(
        "--capture-teacher",
        type=Path,
        metavar="FILE",
        help="write the Teacher of this run (teacher profile only; only when every gate passes)",
    )
    parser.add_argument("--port", type=int, help="serve on this port instead of the manifest's")
    parser.add_argument("--json", action="store_true", help="machine-readable report")


def execute(args: argparse.Namespace) -> int:
    manifest = Manifest.from_path(args.manifest)
    profile = _profile(args, manifest)
    suite = manifest.load_suite()
    teacher = None if args.teacher is None else read_teacher(args.teacher, suite)
    _prepare_models(manifest)
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix=f"repro-run-{profile}-"))
    plan = RunPlan(manifest, profile, run_dir, teacher=teacher, port=args.port)
    try:
        record = run_profile(plan, observe=None if args.json else _progress)
    except KeyboardInterrupt:
        sys.stderr.write(f"interrupted: server torn down; evidence kept in {run_dir}\n")
        raise
    captured = _capture(args.capture_teacher, record)
    if args.json:
        write_report(
            RunOutput(
                ok=record.exit_code == ExitCode.PASS,
                error=run_report_error(record),
                run=RunSummary.of(record),
                captured_teacher=_shown(captured),
            )
        )
    else:
        print_summary(record, captured)
    if record.error is not None:
        if args.json:  # the report above carries it (`error`): one document per command
            sys.stderr.write(record.error.diagnostics() + "\n")
            return int(record.error.exit_code)
        raise record.error
    return int(record.exit_code)


def read_teacher(path: Path, suite: Suite) -> Teacher:
    """The Teacher JSON at `path`, checked to be of `suite`, its prompts in the suite's order."""
    data = read_needed(
        path,
        limit=EVIDENCE_LIMIT,
        what="the teacher",
        missing="cannot read the teacher",
        expected="a readable Teacher JSON file",
    )
    parse_json(data, where=str(path))  # nesting and numbers bounded before pydantic reads it
    teacher = Teacher.from_bytes(data, where=str(path))  # the reader of the sealed teacher
    expected = [prompt.id for prompt in suite.prompts]
    found = [row.prompt_id for row in teacher.rows]
    if teacher.suite != suite.name or found != expected:
        raise BadInput(
            "the teacher is not of this suite",
            where=str(path),
            expected=f"suite {suite.name!r} with prompts {', '.join(expected)}",
            found=f"suite {teacher.suite!r} with prompts {', '.join(found)}",
        )
    return teacher


def _profile(args: argparse.Namespace, manifest: Manifest) -> str:
    teacher_profile = manifest.oracle.teacher
    profile: str = args.profile or teacher_profile
    if profile not in manifest.launch.profiles:
        raise BadInput(
            "unknown launch profile",
            where=f"{args.manifest}: launch.profiles",
            expected=" or ".join(sorted(manifest.launch.profiles)),
            found=profile,
        )
    if args.capture_teacher is not None and profile != teacher_profile:
        raise BadInput(
            "a teacher is captured from the teacher profile only",
            where="--capture-teacher",
            expected=f"--profile {teacher_profile} (oracle.teacher)",
            found=f"--profile {profile}",
        )
    return profile


def _prepare_models(manifest: Manifest) -> None:
    """The embedded default's model is generated where the manifest expects it."""
    for model in manifest.models:
        if model.repo == tinymodel.REPO_ID:
            tinymodel.generate(model.directory(manifest.resolve(".")))


def _capture(path: Path | None, record: RunRecord) -> Path | None:
    """Write the run's Teacher to `path` (and into the run directory) when the run passed."""
    if path is None or not record.passed:
        return None
    document = json_bytes(capture_teacher(record).model_dump(mode="json"))
    atomic_write(record.plan.run_dir / TEACHER_FILE, document)
    atomic_write(path, document)
    return path


def _shown(path: Path | None) -> str | None:
    return None if path is None else str(path)


def _progress(event: Event) -> None:
    say(f"[{event.kind}] {event.message}")


# --- the summary for a person --------------------------------------------------------------------


def print_summary(record: RunRecord, captured: Path | None) -> None:
    out = console()
    summary = record.summary()
    for start in summary["starts"]:
        out.print(_rows_table(start))
        if start["metrics"] is not None:
            out.print(_metrics_line(start))
    if record.verdicts:
        out.print(_verdicts_table("gates", "gate", record.verdicts))
    if record.quality:
        title = "quality (reported apart: never decides the run)"
        out.print(_verdicts_table(title, "check", record.quality))
    out.print(f"run directory: {record.plan.run_dir}")
    if captured is not None:
        out.print(f"teacher captured: {captured}")
    elif record.plan.teacher is None and not record.passed:
        out.print("no teacher captured: the run did not pass")
    verdict = record.status.value.upper()
    out.print(f"{verdict}: {record.plan.manifest.bundle.name} ({record.plan.profile})")


def _verdicts_table(title: str, column: str, verdicts: tuple[Verdict, ...]) -> Any:
    """One line per verdict, gate or quality check: its name, status and summary."""
    return table(
        title,
        (column, "status", "summary"),
        ((v.gate, v.status.value, v.summary) for v in verdicts),
    )


def _rows_table(start: dict[str, Any]) -> Any:
    ready = start["ready_after_s"]
    title = f"start {start['start']}" + ("" if ready is None else f" (ready after {ready:.1f} s)")
    return table(
        title,
        ("prompt", "exact?", "tokens", "cached tokens", "tok/s", "TTFT ms"),
        (
            (
                row["prompt_id"],
                {None: "-", True: "yes", False: "NO"}[row["exact"]],
                row["tokens"],
                "-" if row["cached_tokens"] is None else row["cached_tokens"],
                _rate_cell(row),
                f"{row['ttft_s'] * 1000:.0f}",
            )
            for row in start["rows"]
        ),
    )


def _rate_cell(row: dict[str, Any]) -> str:
    if row["tok_s"] is None:
        return "-"
    return ("≥ " if row["tok_s_lower_bound"] else "") + f"{row['tok_s']:.1f}"


def _metrics_line(start: dict[str, Any]) -> str:
    metrics = start["metrics"]
    hits = metrics["prefix_cache_hits"]
    line = f"prefix-cache hits during the suite: {'-' if hits is None else f'{hits:g}'}"
    if start["acceptance"] is None:
        return line + "; speculative decoding: none"
    curve = ", ".join(f"{value:g}" for value in metrics["spec_decode_accepted_per_position"])
    return (
        f"{line}; acceptance {metrics['spec_decode_accepted']:g}/"
        f"{metrics['spec_decode_draft_tokens']:g} = {start['acceptance']:.3f} "
        f"over {metrics['spec_decode_drafts']:g} drafts; accepted per position: {curve}"
    )
