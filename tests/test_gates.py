"""Each gate fails on the real Laguna evidence made wrong in one controlled way, and passes on
the untouched evidence; `judge` runs every gate the manifest enables, and fails one whose
evidence is missing."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

import pytest
from laguna_record import CONVENTIONAL_MEDIAN, RECORD, laguna_record, per_rank_marker

from repro_serving.builder.documents.evidence import (
    MetricsDelta,
    OracleRow,
    RunEvidence,
    Teacher,
    TeacherRow,
    VerdictStatus,
)
from repro_serving.builder.documents.manifest import (
    FreshStartThroughputGate,
    Gates,
    LatencyGate,
    LogMarker,
    MetricsInfoGate,
    SpecDecodeGate,
    StallGate,
    ThroughputGate,
)
from repro_serving.launch import gates
from repro_serving.launch.historical import RUN_DIR, Record
from repro_serving.launch.metrics import delta

CAPTURED = per_rank_marker(
    "captured", r"Captured audited breakable cudagraph .*\(graphs=146, eager_breaks=145\)$"
)
REPLAYED = CAPTURED.model_copy(
    update={"name": "replayed", "pattern": CAPTURED.pattern.replace("Captured", "Replayed")}
)
PROJECTIONS = LogMarker(
    name="projections", pattern=r"Prepared Laguna DFlash FP8 W8A16 draft projections", count=4
)
FALLBACK = r"Falling back to eager"
SPEC_DECODE = SpecDecodeGate(acceptance_min=0.2, positions=11)
THROUGHPUT = ThroughputGate(tokens=100, floor=0.95)
Row = TypeVar("Row", OracleRow, TeacherRow)
GATES = Gates(
    log_markers=(CAPTURED, REPLAYED, PROJECTIONS),
    forbidden_log_patterns=(FALLBACK,),
    spec_decode=SPEC_DECODE,
    throughput=THROUGHPUT,
)


@pytest.fixture(scope="module")
def record() -> Record:
    return laguna_record()


@pytest.fixture(scope="module")
def metrics_text() -> tuple[str, str]:
    run = RECORD / RUN_DIR
    before = (run / "metrics-before-suite.prom").read_text("utf-8")
    return before, (run / "metrics-after-suite.prom").read_text("utf-8")


def with_token(rows: Sequence[Row], prompt_id: str, index: int, token: int) -> tuple[Row, ...]:
    """`rows` with token `index` of row `prompt_id` replaced."""

    def changed(row: Row) -> Row:
        ids = list(row.token_ids)
        ids[index] = token
        return row.model_copy(update={"token_ids": tuple(ids)})

    return tuple(changed(row) if row.prompt_id == prompt_id else row for row in rows)


def set_counter(text: str, sample: str, value: float) -> str:
    """The metrics text with the value of the one sample line starting `sample` replaced."""
    pattern = re.compile(rf"^{re.escape(sample)} \S+$", re.MULTILINE)
    replaced, count = pattern.subn(f"{sample} {value!r}", text)
    assert count == 1, sample
    return replaced


def accepted_sample(position: int | None = None) -> str:
    labels = 'engine="0",model_name="laguna-s-2.1-int4"'
    if position is None:
        return f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}}"
    return f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{position}"}}'


def without_lines(log: str, *needles: str) -> str:
    """The log without the lines that contain every needle (line breaks kept as they were)."""
    parts = re.split(r"(\r\n|\r|\n)", log)
    kept = [
        part
        for index, part in enumerate(parts)
        if not all(needle in part for needle in needles)
        and not (index % 2 == 1 and all(needle in parts[index - 1] for needle in needles))
    ]
    return "".join(kept)


def line_with(log: str, *needles: str) -> str:
    (line,) = (line for line in gates.log_lines(log) if all(needle in line for needle in needles))
    return line


# --- the untouched evidence --------------------------------------------------------------------


def test_the_untouched_evidence_passes_every_enabled_gate(record: Record) -> None:
    evidence = record.run_evidence(CONVENTIONAL_MEDIAN)
    evidence = evidence.model_copy(update={"later_starts": (record.bench.rows,)})
    verdicts = gates.judge(GATES.model_copy(update={"fresh_starts": 2}), evidence)
    assert [(v.gate, v.status, v.summary) for v in verdicts] == [
        ("exact_token_ids", VerdictStatus.PASS, "13/13 rows equal the teacher's token ids"),
        ("text_sha256", VerdictStatus.PASS, "13/13 rows match the teacher's text sha256"),
        ("cached_tokens_zero", VerdictStatus.PASS, "cached_tokens is 0 on 13/13 rows"),
        (
            "prefix_cache_hit_delta_zero",
            VerdictStatus.PASS,
            "prefix-cache hits rose by 0 during the suite",
        ),
        (
            "log_marker:captured",
            VerdictStatus.PASS,
            "captured: exact on 4 ranks (Worker_TP0_EP0=1, Worker_TP1_EP1=1, Worker_TP2_EP2=1, "
            "Worker_TP3_EP3=1)",
        ),
        (
            "log_marker:replayed",
            VerdictStatus.PASS,
            "replayed: exact on 4 ranks (Worker_TP0_EP0=1, Worker_TP1_EP1=1, Worker_TP2_EP2=1, "
            "Worker_TP3_EP3=1)",
        ),
        ("log_marker:projections", VerdictStatus.PASS, "projections: 4 lines, expected 4"),
        (
            "forbidden_log_patterns",
            VerdictStatus.PASS,
            "none of 1 forbidden patterns in 308 lines of log",
        ),
        (
            "spec_decode",
            VerdictStatus.PASS,
            "acceptance 4747/17699 = 0.2682 within [0.2, 1.0]; survival 1171 … 112 decays "
            "(last/first 0.0956 <= 0.5)",
        ),
        (
            "throughput",
            VerdictStatus.PASS,
            "conventional median 101.94 tok/s over 100 tokens >= floor 96.84 "
            "(0.95 of sealed 101.94)",
        ),
        (
            "fresh_starts",
            VerdictStatus.PASS,
            "start 2: 13/13 rows reproduce start 1's token ids",
        ),
    ]


# --- token ids and texts ----------------------------------------------------------------------


def test_a_teacher_with_one_token_changed_fails_naming_the_row_and_index(record: Record) -> None:
    assert record.bench.rows[3].token_ids[200] == 3226
    rows = with_token(record.teacher.rows, "concurrency-review", 200, 3227)
    teacher = Teacher(suite=record.teacher.suite, rows=rows)
    verdict = gates.exact_token_ids(record.bench.rows, teacher)
    assert verdict.status is VerdictStatus.FAIL
    assert verdict.summary == (
        "12/13 rows equal the teacher's token ids; "
        "row concurrency-review differs at token 200: teacher 3227, run 3226"
    )
    first_difference = verdict.details["first_difference"]
    assert isinstance(first_difference, dict)
    assert first_difference["concurrency-review"] == 200
    assert sum(index is None for index in first_difference.values()) == 12


def test_a_run_row_that_stops_early_differs_at_its_end(record: Record) -> None:
    short = record.bench.rows[10].model_copy(
        update={"token_ids": record.bench.rows[10].token_ids[:295]}
    )
    rows = (*record.bench.rows[:10], short, *record.bench.rows[11:])
    verdict = gates.exact_token_ids(rows, record.teacher)
    assert verdict.summary == (
        "12/13 rows equal the teacher's token ids; "
        "row structured-extraction differs at token 295: teacher 24, run end"
    )


def test_a_missing_row_fails_the_token_and_text_gates(record: Record) -> None:
    rows = record.bench.rows[:12]
    ids = gates.exact_token_ids(rows, record.teacher)
    texts = gates.text_sha256(rows, record.teacher)
    assert (ids.status, texts.status) == (VerdictStatus.FAIL, VerdictStatus.FAIL)
    assert ids.summary == (
        "12/13 rows equal the teacher's token ids; "
        "row long-rollover-repository-audit is missing from run"
    )
    assert texts.summary == (
        "12/13 rows match the teacher's text sha256; "
        "row long-rollover-repository-audit is missing from run"
    )


def test_a_row_given_twice_fails_even_when_identical(record: Record) -> None:
    rows = (*record.bench.rows, record.bench.rows[4])
    ids = gates.exact_token_ids(rows, record.teacher)
    texts = gates.text_sha256(rows, record.teacher)
    assert ids.summary == (
        "13/13 rows equal the teacher's token ids; row arithmetic-reasoning appears 2 times in run"
    )
    assert texts.summary == (
        "13/13 rows match the teacher's text sha256; "
        "row arithmetic-reasoning appears 2 times in run"
    )
    assert (ids.status, texts.status) == (VerdictStatus.FAIL, VerdictStatus.FAIL)


def test_an_empty_teacher_and_run_prove_nothing(record: Record) -> None:
    empty = Teacher(suite=record.teacher.suite, rows=())
    ids = gates.exact_token_ids([], empty)
    texts = gates.text_sha256([], empty)
    assert [(v.status, v.summary) for v in (ids, texts)] == [
        (VerdictStatus.FAIL, "0/0 rows equal the teacher's token ids"),
        (VerdictStatus.FAIL, "0/0 rows match the teacher's text sha256"),
    ]


def test_a_text_hash_that_differs_fails(record: Record) -> None:
    rows = tuple(
        row.model_copy(update={"text_sha256": "f" * 64})
        if row.prompt_id == "typescript-cancellation"
        else row
        for row in record.bench.rows
    )
    verdict = gates.text_sha256(rows, record.teacher)
    assert verdict.status is VerdictStatus.FAIL
    assert verdict.summary == (
        "12/13 rows match the teacher's text sha256; "
        "row typescript-cancellation: teacher b2bd17cbed6a…, run ffffffffffff…"
    )


def test_a_second_start_with_one_token_different_fails(record: Record) -> None:
    again = with_token(record.bench.rows, "structured-extraction", 295, 25)
    verdict = gates.fresh_start_reproduces(record.bench.rows, again, 2)
    assert verdict.status is VerdictStatus.FAIL
    assert verdict.summary == (
        "start 2: 12/13 rows reproduce start 1's token ids; "
        "row structured-extraction differs at token 295: start 1 24, start 2 25"
    )


# --- no prefix reuse ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cached", "shown"), [(1, "1"), (None, "not reported")], ids=["one", "unreported"]
)
def test_a_row_with_cached_tokens_fails(record: Record, cached: int | None, shown: str) -> None:
    rows = tuple(
        row.model_copy(update={"cached_tokens": cached})
        if row.prompt_id == "sql-sessionization"
        else row
        for row in record.bench.rows
    )
    verdict = gates.cached_tokens_zero(rows)
    assert verdict.status is VerdictStatus.FAIL
    assert verdict.summary == f"cached_tokens is 0 on 12/13 rows; row sql-sessionization: {shown}"


def test_no_rows_cannot_show_zero_cached_tokens() -> None:
    verdict = gates.cached_tokens_zero([])
    assert (verdict.status, verdict.summary) == (
        VerdictStatus.FAIL,
        "cached_tokens is 0 on 0/0 rows",
    )


def test_prefix_cache_hits_during_the_suite_fail(metrics_text: tuple[str, str]) -> None:
    before, after = metrics_text
    hits = 'vllm:prefix_cache_hits_total{engine="0",model_name="laguna-s-2.1-int4"}'
    metrics = delta(before, set_counter(after, hits, 128.0))
    verdict = gates.prefix_cache_hit_delta_zero(metrics)
    assert (verdict.status, verdict.summary) == (
        VerdictStatus.FAIL,
        "prefix-cache hits rose by 128 during the suite, expected 0",
    )
    assert verdict.details == {"hits": 128.0, "queries": 0.0}


def test_prefix_cache_hits_not_reported_fail(record: Record) -> None:
    metrics = record.metrics.model_copy(update={"prefix_cache_hits": None})
    verdict = gates.prefix_cache_hit_delta_zero(metrics)
    assert (verdict.status, verdict.summary) == (
        VerdictStatus.FAIL,
        "prefix-cache hits not reported by /metrics",
    )


# --- the server log -----------------------------------------------------------------------------


def test_a_forbidden_pattern_in_the_log_fails(record: Record) -> None:
    fallback = (
        "(Worker_TP2_EP2 pid=162989) WARNING 07-26 17:47:50 [breakable_cudagraph.py:801] "
        "Falling back to eager execution for BatchDescriptor(num_tokens=12)"
    )
    log = record.server_log + fallback + "\r"
    verdict = gates.forbidden_log_patterns([FALLBACK], log)
    assert verdict.status is VerdictStatus.FAIL
    assert verdict.summary == (
        "forbidden 'Falling back to eager' matches 1 line, first: (Worker_TP2_EP2 pid=162989) "
        "WARNING 07-26 17:47:50 [breakable_cudagraph.py:801] Falling back to eager execution "
        "for BatchDescriptor(num_tokens=12)"
    )
    assert verdict.details == {"matches": {FALLBACK: 1}}


def test_a_marker_missing_on_one_rank_fails(record: Record) -> None:
    log = without_lines(record.server_log, "Worker_TP2_EP2", "Replayed audited")
    assert gates.log_lines(log) == [
        line
        for line in gates.log_lines(record.server_log)
        if line != line_with(record.server_log, "Worker_TP2_EP2", "Replayed audited")
    ]
    verdict = gates.log_marker(REPLAYED, log)
    assert (verdict.status, verdict.summary) == (
        VerdictStatus.FAIL,
        "replayed: Worker_TP2_EP2 has 0 lines, expected 1",
    )
    assert verdict.details["found"] == {
        "Worker_TP0_EP0": 1,
        "Worker_TP1_EP1": 1,
        "Worker_TP2_EP2": 0,
        "Worker_TP3_EP3": 1,
    }


def test_a_marker_twice_on_one_rank_fails(record: Record) -> None:
    captured = line_with(record.server_log, "Worker_TP1_EP1", "Captured audited")
    log = record.server_log + captured + "\n"
    verdict = gates.log_marker(CAPTURED, log)
    assert (verdict.status, verdict.summary) == (
        VerdictStatus.FAIL,
        "captured: Worker_TP1_EP1 has 2 lines, expected 1",
    )


def test_a_marker_with_other_graph_counts_fails(record: Record) -> None:
    log = record.server_log.replace("graphs=146, eager_breaks=145", "graphs=146, eager_breaks=0")
    verdict = gates.log_marker(CAPTURED, log)
    assert verdict.summary == (
        "captured: Worker_TP0_EP0 has 0 lines, expected 1; Worker_TP1_EP1 has 0 lines, "
        "expected 1; Worker_TP2_EP2 has 0 lines, expected 1; Worker_TP3_EP3 has 0 lines, "
        "expected 1"
    )


def test_a_marker_on_an_undeclared_rank_or_without_a_rank_fails(record: Record) -> None:
    captured = line_with(record.server_log, "Worker_TP3_EP3", "Captured audited")
    extra = captured.replace("Worker_TP3_EP3", "Worker_TP4_EP4")
    unranked = captured.replace("(Worker_TP3_EP3 pid=162990) ", "")
    verdict = gates.log_marker(CAPTURED, f"{record.server_log}{extra}\n{unranked}\n")
    assert verdict.summary == (
        "captured: (no rank) has 1 line, expected 0; Worker_TP4_EP4 has 1 line, expected 0"
    )


def test_a_marker_absent_from_the_whole_log_fails(record: Record) -> None:
    log = without_lines(record.server_log, "Prepared Laguna DFlash")
    verdict = gates.log_marker(PROJECTIONS, log)
    assert (verdict.status, verdict.summary) == (
        VerdictStatus.FAIL,
        "projections: 0 lines, expected 4",
    )


# --- speculative decoding -----------------------------------------------------------------------


def altered_curve(
    metrics_text: tuple[str, str], curve: Sequence[float], accepted: float
) -> MetricsDelta:
    before, after = metrics_text
    for position, value in enumerate(curve):
        after = set_counter(after, accepted_sample(position), value)
    return delta(before, set_counter(after, accepted_sample(), accepted))


def test_a_flat_survival_curve_fails_as_stale_drafts(metrics_text: tuple[str, str]) -> None:
    metrics = altered_curve(metrics_text, [1171.0] * 11, 11 * 1171.0)
    assert metrics.spec_decode_accepted_per_position == (1171.0,) * 11
    verdict = gates.spec_decode(SPEC_DECODE, metrics)
    assert verdict.status is VerdictStatus.FAIL
    assert verdict.summary == (
        "survival 1171 … 1171 does not decay (last/first 1.0000 > 0.5): "
        "verifier accepting stale drafts"
    )


def test_a_nearly_flat_survival_curve_fails(metrics_text: tuple[str, str]) -> None:
    curve = [1171.0 - 45 * position for position in range(11)]  # 1171 … 721
    metrics = altered_curve(metrics_text, curve, sum(curve))
    verdict = gates.spec_decode(SPEC_DECODE, metrics)
    assert verdict.summary == (
        "survival 1171 … 721 does not decay (last/first 0.6157 > 0.5): "
        "verifier accepting stale drafts"
    )


def test_a_survival_curve_that_rises_fails(metrics_text: tuple[str, str]) -> None:
    curve = [1171.0, 847.0, 631.0, 497.0, 328.0, 397.0, 248.0, 204.0, 172.0, 140.0, 112.0]
    metrics = altered_curve(metrics_text, curve, 4747.0)
    verdict = gates.spec_decode(SPEC_DECODE, metrics)
    assert verdict.summary == (
        "survival rises from position 4 to 5 (328 → 397): verifier accepting stale drafts"
    )


def test_per_position_counts_must_add_up_to_the_accepted_tokens(
    metrics_text: tuple[str, str],
) -> None:
    before, after = metrics_text
    metrics = delta(before, set_counter(after, accepted_sample(), 4748.0))
    verdict = gates.spec_decode(SPEC_DECODE, metrics)
    assert verdict.summary == "per-position counts sum to 4747, accepted is 4748"


def test_acceptance_outside_the_declared_bounds_and_wrong_depth_fail(record: Record) -> None:
    gate = SpecDecodeGate(acceptance_min=0.3, acceptance_max=0.9, positions=12)
    verdict = gates.spec_decode(gate, record.metrics)
    assert verdict.summary == (
        "acceptance 0.2682 outside [0.3, 0.9]; 11 per-position counters, expected 12"
    )


def test_no_spec_decode_counters_fail() -> None:
    metrics = MetricsDelta(prefix_cache_hits=0.0)
    verdict = gates.spec_decode(SPEC_DECODE, metrics)
    assert verdict.summary == (
        "accepted or draft tokens not reported by /metrics; 0 per-position counters, "
        "expected 11; a curve of 0 positions cannot show decay"
    )


def test_a_flat_curve_passes_only_where_decay_is_not_required(
    metrics_text: tuple[str, str],
) -> None:
    metrics = altered_curve(metrics_text, [1171.0] * 11, 11 * 1171.0)
    gate = SPEC_DECODE.model_copy(update={"survival_must_decay": False})
    verdict = gates.spec_decode(gate, metrics)
    assert (verdict.status, verdict.summary) == (
        VerdictStatus.PASS,
        "acceptance 12881/17699 = 0.7278 within [0.2, 1.0]",
    )


# --- throughput ---------------------------------------------------------------------------------


def test_a_floor_above_what_was_measured_fails(record: Record) -> None:
    verdict = gates.throughput(THROUGHPUT, record.bench.rows, 110.0)
    assert (verdict.status, verdict.summary) == (
        VerdictStatus.FAIL,
        "conventional median 101.94 tok/s over 100 tokens < floor 104.50 (0.95 of sealed 110.00)",
    )
    assert verdict.details["conventional_median_tok_s"] == CONVENTIONAL_MEDIAN
    assert verdict.details["floor_rate_tok_s"] == 0.95 * 110.0


def test_a_run_ten_percent_slower_than_the_record_fails(record: Record) -> None:
    slower = tuple(
        row.model_copy(update={"token_offsets_s": tuple(t * 1.1 for t in row.token_offsets_s)})
        for row in record.bench.rows
    )
    verdict = gates.throughput(THROUGHPUT, slower, CONVENTIONAL_MEDIAN)
    assert verdict.status is VerdictStatus.FAIL
    assert verdict.summary == (
        "conventional median 92.67 tok/s over 100 tokens < floor 96.84 (0.95 of sealed 101.94)"
    )
    assert verdict.details["conventional_median_tok_s"] == pytest.approx(
        CONVENTIONAL_MEDIAN / 1.1, rel=1e-12
    )


def test_a_row_too_short_for_the_window_fails_the_throughput_gate(record: Record) -> None:
    gate = THROUGHPUT.model_copy(update={"tokens": 300})
    verdict = gates.throughput(gate, record.bench.rows, CONVENTIONAL_MEDIAN)
    assert (verdict.status, verdict.summary) == (
        VerdictStatus.FAIL,
        "row 'structured-extraction' streamed fewer tokens than the throughput window",
    )
    assert verdict.details == {
        "where": "row 10 (structured-extraction)",
        "expected": "at least 300 token arrival offsets",
        "found": "296",
    }


def read_late(rows: Sequence[OracleRow], *prompt_ids: str) -> tuple[OracleRow, ...]:
    """`rows` with their reads and events numbered as a stream numbers them (the record's
    tokens at one offset came in one event, read alone, the read before the first at half its
    offset), but those of `prompt_ids`, whose first two events came in one read (as a client
    not scheduled for a while reads them)."""
    numbered = []
    for row in rows:
        offsets = list(row.token_offsets_s)
        if row.prompt_id in prompt_ids:
            second = next(i for i, offset in enumerate(offsets) if offset != offsets[0])
            offsets[:second] = [offsets[second]] * second
        times = sorted(set(row.token_offsets_s))
        events = tuple(times.index(offset) for offset in row.token_offsets_s)
        reads = tuple(sorted(set(offsets)).index(offset) for offset in offsets)
        update = {
            "token_offsets_s": tuple(offsets),
            "ttft_s": offsets[0],
            "token_reads": reads,
            "token_events": events,
            "first_token_after_s": row.token_offsets_s[0] / 2,
        }
        numbered.append(OracleRow.model_validate({**row.model_dump(), **update}))
    return tuple(numbered)


def test_a_row_read_out_of_a_backlog_is_a_lower_bound_in_the_gated_median_by_name(
    record: Record,
) -> None:
    """Read late, a row's window opens at the read before its first token: its rate is lower,
    never higher, than the one its tokens read as they came give, and the verdict says so."""
    rows = record.bench.rows
    late = rows[0].prompt_id
    numbered = read_late(rows, late)
    reads = numbered[0].token_reads or ()
    verdict = gates.throughput(THROUGHPUT, numbered, CONVENTIONAL_MEDIAN)
    asis = gates.throughput(THROUGHPUT, read_late(rows), CONVENTIONAL_MEDIAN)
    assert asis.details == gates.throughput(THROUGHPUT, rows, CONVENTIONAL_MEDIAN).details, (
        "numbered as the record's offsets say: the same rates"
    )
    rates, bounded = asis.details["rows_tok_s"], verdict.details["rows_tok_s"]
    assert isinstance(rates, dict) and isinstance(bounded, dict)
    assert bounded[late] < rates[late]
    assert {k: v for k, v in bounded.items() if k != late} == {
        k: v for k, v in rates.items() if k != late
    }
    offset = rows[0].token_offsets_s[0] / 2
    reason = (
        f"token 0 came in a read of {reads.count(reads[0])} tokens, so the window opens at the "
        "read before "
        f"({offset * 1000:.1f} ms)"
    )
    assert verdict.details["lower_bounds"] == {late: reason}
    assert asis.details["lower_bounds"] == {}
    assert verdict.summary.endswith(
        f"; 1 of {len(rows)} rows' rates are lower bounds ({late}: {reason})"
    )


def test_a_run_capturing_the_teacher_states_the_rate_it_seals_and_its_bounds(
    record: Record,
) -> None:
    """The teacher's rate is what every replay's floor scales: a run capturing it says which
    rate it captured, and which rows' rates in it are lower bounds; a row without a rate
    fails it (nothing to seal)."""
    evidence = record.run_evidence().model_copy(update={"teacher": None})
    (captured,) = (v for v in gates.judge_run(GATES, evidence) if v.gate == "throughput")
    assert captured.status is VerdictStatus.NOT_APPLICABLE
    assert captured.summary == (
        f"captures the teacher's rate: conventional median {CONVENTIONAL_MEDIAN:.2f} tok/s "
        "over 100 tokens"
    )
    rows = evidence.rows or ()
    late = rows[0].prompt_id
    bounded = evidence.model_copy(update={"rows": read_late(rows, late)})
    (lower,) = (v for v in gates.judge_run(GATES, bounded) if v.gate == "throughput")
    assert lower.status is VerdictStatus.NOT_APPLICABLE
    assert f"rows' rates are lower bounds ({late}: token 0 came in a read" in lower.summary
    short = rows[0].model_copy(
        update={
            "token_ids": rows[0].token_ids[:99],
            "token_offsets_s": rows[0].token_offsets_s[:99],
        }
    )
    unmeasured = evidence.model_copy(update={"rows": (short, *rows[1:])})
    (refused,) = (v for v in gates.judge_run(GATES, unmeasured) if v.gate == "throughput")
    assert refused.status is VerdictStatus.FAIL
    assert refused.summary == (f"row {late!r} streamed fewer tokens than the throughput window")
    assert set(refused.details) == {"where", "expected", "found"}


# --- judge --------------------------------------------------------------------------------------


def test_enabled_gates_without_their_evidence_fail_naming_what_is_missing() -> None:
    missing = {  # each gate in the order judged, and the evidence it misses
        "exact_token_ids": "oracle rows",
        "text_sha256": "oracle rows",
        "cached_tokens_zero": "oracle rows",
        "prefix_cache_hit_delta_zero": "metrics diff",
        "log_marker:captured": "server log",
        "log_marker:replayed": "server log",
        "log_marker:projections": "server log",
        "forbidden_log_patterns": "server log",
        "spec_decode": "metrics diff",
        "throughput": "oracle rows",
        "fresh_starts": "oracle rows of start 1",
    }
    verdicts = gates.judge(GATES.model_copy(update={"fresh_starts": 2}), RunEvidence())
    assert [(v.gate, v.status, v.summary) for v in verdicts] == [
        (gate, VerdictStatus.FAIL, f"no {what} in the run's evidence")
        for gate, what in missing.items()
    ]


def test_a_declared_second_start_that_did_not_run_fails(record: Record) -> None:
    evidence = record.run_evidence(CONVENTIONAL_MEDIAN)
    verdicts = gates.judge(GATES.model_copy(update={"fresh_starts": 3}), evidence)
    assert [(v.gate, v.status, v.summary) for v in verdicts[-2:]] == [
        ("fresh_starts", VerdictStatus.FAIL, "no oracle rows of start 2 in the run's evidence"),
        ("fresh_starts", VerdictStatus.FAIL, "no oracle rows of start 3 in the run's evidence"),
    ]


def test_a_throughput_gate_without_a_sealed_rate_fails(record: Record) -> None:
    verdicts = gates.judge(GATES, record.run_evidence())
    (verdict,) = (v for v in verdicts if v.gate == "throughput")
    assert (verdict.status, verdict.summary) == (
        VerdictStatus.FAIL,
        "no teacher conventional rate in the run's evidence",
    )


def test_gates_the_manifest_disables_are_not_applicable_and_say_so(record: Record) -> None:
    disabled = (
        "exact_token_ids",
        "text_sha256",
        "cached_tokens_zero",
        "prefix_cache_hit_delta_zero",
    )
    off = Gates.model_validate(dict.fromkeys(disabled, False))
    verdicts = gates.judge(off, RunEvidence())
    assert [v.status for v in verdicts] == [VerdictStatus.NOT_APPLICABLE] * 9
    assert [(v.gate, v.summary) for v in verdicts] == [
        *((gate, "disabled in oracle.gates") for gate in disabled),
        ("log_markers", "no log markers declared"),
        ("forbidden_log_patterns", "no forbidden log patterns declared"),
        ("spec_decode", "no spec_decode gate declared"),
        ("throughput", "no throughput gate declared"),
        ("fresh_starts", "one fresh start declared"),
    ]
    assert all(v.passed for v in verdicts)


def test_every_failure_of_a_run_is_reported_at_once(
    record: Record, metrics_text: tuple[str, str]
) -> None:
    before, after = metrics_text
    hits = 'vllm:prefix_cache_hits_total{engine="0",model_name="laguna-s-2.1-int4"}'
    evidence = record.run_evidence(CONVENTIONAL_MEDIAN).model_copy(
        update={
            "metrics": delta(before, set_counter(after, hits, 1.0)),
            "later_starts": (with_token(record.bench.rows, "python-lru-cache", 0, 73),),
        }
    )
    verdicts = gates.judge(GATES, evidence)
    assert [v.gate for v in verdicts if not v.passed] == [
        "prefix_cache_hit_delta_zero",
        "fresh_starts",
    ]


# --- the server log gate, on the committed bundles' logs --------------------------------------

REPO = Path(__file__).resolve().parents[1]
TINY_START = REPO / "repro" / "tiny-cpu" / "evidence" / "start-1"
RANK_1 = REPO / "repro" / "tiny-cpu-2node" / "evidence" / "start-1" / "rank-1"
SUITE_POST = b'"POST /v1/chat/completions HTTP/1.1" 200'


def served(directory: Path) -> tuple[bytes, int]:
    """A start's (one rank's) log and how much of it was written before teardown began."""
    teardown = json.loads((directory / "teardown.json").read_text())
    return (directory / "server.log").read_bytes(), int(teardown["log_bytes"])


def answered(directory: Path) -> int:
    """The requests a start's client posted: its suite's rows and each load's."""
    return sum(len(json.loads(p.read_text())) for p in directory.glob("**/rows.json"))


