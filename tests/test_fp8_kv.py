"""manifests/fp8-kv.toml: each promotion rule is a gate that `judge` runs, proved on evidence made
from the real Laguna record's files.

The FP8 lane has not run, so its evidence is the BF16 record's, transformed as the lane's would
differ: the FP8 audit lines added on each rank of a copy of the real server.log, the engine's
KV dtype made fp8 there and in the real metrics, the answers given a text of the record's own
format (its bench rows' text previews) and an FP8 teacher made of those rows. Then each rule is
broken one way at a time and must fail, alone.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

from repro_serving.builder.documents.evidence import (
    OracleRow,
    RunEvidence,
    Teacher,
    TeacherRow,
    Verdict,
)
from repro_serving.builder.documents.manifest import (
    Gates,
    InvalidDocument,
    Manifest,
    RepetitionCheck,
    Suite,
    ToolCallCheck,
)
from repro_serving.builder.documents.translate import Problem
from repro_serving.builder.errors import BadInput
from repro_serving.launch import gates as gate_functions
from repro_serving.launch.gates import judge
from repro_serving.launch.historical import RUN_DIR, Record, load_record
from repro_serving.launch.quality import assess, quality_check
from repro_serving.launch.throughput import measure

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "manifests" / "fp8-kv.toml"
RECORD = ROOT / "records" / "laguna-102tps"
DIGEST = "3e6df440976ab2ed5229e1a39179cbc99d573c615386f223eeabc9de5ea9ddc0"
TARGET_AUDIT = (
    "Laguna FP8 KV calibrated-scale audit: PASS layers=48 scales=96 source=checkpoint "
    f"calculate_kv_scales=False digest={DIGEST}"
)
DRAFT_AUDIT = (
    "Laguna DFlash FP8 KV cache audit: PASS layers=6 uncalibrated=6 k_scale=1.0 v_scale=1.0"
)
PROJECTIONS = re.compile(
    r"^(?P<prefix>\((?P<rank>Worker_TP\d_EP\d) pid=\d+\) INFO \S+ \S+) \[laguna_dflash\.py:878\] "
    r"Prepared Laguna DFlash FP8 W8A16 draft projections: count=31$",
    re.MULTILINE,
)
TEACHER_RATE = 60.0
"""The FP8 teacher's rate: the target alone, slower than the candidate with its drafter."""
STRUCTURED = "structured-extraction"
FULL_JSON = json.dumps(
    {
        "service": "Atlas export API",
        "start_utc": "14:07",
        "end_utc": "14:46",
        "customer_impact": "Intermittent 503 errors for EU tenants",
        "trigger": "Schema migration deployed at 13:58 increased lock duration",
        "contributing_factors": ["Schema migration deployed at 13:58 increased lock duration"],
    },
    indent=2,
)
GATE_NAMES = [
    "exact_token_ids",
    "text_sha256",
    "cached_tokens_zero",
    "prefix_cache_hit_delta_zero",
    "metrics_info:vllm:cache_config_info",
    "log_marker:target-calibrated-kv-scales",
    "log_marker:draft-unit-scale-kv",
    "log_marker:engine-fp8-kv",
    "log_marker:flash-attention-backend",
    "log_marker:graph-captured",
    "log_marker:graph-replayed",
    "forbidden_log_patterns",
    "spec_decode",
    "throughput",
    "fresh_starts",
    "fresh_start_throughput",
]


# --- the lane's evidence, made from the record's ------------------------------------------------


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return Manifest.from_path(MANIFEST)


@pytest.fixture(scope="module")
def gates(manifest: Manifest) -> Gates:
    return manifest.oracle.gates


@pytest.fixture(scope="module")
def record() -> Record:
    return load_record(RECORD)


