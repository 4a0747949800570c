"""Rows and metrics that contradict themselves, their suite or each other are refused
(`launch.consistency`), on the committed bundles' own sealed evidence.

The honest evidence of every committed bundle gives no problem: the tiny model's two fresh starts
and its two-node start (vLLM 0.32 on CPU, prefix caching off) and the Laguna record (another
vLLM, DFlash speculative decoding with 11 draft tokens). Each hostile case then changes one fact
of it, as a holder of the public example key would before re-sealing, checks that the rows still
pass their own model (the change is one the file format allows), and asserts the exact problems.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT
from prometheus import a_month_earlier, revalued

from repro_serving.builder.documents.evidence import OracleRow, Rows
from repro_serving.builder.documents.manifest import Manifest, Suite
from repro_serving.builder.errors import BadInput
from repro_serving.builder.tinymodel import ARCHITECTURE
from repro_serving.launch.consistency import (
    DELIVERY_SLACK_S,
    Findings,
    Limits,
    ServerFacts,
    metrics_problems,
    rows_problems,
    starts_problems,
)
from repro_serving.launch.historical import load_bench

TINY = REPO_ROOT / "tests" / "evidence" / "tiny-cpu" / "record"
"""A real record of the tiny stack, frozen: the committed bundle of that name before it was
sealed again (its values are named in the expectations below; a new seal does not move them)."""
TWO_NODE = REPO_ROOT / "repro" / "tiny-cpu-2node"
LAGUNA = REPO_ROOT / "repro" / "laguna-102tps"
ROWS = "evidence/start-1/rows.json"
BEFORE, AFTER = "evidence/start-1/metrics-before.prom", "evidence/start-1/metrics-after.prom"
PAIR = f"{BEFORE} → {AFTER}"
LAGUNA_BEFORE = "evidence/run/metrics-before-suite.prom"
LAGUNA_AFTER = "evidence/run/metrics-after-suite.prom"
LAGUNA_PAIR = f"{LAGUNA_BEFORE} → {LAGUNA_AFTER}"
LAGUNA_LOG = "evidence/run/server.log"
LOG = "evidence/start-1/server.log"
VOCABULARY = "token ids against the vocabulary: the evidence does not state its size"

Document = list[dict[str, Any]]


def suite_of(bundle: Path) -> Suite:
    return Suite.from_path(bundle / "oracle" / "suite.json")


def locked_argv(bundle: Path) -> list[str]:
    argv: list[str] = json.loads((bundle / "lock.json").read_text())["launch"]["argv"]
    return argv


def limits_of(bundle: Path) -> Limits:
    return Limits.of(suite_of(bundle), locked_argv(bundle))


def document(bundle: Path, start: int = 1) -> Document:
    rows: Document = json.loads((bundle / f"evidence/start-{start}/rows.json").read_text())
    return rows


def parsed(rows: Document) -> tuple[OracleRow, ...]:
    """The rows as `repro verify` reads them: a change the model refuses is no attack here."""
    return Rows.model_validate_json(json.dumps(rows)).root


def text(bundle: Path, relative: str) -> str:
    return (bundle / relative).read_text()


def tiny_rows(
    rows: Document | None = None, *, suite: Suite | None = None, gated: bool = True, **kw: Any
) -> Findings:
    return rows_problems(
        suite or suite_of(TINY),
        parsed(document(TINY) if rows is None else rows),
        where=ROWS,
        limits=kw.pop("limits", limits_of(TINY)),
        cached_tokens_gated=gated,
        **kw,
    )


def tiny_metrics(
    rows: Document | None = None,
    *,
    before: Callable[[str], str] = str,
    after: Callable[[str], str] = str,
    served: Limits | None = None,
) -> tuple[str, ...]:
    findings = metrics_problems(
        parsed(document(TINY) if rows is None else rows),
        before(text(TINY, BEFORE)),
        after(text(TINY, AFTER)),
        limits=served or limits_of(TINY),
        sources=(BEFORE, AFTER),
    )
    return findings.problems


def laguna_rows() -> tuple[OracleRow, ...]:
    return load_bench(LAGUNA / "evidence" / "run" / "bench.json").rows


def laguna_metrics(
    after: Callable[[str], str] = str, served: Limits | None = None
) -> tuple[str, ...]:
    findings = metrics_problems(
        laguna_rows(),
        text(LAGUNA, LAGUNA_BEFORE),
        after(text(LAGUNA, LAGUNA_AFTER)),
        limits=served or limits_of(LAGUNA),
        sources=(LAGUNA_BEFORE, LAGUNA_AFTER),
    )
    return findings.problems


def sample(name: str, value: float, **labels: str) -> Callable[[str], str]:
    """A change of a metrics text: the value of sample `name` whose labels include `labels`."""

    def change(metrics: str) -> str:
        wanted = "".join(f'(?=[^}}]*\\b{key}="{re.escape(v)}")' for key, v in labels.items())
        braces = rf"(?:\{{{wanted}[^}}]*\}})" + ("" if labels else "?")
        pattern = re.compile(rf"^({re.escape(name)}{braces}) \S+$", re.MULTILINE)
        changed, count = pattern.subn(lambda m: f"{m[1]} {value}", metrics)
        assert count == 1, f"{name} {labels}: {count} samples"
        return changed

    return change


def replaced(old: str, new: str) -> Callable[[str], str]:
    def change(metrics: str) -> str:
        assert metrics.count(old) == 1, old
        return metrics.replace(old, new)

    return change


def every(name: str, value: float, **labels: str) -> Callable[[str], str]:
    """A change of a metrics text: the value of every sample `name` whose labels include
    `labels` (each bucket of a histogram, say)."""

    def change(metrics: str) -> str:
        wanted = "".join(f'(?=[^}}]*\\b{key}="{re.escape(v)}")' for key, v in labels.items())
        pattern = re.compile(rf"^({re.escape(name)}\{{{wanted}[^}}]*\}}) \S+$", re.MULTILINE)
        changed, count = pattern.subn(lambda m: f"{m[1]} {value}", metrics)
        assert count >= 1, f"{name} {labels}: no sample"
        return changed

    return change


def plus(name: str, rise: float, **labels: str) -> Callable[[str], str]:
    """A change of a metrics text: sample `name` (its labels include `labels`) raised by `rise`."""

    def change(metrics: str) -> str:
        wanted = "".join(f'(?=[^}}]*\\b{key}="{re.escape(v)}")' for key, v in labels.items())
        pattern = re.compile(rf"^({re.escape(name)}\{{{wanted}[^}}]*\}}) (\S+)$", re.MULTILINE)
        changed, count = pattern.subn(lambda m: f"{m[1]} {float(m[2]) + rise}", metrics)
        assert count == 1, f"{name} {labels}: {count} samples"
        return changed

    return change


def facts_of(bundle: Path, start: int = 1) -> ServerFacts:
    """What a built bundle's other files state about start `start`'s server, as `repro verify`
    reads them (`builder.verify._server_facts`)."""
    at = f"evidence/start-{start}"
    ready = json.loads((bundle / at / "server.json").read_text())["ready_at"]
    engine = json.loads((bundle / at / "audit" / "engine_core.json").read_text())["processes"]
    observations = json.loads((bundle / "evidence" / "observations.json").read_text())
    return ServerFacts(
        answering=(ready, f"{at}/server.json ready_at"),
        engine=(engine[0]["started_at"], f"the engine core's started_at in {at}/audit"),
        python=(
            observations["python"]["version"],
            "evidence/observations.json python.version",
        ),
        environment=(
            json.loads((bundle / "evidence" / "run.json").read_text())["env"],
            "evidence/run.json env",
        ),
        readiness_path="/health",
    )


LAGUNA_RUN = LAGUNA / "evidence" / "run"


def laguna_facts() -> ServerFacts:
    """What the Laguna record's other files state about its server (`builder.imported`)."""
    started = json.loads((LAGUNA_RUN / "bench.json").read_text())["rows"][0]
    prestart = sorted((LAGUNA_RUN / "idle-interval").glob("prestart-*.json"))[-1]
    observed = json.loads(prestart.read_text())["observed_utc"]
    runtime = json.loads((LAGUNA / "evidence" / "identity.json").read_text())
    return ServerFacts(
        answering=(
            started["request_started_epoch_s"],
            "run/bench.json rows[0] request_started_epoch_s",
        ),
        engine=(
            datetime.fromisoformat(observed).timestamp(),
            f"run/idle-interval/{prestart.name} observed_utc (the last idle snapshot before)",
        ),
        python=(runtime["toolchain"]["python"], "the runtime lock's toolchain.python"),
        readiness_path="/health",
    )


def served_log(bundle: Path, start: int = 1) -> tuple[str, dict[str, Any]]:
    """What start `start`'s server logged while it served (up to teardown's log_bytes), and
    its teardown record."""
    teardown: dict[str, Any] = json.loads(
        (bundle / f"evidence/start-{start}/teardown.json").read_text()
    )
    log = (bundle / f"evidence/start-{start}/server.log").read_bytes()
    return log[: teardown["log_bytes"]].decode(), teardown


def with_row(place: int, **changes: Any) -> Document:
    rows = document(TINY)
    rows[place].update(changes)
    return rows


def cut(row: dict[str, Any], tokens: int) -> dict[str, Any]:
    """`row` as if its stream had brought only its first `tokens` tokens."""
    keys = ("token_ids", "token_offsets_s", "token_reads", "token_events")
    return row | {key: row[key][:tokens] for key in keys} | {"completion_tokens": tokens}