TINY_ANSWERED = answered(TINY_START)


def before_first_post(directory: Path, *lines: str) -> tuple[bytes, int]:
    """The start's log with `lines` written while it served, just before its first answer."""
    log, written = served(directory)
    at = log.rindex(b"\n", 0, log.index(SUITE_POST)) + 1
    added = "".join(f"{line}\n" for line in lines).encode()
    return log[:at] + added + log[at:], written + len(added)


@pytest.mark.parametrize(
    "directory",
    [
        TINY_START,
        REPO / "repro" / "tiny-cpu" / "evidence" / "start-2",
        REPO / "repro" / "tiny-cpu-2node" / "evidence" / "start-1",
        RANK_1,
    ],
    ids=["tiny-1", "tiny-2", "2node", "2node-rank-1"],
)
def test_the_committed_logs_pass_the_server_log_gate(directory: Path) -> None:
    log, written = served(directory)
    rank = 1 if directory == RANK_1 else 0
    verdict = gates.server_log_verdict(
        1, log, written, answered=0 if rank else answered(directory), rank=rank
    )
    assert verdict.passed, verdict.summary
    assert not any(marker in log[:written].decode() for marker in gates.CRASH_MARKERS)
    assert [gates.crash_marker(line) for line in log[:written].decode().splitlines()] == [
        None for _ in log[:written].decode().splitlines()
    ]