def fp8_log(bf16_log: str) -> str:
    """The record's log as the FP8 lane's: the engine's KV dtype fp8, and on each rank the target
    and draft audits logged right after the rank's draft projections."""

    def audits(match: re.Match[str]) -> str:
        prefix = match["prefix"]
        return (
            f"{match[0]}\n{prefix} [laguna_fp8_kv.py:211] {TARGET_AUDIT}\n"
            f"{prefix} [laguna_fp8_kv.py:305] {DRAFT_AUDIT}"
        )

    log, engines = re.subn(r", kv_cache_dtype=bfloat16,", ", kv_cache_dtype=fp8,", bf16_log)
    log, ranks = PROJECTIONS.subn(audits, log)
    assert (engines, ranks) == (1, 4)
    return log


def fp8_metrics(bf16_metrics: str) -> str:
    metrics, count = re.subn(r'cache_dtype="bfloat16"', 'cache_dtype="fp8"', bf16_metrics)
    assert count == 1
    return metrics


def previews() -> dict[str, str]:
    """Each row's text in the record's own format: its bench row's text preview."""
    bench = json.loads((RECORD / RUN_DIR / "bench.json").read_text("utf-8"))
    return {row["prompt_id"]: row["text_preview"] for row in bench["rows"]}


def with_text(row: OracleRow, text: str) -> OracleRow:
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return row.model_copy(update={"text": text, "text_sha256": digest})


def teacher_of(rows: Sequence[OracleRow], rate: float = TEACHER_RATE) -> Teacher:
    """An FP8 teacher whose rows are `rows`' token ids and text hashes."""
    return Teacher.of_rows("laguna-s-2.1-realistic-cold-v1", rows, rate)


def slower(rows: Sequence[OracleRow], factor: float) -> tuple[OracleRow, ...]:
    """The rows with every arrival offset (the first is the TTFT) stretched by `factor` (the
    rate divided by it)."""
    return tuple(
        row.model_copy(
            update={
                "token_offsets_s": tuple(t * factor for t in row.token_offsets_s),
                "ttft_s": row.ttft_s * factor,
            }
        )
        for row in rows
    )


@pytest.fixture(scope="module")
def fp8_rows(record: Record) -> tuple[OracleRow, ...]:
    texts = previews() | {STRUCTURED: FULL_JSON}
    return tuple(with_text(row, texts[row.prompt_id]) for row in record.bench.rows)


@pytest.fixture(scope="module")
def evidence(record: Record, fp8_rows: tuple[OracleRow, ...]) -> RunEvidence:
    after = (RECORD / RUN_DIR / "metrics-after-suite.prom").read_text("utf-8")
    return RunEvidence(
        rows=fp8_rows,
        teacher=teacher_of(fp8_rows),
        metrics=record.metrics,
        server_log=fp8_log(record.server_log),
        later_starts=(slower(fp8_rows, 1.02),),
        metrics_after=fp8_metrics(after),
    )


def verdicts_by_gate(verdicts: Sequence[Verdict]) -> dict[str, Verdict]:
    found = {verdict.gate: verdict for verdict in verdicts}
    assert len(found) == len(verdicts)
    return found


def failing(gates: Gates, evidence: RunEvidence) -> dict[str, str]:
    """The gates that fail on `evidence`, with their summaries."""
    return {v.gate: v.summary for v in judge(gates, evidence) if not v.passed}


def failing_quality(manifest: Manifest, rows: Sequence[OracleRow]) -> dict[str, str]:
    """The quality checks that fail on `rows`, with their summaries."""
    return {v.gate: v.summary for v in assess(manifest.oracle.quality, rows) if not v.passed}


def answered(
    rows: Sequence[OracleRow], prompt_id: str, change: Callable[[str], str]
) -> tuple[OracleRow, ...]:
    """`rows` with the answer to `prompt_id` changed."""
    return tuple(
        with_text(r, change(r.text or "")) if r.prompt_id == prompt_id else r for r in rows
    )


Row = TypeVar("Row", OracleRow, TeacherRow)


def with_token(rows: Sequence[Row], index: int, position: int, token: int) -> tuple[Row, ...]:
    """`rows` with token `position` of row `index` replaced by `token`."""
    changed = list(rows)
    ids = list(changed[index].token_ids)
    ids[position] = token
    changed[index] = changed[index].model_copy(update={"token_ids": tuple(ids)})
    return tuple(changed)


