"""A historical record's evidence files, loaded into the run's evidence models.

This module owns the file layout of a record such as `records/laguna-102tps/` and the reading of
each file: `evidence/record-run/bench.json` (one row per prompt), the teacher files
`teacher-token-oracle-v1.json` and `teacher-text-sha256-v1.json`, the metrics read before and
after the suite, `server.log`, `cleanup-status.txt` and the idle snapshots of `idle-interval/`.
The gates then judge these models exactly as they judge a live run (`builder.documents.evidence`).

Loading is strict: a file that cannot be read, is not UTF-8, is not the JSON it should be, or
lacks a key the models need raises `BadInput` naming the file and the key. Keys the models do not
use are left alone: these files carry much more than the gates judge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from repro_serving.builder.documents.evidence import (
    MetricsDelta,
    OracleRow,
    RunEvidence,
    Teacher,
    TeacherRow,
)
from repro_serving.builder.documents.invalid import validated
from repro_serving.builder.documents.manifest import Sha256
from repro_serving.builder.errors import BadInput
from repro_serving.builder.readers import (
    EVIDENCE_LIMIT,
    NotParsed,
    parse_json,
    read_needed,
)
from repro_serving.launch.metrics import delta

RUN_DIR: Final = Path("evidence") / "record-run"
TEACHER_TOKENS: Final = Path("teacher-token-oracle-v1.json")
TEACHER_TEXTS: Final = Path("teacher-text-sha256-v1.json")
_SNAPSHOT: Final = re.compile(r"^(?P<phase>prestart|poststop)-(?P<number>[0-9]{2})\.json$")
_STATUS_LINE: Final = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>-?[0-9]+)$")


class _Read(BaseModel):
    """The keys a loader needs from a file; every other key is left alone."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


class _PromptTokensDetails(_Read):
    cached_tokens: int | None = None


class _Usage(_Read):
    prompt_tokens: int
    completion_tokens: int
    prompt_tokens_details: _PromptTokensDetails | None = None


class _BenchRow(_Read):
    prompt_id: str
    prompt_index: int
    token_ids: tuple[int, ...]
    token_id_offsets_s: tuple[float, ...]
    sha256: Sha256
    ttft_s: float
    usage: _Usage


class _SuiteIdentity(_Read):
    suite_id: str


class _RunIdentity(_Read):
    suite: _SuiteIdentity


class _Statistic(_Read):
    median: float


class _Bench(_Read):
    rows: tuple[_BenchRow, ...]
    run_identity: _RunIdentity
    summary: dict[str, _Statistic]


class _TeacherTokenRow(_Read):
    prompt_index: int
    prompt_id: str
    token_ids: tuple[int, ...]


class _TeacherTextRow(_Read):
    prompt_index: int
    prompt_id: str
    sha256: Sha256


class _TeacherTokens(_Read):
    rows: tuple[_TeacherTokenRow, ...]


class _TeacherTexts(_Read):
    rows: tuple[_TeacherTextRow, ...]


class _IdleSnapshot(_Read):
    observed_utc: str
    status: str


_M = TypeVar("_M", bound=_Read)


@dataclass(frozen=True)
class Bench:
    """A record's bench file: its rows, its suite, and the median of each stored summary."""

    rows: tuple[OracleRow, ...]
    suite: str
    stored_medians: dict[str, float]
    """Summary name (e.g. `tok_s_1_100_after_ttft`) to the median the record stored."""


@dataclass(frozen=True)
class IdleSnapshot:
    name: str
    observed_utc: str
    status: str


@dataclass(frozen=True)
class IdleSnapshots:
    """The accelerator idle snapshots taken before the server started and after it stopped."""

    prestart: tuple[IdleSnapshot, ...]
    poststop: tuple[IdleSnapshot, ...]


@dataclass(frozen=True)
class Record:
    """Everything a record's files let the gates recompute."""

    bench: Bench
    teacher: Teacher
    metrics: MetricsDelta
    server_log: str
    cleanup_status: dict[str, int]
    idle: IdleSnapshots

    def run_evidence(self, sealed_tok_s: float | None = None) -> RunEvidence:
        """The record as the evidence of one run, for `launch.gates.judge`; `sealed_tok_s` is
        the conventional rate a throughput floor scales (the teacher files do not carry one)."""
        teacher = self.teacher.model_copy(update={"conventional_tok_s": sealed_tok_s})
        return RunEvidence(
            rows=self.bench.rows,
            teacher=teacher,
            metrics=self.metrics,
            server_log=self.server_log,
        )


# --- reading files ------------------------------------------------------------------------------


def _malformed(path: Path, what: str, key: str = "", **sides: str) -> BadInput:
    where = f"{path}, {key}" if key else str(path)
    return BadInput(f"malformed record file: {what}", where=where, **sides)


def _read_text(path: Path) -> str:
    raw = read_needed(
        path,
        limit=EVIDENCE_LIMIT,
        what="a record file",
        missing="cannot read record file",
        expected="a readable file",
    )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        found = f"byte 0x{raw[error.start]:02x} at offset {error.start}"
        raise _malformed(path, "not UTF-8 text", expected="UTF-8", found=found) from None


