"""The gates fed the real sealed evidence of the Laguna 102 tok/s record recompute what it claims.

The record is copied verbatim into the repository (`records/laguna-102tps`); `records/README.md`
lists every value asserted here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from diagnostics import diagnostic, refusal
from laguna_record import CONVENTIONAL_MEDIAN, RANKS, RECORD, laguna_record, per_rank_marker

from repro_serving.builder.documents.evidence import VerdictStatus
from repro_serving.builder.documents.invalid import InvalidDocument
from repro_serving.builder.documents.manifest import (
    Gates,
    LogMarker,
    SpecDecodeGate,
    ThroughputGate,
)
from repro_serving.builder.errors import BadInput
from repro_serving.launch import gates
from repro_serving.launch.historical import (
    RUN_DIR,
    TEACHER_TEXTS,
    TEACHER_TOKENS,
    Record,
    load_bench,
    load_cleanup_status,
    load_idle_snapshots,
    load_teacher,
    read_log,
)
from repro_serving.launch.throughput import measure

HISTORICAL_MEDIAN = 102.97143559613157
GRAPHS = r"BreakableCUDAGraphCapture\(graphs=146, eager_breaks=145\)$"


MARKERS = (
    per_rank_marker("captured", r"Captured audited breakable cudagraph"),
    per_rank_marker("captured-graphs", r"Captured audited breakable cudagraph .*" + GRAPHS),
    per_rank_marker("replayed", r"Replayed audited breakable cudagraph"),
    per_rank_marker("replayed-graphs", r"Replayed audited breakable cudagraph .*" + GRAPHS),
    per_rank_marker(
        "draft-projections", r"Prepared Laguna DFlash FP8 W8A16 draft projections: count=31$"
    ),
)
SPEC_DECODE = SpecDecodeGate(acceptance_min=0.25, acceptance_max=0.3, positions=11)
THROUGHPUT = ThroughputGate(tokens=100, floor=0.95, record_historical=True)
RECORD_GATES = Gates(
    log_markers=MARKERS,
    forbidden_log_patterns=(r"Traceback \(most recent call last\)",),
    spec_decode=SPEC_DECODE,
    throughput=THROUGHPUT,
)


@pytest.fixture(scope="module")
def record() -> Record:
    return laguna_record()


def stored_conventional_median() -> float:
    """The conventional rate the record's runtime lock states in words."""
    lock = json.loads((RECORD / "manifests" / "runtime-lock.json").read_text("utf-8"))
    match = re.search(r"conventional 99-interval ([0-9.]+) tok/s", lock["scope"]["sealed_result"])
    assert match is not None
    return float(match[1])


def test_both_throughput_conventions_recompute_the_stored_medians(record: Record) -> None:
    measured = measure(record.bench.rows, 100)
    assert measured.historical_median == pytest.approx(HISTORICAL_MEDIAN, abs=1e-12)
    assert measured.conventional_median == pytest.approx(CONVENTIONAL_MEDIAN, abs=1e-12)
    stored = record.bench.stored_medians["tok_s_1_100_after_ttft"]
    assert measured.historical_median == pytest.approx(stored, abs=1e-12)
    assert measured.conventional_median == pytest.approx(stored_conventional_median(), abs=1e-12)


def test_each_rows_historical_rate_is_the_one_the_record_stored(record: Record) -> None:
    bench = json.loads((RECORD / RUN_DIR / "bench.json").read_text("utf-8"))
    stored = [row["tok_s_1_100_after_ttft"] for row in bench["rows"]]
    measured = measure(record.bench.rows, 100)
    assert [rate.historical for rate in measured.rows] == pytest.approx(stored, abs=1e-12)
    assert len(stored) == 13