def only_failure(gates: Gates, evidence: RunEvidence, gate: str) -> str:
    """The summary of `gate`, which must be the one gate that fails on `evidence`."""
    found = failing(gates, evidence)
    assert list(found) == [gate], found
    return found[gate]


def changed_log(evidence: RunEvidence, change: Callable[[str], str]) -> RunEvidence:
    assert evidence.server_log is not None
    return evidence.model_copy(update={"server_log": change(evidence.server_log)})


# --- the untouched lane passes every rule -------------------------------------------------------


def test_repro_check_accepts_the_lane(manifest: Manifest) -> None:
    suite = manifest.load_suite()
    assert (suite.name, len(suite.prompts), suite.replayable) == (
        "laguna-s-2.1-realistic-cold-v1",
        13,
        False,
    )
    assert manifest.oracle.teacher == "fp8-teacher"
    assert manifest.launch.argv_for("fp8-teacher") == manifest.launch.argv
    assert "--speculative-config" in manifest.launch.argv_for("candidate")


def test_every_rule_is_a_gate_judge_runs_and_the_lane_passes_them_all(
    gates: Gates, evidence: RunEvidence
) -> None:
    verdicts = judge(gates, evidence)
    assert [v.gate for v in verdicts] == GATE_NAMES
    assert {v.gate: v.status.value for v in verdicts} == dict.fromkeys(GATE_NAMES, "pass")
    found = verdicts_by_gate(verdicts)
    assert found["log_marker:target-calibrated-kv-scales"].summary == (
        "target-calibrated-kv-scales: exact on 4 ranks (Worker_TP0_EP0=1, Worker_TP1_EP1=1, "
        "Worker_TP2_EP2=1, Worker_TP3_EP3=1)"
    )
    assert found["metrics_info:vllm:cache_config_info"].summary == (
        "vllm:cache_config_info reports cache_dtype='fp8', calculate_kv_scales='False', "
        "enable_prefix_caching='False' on 1 label set(s)"
    )
    assert found["fresh_start_throughput"].details["deviation"] == pytest.approx(
        1 - 1 / 1.02, abs=1e-12
    )


def test_the_bf16_record_itself_fails_exactly_the_fp8_rules(
    gates: Gates, record: Record, evidence: RunEvidence
) -> None:
    after = (RECORD / RUN_DIR / "metrics-after-suite.prom").read_text("utf-8")
    bf16 = evidence.model_copy(update={"server_log": record.server_log, "metrics_after": after})
    assert failing(gates, bf16) == {
        "metrics_info:vllm:cache_config_info": (
            "vllm:cache_config_info: cache_dtype is 'bfloat16', expected 'fp8'"
        ),
        "log_marker:target-calibrated-kv-scales": (
            "target-calibrated-kv-scales: Worker_TP0_EP0 has 0 lines, expected 1; "
            "Worker_TP1_EP1 has 0 lines, expected 1; Worker_TP2_EP2 has 0 lines, expected 1; "
            "Worker_TP3_EP3 has 0 lines, expected 1"
        ),
        "log_marker:draft-unit-scale-kv": (
            "draft-unit-scale-kv: Worker_TP0_EP0 has 0 lines, expected 1; "
            "Worker_TP1_EP1 has 0 lines, expected 1; Worker_TP2_EP2 has 0 lines, expected 1; "
            "Worker_TP3_EP3 has 0 lines, expected 1"
        ),
        "log_marker:engine-fp8-kv": "engine-fp8-kv: 0 lines, expected 1",
        "forbidden_log_patterns": (
            "forbidden '\\\\bkv_cache_dtype=(?:$|[^f]|f(?:$|[^p]|p(?:$|[^8]|8\\\\w)))' "
            "matches 1 line, first: "
            "(EngineCore pid=162906) INFO 07-26 17:45:47 [core.py:114] Initializing a V1 LLM "
            "engine (v0.1.dev1267+g6ae34833d.d20260726) with config: "
            "model='/mnt/fast-ai/llm…"
        ),
    }