def grown(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with one more token, in one more read and event just after its last."""
    return row | {
        "token_ids": [*row["token_ids"], 7],
        "token_offsets_s": [*row["token_offsets_s"], row["token_offsets_s"][-1] + 0.01],
        "token_reads": [*row["token_reads"], row["token_reads"][-1] + 1],
        "token_events": [*row["token_events"], row["token_events"][-1] + 1],
        "completion_tokens": row["completion_tokens"] + 1,
    }


# --- the honest evidence --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bundle", "start"), [(TINY, 1), (TINY, 2), (TWO_NODE, 1)], ids=["tiny-1", "tiny-2", "2node"]
)
def test_the_committed_tiny_bundles_contradict_nothing(bundle: Path, start: int) -> None:
    rows = parsed(document(bundle, start))
    served = limits_of(bundle)
    at = f"evidence/start-{start}"
    assert rows_problems(
        suite_of(bundle), rows, where=f"{at}/rows.json", limits=served, cached_tokens_gated=True
    ) == Findings((), (VOCABULARY,))
    assert (
        rows_problems(
            suite_of(bundle),
            rows,
            where=f"{at}/rows.json",
            limits=served,
            cached_tokens_gated=True,
            vocab_size=ARCHITECTURE.vocab_size,
        )
        == Findings()
    )
    before, after = f"{at}/metrics-before.prom", f"{at}/metrics-after.prom"
    assert (
        metrics_problems(
            rows, text(bundle, before), text(bundle, after), limits=served, sources=(before, after)
        )
        == Findings()
    )
    log, teardown = served_log(bundle, start)
    assert (
        metrics_problems(
            rows,
            text(bundle, before),
            text(bundle, after),
            limits=served,
            sources=(before, after),
            read_by=teardown["began_at"],
            served_log=log,
            facts=facts_of(bundle, start),
        )
        == Findings()
    )


def test_the_tiny_bundles_fresh_starts_tokenize_each_prompt_alike() -> None:
    starts = [(f"evidence/start-{n}/rows.json", parsed(document(TINY, n))) for n in (1, 2)]
    assert starts_problems(starts) == []


def test_the_laguna_record_with_its_speculative_counters_contradicts_nothing() -> None:
    """Its bench rows keep neither finish reasons nor read numbers; its vLLM exports neither
    admission rejections nor preemptions per request."""
    served = limits_of(LAGUNA)
    assert served == Limits(
        "chat", 512, 8192, speculative=True, speculative_k=11, prefix_caching=False,
        served_name="laguna-s-2.1-int4",
    )  # fmt: skip
    findings = rows_problems(
        suite_of(LAGUNA), laguna_rows(), where="bench.json", limits=served, cached_tokens_gated=True
    )
    assert findings == Findings((), (VOCABULARY,))
    assert metrics_problems(
        laguna_rows(),
        text(LAGUNA, LAGUNA_BEFORE),
        text(LAGUNA, LAGUNA_AFTER),
        limits=served,
        sources=(LAGUNA_BEFORE, LAGUNA_AFTER),
        served_log=text(LAGUNA, LAGUNA_LOG),
        facts=laguna_facts(),
    ) == Findings(
        (),
        (
            "vllm:admission_rejections_total: exported by neither read",
            "vllm:request_num_preemptions_count: exported by neither read",
        ),
    )


# --- limits from the locked argv -----------------------------------------------------------------


def test_limits_come_from_the_suite_and_the_locked_argv() -> None:
    assert limits_of(TINY) == Limits(
        "chat", 32, 2048, speculative=False, prefix_caching=False, served_name="tiny"
    )
    run_argv = json.loads((TINY / "evidence" / "run.json").read_text())["argv"]
    assert Limits.of(suite_of(TINY), run_argv) == limits_of(TINY)


def test_the_speculative_depth_is_read_from_a_profile_template_and_from_its_expansion() -> None:
    manifest = Manifest.from_path(REPO_ROOT / "manifests" / "tiny-cpu.toml")
    template = list(manifest.launch.argv_for("ngram"))
    assert Limits.of(suite_of(TINY), template).speculative_k == 3
    expanded = [a.replace("{{", "{").replace("}}", "}") for a in template]
    assert Limits.of(suite_of(TINY), expanded).speculative_k == 3


@pytest.mark.parametrize(
    ("argv", "max_model_len"),
    [
        (["--max-model-len", "2K"], 2048),
        (["--max_model_len=1k"], 1000),
        (["--max-model-len", "auto"], None),
    ],
)
def test_max_model_len_is_read_as_vllm_reads_it(argv: list[str], max_model_len: int | None) -> None:
    assert Limits.of(suite_of(TINY), argv).max_model_len == max_model_len


@pytest.mark.parametrize(
    ("argv", "what"),
    [
        (
            ["--speculative-config", "{not json"],
            "the argv's --speculative-config is not a JSON object",
        ),
        (
            ["-sc", '{"method": "ngram", "num_speculative_tokens": 0}'],
            "the argv's speculative num_speculative_tokens is not a positive integer",
        ),
        (["--max-model-len", "long"], "the argv's --max-model-len is not a number vLLM reads"),
    ],
)
def test_an_argv_vllm_would_not_start_with_is_refused(argv: list[str], what: str) -> None:
    with pytest.raises(BadInput) as refused:
        Limits.of(suite_of(TINY), argv)
    assert refused.value.what == what


# --- rows against themselves and the suite ----------------------------------------------------


def test_a_completion_count_other_than_the_token_ids_is_refused() -> None:
    assert tiny_rows(with_row(1, completion_tokens=31)).problems == (
        f"{ROWS}: row 1 (arithmetic) completion_tokens: expected 32 (its token_ids), found 31",
    )


def test_more_tokens_than_the_suite_allows_are_refused() -> None:
    rows = document(TINY)
    rows[0] = grown(rows[0])
    assert tiny_rows(rows).problems == (
        f"{ROWS}: row 0 (greeting) token_ids: expected at most 32 (the suite's max_tokens), "
        "found 33",
    )


def test_more_tokens_than_max_model_len_leaves_room_for_are_refused() -> None:
    """vLLM asks for min(max_tokens, max_model_len - prompt_tokens), and refuses a prompt that
    leaves no room."""
    served = Limits.of(suite_of(TINY), [*locked_argv(TINY), "--max-model-len", "80"])
    assert tiny_rows(limits=served).problems == (
        f"{ROWS}: row 3 (code) token_ids: expected at most 26 (max_model_len 80 less 54 prompt "
        "tokens), found 32",
        f"{ROWS}: row 4 (unicode) token_ids: expected at most 29 (max_model_len 80 less 51 "
        "prompt tokens), found 32",
    )
    served = Limits.of(suite_of(TINY), [*locked_argv(TINY), "--max-model-len", "54"])
    assert tiny_rows(limits=served).problems[3:5] == (
        f"{ROWS}: row 3 (code) prompt_tokens: expected fewer than max_model_len 54 (vLLM refuses "
        "a longer prompt), found 54",
        f"{ROWS}: row 3 (code) token_ids: expected at most 0 (max_model_len 54 less 54 prompt "
        "tokens), found 32",
    )


def test_a_length_finish_short_of_the_limit_is_refused() -> None:
    rows = document(TINY)
    rows[2] = cut(rows[2], 31)
    assert tiny_rows(rows).problems == (
        f"{ROWS}: row 2 (list) finish_reason 'length': expected 32 tokens (the suite's "
        "max_tokens), found 31",
    )


def test_a_stop_at_the_limit_is_what_vllm_does_when_the_last_token_ends_the_sequence() -> None:
    """vLLM 0.32's `check_stop` tests the end-of-sequence token before the length limit."""
    assert tiny_rows(with_row(3, finish_reason="stop")).problems == ()
    rows = document(TINY)
    rows[3] = cut(rows[3], 20) | {"finish_reason": "stop"}
    assert tiny_rows(rows).problems == ()


@pytest.mark.parametrize(
    ("reason", "problem"),
    [
        ("abort", "expected 'stop' or 'length' (a complete answer), found 'abort'"),
        (
            None,
            "expected 'stop' or 'length' (vLLM ends every stream with one, and the oracle keeps "
            "it), found none",
        ),
    ],
)
def test_a_row_that_did_not_end_as_an_answer_is_refused(reason: str | None, problem: str) -> None:
    assert tiny_rows(with_row(4, finish_reason=reason)).problems == (
        f"{ROWS}: row 4 (unicode) finish_reason: {problem}",
    )


def test_a_dropped_prompt_is_refused() -> None:
    rows = document(TINY)
    del rows[3]
    assert tiny_rows(rows).problems == (
        f"{ROWS}: expected one row for each of the 5 prompts of suite tiny-cpu-v1, found 4 rows",
        f"{ROWS}: prompt 3 (code) of suite tiny-cpu-v1: expected a row, found none",
    )


def test_a_prompt_answered_twice_is_refused() -> None:
    rows = document(TINY)
    rows[4] = rows[3]
    assert tiny_rows(rows).problems == (
        f"{ROWS}: prompt 'code': expected one row, found rows 3, 4",
        f"{ROWS}: prompt 4 (unicode) of suite tiny-cpu-v1: expected a row, found none",
    )


def test_a_renamed_prompt_is_refused() -> None:
    assert tiny_rows(with_row(2, prompt_id="lists")).problems == (
        f"{ROWS}: row 2 prompt_id: expected a prompt of suite tiny-cpu-v1, found 'lists'",
        f"{ROWS}: prompt 2 (list) of suite tiny-cpu-v1: expected a row, found none",
    )


@pytest.mark.parametrize(
    ("index", "outside"),
    [(3, ""), (7, ", outside the suite's 0..4"), (-1, ", outside the suite's 0..4")],
)
def test_a_reindexed_row_is_refused(index: int, outside: str) -> None:
    assert tiny_rows(with_row(2, prompt_index=index)).problems == (
        f"{ROWS}: row 2 (list) prompt_index: expected 2 (its prompt's place in the suite), "
        f"found {index}{outside}",
    )


def test_rows_out_of_suite_order_are_refused() -> None:
    rows = document(TINY)
    rows[1], rows[2] = rows[2], rows[1]
    assert tiny_rows(rows).problems == (
        f"{ROWS}: row 1 prompt_id: expected 'arithmetic' (suite prompt 1), found 'list' (suite "
        "prompt 2): rows answer the suite in order",
        f"{ROWS}: row 2 prompt_id: expected 'list' (suite prompt 2), found 'arithmetic' (suite "
        "prompt 1): rows answer the suite in order",
    )


def test_a_negative_token_id_is_refused() -> None:
    rows = document(TINY)
    rows[0]["token_ids"][5] = -1
    assert tiny_rows(rows).problems == (
        f"{ROWS}: row 0 (greeting) token_ids: expected ids of at least 0, found -1 at token 5",
    )


def test_a_token_id_beyond_a_known_vocabulary_is_refused() -> None:
    rows = document(TINY)
    rows[1]["token_ids"][0] = ARCHITECTURE.vocab_size
    findings = tiny_rows(rows, vocab_size=ARCHITECTURE.vocab_size)
    assert findings.problems == (
        f"{ROWS}: row 1 (arithmetic) token_ids: expected ids below the vocabulary size 264, "
        "found 264 at token 0",
    )
    assert findings.not_applicable == ()


def test_a_prompt_of_no_tokens_is_refused() -> None:
    assert tiny_rows(with_row(0, prompt_tokens=0)).problems == (
        f"{ROWS}: row 0 (greeting) prompt_tokens: expected at least 1, found 0",
    )


def test_cached_tokens_missing_where_the_manifest_gates_them_is_refused() -> None:
    rows = with_row(3, cached_tokens=None)
    assert tiny_rows(rows).problems == (
        f"{ROWS}: row 3 (code) cached_tokens: expected a count (the manifest gates "
        "cached_tokens_zero), found none",
    )
    assert tiny_rows(rows, gated=False).problems == ()


@pytest.mark.parametrize("cached", [26, -1])
def test_cached_tokens_beyond_a_prompt_less_its_last_token_are_refused(cached: int) -> None:
    assert tiny_rows(with_row(0, cached_tokens=cached)).problems == (
        f"{ROWS}: row 0 (greeting) cached_tokens: expected 0..25 (vLLM recomputes a prompt's "
        f"last token), found {cached}",
    )


def test_a_first_token_in_read_0_after_an_earlier_read_is_refused() -> None:
    rows = document(TINY)
    first = rows[1]["token_reads"][0]
    rows[1]["token_reads"] = [read - first for read in rows[1]["token_reads"]]
    after = rows[1]["first_token_after_s"]
    assert after > 0.0
    assert tiny_rows(rows).problems == (
        f"{ROWS}: row 1 (arithmetic) first_token_after_s: expected 0.0 (its first token came in "
        f"read 0, with no read before it), found {after!r}",
    )
    rows[1]["token_reads"] = [read - 1 for read in rows[1]["token_reads"]]
    assert tiny_rows(rows).problems == (
        f"{ROWS}: row 1 (arithmetic) token_reads: expected read numbers of at least 0, found -1",
    )


def test_a_prompt_tokenized_otherwise_on_a_fresh_start_is_refused() -> None:
    later = document(TINY, 2)
    later[3]["prompt_tokens"] = 55
    starts = [(ROWS, parsed(document(TINY))), ("evidence/start-2/rows.json", parsed(later))]
    assert starts_problems(starts) == [
        "evidence/start-2/rows.json: row 3 (code) prompt_tokens: expected 54 (as in "
        f"{ROWS}), found 55"
    ]


def test_a_suite_whose_max_tokens_was_raised_contradicts_the_rows_and_the_metrics() -> None:
    raised = suite_of(TINY).model_copy(update={"max_tokens": 64})
    served = Limits.of(raised, locked_argv(TINY))
    assert tiny_rows(suite=raised, limits=served).problems == tuple(
        f"{ROWS}: row {n} ({name}) finish_reason 'length': expected 64 tokens (the suite's "
        "max_tokens), found 32"
        for n, name in enumerate(["greeting", "arithmetic", "list", "code", "unicode"])
    )
    assert tiny_metrics(served=served) == (
        f"{PAIR}: vllm:request_params_max_tokens_sum: expected a rise of 320 (each row's "
        "max_tokens as vLLM clamps it), found 160",
        f'{PAIR}: vllm:request_params_max_tokens_bucket{{le="50.0"}}: expected a rise of 0 (the '
        "rows at most 50.0: each row's max_tokens as vLLM clamps it), found 5",
    )


# --- metrics against the rows -----------------------------------------------------------------


def test_generated_tokens_other_than_the_rows_completions_are_refused() -> None:
    assert tiny_metrics(after=sample("vllm:generation_tokens_total", 150.0)) == (
        f"{PAIR}: vllm:generation_tokens_total: expected a rise of 160 (the rows' "
        "completion_tokens), found 150",
    )


def test_prompt_tokens_other_than_the_rows_prompts_are_refused() -> None:
    assert tiny_metrics(after=sample("vllm:prompt_tokens_total", 198.0)) == (
        f"{PAIR}: vllm:prompt_tokens_total: expected a rise of 199 (the rows' prompt_tokens), "
        "found 198",
    )


def test_a_row_the_server_never_counted_is_refused() -> None:
    """Every count of requests and tokens of the engine and the HTTP server disagrees."""
    rows = document(TINY)
    rows.append(rows[4] | {"prompt_id": "unicode"})
    problems = tiny_metrics(rows)
    # every count, sum and bucket of every per-request histogram, the HTTP durations' too
    assert len(problems) == 113
    assert {
        f"{PAIR}: vllm:request_success_total: expected a rise of 6 (one per row), found 5",
        f'{PAIR}: vllm:request_success_total{{finished_reason="length"}}: expected a rise of 6 '
        "(rows that finished by 'length'), found 5",
        f'{PAIR}: http_requests_total{{handler="/v1/chat/completions",status="2xx"}}: expected '
        "a rise of 6 (every one answered), found 5",
        f"{PAIR}: vllm:prompt_tokens_total: expected a rise of 250 (the rows' prompt_tokens), "
        "found 199",
        f"{PAIR}: vllm:generation_tokens_total: expected a rise of 192 (the rows' "
        "completion_tokens), found 160",
        f"{PAIR}: vllm:inter_token_latency_seconds_count: expected a rise of 186 (each row's "
        "tokens after its first: one decode step each), found 155",
    } <= set(problems)


def test_a_histogram_of_prompt_tokens_other_than_the_rows_is_refused() -> None:
    """Its count and sum kept, three prompts moved into its lowest bucket."""
    found = tiny_metrics(after=sample("vllm:request_prompt_tokens_bucket", 3.0, le="1.0"))
    assert (
        f'{PAIR}: vllm:request_prompt_tokens_bucket{{le="1.0"}}: expected a rise of 0 (the rows '
        "at most 1.0: the rows' prompt_tokens), found 3"
    ) in found, found


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("vllm:time_to_first_token_seconds_sum", 1000.0),  # longer than the client waited
        ("vllm:e2e_request_latency_seconds_sum", 1000.0),  # longer than the last token took
    ],
)
def test_server_times_outside_the_clients_are_refused(name: str, value: float) -> None:
    found = tiny_metrics(after=sample(name, value))
    assert any(p.startswith(f"{PAIR}: {name}: expected a rise of ") for p in found), found