def test_the_laguna_log_passes_the_server_log_gate_whole(record: Record) -> None:
    """An imported record states no teardown offset: its whole log is judged, shutdown too."""
    log = record.server_log.encode()
    verdict = gates.server_log_verdict(1, log, None, answered=len(record.bench.rows))
    assert verdict.passed, verdict.summary


@pytest.mark.parametrize(
    ("line", "marker"),
    [
        (
            "(EngineCore pid=22843) ERROR 12-04 15:14:44 [multiproc_executor.py:250] Worker proc "
            "VllmWorker-0 died unexpectedly, shutting down executor.",
            "died unexpectedly",
        ),
        (
            "(APIServer pid=22825) ERROR 12-04 15:14:44 [core_client.py:612] Engine core proc "
            "EngineCore died unexpectedly, shutting down client.",
            "died unexpectedly",
        ),
        (
            "(EngineCore pid=22843) ERROR 12-04 15:14:44 [core.py:1000] EngineCore failed: "
            "RuntimeError: CPU out of memory. Worker killed by signal 9.",
            "killed by signal",
        ),
        ("Fatal error: SIGSEGV received; Bus error; Aborted", "SIGSEGV"),
        ("Fatal Python error: Bus error", "Fatal Python error"),
        ("Aborted (core dumped)", "Aborted"),
        ("free(): invalid pointer", "free(): "),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out of memory"),
        (
            "terminate called after throwing an instance of 'c10::Error'",
            "terminate called after throwing",
        ),
        (
            "(APIServer pid=11746) ERROR 12-06 01:28:00 [serving_chat.py:1301] Error in chat "
            "completion stream generator.",
            "Error in chat completion stream generator",
        ),
        (
            "(APIServer pid=11746) ERROR 12-06 01:28:00 [async_llm.py:700] AsyncLLM "
            "output_handler failed.",
            "output_handler failed",
        ),
        ("ERROR:    Exception in ASGI application", "Exception in ASGI application"),
        (
            "(Worker pid=11776) ERROR 12-06 01:28:00 [cpu_model_runner.py:1] RuntimeError: "
            "Expected all tensors to be on the same device",
            "RuntimeError",
        ),
        ("ValueError: boom", "ValueError"),
        (
            "(APIServer pid=11746) ERROR 12-06 01:28:00 [launcher.py:1] "
            "torch.AcceleratorError: device lost",
            "AcceleratorError",
        ),
        ("Killed", "Killed"),
        ("bash: line 1: 11746 Killed                  python -m vllm", "Killed"),
    ],
)
def test_a_crash_written_while_serving_fails_the_server_log_gate(line: str, marker: str) -> None:
    log, written = before_first_post(TINY_START, line)
    verdict = gates.server_log_verdict(1, log, written, answered=5)
    assert verdict.summary == f"1 crash line(s) while serving; first: line 109 {marker!r}"