# --- each rule broken alone ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rank", "audit", "logged", "marker"),
    [
        pytest.param(
            "Worker_TP2_EP2",
            TARGET_AUDIT,
            None,
            "target-calibrated-kv-scales",
            id="a target rank without its calibrated scale audit",
        ),
        pytest.param(
            "Worker_TP1_EP1",
            TARGET_AUDIT,
            TARGET_AUDIT.replace(DIGEST, "0" * 64),
            "target-calibrated-kv-scales",
            id="a calibrated scale audit of other scales",
        ),
        pytest.param(
            "Worker_TP3_EP3",
            DRAFT_AUDIT,
            DRAFT_AUDIT.replace("uncalibrated=6", "uncalibrated=5"),
            "draft-unit-scale-kv",
            id="a draft rank with a calibrated cache layer",
        ),
    ],
)
def test_a_rank_whose_kv_scale_audit_is_not_logged_as_sealed_fails_its_marker(
    gates: Gates, evidence: RunEvidence, rank: str, audit: str, logged: str | None, marker: str
) -> None:
    """The rank's audit line removed (`logged` None) or saying `logged` instead."""
    line = re.compile(rf"^(\({rank} .*){re.escape(audit)}\n", flags=re.M)
    instead = "" if logged is None else rf"\g<1>{logged}\n"
    broken = changed_log(evidence, lambda log: line.sub(instead, log))
    assert failing(gates, broken) == {
        f"log_marker:{marker}": f"{marker}: {rank} has 0 lines, expected 1"
    }


def test_an_audit_logged_twice_on_a_rank_fails(gates: Gates, evidence: RunEvidence) -> None:
    line = (
        f"(Worker_TP0_EP0 pid=162987) INFO 07-26 17:46:44 [laguna_fp8_kv.py:211] {TARGET_AUDIT}\n"
    )
    broken = changed_log(evidence, lambda log: log + line)
    assert failing(gates, broken) == {
        "log_marker:target-calibrated-kv-scales": (
            "target-calibrated-kv-scales: Worker_TP0_EP0 has 2 lines, expected 1"
        )
    }


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        (
            "(Worker_TP0_EP0 pid=162987) WARNING 07-26 17:47:01 [flash_attn.py:712] FP8 KV cache "
            "is not supported by this kernel. Falling back to the native attention path.",
            "(?i)\\bfall(?:ing|s)? back\\b.*\\b(?:attention|kv[ _-]?cache|fp8)",
        ),
        (
            "(Worker_TP1_EP1 pid=162988) INFO 07-26 17:46:04 [xpu.py:171] Using Triton Attention "
            "backend.",
            "Using (?:Flash (?:Attention backend(?:[^.]|$)|attention backend)"
            "|[^.]{0,5}[Aa]ttention backend|[^.]{7,}[Aa]ttention backend"
            "|(?:[^F.][^.]{5}|F[^l.][^.]{4}|Fl[^a.][^.]{3}|Fla[^s.][^.]{2}|Flas[^h.][^.]"
            "|Flash[^ .])[Aa]ttention backend)",
        ),
        (
            "(EngineCore pid=162906) INFO 07-26 17:47:13 [cache.py:88] cache config: "
            "calculate_kv_scales=True",
            "\\bcalculate_kv_scales=True\\b",
        ),
        (
            "(Worker_TP2_EP2 pid=162989) ERROR 07-26 17:46:43 [laguna_fp8_kv.py:230] Laguna FP8 KV "
            "calibrated-scale audit: FAIL layer 17 k_scale missing",
            "FP8 KV (?:calibrated-scale |cache )?audit: FAIL",
        ),
    ],
)
def test_a_fallback_line_fails_the_forbidden_patterns(
    gates: Gates, evidence: RunEvidence, line: str, pattern: str
) -> None:
    broken = changed_log(evidence, lambda log: log + line + "\n")
    assert failing(gates, broken) == {
        "forbidden_log_patterns": f"forbidden {pattern!r} matches 1 line, first: {line}"
    }