def test_an_end_to_end_latency_shorter_than_the_streams_is_refused() -> None:
    """The Laguna record's 13 requests, each streamed for seconds, stated as 1 s in all: far
    below the client's first to last tokens less the delivery slack (0.25 s a request)."""
    name = "vllm:e2e_request_latency_seconds_sum"
    found = laguna_metrics(sample(name, 1.0))
    assert any(
        p.startswith(f"{LAGUNA_PAIR}: {name}: expected a rise of ") and "s of delivery slack)" in p
        for p in found
    ), found


def test_a_client_that_read_its_tokens_late_is_no_contradiction() -> None:
    """A busy host's client reads the last token later than the server sent it: the rows'
    first-to-last token longer than the server timed them, by less than the delivery slack,
    is not refused (a demo sealed beside the test suite on 2 cores was)."""
    late = DELIVERY_SLACK_S * 0.9
    rows = document(TINY)
    for row in rows:
        offsets = row["token_offsets_s"]
        row["token_offsets_s"] = [*offsets[:-1], offsets[-1] + late]
    assert tiny_metrics(rows) == ()


def test_successes_by_another_finish_reason_than_the_rows_are_refused() -> None:
    after = text(TINY, AFTER)
    moved = sample("vllm:request_success_total", 1.0, finished_reason="stop")(
        sample("vllm:request_success_total", 4.0, finished_reason="length")(after)
    )
    assert tiny_metrics(after=lambda _: moved) == (
        f'{PAIR}: vllm:request_success_total{{finished_reason="length"}}: expected a rise of 5 '
        "(rows that finished by 'length'), found 4",
        f'{PAIR}: vllm:request_success_total{{finished_reason="stop"}}: expected a rise of 0 '
        "(rows that finished by 'stop'), found 1",
    )


def test_fewer_chat_requests_than_rows_are_refused() -> None:
    """One request counted less, its sizes and durations still observed: the instrumentator
    observes each request it counts in every one of its families."""
    change = sample("http_requests_total", 4.0, handler="/v1/chat/completions")
    chat = 'handler="/v1/chat/completions"'
    counts = "the requests http_requests_total counts for the handler"
    assert tiny_metrics(after=change) == (
        f"{PAIR} (after): http_request_size_bytes_count{{{chat}}}: expected 4 ({counts}: the "
        "instrumentator observes each one it counts), found 5",
        f"{PAIR} (after): http_response_size_bytes_count{{{chat}}}: expected 4 ({counts}: the "
        "instrumentator observes each one it counts), found 5",
        f'{PAIR} (after): http_request_duration_seconds_count{{{chat},method="POST"}}: expected '
        f"4 ({counts} and method), found 5",
        f"{PAIR} (after): http_request_duration_highr_seconds_count: expected 5 (every request "
        "http_requests_total counts), found 6",
        f'{PAIR}: http_requests_total{{handler="/v1/chat/completions"}}: expected a rise of 5 '
        "(one POST /v1/chat/completions per row), found 4",
        f'{PAIR}: http_requests_total{{handler="/v1/chat/completions",status="2xx"}}: expected '
        "a rise of 5 (every one answered), found 4",
    )