@pytest.mark.parametrize(
    "line",
    [
        "(APIServer pid=11746) WARNING 12-06 01:27:53 [system_utils.py:255] Found ulimit of 20000 "
        "and failed to automatically increase with error current limit exceeds maximum limit. "
        "This can cause fd limit errors like `OSError: [Errno 24] Too many open files`.",
        "(APIServer pid=11746) INFO 12-06 01:28:00 [x.py:1] Killed 0 stale sockets",
        "(APIServer pid=11746) INFO 12-06 01:28:00 [x.py:1] no RuntimeError: seen",
    ],
)
def test_a_line_that_only_names_an_exception_or_a_kill_is_no_crash(line: str) -> None:
    """A message that quotes an exception or says `Killed` within it states no failure: only
    a message that is an exception (a traceback's last line) or the shell's report does."""
    log, written = before_first_post(TINY_START, line)
    assert gates.server_log_verdict(1, log, written, answered=TINY_ANSWERED).passed


def test_a_worker_of_another_node_dying_fails_its_rank() -> None:
    log, written = served(RANK_1)
    line = b"(Worker_TP1 pid=26240) ERROR 12-04 17:57:00 [multiproc_executor.py:250] Worker proc "
    line += b"VllmWorker-1 died unexpectedly, shutting down executor.\n"
    cut = log.index(b"\n") + 1
    verdict = gates.server_log_verdict(1, log[:cut] + line + log[cut:], written + len(line), rank=1)
    assert verdict.summary == "1 crash line(s) while serving; first: line 2 'died unexpectedly'"