def test_the_records_own_sampler_fallback_is_not_a_kv_or_attention_fallback(
    evidence: RunEvidence, gates: Gates
) -> None:
    assert evidence.server_log is not None
    assert "Falling back to PyTorch-native implementation." in evidence.server_log
    verdict = gate_functions.forbidden_log_patterns(
        gates.forbidden_log_patterns, evidence.server_log
    )
    assert verdict.passed


def test_an_engine_that_resolves_another_kv_dtype_fails_in_metrics_and_log(
    gates: Gates, evidence: RunEvidence
) -> None:
    assert evidence.metrics_after is not None
    metrics = evidence.metrics_after.replace('cache_dtype="fp8"', 'cache_dtype="fp8_e5m2"')
    log = (evidence.server_log or "").replace("kv_cache_dtype=fp8,", "kv_cache_dtype=fp8_e5m2,")
    broken = evidence.model_copy(update={"metrics_after": metrics, "server_log": log})
    found = failing(gates, broken)
    assert set(found) == {
        "metrics_info:vllm:cache_config_info",
        "log_marker:engine-fp8-kv",
        "forbidden_log_patterns",
    }
    assert found["metrics_info:vllm:cache_config_info"] == (
        "vllm:cache_config_info: cache_dtype is 'fp8_e5m2', expected 'fp8'"
    )


def test_metrics_that_were_not_read_fail_the_engine_report(
    gates: Gates, evidence: RunEvidence
) -> None:
    broken = evidence.model_copy(update={"metrics_after": None})
    assert failing(gates, broken) == {
        "metrics_info:vllm:cache_config_info": (
            "no metrics text read after the suite in the run's evidence"
        )
    }


def test_metrics_without_the_info_gauge_fail(gates: Gates, evidence: RunEvidence) -> None:
    assert evidence.metrics_after is not None
    kept = [line for line in evidence.metrics_after.splitlines() if "cache_config_info" not in line]
    broken = evidence.model_copy(update={"metrics_after": "\n".join(kept) + "\n"})
    assert failing(gates, broken) == {
        "metrics_info:vllm:cache_config_info": (
            "no vllm:cache_config_info sample in the run's evidence"
        )
    }


def test_a_row_that_differs_from_the_fp8_teacher_fails_exactness(
    gates: Gates, evidence: RunEvidence, fp8_rows: tuple[OracleRow, ...]
) -> None:
    assert evidence.teacher is not None
    rows = evidence.teacher.rows
    teacher_rows = with_token(rows, 4, 37, rows[4].token_ids[37] + 1)
    teacher = evidence.teacher.model_copy(update={"rows": teacher_rows})
    broken = evidence.model_copy(update={"teacher": teacher})
    assert only_failure(gates, broken, "exact_token_ids").startswith(
        "12/13 rows equal the teacher's token ids; row arithmetic-reasoning differs at token 37"
    )


def test_a_warm_prompt_fails_the_cold_rule(gates: Gates, evidence: RunEvidence) -> None:
    assert evidence.rows is not None
    rows = list(evidence.rows)
    rows[12] = rows[12].model_copy(update={"cached_tokens": 768})
    only_failure(gates, evidence.model_copy(update={"rows": tuple(rows)}), "cached_tokens_zero")


def test_a_second_start_that_is_slower_fails_the_rate_and_keeps_its_tokens(
    gates: Gates, evidence: RunEvidence, fp8_rows: tuple[OracleRow, ...]
) -> None:
    broken = evidence.model_copy(update={"later_starts": (slower(fp8_rows, 1.10),)})
    first = measure(fp8_rows, 100).conventional_median
    found = failing(gates, broken)
    assert found == {
        "fresh_start_throughput": (
            f"start 2 {first / 1.10:.2f} tok/s vs start 1 {first:.2f} tok/s over 100 tokens: "
            f"deviation {1 - 1 / 1.10:.4f} > 0.05"
        )
    }