def test_a_per_request_histogram_counting_other_requests_is_refused() -> None:
    """Its count alone raised: more observations than rows, and more than its own buckets."""
    assert tiny_metrics(after=sample("vllm:e2e_request_latency_seconds_count", 6.0)) == (
        f'{PAIR} (after): vllm:e2e_request_latency_seconds_bucket{{engine="0",'
        'model_name="tiny"}: expected the +Inf bucket to be vllm:e2e_request_latency_seconds_count'
        " 6, found 5",
        f"{PAIR}: vllm:e2e_request_latency_seconds_count: expected a rise of 5 (one per row), "
        "found 6",
    )


def test_a_histogram_whose_buckets_are_not_cumulative_is_refused() -> None:
    bucket = "vllm:time_to_first_token_seconds_bucket"
    found = tiny_metrics(after=sample(bucket, 5.0, le="0.001"))
    assert any("expected cumulative buckets" in problem for problem in found), found


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        pytest.param(
            sample("vllm:num_requests_running", 3.0),
            f'{PAIR}: vllm:num_requests_running{{engine="0",model_name="tiny"}}: expected no '
            "request left once the suite was answered, found 3",
            id="requests left running after the suite",
        ),
        pytest.param(
            sample("vllm:inter_token_latency_seconds_count", 154.0),
            f"{PAIR}: vllm:inter_token_latency_seconds_count: expected a rise of 155 (each row's "
            "tokens after its first: one decode step each), found 154",
            id="decode steps other than one per later token",
        ),
    ],
)
def test_a_count_the_answered_rows_contradict_is_refused(
    change: Callable[[str], str], refusal: str
) -> None:
    found = tiny_metrics(after=change)
    assert refusal in found, found


def test_prefix_cache_queries_while_the_engine_reports_caching_off_are_refused() -> None:
    assert tiny_metrics(after=sample("vllm:prefix_cache_queries_total", 199.0)) == (
        f"{PAIR}: vllm:prefix_cache_queries_total: expected a rise of 0 (prefix caching is "
        "off), found 199",
    )


UNSTATED = dataclasses.replace(limits_of(TINY), prefix_caching=None)
"""The tiny bundle's limits with prefix caching left to vLLM's default by the argv."""


def test_an_engine_caching_prefixes_the_argv_turned_off_is_refused() -> None:
    on = replaced('enable_prefix_caching="False"', 'enable_prefix_caching="True"')
    assert (
        f"{PAIR}: vllm:cache_config_info enable_prefix_caching: expected False (the argv), found "
        "True"
    ) in tiny_metrics(after=on)


def test_metrics_of_another_model_name_than_the_argv_serves_are_refused() -> None:
    found = tiny_metrics(
        before=lambda t: t.replace('model_name="tiny"', 'model_name="gpt-4"'),
        after=lambda t: t.replace('model_name="tiny"', 'model_name="gpt-4"'),
    )
    assert (
        f"{PAIR}: model_name: expected 'tiny' (the argv's --served-model-name), found ['gpt-4']"
    ) in found, found


def test_no_prefix_cache_queries_while_the_engine_reports_caching_on_are_refused() -> None:
    on = replaced('enable_prefix_caching="False"', 'enable_prefix_caching="True"')
    assert tiny_metrics(before=on, after=on, served=UNSTATED) == (
        f"{PAIR}: vllm:prefix_cache_queries_total: expected a rise of 199 (the rows' "
        "prompt_tokens, prefix caching on), found 0",
    )


def test_cached_tokens_the_server_never_counted_are_refused() -> None:
    on = replaced('enable_prefix_caching="False"', 'enable_prefix_caching="True"')
    queried = sample("vllm:prefix_cache_queries_total", 199.0)
    found = tiny_metrics(
        with_row(1, cached_tokens=10), before=on, after=lambda t: queried(on(t)), served=UNSTATED
    )
    assert found == (
        f"{PAIR}: vllm:prompt_tokens_cached_total: expected a rise of 10 (the rows' "
        "cached_tokens), found 0",
        f'{PAIR}: vllm:prompt_tokens_by_source_total{{source="local_compute"}}: expected a rise '
        "of 189 (prompt_tokens less cached_tokens), found 199",
        f"{PAIR}: vllm:request_prefill_kv_computed_tokens_sum: expected a rise of 189 (the rows' "
        "prompt_tokens less cached_tokens), found 199",
        f'{PAIR}: vllm:request_prefill_kv_computed_tokens_bucket{{le="20.0"}}: expected a rise '
        "of 1 (the rows at most 20.0: each row's prompt_tokens less its cached_tokens), found 0",
        f"{PAIR}: vllm:iteration_tokens_total_sum: expected a rise of 349 (the rows' computed "
        "prompt tokens and completion_tokens), found 359",
        f"{PAIR}: vllm:prefix_cache_hits_total: expected a rise of 10 (the rows' cached_tokens), "
        "found 0",
    )


def test_a_cached_prefix_no_earlier_row_computed_is_refused() -> None:
    """A first row's prefix cached by a server that had answered nothing before the suite."""
    problems = tiny_metrics(with_row(0, cached_tokens=16))
    assert problems[-1] == (
        f"{PAIR}: row 0 (greeting) cached_tokens: expected at most 0 (prefix caching is off), "
        "found 16"
    )
    on = replaced('enable_prefix_caching="False"', 'enable_prefix_caching="True"')
    assert tiny_metrics(with_row(0, cached_tokens=16), after=on)[-1] == (
        f"{PAIR}: row 0 (greeting) cached_tokens: expected at most 0 (the longest prompt and "
        "answer of an earlier row, the server having answered nothing before the suite), found 16"
    )


def test_metrics_after_equal_to_before_while_rows_were_answered_are_refused() -> None:
    before = text(TINY, BEFORE)
    assert tiny_metrics(after=lambda _: before) == (
        f"{PAIR}: expected vLLM's counters to rise while 5 rows were answered, found every one "
        "unchanged",
    )


def test_a_counter_that_went_backwards_is_refused() -> None:
    assert tiny_metrics(before=sample("vllm:generation_tokens_total", 200.0)) == (
        f'{PAIR}: vllm:generation_tokens_total{{engine="0",model_name="tiny"}}: expected a '
        "counter that never decreases, found 200 before and 160 after",
        f"{PAIR}: vllm:generation_tokens_total: expected a rise of 160 (the rows' "
        "completion_tokens), found -40",
    )


def test_a_counter_recreated_between_the_reads_is_refused() -> None:
    created = re.search(
        r'^vllm:generation_tokens_created\{engine="0",model_name="tiny"\} (\S+)$',
        text(TINY, AFTER),
        re.MULTILINE,
    )
    assert created is not None
    assert tiny_metrics(after=sample("vllm:generation_tokens_created", 1.8e9)) == (
        f'{PAIR}: vllm:generation_tokens_created{{engine="0",model_name="tiny"}}: expected one '
        f"creation time (the counter was not recreated), found {float(created[1])!r} before and "
        "1800000000.0 after",
    )


def test_reads_of_another_server_process_are_refused() -> None:
    started = re.search(r"^process_start_time_seconds (\S+)$", text(TINY, BEFORE), re.MULTILINE)
    assert started is not None
    assert tiny_metrics(after=sample("process_start_time_seconds", 1.0)) == (
        f"{PAIR}: process_start_time_seconds: expected one server process for both reads, "
        f"found {float(started[1])!r} before and 1.0 after",
    )


def test_a_label_set_that_vanished_between_the_reads_is_refused() -> None:
    line = re.compile(
        r'^vllm:request_success_total\{[^}]*finished_reason="abort"[^}]*\} .*\n', re.M
    )
    assert tiny_metrics(after=lambda t: line.sub("", t)) == (
        f"{PAIR}: vllm:request_success_total: expected the same label sets in both reads, found "
        '{engine="0",finished_reason="abort",model_name="tiny"} only before and none only after',
    )


# --- speculative decoding, on the Laguna record's counters ------------------------------------


ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def test_more_accepted_tokens_than_draft_tokens_are_refused() -> None:
    assert laguna_metrics(sample(ACCEPTED, 17700.0)) == (
        f"{LAGUNA_PAIR}: {ACCEPTED}: expected a rise of at most the 17699 draft tokens, found "
        "17700",
        f"{LAGUNA_PAIR}: {PER_POSITION}: expected positions summing to the 17700 accepted tokens, "
        "found 4747",
        f"{LAGUNA_PAIR}: vllm:inter_token_latency_seconds_count and {ACCEPTED}: expected decode "
        "steps plus accepted draft tokens to rise by the rows' 6341 tokens after their first, "
        "plus at most 143 drafted past a row's end (11 a row), found 1609 + 17700",
    )


def test_more_draft_tokens_than_k_per_draft_are_refused() -> None:
    assert laguna_metrics(sample(DRAFT_TOKENS, 17700.0)) == (
        f"{LAGUNA_PAIR}: {DRAFT_TOKENS}: expected a rise between the 1609 drafts and 11 tokens "
        "each (17699), found 17700",
    )


def test_a_position_accepted_more_often_than_there_were_drafts_is_refused() -> None:
    assert laguna_metrics(sample(PER_POSITION, 1700.0, position="0")) == (
        f"{LAGUNA_PAIR}: {PER_POSITION}: expected positions summing to the 4747 accepted tokens, "
        "found 5276",
        f'{LAGUNA_PAIR}: {PER_POSITION}{{position="0"}}: expected a rise of at most the 1609 '
        "drafts, found 1700",
    )


def test_a_position_accepted_more_often_than_the_one_before_it_is_refused() -> None:
    swapped = lambda t: sample(PER_POSITION, 497.0, position="4")(  # noqa: E731
        sample(PER_POSITION, 397.0, position="3")(t)
    )
    assert laguna_metrics(swapped) == (
        f"{LAGUNA_PAIR}: {PER_POSITION}: expected position 4 to rise by at most position 3's 397 "
        "(a draft token is accepted only after the one before it), found 497",
    )