def test_the_floor_of_a_performance_reproduction_is_95_percent_of_the_conventional_rate(
    record: Record,
) -> None:
    verdict = gates.throughput(THROUGHPUT, record.bench.rows, CONVENTIONAL_MEDIAN)
    assert verdict.details["floor_rate_tok_s"] == 96.84463517816175
    assert verdict.status is VerdictStatus.PASS
    assert verdict.summary == (
        "conventional median 101.94 tok/s over 100 tokens >= floor 96.84 (0.95 of sealed "
        "101.94); historical N/span median 102.97 (not gated)"
    )


def test_all_13_rows_equal_the_teacher_token_ids_and_text_hashes(record: Record) -> None:
    assert [row.prompt_id for row in record.bench.rows] == [
        row.prompt_id for row in record.teacher.rows
    ]
    ids = gates.exact_token_ids(record.bench.rows, record.teacher)
    texts = gates.text_sha256(record.bench.rows, record.teacher)
    assert (ids.status, ids.summary) == (
        VerdictStatus.PASS,
        "13/13 rows equal the teacher's token ids",
    )
    assert (texts.status, texts.summary) == (
        VerdictStatus.PASS,
        "13/13 rows match the teacher's text sha256",
    )
    assert record.teacher.suite == "laguna-s-2.1-realistic-cold-v1"


def test_cached_tokens_are_reported_and_zero_on_every_row(record: Record) -> None:
    assert [row.cached_tokens for row in record.bench.rows] == [0] * 13
    verdict = gates.cached_tokens_zero(record.bench.rows)
    assert (verdict.status, verdict.summary) == (
        VerdictStatus.PASS,
        "cached_tokens is 0 on 13/13 rows",
    )


@pytest.mark.parametrize("marker", MARKERS, ids=lambda marker: marker.name)
def test_each_marker_is_on_each_of_the_four_ranks_exactly_once(
    record: Record, marker: LogMarker
) -> None:
    verdict = gates.log_marker(marker, record.server_log)
    assert verdict.details["found"] == dict.fromkeys(RANKS, 1)
    assert verdict.summary == (
        f"{marker.name}: exact on 4 ranks (Worker_TP0_EP0=1, Worker_TP1_EP1=1, "
        "Worker_TP2_EP2=1, Worker_TP3_EP3=1)"
    )


def test_the_log_is_split_at_carriage_returns_too(record: Record) -> None:
    assert record.server_log.count("\r") == 27
    lines = gates.log_lines(record.server_log)
    assert len(lines) == len(record.server_log.splitlines())
    assert not any("\r" in line or "\n" in line for line in lines)


def test_the_spec_decode_counters_of_the_suite(record: Record) -> None:
    metrics = record.metrics
    assert (
        metrics.spec_decode_drafts,
        metrics.spec_decode_draft_tokens,
        metrics.spec_decode_accepted,
    ) == (1609, 17699, 4747)
    assert metrics.spec_decode_draft_tokens == 1609 * 11
    assert metrics.spec_decode_accepted_per_position == (
        1171, 847, 631, 497, 397, 328, 248, 204, 172, 140, 112,
    )  # fmt: skip
    assert (metrics.prefix_cache_hits, metrics.generation_tokens) == (0, 6354)


def test_the_spec_decode_gate_passes_a_decaying_survival_curve(record: Record) -> None:
    assert gates.survival_problem(record.metrics.spec_decode_accepted_per_position) is None
    verdict = gates.spec_decode(SPEC_DECODE, record.metrics)
    assert (verdict.status, verdict.summary) == (
        VerdictStatus.PASS,
        "acceptance 4747/17699 = 0.2682 within [0.25, 0.3]; survival 1171 … 112 decays "
        "(last/first 0.0956 <= 0.5)",
    )
    assert verdict.details["acceptance"] == 4747 / 17699


def test_prefix_cache_hits_did_not_move(record: Record) -> None:
    verdict = gates.prefix_cache_hit_delta_zero(record.metrics)
    assert (verdict.status, verdict.summary) == (
        VerdictStatus.PASS,
        "prefix-cache hits rose by 0 during the suite",
    )