def test_a_second_start_that_is_faster_beyond_the_tolerance_fails_too(
    gates: Gates, evidence: RunEvidence, fp8_rows: tuple[OracleRow, ...]
) -> None:
    broken = evidence.model_copy(update={"later_starts": (slower(fp8_rows, 0.9),)})
    assert list(failing(gates, broken)) == ["fresh_start_throughput"]


def test_a_second_start_that_did_not_run_fails_both_reproduction_rules(
    gates: Gates, evidence: RunEvidence
) -> None:
    found = failing(gates, evidence.model_copy(update={"later_starts": ()}))
    assert found == {
        "fresh_starts": "no oracle rows of start 2 in the run's evidence",
        "fresh_start_throughput": "no oracle rows of start 2 in the run's evidence",
    }


def test_a_second_start_with_other_tokens_fails_the_output_rule(
    gates: Gates, evidence: RunEvidence, fp8_rows: tuple[OracleRow, ...]
) -> None:
    again = with_token(fp8_rows, 0, 511, 0)
    broken = evidence.model_copy(update={"later_starts": (again,)})
    assert "row python-lru-cache differs at token 511" in only_failure(
        gates, broken, "fresh_starts"
    )


def test_a_candidate_slower_than_its_target_only_teacher_fails_the_floor(
    gates: Gates, evidence: RunEvidence, fp8_rows: tuple[OracleRow, ...]
) -> None:
    teacher = teacher_of(fp8_rows, rate=120.0)
    broken = evidence.model_copy(update={"teacher": teacher})
    assert only_failure(gates, broken, "throughput").startswith(
        "conventional median 101.94 tok/s over 100 tokens < floor 120.00 (1.0 of sealed 120.00)"
    )


def test_a_flat_survival_curve_fails_spec_decode(gates: Gates, evidence: RunEvidence) -> None:
    assert evidence.metrics is not None
    flat = evidence.metrics.model_copy(
        update={"spec_decode_accepted_per_position": (431.0,) * 11, "spec_decode_accepted": 4741.0}
    )
    found = failing(gates, evidence.model_copy(update={"metrics": flat}))
    assert list(found) == ["spec_decode"]
    assert found["spec_decode"].endswith("verifier accepting stale drafts")


# --- quality, reported apart from exactness -----------------------------------------------------


def test_every_quality_check_passes_on_the_lanes_answers(
    manifest: Manifest, fp8_rows: tuple[OracleRow, ...]
) -> None:
    verdicts = assess(manifest.oracle.quality, fp8_rows)
    assert {v.gate: v.summary for v in verdicts} == {
        "quality:code-python": "code_block: 2/2 rows pass",
        "quality:code-sql": "code_block: 1/1 rows pass",
        "quality:code-typescript": "code_block: 1/1 rows pass",
        "quality:code-rust": "code_block: 1/1 rows pass",
        "quality:structured-output": "json: 1/1 rows pass",
        "quality:no-repetition": "repetition: 13/13 rows pass",
        "quality:longer-context": "long_context: 1/1 rows pass",
    }
    assert all(v.passed for v in verdicts)


def test_an_answer_that_is_not_json_fails_quality_and_leaves_exactness_passing(
    manifest: Manifest, gates: Gates, evidence: RunEvidence, fp8_rows: tuple[OracleRow, ...]
) -> None:
    cut = previews()[STRUCTURED]  # the record's preview: JSON cut off mid-object
    rows = answered(fp8_rows, STRUCTURED, lambda _: cut)
    run = evidence.model_copy(
        update={"rows": rows, "teacher": teacher_of(rows), "later_starts": (rows,)}
    )
    assert all(verdict.passed for verdict in judge(gates, run))
    assert failing_quality(manifest, rows) == {
        "quality:structured-output": (
            "json: 0/1 rows pass; structured-extraction: not JSON (Expecting value at line 8, "
            "column 66)"
        )
    }


LOOP = "\nThe cache evicts the least recently used entry when it is full. " * 6