def test_positions_other_than_the_argv_depth_are_refused() -> None:
    argv = [
        a.replace('"num_speculative_tokens": 11', '"num_speculative_tokens": 12')
        for a in locked_argv(LAGUNA)
    ]
    served = Limits.of(suite_of(LAGUNA), argv)
    assert served.speculative_k == 12
    assert laguna_metrics(served=served) == (
        f"{LAGUNA_PAIR}: {PER_POSITION}: expected positions 0..11 (num_speculative_tokens 12), "
        "found 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10",
    )


def test_speculative_counters_of_an_argv_without_speculation_are_refused() -> None:
    plain = [a for a in locked_argv(LAGUNA) if "speculative" not in a and "dflash" not in a]
    served = Limits.of(suite_of(LAGUNA), plain)
    assert not served.speculative
    assert laguna_metrics(served=served) == (
        "evidence/run/metrics-before-suite.prom → evidence/run/metrics-after-suite.prom: "
        "vllm:spec_decode_num_drafts_total: expected a rise of 0 (the argv asks for no "
        "speculative decoding), found 1609",
        f"{LAGUNA_PAIR}: vllm:inter_token_latency_seconds_count: expected a rise of 6341 (each "
        "row's tokens after its first: one decode step each), found 1609",
    )


def test_more_length_finishes_than_rows_at_their_limit_are_refused() -> None:
    """The bench rows keep no finish reason: 11 of 13 reached max_tokens, so at most 11 can
    have finished by length."""
    change = lambda t: sample("vllm:request_success_total", 12.0, finished_reason="length")(  # noqa: E731
        sample("vllm:request_success_total", 1.0, finished_reason="stop")(t)
    )
    assert laguna_metrics(change) == (
        f'{LAGUNA_PAIR}: vllm:request_success_total{{finished_reason="length"}}: expected a rise '
        "of at most 11 (the rows that reached their token limit), found 12",
    )


def test_speculation_the_metrics_do_not_export_is_not_applicable_not_invented() -> None:
    """The tiny teacher's reads judged as if its argv had asked for ngram drafts: neither the
    counters nor the decode steps they would explain can be checked."""
    manifest = Manifest.from_path(REPO_ROOT / "manifests" / "tiny-cpu.toml")
    served = Limits.of(suite_of(TINY), manifest.launch.argv_for("ngram"))
    findings = metrics_problems(
        parsed(document(TINY)),
        text(TINY, BEFORE),
        text(TINY, AFTER),
        limits=served,
        sources=(BEFORE, AFTER),
    )
    assert findings == Findings(
        (), ("speculative decoding and decode steps: a read lacks vllm:spec_decode_* counters",)
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--max-model-len", "9" * 400 + "k"],  # float() of it is inf: no int
        ["--max-model-len", str(2**64)],
        ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 10000000000}'],
    ],
)
def test_a_limit_too_large_to_be_one_is_refused_not_computed(argv: list[str]) -> None:
    """Neither an overflow nor an enumeration of ten billion draft positions."""
    with pytest.raises(BadInput):
        Limits.of(suite_of(TINY), argv)


# --- each histogram's sum against its buckets ------------------------------------------------

LABELS = '{engine="0",model_name="tiny"}'
TTFT_SUM = "vllm:time_to_first_token_seconds_sum"
E2E_SUM = "vllm:e2e_request_latency_seconds_sum"


def test_a_time_to_first_token_sum_its_buckets_cannot_hold_is_refused() -> None:
    """Every request in the 1 ms bucket, its sum 52 ms: in the read and in the rise."""
    found = tiny_metrics(after=every("vllm:time_to_first_token_seconds_bucket", 5.0))
    assert found == (
        f"{PAIR} (after): {TTFT_SUM}{LABELS}: expected a sum between 0 and 0.005 (each of its 5 "
        "observations between the bounds of its bucket), found 0.05183672904968262",
        f"{PAIR}: {TTFT_SUM}{LABELS}: expected a rise between 0 and 0.005 (each of the 5 "
        "observations between the reads between the bounds of its bucket), found "
        "0.05183672904968262",
    )


def test_an_end_to_end_sum_below_what_its_buckets_hold_is_refused() -> None:
    """Every request only in +Inf (beyond the last bound, 7680 s), its sum 0.42 s."""
    only_inf = every("vllm:e2e_request_latency_seconds_bucket", 5.0, le="+Inf")
    found = tiny_metrics(
        after=lambda t: only_inf(every("vllm:e2e_request_latency_seconds_bucket", 0.0)(t))
    )
    assert (
        f"{PAIR} (after): {E2E_SUM}{LABELS}: expected a sum of at least 38400 (each of its 5 "
        "observations between the bounds of its bucket), found 0.4203219413757324"
    ) in found, found
    assert (
        f"{PAIR}: {E2E_SUM}{LABELS}: expected a rise of at least 38400 (each of the 5 "
        "observations between the reads between the bounds of its bucket), found "
        "0.4203219413757324"
    ) in found, found


def test_the_laguna_time_to_first_token_sum_its_buckets_cannot_hold_is_refused() -> None:
    found = laguna_metrics(every("vllm:time_to_first_token_seconds_bucket", 13.0))
    assert (
        f'{LAGUNA_PAIR}: {TTFT_SUM}{{engine="0",model_name="laguna-s-2.1-int4"}}: expected a rise '
        "between 0 and 0.013 (each of the 13 observations between the reads between the bounds "
        "of its bucket), found 81.50771450996399"
    ) in found, found


# --- vLLM's per-request times against each other ----------------------------------------------

DECODE_SUM = "vllm:request_decode_time_seconds_sum"
ITL_SUM = "vllm:inter_token_latency_seconds_sum"
TPOT_SUM = "vllm:request_time_per_output_token_seconds_sum"
QUEUE_SUM = "vllm:request_queue_time_seconds_sum"
INFERENCE_SUM = "vllm:request_inference_time_seconds_sum"
PREFILL_SUM = "vllm:request_prefill_time_seconds_sum"
CLOCKS = "0.05 s of slack between the server's and the engine's clocks"


def outlasting(series: str, what: str, found: str) -> str:
    """The refusal of `series`, `what` of each tiny request, rising past their end-to-end
    latencies."""
    return (
        f"{PAIR}: {series}: expected a rise of at most 0.470322 s (each request's {what} inside "
        f"its end-to-end latency, whose sum rose by 0.420322 s; {CLOCKS}), found {found}"
    )


def not_the_same_intervals(series: str, of: str, expected: str, found: str) -> str:
    """The refusal of `series`, which times the same intervals as `of`, rising otherwise."""
    return (
        f"{PAIR}: {series}: expected a rise of {expected} ({of}: the same intervals of the "
        f"engine's clock, to 1e-06 s an observation), found {found}"
    )


def test_a_decode_time_longer_than_the_end_to_end_latency_is_refused() -> None:
    """Decode and inference 10 s longer: outside the 0.42 s the requests took, and no longer
    the sum of their inter-token latencies (equal to the last bit in every committed read)."""
    found = tiny_metrics(after=lambda t: plus(INFERENCE_SUM, 10)(plus(DECODE_SUM, 10)(t)))
    assert {
        outlasting(DECODE_SUM, "decode", "10.372868546000063"),
        not_the_same_intervals(ITL_SUM, DECODE_SUM, "10.372868546000063", "0.37286854600006336"),
        f"{PAIR}: {QUEUE_SUM}, {PREFILL_SUM} and {DECODE_SUM}: expected rises summing to at most "
        "0.470322 s (a request is queued, prefilled and decoded inside its end-to-end latency, "
        f"whose sum rose by 0.420322 s; {CLOCKS}), found 10.4031 s",
    } <= set(found), found


def test_a_decode_time_within_its_buckets_but_not_its_steps_is_refused() -> None:
    """10 ms more decode, inside every bucket bound and the end-to-end latency: the sum of the
    inter-token latencies and inference (prefill + decode) still tell."""
    assert tiny_metrics(after=plus(DECODE_SUM, 0.01)) == (
        not_the_same_intervals(
            INFERENCE_SUM,
            f"{PREFILL_SUM} + {DECODE_SUM}",
            "0.41300842700025897",
            "0.40300842700025896",
        ),
        not_the_same_intervals(ITL_SUM, DECODE_SUM, "0.38286854600006337", "0.37286854600006336"),
        f"{PAIR}: {TPOT_SUM}: expected a rise of 0.0123506 s (each request's decode time over its "
        "tokens after the first: the decode time's rise 0.382869 s over the rows' 31 to 31 "
        "tokens), found 0.01202801761290527",
    )


def test_inter_token_latencies_longer_than_the_requests_are_refused() -> None:
    found = tiny_metrics(after=plus(ITL_SUM, 34.0))
    assert {
        outlasting(ITL_SUM, "inter-token latencies", "34.37286854600006"),
        not_the_same_intervals(ITL_SUM, DECODE_SUM, "0.37286854600006336", "34.37286854600006"),
    } <= set(found), found


@pytest.mark.parametrize("rise", [100.0, 0.001])
def test_a_time_per_output_token_other_than_decode_over_the_tokens_is_refused(rise: float) -> None:
    """Each of the 5 rows streamed 32 tokens: its time per output token is its decode over 31."""
    found = tiny_metrics(after=plus(TPOT_SUM, rise))
    assert (
        f"{PAIR}: {TPOT_SUM}: expected a rise of 0.012028 s (each request's decode time over its "
        "tokens after the first: the decode time's rise 0.372869 s over the rows' 31 to 31 "
        f"tokens), found {0.01202801761290527 + rise!r}"
    ) in found, found