def test_a_suite_request_answered_500_fails_the_server_log_gate() -> None:
    error = 'INFO:     127.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server'
    log, written = before_first_post(TINY_START, error)
    verdict = gates.server_log_verdict(1, log, written, answered=5)
    assert verdict.summary == (
        "1 suite request(s) answered otherwise than 2xx while serving; first: line 109 POST "
        "/v1/chat/completions 500"
    )


def test_more_suite_requests_logged_than_rows_fail_the_server_log_gate() -> None:
    answered = 'INFO:     127.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
    log, written = before_first_post(TINY_START, answered, answered)
    verdict = gates.server_log_verdict(1, log, written, answered=TINY_ANSWERED)
    assert TINY_ANSWERED == 10  # 5 prompts, asked alone and then under the c4 load
    assert verdict.summary == (
        "12 suite requests logged while serving, expected the 10 answered (one POST a row): the "
        "log says the stack answered requests the rows do not hold; first: line 109"
    )


def test_a_fourteenth_laguna_request_and_a_500_fail_the_server_log_gate(record: Record) -> None:
    last = [line for line in gates.log_lines(record.server_log) if "POST /v1/chat" in line][-1]
    extra = '(APIServer pid=162700) INFO:     127.0.0.1:39000 - "POST /v1/chat/completions '
    for status, summary in (
        ("200 OK", "14 suite requests logged while serving, expected the 13 answered"),
        ("500 Internal Server Error", "1 suite request(s) answered otherwise than 2xx while"),
    ):
        log = record.server_log.replace(last, f'{last}\n{extra}HTTP/1.1" {status}', 1)
        verdict = gates.server_log_verdict(1, log.encode(), None, answered=13)
        assert verdict.summary.startswith(summary), verdict.summary