@pytest.mark.parametrize(
    ("prompt_id", "change", "failed"),
    [
        pytest.param(
            "rust-stream-parser",
            lambda text: text.replace("```rust", "```"),
            {
                "quality:code-rust": (
                    "code_block: 0/1 rows pass; rust-stream-parser: no ```rust block"
                )
            },
            id="an answer without its code block fails that check only",
        ),
        pytest.param(
            "prose-decision-memo",
            lambda text: text + LOOP,
            {
                "quality:no-repetition": (
                    "repetition: 12/13 rows pass; prose-decision-memo: 12 words repeat 6 times (at "
                    "most 3): 'The cache evicts the least recently used entry when it is f…'"
                )
            },
            id="a decoding loop fails the repetition check",
        ),
    ],
)
def test_an_answer_changed_fails_the_quality_check_it_breaks_only(
    manifest: Manifest,
    fp8_rows: tuple[OracleRow, ...],
    prompt_id: str,
    change: Callable[[str], str],
    failed: dict[str, str],
) -> None:
    assert failing_quality(manifest, answered(fp8_rows, prompt_id, change)) == failed


def test_a_short_prompt_or_an_answer_that_ignores_the_context_fails_long_context(
    manifest: Manifest, fp8_rows: tuple[OracleRow, ...]
) -> None:
    (check,) = (c for c in manifest.oracle.quality if c.name == "longer-context")
    (row,) = (r for r in fp8_rows if r.prompt_id == "long-rollover-repository-audit")
    short = row.model_copy(update={"prompt_tokens": 120})
    assert quality_check(check, [short]).summary == (
        "long_context: 0/1 rows pass; long-rollover-repository-audit: prompt of 120 tokens, "
        "expected at least 800"
    )
    generic = with_text(row, "Add a migration and a test.")
    assert quality_check(check, [generic]).summary == (
        "long_context: 0/1 rows pass; long-rollover-repository-audit: answer lacks "
        "'migrations/', '-- +migrate Up'"
    )


def test_a_row_the_run_kept_no_text_of_fails_its_check(manifest: Manifest, record: Record) -> None:
    verdicts = assess(manifest.oracle.quality, record.bench.rows)
    assert verdicts[4].summary == (
        "json: 0/1 rows pass; structured-extraction: the run kept no text"
    )


@pytest.mark.parametrize(
    ("text", "summary"),
    [
        ('{"name": "run_tests", "arguments": {"path": "tests/"}}', "tool_call: 1/1 rows pass"),
        (
            '```json\n{"name": "run_tests", "arguments": {}}\n```',
            "tool_call: 1/1 rows pass",
        ),
        (
            '{"name": "rm", "arguments": {}}',
            "tool_call: 0/1 rows pass; shell-safety-review: tool 'rm' is not one of run_tests",
        ),
        (
            '{"name": "run_tests", "arguments": "tests/"}',
            "tool_call: 0/1 rows pass; shell-safety-review: no object arguments",
        ),
        (
            "I would run the tests.",
            "tool_call: 0/1 rows pass; shell-safety-review: not JSON (Expecting value at line 1, "
            "column 1)",
        ),
    ],
)
def test_a_tool_call_check_reads_one_call_object(
    fp8_rows: tuple[OracleRow, ...], text: str, summary: str
) -> None:
    check = ToolCallCheck(
        name="tool", kind="tool_call", prompts=("shell-safety-review",), tools=("run_tests",)
    )
    rows = [with_text(r, text) for r in fp8_rows if r.prompt_id == "shell-safety-review"]
    assert quality_check(check, rows).summary == summary


def test_a_check_of_every_row_names_a_missing_row() -> None:
    check = RepetitionCheck(name="loops", kind="repetition", prompts=("absent",))
    verdict = quality_check(check, [])
    assert (verdict.passed, verdict.summary) == (
        False,
        "repetition: 0/1 rows pass; absent: row absent",
    )


def test_a_row_text_must_hash_to_its_text_sha256(fp8_rows: tuple[OracleRow, ...]) -> None:
    with pytest.raises(ValueError, match="text hashes to"):
        OracleRow.model_validate(fp8_rows[0].model_dump() | {"text": "other"})


# --- the launch contract, refused at load ------------------------------------------------------