def test_cleanup_status_and_idle_snapshots(record: Record) -> None:
    assert record.cleanup_status == {
        "original_status": 0,
        "stop_status": 0,
        "worker_status": 0,
        "idle_status": 0,
    }
    assert (len(record.idle.prestart), len(record.idle.poststop)) == (13, 13)
    assert {snapshot.status for snapshot in record.idle.prestart + record.idle.poststop} == {
        "passed"
    }


def test_the_record_passes_every_gate_it_declares(record: Record) -> None:
    verdicts = gates.judge(RECORD_GATES, record.run_evidence(CONVENTIONAL_MEDIAN))
    assert [(v.gate, v.status) for v in verdicts] == [
        ("exact_token_ids", VerdictStatus.PASS),
        ("text_sha256", VerdictStatus.PASS),
        ("cached_tokens_zero", VerdictStatus.PASS),
        ("prefix_cache_hit_delta_zero", VerdictStatus.PASS),
        *((f"log_marker:{marker.name}", VerdictStatus.PASS) for marker in MARKERS),
        ("forbidden_log_patterns", VerdictStatus.PASS),
        ("spec_decode", VerdictStatus.PASS),
        ("throughput", VerdictStatus.PASS),
        ("fresh_starts", VerdictStatus.NOT_APPLICABLE),
    ]


def test_the_record_ran_one_sampler_fallback(record: Record) -> None:
    """The record's sampler fell back to PyTorch for per-request generators (seed 1): a
    manifest that forbids every fallback refuses this record."""
    verdict = gates.forbidden_log_patterns([r"Falling back"], record.server_log)
    assert verdict.status is VerdictStatus.FAIL
    assert verdict.summary == (
        "forbidden 'Falling back' matches 1 line, first: (Worker_TP0_EP0 pid=162987) WARNING "
        "07-26 17:47:01 [topk_topp_sampler.py:293] xpu kernel topk_topp_sampler does not "
        "support per-request generators. Falling bac…"
    )


# --- loading is strict --------------------------------------------------------------------------


def copy_bench(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    bench = json.loads((RECORD / RUN_DIR / "bench.json").read_text("utf-8"))
    edit(bench)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(bench), "utf-8")
    return path


def test_a_bench_row_without_usage_is_refused_naming_the_file_and_key(tmp_path: Path) -> None:
    path = copy_bench(tmp_path, lambda bench: bench["rows"][3].pop("usage"))
    with pytest.raises(BadInput) as caught:
        load_bench(path)
    lines = caught.value.diagnostics().splitlines()
    assert lines[0] == "error: malformed record file: missing key"
    assert re.fullmatch(
        rf"  where: +{re.escape(str(path))}, key rows\[3\]\.usage \(line 1, column \d+\)", lines[1]
    )
    assert lines[2:] == ["  expected: an object", "  found:    nothing"]


def test_every_problem_of_a_record_file_is_named_not_the_first_alone(tmp_path: Path) -> None:
    def edit(bench: dict[str, Any]) -> None:
        bench["rows"][3].pop("usage")
        bench["rows"][5]["token_ids"][2] = "7"

    path = copy_bench(tmp_path, edit)
    with pytest.raises(InvalidDocument) as caught:
        load_bench(path)
    assert caught.value.what == "malformed record file: 2 problems"
    assert caught.value.where == str(path)
    assert [(p.where, p.what, p.found) for p in caught.value.problems] == [
        ("key rows[3].usage", "missing key", "nothing"),
        ("key rows[5].token_ids[2]", "wrong type", 'a string "7"'),
    ]
    assert all(p.position.startswith("line 1, column ") for p in caught.value.problems)
    found = caught.value.found or ""
    assert found.startswith("key rows[3].usage (line 1, column ")
    assert "; key rows[5].token_ids[2] (line 1, column " in found
    assert found.endswith(': wrong type (expected an integer, found a string "7")')