def test_a_queue_time_longer_than_the_requests_are_refused() -> None:
    found = tiny_metrics(after=plus(QUEUE_SUM, 50.0))
    assert {
        outlasting(QUEUE_SUM, "time queued", "50.00008781500037"),
        f"{PAIR}: {QUEUE_SUM} and {PREFILL_SUM}: expected rises summing to at most 0.101837 s (a "
        "request is queued and prefilled before the server sees its first token, whose times "
        f"rose by 0.0518367 s; {CLOCKS}), found 50.0302 s",
    } <= set(found), found


def test_the_laguna_time_per_output_token_lies_between_its_rows_longest_and_shortest() -> None:
    """Its 13 rows streamed 296 to 512 tokens: any sum outside decode / 511 .. decode / 295."""
    assert laguna_metrics(sample(TPOT_SUM, 0.21)) == (
        f"{LAGUNA_PAIR}: {TPOT_SUM}: expected a rise between 0.120078 and 0.207999 s (each "
        "request's decode time over its tokens after the first: the decode time's rise 61.3597 "
        "s over the rows' 295 to 511 tokens), found 0.21",
    )


# --- caches, waiting requests, preemptions ----------------------------------------------------


def test_external_prefix_cache_hits_without_a_kv_connector_are_refused() -> None:
    external = "vllm:external_prefix_cache_{}_total"
    change = lambda t: plus(external.format("hits"), 50)(plus(external.format("queries"), 50)(t))  # noqa: E731
    no_connector = "the argv configures no KV connector (--kv-transfer-config)"
    assert tiny_metrics(after=change) == (
        f"{PAIR}: {external.format('queries')}: expected a rise of 0 ({no_connector}), found 50",
        f"{PAIR}: {external.format('hits')}: expected a rise of 0 ({no_connector}), found 50",
        f"{PAIR}: vllm:prompt_tokens_cached_by_source_total: expected a rise of 50 over every "
        "source (the prefix cache's 0 hits and 50 external hits), found 0",
    )
    connected = dataclasses.replace(limits_of(TINY), kv_connector=True)
    assert tiny_metrics(after=change, served=connected) == (
        f"{PAIR}: vllm:prompt_tokens_cached_by_source_total: expected a rise of 50 over every "
        "source (the prefix cache's 0 hits and 50 external hits), found 0",
    )


def test_a_kv_connector_is_read_from_the_argv() -> None:
    argv = [*locked_argv(TINY), "--kv-transfer-config", '{"kv_connector": "x"}']
    assert Limits.of(suite_of(TINY), argv).kv_connector
    assert not limits_of(TINY).kv_connector


def test_prompt_tokens_cached_by_a_source_the_cache_never_hit_are_refused() -> None:
    found = tiny_metrics(
        after=plus("vllm:prompt_tokens_cached_by_source_total", 16, source="device")
    )
    assert found == (
        f"{PAIR}: vllm:prompt_tokens_cached_by_source_total: expected a rise of 0 over every "
        "source (the prefix cache's 0 hits and 0 external hits), found 16",
    )


def test_requests_waiting_by_a_reason_while_none_wait_are_refused() -> None:
    found = tiny_metrics(
        after=sample("vllm:num_requests_waiting_by_reason", 2.0, reason="capacity")
    )
    assert found == (
        f"{PAIR} (after): vllm:num_requests_waiting_by_reason{LABELS}: expected reasons summing "
        "to vllm:num_requests_waiting 0 (every waiting request has one reason), found 2",
        f'{PAIR}: vllm:num_requests_waiting_by_reason{{engine="0",model_name="tiny",'
        'reason="capacity"}: expected no request left once the suite was answered, found 2',
    )


def test_preemptions_no_finished_request_counted_are_refused() -> None:
    assert tiny_metrics(after=plus("vllm:num_preemptions_total", 3)) == (
        f"{PAIR}: vllm:num_preemptions_total: expected a rise of 0 "
        "(vllm:request_num_preemptions_sum: the preemptions of the requests finished between the "
        "reads), found 3",
    )


def test_kv_blocks_in_use_with_nothing_running_and_no_prefix_cache_are_refused() -> None:
    assert tiny_metrics(after=sample("vllm:kv_cache_usage_perc", 0.9)) == (
        f"{PAIR}: vllm:kv_cache_usage_perc{LABELS}: expected 0 once the suite was answered (no "
        "request running or waiting, prefix caching off, no KV connector: every block free), "
        "found 0.9",
    )


# --- the reads against the times and the log of the start -------------------------------------


def tiny_read(
    after: Callable[[str], str] = str,
    log: Callable[[str], str] = str,
    *,
    before: Callable[[str], str] = str,
    facts: ServerFacts | None = None,
) -> tuple[str, ...]:
    """The tiny bundle's start 1 judged with the time its teardown began, its served log and
    (given) what its other files state of its server."""
    served, teardown = served_log(TINY)
    return metrics_problems(
        parsed(document(TINY)),
        before(text(TINY, BEFORE)),
        after(text(TINY, AFTER)),
        limits=limits_of(TINY),
        sources=(BEFORE, AFTER),
        read_by=teardown["began_at"],
        served_log=log(served),
        log_source=LOG,
        facts=facts or ServerFacts(),
    ).problems


def test_a_counter_created_after_the_read_was_taken_is_refused() -> None:
    _, teardown = served_log(TINY)
    late = teardown["ended_at"] + 3600
    found = tiny_read(after=sample("http_requests_created", late, handler="/v1/chat/completions"))
    assert found == (
        f'{PAIR} (after): http_requests_created{{handler="/v1/chat/completions",method="POST",'
        'status="2xx"}: expected a time no later than the read, taken before '
        f"{teardown['began_at']!r} (teardown began), found {late!r}",
    )


def test_requests_counted_that_the_access_log_does_not_hold_are_refused() -> None:
    """Three failed POSTs to another endpoint while the suite ran: uvicorn logs none (nor did
    the instrumentator observe them in its other families)."""
    models = 'http_requests_total{handler="/v1/models",method="GET",status="2xx"} 1.0'
    errors = 'http_requests_total{handler="/v1/completions",method="POST",status="5xx"} 3.0'
    assert tiny_read(after=replaced(models, f"{models}\n{errors}"))[-1:] == (
        f'{LOG}: access lines of http_requests_total{{handler="/v1/completions",method="POST",'
        'status="5xx"}: expected at least the 3 requests it counted between the reads '
        f"({PAIR}; uvicorn logs every request it answers), found 0",
    )


def test_a_log_stripped_of_its_access_lines_is_refused() -> None:
    """The argv leaves uvicorn's access log on: every counted request has its line."""
    stripped = lambda log: "\n".join(line for line in log.splitlines() if "HTTP/1.1" not in line)  # noqa: E731
    found = tiny_read(log=stripped)
    assert (
        f'{LOG}: access lines of http_requests_total{{handler="/v1/chat/completions",'
        'method="POST",status="2xx"}: expected at least the 5 requests it counted between the '
        f"reads ({PAIR}; uvicorn logs every request it answers), found 0"
    ) in found, found
    quiet = [*locked_argv(TINY), "--disable-uvicorn-access-log"]
    assert not Limits.of(suite_of(TINY), quiet).access_logged
    assert limits_of(TINY).access_logged


# --- buckets against each row's bounds (the second attacker round) -------------------------------

TTFT_BUCKET = "vllm:time_to_first_token_seconds_bucket"
INSIDE = "one observation a row, inside the client's times"


def test_a_first_token_later_than_every_client_saw_one_is_refused() -> None:
    """One request moved from the 10 ms bucket into (40, 60] ms, the sum kept inside every
    bound it is checked against: every row's client saw its first token within 24 ms."""

    def moved(metrics: str) -> str:
        for bound, count in (("0.01", 3.0), ("0.02", 3.0), ("0.04", 4.0)):
            metrics = sample(TTFT_BUCKET, count, le=bound)(metrics)
        return sample(TTFT_SUM, 0.09)(metrics)

    assert tiny_metrics(after=moved) == (
        f'{PAIR}: {TTFT_BUCKET}{{le="0.02"}}: expected a rise between 4 and 5 ({INSIDE}: 4 rows '
        "whose ttft_s plus 0.01 s is at most 0.02 s), found 3",
        f'{PAIR}: {TTFT_BUCKET}{{le="0.04"}}: expected a rise of 5 ({INSIDE}: 5 rows whose '
        "ttft_s plus 0.01 s is at most 0.04 s), found 4",
    )


def test_an_end_to_end_latency_longer_than_every_row_took_is_refused() -> None:
    """One request's end-to-end latency moved into (0.3, 0.5] s: every row's last token came
    within 0.1 s of its request."""
    after = sample("vllm:e2e_request_latency_seconds_bucket", 4.0, le="0.3")
    assert tiny_metrics(after=after) == (
        f'{PAIR}: vllm:e2e_request_latency_seconds_bucket{{le="0.3"}}: expected a rise of 5 '
        f"({INSIDE}: 5 rows whose last token's offset plus 0.01 s is at most 0.3 s, 5 whose "
        "first to last token less 0.25 s is), found 4",
    )


def test_prefill_kv_tokens_other_than_each_rows_prompt_less_its_cache_are_refused() -> None:
    """Two prompts of at most 50 computed tokens where the rows (cached 0) have three: 26, 27
    and 41 tokens. vLLM 0.32 observes `num_prompt_tokens - max(num_cached_tokens, 0)`."""
    after = sample("vllm:request_prefill_kv_computed_tokens_bucket", 2.0, le="50.0")
    assert tiny_metrics(after=after) == (
        f'{PAIR}: vllm:request_prefill_kv_computed_tokens_bucket{{le="50.0"}}: expected a rise '
        "of 3 (the rows at most 50.0: each row's prompt_tokens less its cached_tokens), found 2",
    )


# --- the API server's HTTP instrumentation -------------------------------------------------------

CHAT = 'handler="/v1/chat/completions"'
HIGHR = "http_request_duration_highr_seconds"
SAME_DURATIONS = (
    "the requests http_request_duration_seconds counts within the same bound: both observe "
    "every request's one duration"
)