def refused(text: str) -> list[tuple[str, str, str, str]]:
    with pytest.raises(InvalidDocument) as caught:
        Manifest.from_toml(text, source="fp8.toml", base_dir=MANIFEST.parent)
    return [(p.where, p.what, p.expected, p.found) for p in caught.value.problems]


def test_calculate_kv_scales_in_any_profile_is_refused() -> None:
    text = MANIFEST.read_text("utf-8").replace(
        '  "--compilation-config",\n', '  "--calculate-kv-scales",\n  "--compilation-config",\n'
    )
    assert refused(text) == [
        (
            "key launch.profiles.candidate.argv[42]",
            "forbidden flag",
            "no flag of launch.forbidden_argv: --calculate-kv-scales, --enable-prefix-caching, "
            "--async-scheduling",
            'a string "--calculate-kv-scales"',
        )
    ]


def test_a_teacher_on_a_bf16_kv_cache_is_refused() -> None:
    text = MANIFEST.read_text("utf-8").replace(
        "[launch.profiles.fp8-teacher]\n",
        '[launch.profiles.fp8-teacher]\nargv = ["--kv-cache-dtype=bfloat16"]\n',
    )
    assert refused(text) == [
        (
            "key launch.profiles.fp8-teacher.argv",
            "pinned flag",
            "--kv-cache-dtype given exactly once, with value 'fp8' (launch.pinned_argv)",
            "--kv-cache-dtype: 'fp8', 'bfloat16'",
        )
    ]


def test_a_rate_reproduction_without_a_rate_window_is_refused() -> None:
    text = MANIFEST.read_text("utf-8")
    start = text.index("[oracle.gates.throughput]")
    end = text.index("[oracle.gates.fresh_start_throughput]")
    assert refused(text[:start] + text[end:]) == [
        (
            "key oracle.gates.fresh_start_throughput",
            "rate without a window",
            "a [oracle.gates.throughput] gate: its tokens define the rate",
            "none",
        )
    ]


def test_a_quality_check_of_an_unknown_prompt_is_refused() -> None:
    text = MANIFEST.read_text("utf-8").replace(
        'prompts = ["sql-sessionization"]', 'prompts = ["sql-migration"]'
    )
    manifest = Manifest.from_toml(text, source="fp8.toml", base_dir=MANIFEST.parent)
    with pytest.raises(BadInput) as caught:
        manifest.load_suite()
    assert caught.value.diagnostics().splitlines()[:4] == [
        "error: invalid manifest: unknown prompt",
        "  where:    fp8.toml, key oracle.quality[1].prompts[0]",
        "  expected: a prompt id of suite laguna-s-2.1-realistic-cold-v1",
        '  found:    a string "sql-migration"',
    ]


# --- suites of imported rows --------------------------------------------------------------------

SHA = "b08053d052ee3e55424944fec1b27ff1ed7919b60df3616a5f2220bdbde7da0a"


def suite_problems(**document: object) -> list[Problem]:
    """The problems of suite `s` (8 tokens, seed 1) with the keys of `document` besides."""
    text = json.dumps({"name": "s", "max_tokens": 8, "seed": 1, **document})
    with pytest.raises(InvalidDocument) as caught:
        Suite.from_json(text, source="s.json")
    return list(caught.value.problems)


def test_a_prompt_with_both_text_and_digest_is_refused() -> None:
    problems = suite_problems(
        api="chat",
        temperature=0,
        prompts=[
            {"id": "a", "sha256": SHA},
            {"id": "b", "messages": [{"role": "user", "content": "hi"}], "sha256": SHA},
        ],
    )
    assert [(p.where, p.found) for p in problems] == [
        ("key prompts[0]", "key sha256"),
        ("key prompts[1]", "key messages and key sha256"),
    ]


def test_a_suite_of_texts_needs_its_temperature() -> None:
    problems = suite_problems(api="completion", prompts=[{"id": "a", "prompt": "hi"}])
    assert [(p.where, p.what) for p in problems] == [("key temperature", "missing key")]