def test_a_bench_token_id_that_is_not_an_integer_is_refused(tmp_path: Path) -> None:
    path = copy_bench(tmp_path, lambda bench: bench["rows"][0]["token_ids"].__setitem__(5, "72"))
    with pytest.raises(BadInput) as caught:
        load_bench(path)
    assert (caught.value.where or "").startswith(f"{path}, key rows[0].token_ids[5] (line 1, ")
    assert caught.value.found == 'a string "72"'


def test_a_text_hash_that_is_not_a_sha256_is_refused(tmp_path: Path) -> None:
    path = copy_bench(tmp_path, lambda bench: bench["rows"][1].__setitem__("sha256", "D164"))
    with pytest.raises(BadInput) as caught:
        load_bench(path)
    assert (caught.value.where or "").startswith(f"{path}, key rows[1].sha256 (line 1, column ")


@pytest.mark.parametrize(
    ("edit", "found"),
    [
        (lambda row: row["token_id_offsets_s"].pop(), "295 token offsets for 296 token ids"),
        (lambda row: row["token_id_offsets_s"].reverse(), "token offsets go back in time"),
    ],
    ids=["an-offset-short", "back-in-time"],
)
def test_a_bench_row_no_stream_could_give_is_refused_naming_it(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None], found: str
) -> None:
    path = copy_bench(tmp_path, lambda bench: edit(bench["rows"][10]))
    with pytest.raises(BadInput) as caught:
        load_bench(path)
    assert (caught.value.what, caught.value.where) == (
        "malformed record file: a row no stream could give",
        f"{path}, key rows[10]",
    )
    assert caught.value.found == f"Value error, row structured-extraction: {found}"


def test_unreported_cached_tokens_load_as_none(tmp_path: Path) -> None:
    path = copy_bench(
        tmp_path, lambda bench: bench["rows"][2]["usage"].pop("prompt_tokens_details")
    )
    assert load_bench(path).rows[2].cached_tokens is None


def test_a_bench_file_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    path.write_text('{"rows": [\n  1,\n', "utf-8")
    with pytest.raises(BadInput) as caught:
        load_bench(path)
    assert (caught.value.what, caught.value.where) == (
        "malformed record file: JSON syntax error",
        f"{path}, line 3, column 1",
    )


def test_teacher_files_of_different_prompts_are_refused(tmp_path: Path) -> None:
    texts = json.loads((RECORD / TEACHER_TEXTS).read_text("utf-8"))
    texts["rows"].reverse()
    path = tmp_path / "texts.json"
    path.write_text(json.dumps(texts), "utf-8")
    with pytest.raises(BadInput) as caught:
        load_teacher(RECORD / TEACHER_TOKENS, path, "s")
    assert (caught.value.what, caught.value.where) == (
        "malformed record file: teacher files list different prompts",
        f"{path}, key rows",
    )


def test_a_cleanup_status_line_that_is_not_key_equals_integer_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cleanup-status.txt"
    path.write_text("original_status=0\nstop_status=ok\n", "utf-8")
    assert refusal(BadInput, load_cleanup_status, path) == diagnostic(
        "malformed record file: not a key=integer line",
        f"{path}, line 2",
        expected="key=integer",
        found="'stop_status=ok'",
    )


def test_idle_snapshots_numbered_with_a_gap_are_refused(tmp_path: Path) -> None:
    source = RECORD / RUN_DIR / "idle-interval"
    for name in ("prestart-00.json", "prestart-02.json"):
        (tmp_path / name).write_bytes((source / name).read_bytes())
    with pytest.raises(BadInput) as caught:
        load_idle_snapshots(tmp_path)
    assert (caught.value.what, caught.value.expected, caught.value.found) == (
        "malformed record file: idle snapshots numbered with a gap",
        "prestart-01.json next",
        "prestart-02.json",
    )


def test_a_log_that_is_not_utf8_is_refused_with_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_bytes(b"INFO ok\r\n\xff")
    with pytest.raises(BadInput) as caught:
        read_log(path)
    assert caught.value.found == "byte 0xff at offset 9"