def test_suite_requests_the_server_timed_longer_than_the_client_waited_are_refused() -> None:
    """Every POST over 1 s (6 s in all) where each row streamed within 0.1 s and the unlabelled
    histogram, the same durations, holds every request within 0.1 s."""

    def slow(metrics: str) -> str:
        for bound in ("0.1", "0.5", "1.0"):
            metrics = sample(
                "http_request_duration_seconds_bucket",
                0.0,
                le=bound,
                handler="/v1/chat/completions",
            )(metrics)
        return sample("http_request_duration_seconds_sum", 6.0, handler="/v1/chat/completions")(
            metrics
        )

    found = tiny_metrics(after=slow)
    assert {
        *(
            f'{PAIR} (after): {HIGHR}_bucket{{le="{bound}"}}: expected 1 ({SAME_DURATIONS}), '
            "found 6"
            for bound in ("0.1", "0.5", "1.0")
        ),
        f"{PAIR} (after): {HIGHR}_sum: expected 6.000851396000144 (the sum of "
        "http_request_duration_seconds_sum over its handlers: the same durations), found "
        "0.4285929079997004",
        f'{PAIR}: http_request_duration_seconds_sum{{{CHAT},method="POST"}}: expected a rise '
        "between 0.000 and 1.678 s (the rows' first to last token less, and their last token's "
        "offset plus, 1.25 s of delivery slack), found 6",
        f'{PAIR}: http_request_duration_seconds_bucket{{{CHAT},le="0.5",method="POST"}}: '
        f"expected a rise of 5 ({INSIDE}: 5 rows whose last token's offset plus 0.25 s is at "
        "most 0.5 s, 5 whose first to last token less 0.25 s is), found 0",
    } <= set(found), found


def sizes_counted(count: float) -> Callable[[str], str]:
    """A change of a metrics text: `count` chat requests and responses sized."""

    def change(metrics: str) -> str:
        for name in ("http_request_size_bytes_count", "http_response_size_bytes_count"):
            metrics = sample(name, count, handler="/v1/chat/completions")(metrics)
        return metrics

    return change


def test_request_sizes_observed_for_requests_never_counted_are_refused() -> None:
    counts = "the requests http_requests_total counts for the handler"
    assert tiny_metrics(after=sizes_counted(9.0)) == tuple(
        f"{PAIR} (after): {name}_count{{{CHAT}}}: expected 5 ({counts}: the instrumentator "
        "observes each one it counts), found 9"
        for name in ("http_request_size_bytes", "http_response_size_bytes")
    )


def test_more_requests_timed_than_counted_are_refused() -> None:
    """The unlabelled histogram (every request) given 14 more: the handlers counted 6."""

    def more(metrics: str) -> str:
        metrics = revalued(metrics, rf'{HIGHR}_bucket\{{le="[^"]+"\}}', lambda n: n + 14.0)
        return sample(f"{HIGHR}_count", 20.0)(metrics)

    assert tiny_metrics(after=more) == (
        f"{PAIR} (after): {HIGHR}_count: expected 6 (every request http_requests_total counts), "
        "found 20",
        *(
            f'{PAIR} (after): {HIGHR}_bucket{{le="{bound}"}}: expected 6 ({SAME_DURATIONS}), '
            "found 20"
            for bound in ("0.1", "0.5", "1.0", "+Inf")
        ),
    )


def test_laguna_requests_timed_shorter_than_their_streams_are_refused() -> None:
    """All 13 requests within 0.01 s in the unlabelled histogram (sum 0.1 s) while each row
    streamed 6 to 25 s: the labelled histogram, the same durations, and the rows both refuse."""

    def quick(metrics: str) -> str:
        metrics = revalued(metrics, rf'{HIGHR}_bucket\{{le="[^"]+"\}}', lambda _: 13.0)
        return sample(f"{HIGHR}_sum", 0.1)(metrics)

    found = laguna_metrics(quick)
    assert {
        f'{LAGUNA_PAIR} (after): {HIGHR}_bucket{{le="0.1"}}: expected 0 ({SAME_DURATIONS}), '
        "found 13",
        f"{LAGUNA_PAIR} (after): {HIGHR}_sum: expected 142.8821989370008 (the sum of "
        "http_request_duration_seconds_sum over its handlers: the same durations), found 0.1",
        f'{LAGUNA_PAIR}: {HIGHR}_bucket{{le="0.01"}}: expected a rise of 0 ({INSIDE}: 0 rows '
        "whose last token's offset plus 0.25 s is at most 0.01 s, 0 whose first to last token "
        "less 0.25 s is), found 13",
    } <= set(found), found


def test_laguna_request_sizes_of_uncounted_requests_are_refused() -> None:
    assert laguna_metrics(sizes_counted(20.0))[:1] == (
        f"{LAGUNA_PAIR} (after): http_request_size_bytes_count{{{CHAT}}}: expected 13 (the "
        "requests http_requests_total counts for the handler: the instrumentator observes each "
        "one it counts), found 20",
    )


# --- gauges and information of one process ------------------------------------------------------

PREFIX_ON = replaced('enable_prefix_caching="False"', 'enable_prefix_caching="True"')
SAME_INFORMATION = "expected the same information in both reads of one server process"


def test_a_cache_config_other_before_the_suite_than_after_is_refused() -> None:
    assert tiny_metrics(before=PREFIX_ON) == (
        f"{PAIR}: vllm:cache_config_info: {SAME_INFORMATION}, found enable_prefix_caching='True' "
        "before, 'False' after",
    )


def test_requests_running_before_the_suite_are_refused() -> None:
    """Three running when the suite began, none answered before, none aborted, none left."""
    assert tiny_metrics(before=sample("vllm:num_requests_running", 3.0)) == (
        f'{PAIR}: vllm:num_requests_running{{engine="0",model_name="tiny"}}: expected no request '
        "running or waiting when the suite began (its client had sent nothing to the fresh "
        "server), found 3",
    )


def test_the_laguna_before_read_is_judged_as_the_after_read() -> None:
    before = replaced('enable_prefix_caching="False"', 'enable_prefix_caching="True"')
    running = sample("vllm:num_requests_running", 2.0)
    found = metrics_problems(
        laguna_rows(),
        running(before(text(LAGUNA, LAGUNA_BEFORE))),
        text(LAGUNA, LAGUNA_AFTER),
        limits=limits_of(LAGUNA),
        sources=(LAGUNA_BEFORE, LAGUNA_AFTER),
    ).problems
    assert found == (
        f"{LAGUNA_PAIR}: vllm:cache_config_info: {SAME_INFORMATION}, found "
        "enable_prefix_caching='True' before, 'False' after",
        f'{LAGUNA_PAIR}: vllm:num_requests_running{{engine="0",model_name="laguna-s-2.1-int4"}}: '
        "expected no request running or waiting when the suite began (its client had sent "
        "nothing to the fresh server), found 2",
    )


def _second_engine(metrics: str) -> str:
    lines = []
    for line in metrics.splitlines(keepends=True):
        lines.append(line)
        if line.startswith(("vllm:num_requests_running{", "vllm:cache_config_info{")):
            lines.append(line.replace('engine="0"', 'engine="1"'))
    return "".join(lines)


def test_a_second_engine_without_data_parallelism_is_refused() -> None:
    assert tiny_metrics(before=_second_engine, after=_second_engine) == (
        f"{PAIR}: engine: expected the samples of at most 1 engine(s) (the argv's "
        "--data-parallel-size, 1 when not given), found engines ['0', '1']",
    )
    parallel = [*locked_argv(TINY), "--data-parallel-size", "2"]
    assert Limits.of(suite_of(TINY), parallel).data_parallel == 2
    served = Limits.of(suite_of(TINY), parallel)
    assert tiny_metrics(before=_second_engine, after=_second_engine, served=served) == ()


def test_a_kv_cache_other_than_the_log_and_the_environment_state_is_refused() -> None:
    """64 GiB and 33.5 M tokens where `VLLM_CPU_KVCACHE_SPACE=1` (run.json) and the log says
    524,288 tokens, 256.00x concurrency."""

    def bigger(metrics: str) -> str:
        for old, new in (
            ('kv_cache_memory_bytes="1073741824"', 'kv_cache_memory_bytes="68719476736"'),
            ('kv_cache_size_tokens="524288"', 'kv_cache_size_tokens="33554432"'),
            ('num_gpu_blocks="4096"', 'num_gpu_blocks="262144"'),
            ('kv_cache_max_concurrency="256.0"', 'kv_cache_max_concurrency="16384.0"'),
        ):
            metrics = replaced(old, new)(metrics)
        return metrics

    config = 'vllm:cache_config_info{engine="0"}'
    assert tiny_read(before=bigger, after=bigger, facts=facts_of(TINY)) == (
        f"{PAIR}: {config} kv_cache_size_tokens: expected 524288 (the KV cache size {LOG} "
        "states), found 33554432",
        f"{PAIR}: {config} kv_cache_max_concurrency: expected 256.00 (the maximum concurrency "
        f"{LOG} states), found 16384.0",
        f"{PAIR}: {config} kv_cache_memory_bytes: expected 1073741824 (VLLM_CPU_KVCACHE_SPACE=1 "
        "GiB in evidence/run.json env, the CPU platform's KV cache), found 68719476736",
    )


@pytest.mark.parametrize("bundle", [TINY, LAGUNA], ids=["tiny", "laguna"])
def test_python_info_of_another_interpreter_is_refused(bundle: Path) -> None:
    """CPython 3.12.1 (tiny) or 3.11.9 (Laguna) in both reads, where the observations (the
    runtime lock) state 3.11.7 (3.12.13)."""
    if bundle == TINY:
        old, new = (
            'minor="11",patchlevel="7",version="3.11.7"',
            'minor="12",patchlevel="1",version="3.12.1"',
        )
        found = tiny_read(before=replaced(old, new), after=replaced(old, new), facts=facts_of(TINY))
        pair, stated, where = PAIR, "3.11.7", "evidence/observations.json python.version"
        shown = "3.12.1"
    else:
        old, new = (
            'minor="12",patchlevel="13",version="3.12.13"',
            'minor="11",patchlevel="9",version="3.11.9"',
        )
        found = metrics_problems(
            laguna_rows(),
            replaced(old, new)(text(LAGUNA, LAGUNA_BEFORE)),
            replaced(old, new)(text(LAGUNA, LAGUNA_AFTER)),
            limits=limits_of(LAGUNA),
            sources=(LAGUNA_BEFORE, LAGUNA_AFTER),
            facts=laguna_facts(),
        ).problems
        pair, stated, where = LAGUNA_PAIR, "3.12.13", "the runtime lock's toolchain.python"
        shown = "3.11.9"
    assert found == tuple(
        f"{pair} ({which}): python_info version: expected {stated!r} (the interpreter {where} "
        f"states), found {shown!r}"
        for which in ("before", "after")
    )