# --- the one table of gates --------------------------------------------------------------------


EVERY_GATE = GATES.model_copy(
    update={
        "fresh_starts": 3,
        "metrics_info": (MetricsInfoGate(family="vllm:cache_config_info", labels={"a": "b"}),),
        "fresh_start_throughput": FreshStartThroughputGate(relative_tolerance=0.2),
        "stall": StallGate(),
        "latency": LatencyGate(itl_p99_max_ms=500.0),
    }
)


def test_check_names_every_gate_a_run_judges_as_its_verdict_names_it() -> None:
    """`repro check`'s plan comes from the same table as the verdicts: one entry a gate, so a
    declared gate can be neither missing from the plan nor named otherwise there."""
    judged = [v.gate for v in gates.judge(EVERY_GATE, RunEvidence())]
    planned = [name for name, _checks in gates.plan(EVERY_GATE)]
    assert sorted(set(judged)) == sorted(set(planned))
    # 4 on by default, 1 info gauge, 3 log markers, 1 set of patterns, 6 gates declared once
    assert len(set(judged)) == 15


def test_every_verdict_has_its_kind_and_every_kind_describes_itself() -> None:
    verdicts = gates.judge(EVERY_GATE, RunEvidence(), kernel_markers=(CAPTURED,))
    assert [v.gate for v in verdicts if gates.kind_of(v.gate) is None] == []
    assert f"kernel_marker:{CAPTURED.name}" in {v.gate for v in verdicts}
    assert len(gates.KINDS) == len(gates.GATES)
    judged_kinds = [kind.name for kind in gates.GATES if kind.judge is not None]
    order = [gates.kind_of(v.gate) for v in verdicts]
    # the verdicts follow the table's order
    positions = [judged_kinds.index(kind.name) for kind in order if kind is not None]
    assert positions == sorted(positions)


def test_a_gate_left_out_of_the_table_is_neither_judged_nor_planned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The table is the one place: without its entry a gate vanishes from both at once, never
    from one alone."""
    kept = tuple(kind for kind in gates.GATES if kind.name != "stall")
    monkeypatch.setattr(gates, "GATES", kept)
    assert "stall" not in {v.gate for v in gates.judge(EVERY_GATE, RunEvidence())}
    assert "stall" not in {name for name, _ in gates.plan(EVERY_GATE)}