def _read_json(path: Path, model: type[_M]) -> _M:
    text = _read_text(path)
    try:
        parse_json(text, where=str(path))  # nesting and numbers bounded before pydantic reads it
    except NotParsed as error:
        raise _malformed(
            path, "JSON syntax error", error.position, expected="JSON", found=error.message
        ) from None
    except BadInput as error:
        sides = {"expected": error.expected or "", "found": error.found or ""}
        raise _malformed(path, error.what, **sides) from None
    return validated(model, text, source=str(path), title="malformed record file", strict=None)


# --- the files of a record ----------------------------------------------------------------------


def _oracle_row(row: _BenchRow) -> OracleRow:
    details = row.usage.prompt_tokens_details
    return OracleRow(
        prompt_id=row.prompt_id,
        prompt_index=row.prompt_index,
        token_ids=row.token_ids,
        text_sha256=row.sha256,
        prompt_tokens=row.usage.prompt_tokens,
        completion_tokens=row.usage.completion_tokens,
        cached_tokens=None if details is None else details.cached_tokens,
        token_offsets_s=row.token_id_offsets_s,
        ttft_s=row.ttft_s,
    )


def load_bench(path: Path) -> Bench:
    """A bench file's rows as `OracleRow`s: `sha256` is the text's hash, `cached_tokens` is
    `usage.prompt_tokens_details.cached_tokens` (None when not reported)."""
    bench = _read_json(path, _Bench)
    rows = []
    for index, row in enumerate(bench.rows):
        try:
            rows.append(_oracle_row(row))
        except ValidationError as error:
            problem = "; ".join(str(detail["msg"]) for detail in error.errors())
            raise _malformed(
                path, "a row no stream could give", f"key rows[{index}]", found=problem
            ) from None
    return Bench(
        rows=tuple(rows),
        suite=bench.run_identity.suite.suite_id,
        stored_medians={name: stat.median for name, stat in bench.summary.items()},
    )


def load_teacher(tokens: Path, texts: Path, suite: str) -> Teacher:
    """The teacher of `suite` from its token-id file and its text-sha256 file, which must list
    the same prompts in the same order."""
    id_rows = _read_json(tokens, _TeacherTokens).rows
    text_rows = _read_json(texts, _TeacherTexts).rows
    ids = [(row.prompt_index, row.prompt_id) for row in id_rows]
    hashed = [(row.prompt_index, row.prompt_id) for row in text_rows]
    if ids != hashed:
        raise _malformed(
            texts,
            "teacher files list different prompts",
            "key rows",
            expected=f"the prompts of {tokens.name}: {ids}",
            found=str(hashed),
        )
    return Teacher(
        suite=suite,
        rows=tuple(
            TeacherRow(
                prompt_id=ids_row.prompt_id,
                prompt_index=ids_row.prompt_index,
                token_ids=ids_row.token_ids,
                text_sha256=text_row.sha256,
            )
            for ids_row, text_row in zip(id_rows, text_rows, strict=True)
        ),
    )


def load_metrics_delta(before: Path, after: Path) -> MetricsDelta:
    return delta(
        _read_text(before), _read_text(after), before_source=str(before), after_source=str(after)
    )


def read_log(path: Path) -> str:
    """A server log, decoded as it was written: carriage returns stay (`gates.log_lines`)."""
    return _read_text(path)


def load_cleanup_status(path: Path) -> dict[str, int]:
    """`key=integer` lines, each key once."""
    status: dict[str, int] = {}
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        match = _STATUS_LINE.match(line)
        if match is None or match["key"] in status:
            what = "not a key=integer line" if match is None else "a key given twice"
            found = repr(line)
            raise _malformed(path, what, f"line {number}", expected="key=integer", found=found)
        status[match["key"]] = int(match["value"])
    return status


def load_idle_snapshots(directory: Path) -> IdleSnapshots:
    """The `prestart-NN.json` and `poststop-NN.json` files of `directory`, each numbered from 00
    without a gap."""
    try:
        names = sorted(entry.name for entry in directory.iterdir())
    except OSError as error:
        found = error.strerror or str(error)
        raise BadInput(
            "cannot list idle snapshots", where=str(directory), expected="a directory", found=found
        ) from None
    phases: dict[str, list[IdleSnapshot]] = {"prestart": [], "poststop": []}
    for name in names:
        match = _SNAPSHOT.match(name)
        if match is None:
            continue
        taken = phases[match["phase"]]
        if int(match["number"]) != len(taken):
            expected = f"{match['phase']}-{len(taken):02d}.json next"
            raise _malformed(
                directory / name,
                "idle snapshots numbered with a gap",
                expected=expected,
                found=name,
            )
        snapshot = _read_json(directory / name, _IdleSnapshot)
        taken.append(IdleSnapshot(name, snapshot.observed_utc, snapshot.status))
    return IdleSnapshots(tuple(phases["prestart"]), tuple(phases["poststop"]))


def load_record(root: Path) -> Record:
    """Every evidence file of the record at `root` (e.g. `records/laguna-102tps`)."""
    run = root / RUN_DIR
    bench = load_bench(run / "bench.json")
    return Record(
        bench=bench,
        teacher=load_teacher(root / TEACHER_TOKENS, root / TEACHER_TEXTS, bench.suite),
        metrics=load_metrics_delta(
            run / "metrics-before-suite.prom", run / "metrics-after-suite.prom"
        ),
        server_log=read_log(run / "server.log"),
        cleanup_status=load_cleanup_status(run / "cleanup-status.txt"),
        idle=load_idle_snapshots(run / "idle-interval"),
    )