def test_python_info_whose_parts_are_not_its_version_is_refused() -> None:
    parts = replaced('patchlevel="7",version="3.11.7"', 'patchlevel="9",version="3.11.7"')
    assert tiny_metrics(after=parts) == (
        f"{PAIR}: python_info: {SAME_INFORMATION}, found patchlevel='7' before, '9' after",
        f"{PAIR} (after): python_info: expected major.minor.patchlevel '3.11.9' to be its "
        "version, found '3.11.7'",
    )


# --- the reads' times against what other files state ----------------------------------------------


def test_a_suite_request_counted_before_the_server_was_ready_is_refused() -> None:
    """The suite's handler first counted 2 s after the server was spawned, 29 s before
    server.json says it answered its readiness probe."""
    started = json.loads((TINY / "evidence/start-1/server.json").read_text())["started_at"]

    def early(metrics: str) -> str:
        for name in (
            "http_requests_created",
            "http_request_size_bytes_created",
            "http_response_size_bytes_created",
            "http_request_duration_seconds_created",
        ):
            metrics = sample(name, started + 2.0, handler="/v1/chat/completions")(metrics)
        return metrics

    assert tiny_read(after=early, facts=facts_of(TINY)) == (
        f'{PAIR} (after): http_request_duration_seconds_created{{{CHAT},method="POST"}}: '
        "expected a time no earlier than evidence/start-1/server.json ready_at "
        "(1796520498.1284993): the suite's first request came after it, found 1796520469.035204 "
        "(and 3 more)",
    )


def test_vllm_counters_created_before_their_engine_core_started_are_refused() -> None:
    started = json.loads((TINY / "evidence/start-1/server.json").read_text())["started_at"]

    def early(metrics: str) -> str:
        return revalued(metrics, r"vllm:\S+_created(?:\{[^}]*\})?", lambda _: started + 1.0)

    assert tiny_read(before=early, after=early, facts=facts_of(TINY)) == tuple(
        f'{PAIR} ({which}): vllm:admission_rejections_created{{model_name="tiny",'
        'reason="max_num_queued_reqs"}: expected a time no earlier than the engine core\'s '
        "started_at in evidence/start-1/audit (1796520482.38; 1 s of slack): vLLM creates its "
        "counters once its engine answered, found 1796520468.035204 (and 43 more)"
        for which in ("before", "after")
    )


def _laguna_read(before: str, after: str, facts: ServerFacts) -> tuple[str, ...]:
    return metrics_problems(
        laguna_rows(),
        before,
        after,
        limits=limits_of(LAGUNA),
        sources=(LAGUNA_BEFORE, LAGUNA_AFTER),
        facts=facts,
    ).problems


def test_laguna_counters_a_day_after_the_requests_they_counted_are_refused() -> None:
    """The bench's requests a day earlier (its first request's start stated a day earlier):
    vLLM's counters, created once its engine answered, would postdate the server's answers."""
    facts = laguna_facts()
    assert facts.answering is not None
    at = facts.answering[0] - 86400
    earlier = dataclasses.replace(facts, answering=(at, facts.answering[1]))
    found = _laguna_read(text(LAGUNA, LAGUNA_BEFORE), text(LAGUNA, LAGUNA_AFTER), earlier)
    assert found == tuple(
        f'{LAGUNA_PAIR} ({which}): vllm:request_prefill_kv_computed_tokens_created{{engine="0",'
        'model_name="laguna-s-2.1-int4"}: expected a time no later than run/bench.json rows[0] '
        f"request_started_epoch_s ({at!r}): the server answered by then, its engine up, found "
        "1785102446.0922503 (and 50 more)"
        for which in ("before", "after")
    )


def test_laguna_counters_a_month_before_the_run_are_refused() -> None:
    """The process start and every counter's creation 30 days earlier: before the idle
    snapshots that saw no process holding a card, before the first request was sent."""

    before = a_month_earlier(text(LAGUNA, LAGUNA_BEFORE))
    after = a_month_earlier(text(LAGUNA, LAGUNA_AFTER))
    snapshot = (
        "run/idle-interval/prestart-12.json observed_utc (the last idle snapshot before) "
        "(1785102297.0558; 1 s of slack)"
    )
    drafts = 'vllm:spec_decode_num_drafts_created{engine="0",model_name="laguna-s-2.1-int4"}'
    assert _laguna_read(before, after, laguna_facts()) == (
        f"{LAGUNA_PAIR} (before): {drafts}: expected a time no earlier than {snapshot}: vLLM "
        "creates its counters once its engine answered, found 1782510446.030879 (and 49 more)",
        f'{LAGUNA_PAIR} (after): http_requests_created{{{CHAT},method="POST",status="2xx"}}: '
        "expected a time no earlier than run/bench.json rows[0] request_started_epoch_s "
        "(1785102457.6666265): the suite's first request came after it, found "
        "1782510483.1337218 (and 3 more)",
        f"{LAGUNA_PAIR} (after): {drafts}: expected a time no earlier than {snapshot}: vLLM "
        "creates its counters once its engine answered, found 1782510446.030879 (and 49 more)",
    )


# --- the access log while serving ---------------------------------------------------------------

FIRST_POST = '"POST /v1/chat/completions HTTP/1.1" 200 OK'


def after_first_post(line: str) -> Callable[[str], str]:
    def change(log: str) -> str:
        at = log.index("\n", log.index(FIRST_POST)) + 1
        return log[:at] + line + "\n" + log[at:]

    return change


def test_a_post_to_another_route_while_serving_is_refused() -> None:
    lora = 'INFO:     127.0.0.1:54025 - "POST /v1/load_lora_adapter HTTP/1.1" 200 OK'
    assert tiny_read(log=after_first_post(lora), facts=facts_of(TINY)) == (
        f"{LOG}:110: access line: expected only the suite's POSTs to /v1/chat/completions (its "
        "client posts nothing else), found POST /v1/load_lora_adapter answered 200",
    )


def test_the_read_after_the_suite_logged_before_its_posts_is_refused() -> None:
    def moved(log: str) -> str:
        lines = log.splitlines(keepends=True)
        last = lines.pop(max(i for i, line in enumerate(lines) if '"GET /metrics' in line))
        first = next(i for i, line in enumerate(lines) if FIRST_POST in line)
        return "".join([*lines[:first], last, *lines[first:]])

    assert tiny_read(log=moved, facts=facts_of(TINY)) == (
        f"{LOG}: the read after the suite GET /metrics: expected its access line answered 2xx "
        "after the suite's last POST /v1/chat/completions (line 114), found none",
    )


def test_a_log_without_the_metrics_reads_is_refused() -> None:
    def unread(log: str) -> str:
        return "".join(line for line in log.splitlines(keepends=True) if "GET /metrics" not in line)

    assert tiny_read(log=unread, facts=facts_of(TINY)) == (
        f"{LOG}: the read before the suite GET /metrics: expected its access line answered 2xx "
        "before the suite's first POST /v1/chat/completions (line 108), found none",
        f"{LOG}: the read after the suite GET /metrics: expected its access line answered 2xx "
        "after the suite's last POST /v1/chat/completions (line 112), found none",
    )
    quiet = dataclasses.replace(limits_of(TINY), unlogged_paths=frozenset({"/metrics"}))
    served, teardown = served_log(TINY)
    assert (
        metrics_problems(
            parsed(document(TINY)),
            text(TINY, BEFORE),
            text(TINY, AFTER),
            limits=quiet,
            sources=(BEFORE, AFTER),
            read_by=teardown["began_at"],
            served_log=unread(served),
            facts=facts_of(TINY),
        )
        == Findings()
    )


def test_a_readiness_probe_never_answered_2xx_is_refused() -> None:
    unready = replaced(
        '"GET /health HTTP/1.1" 200 OK', '"GET /health HTTP/1.1" 503 Service Unavailable'
    )
    assert tiny_read(log=unready, facts=facts_of(TINY)) == (
        f"{LOG}: the readiness probe GET /health: expected its access line answered 2xx before "
        "the suite's first POST /v1/chat/completions (line 109), found none",
    )


def test_the_laguna_access_log_is_judged_as_a_built_bundles() -> None:
    lora = (
        '(APIServer pid=162700) INFO:     127.0.0.1:39515 - "POST /v1/load_lora_adapter '
        'HTTP/1.1" 200 OK'
    )

    def judged(log: str) -> tuple[str, ...]:
        return metrics_problems(
            laguna_rows(),
            text(LAGUNA, LAGUNA_BEFORE),
            text(LAGUNA, LAGUNA_AFTER),
            limits=limits_of(LAGUNA),
            sources=(LAGUNA_BEFORE, LAGUNA_AFTER),
            served_log=log,
            log_source=LAGUNA_LOG,
            facts=laguna_facts(),
        ).problems

    log = text(LAGUNA, LAGUNA_LOG)
    assert judged(after_first_post(lora)(log)) == (
        f"{LAGUNA_LOG}:228: access line: expected only the suite's POSTs to "
        "/v1/chat/completions (its client posts nothing else), found POST "
        "/v1/load_lora_adapter answered 200",
    )
    unread = "".join(line for line in log.splitlines(keepends=True) if "GET /metrics" not in line)
    assert len(judged(unread)) == 2
