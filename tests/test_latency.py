"""Latency from the client's sealed token times, and the gates a record can hold over it.

The rows are real: the committed tiny bundles' (two fresh starts of one build; the 2-node
record's first start). A stall, a slow prompt or a slower start is planted by moving token
offsets the way a paused server or a slower host would, keeping each row a stream the oracle
could have read (`OracleRow` validates every edit).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

import pytest
from pydantic import ValidationError

from repro_serving.builder.documents.evidence import OracleRow, Rows, RunEvidence, VerdictStatus
from repro_serving.builder.documents.manifest import (
    FreshStartThroughputGate,
    Gates,
    LatencyGate,
    StallGate,
    ThroughputGate,
)
from repro_serving.launch import gates, latency
from repro_serving.launch.throughput import measure

REPO = Path(__file__).resolve().parents[1]


def rows_of(bundle: str, start: int) -> tuple[OracleRow, ...]:
    path = REPO / "repro" / bundle / "evidence" / f"start-{start}" / "rows.json"
    return Rows.model_validate_json(path.read_bytes()).root


def delayed(row: OracleRow, token: int, seconds: float) -> OracleRow:
    """The row as if the server paused `seconds` before the read that brought `token`, the
    first token of its read (as `latency.gaps` names each gap)."""
    offsets = [t + (seconds if i >= token else 0.0) for i, t in enumerate(row.token_offsets_s)]
    return OracleRow.model_validate(row.model_dump() | {"token_offsets_s": tuple(offsets)})


def slower(rows: Sequence[OracleRow], factor: float) -> tuple[OracleRow, ...]:
    """Every row streamed `factor` times as long after its first token."""
    changed = []
    for row in rows:
        t0 = row.token_offsets_s[0]
        offsets = tuple(t0 + (t - t0) * factor for t in row.token_offsets_s)
        changed.append(OracleRow.model_validate(row.model_dump() | {"token_offsets_s": offsets}))
    return tuple(changed)


def test_percentiles_interpolate_between_closest_ranks() -> None:
    values = [r.ttft_s for r in rows_of("tiny-cpu", 1)] + [0.5, 0.001, 0.25]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    for q in (50, 90, 99):
        assert latency.percentile(values, q) == pytest.approx(cuts[q - 1])
    assert latency.percentile([3.0], 99) == 3.0
    with pytest.raises(ValueError, match="no values"):
        latency.percentile([], 50)


def test_tokens_one_read_brought_make_one_gap() -> None:
    for row in rows_of("tiny-cpu", 1):
        assert row.token_reads is not None
        found = latency.gaps(row)
        assert len(found) == len(set(row.token_reads)) - 1
        assert all(gap.seconds >= 0 for gap in found)
        assert sum(gap.seconds for gap in found) == pytest.approx(
            row.token_offsets_s[-1] - row.token_offsets_s[0]
        )


def test_the_distributions_of_a_suite() -> None:
    rows = rows_of("tiny-cpu", 1)
    measured = latency.latency(rows)
    assert measured.ttft is not None and measured.itl is not None and measured.tpot is not None
    assert measured.ttft.count == len(rows)
    assert measured.itl.count == sum(len(latency.gaps(r)) for r in rows)
    assert measured.tpot.count == len(rows)
    assert measured.itl.p50 <= measured.itl.p90 <= measured.itl.p99 <= measured.itl.max
    one = rows[0]
    assert latency.tpot(one) == pytest.approx(
        (one.token_offsets_s[-1] - one.token_offsets_s[0]) / (len(one.token_offsets_s) - 1)
    )


def test_the_committed_two_node_record_stalled_after_its_first_token() -> None:
    """A real stall: the 2-node record's first answer waited ~2 s after its first token (the
    second node's first decode step), over 100 times its median inter-token latency."""
    found = latency.stalls(rows_of("tiny-cpu-2node", 1), factor=20, min_s=1.0)
    assert [(s.prompt_id, s.token) for s in found] == [("greeting", 1)]
    assert found[0].seconds > 1.0 and found[0].seconds > 20 * found[0].median_s


def _evidence(first: Sequence[OracleRow], *later: Sequence[OracleRow]) -> RunEvidence:
    return RunEvidence(rows=tuple(first), later_starts=tuple(tuple(rows) for rows in later))


def _verdict(gates_: Gates, evidence: RunEvidence, name: str) -> gates.Verdict:
    return next(v for v in gates.judge(gates_, evidence) if v.gate == name)


def test_a_planted_two_second_stall_fails_the_stall_gate_naming_start_prompt_and_token() -> None:
    first, second = rows_of("tiny-cpu", 1), list(rows_of("tiny-cpu", 2))
    index = next(i for i, row in enumerate(second) if row.prompt_id == "code")
    token = next(gap.token for gap in latency.gaps(second[index]) if gap.token >= 17)
    second[index] = delayed(second[index], token, 2.0)
    declared = Gates(fresh_starts=2, stall=StallGate(factor=20, min_ms=1000))
    honest = _verdict(declared, _evidence(first, rows_of("tiny-cpu", 2)), "stall")
    assert honest.status is VerdictStatus.PASS, honest.summary
    verdict = _verdict(declared, _evidence(first, second), "stall")
    assert verdict.status is VerdictStatus.FAIL
    assert f"start 2 prompt 'code' token {token}: 2" in verdict.summary
    assert verdict.details["stalls"][0] | {"gap_s": 0, "median_itl_s": 0} == {
        "start": 2, "prompt_id": "code", "token": token, "gap_s": 0, "median_itl_s": 0,
    }  # fmt: skip


def test_a_stall_shorter_than_the_floor_in_ms_is_jitter() -> None:
    rows = list(rows_of("tiny-cpu", 1))
    rows[0] = delayed(rows[0], latency.gaps(rows[0])[5].token, 0.2)  # 200 ms: ~80 x the median
    declared = Gates(stall=StallGate(factor=20, min_ms=1000))
    assert _verdict(declared, _evidence(rows), "stall").status is VerdictStatus.PASS
    tight = Gates(stall=StallGate(factor=20, min_ms=100))
    assert _verdict(tight, _evidence(rows), "stall").status is VerdictStatus.FAIL


def test_latency_bounds_judge_every_start() -> None:
    first, second = rows_of("tiny-cpu", 1), rows_of("tiny-cpu", 2)
    itl = max(latency.latency(rows).itl.p99 for rows in (first, second))  # type: ignore[union-attr]
    loose = Gates(fresh_starts=2, latency=LatencyGate(itl_p99_max_ms=itl * 1e3 * 1.01))
    verdict = _verdict(loose, _evidence(first, second), "latency")
    assert verdict.status is VerdictStatus.PASS, verdict.summary
    assert set(verdict.details["measured"]) == {"start-1", "start-2"}
    tight = Gates(fresh_starts=2, latency=LatencyGate(itl_p99_max_ms=itl * 1e3 * 0.5))
    verdict = _verdict(tight, _evidence(first, second), "latency")
    assert verdict.status is VerdictStatus.FAIL
    assert "ITL p99" in verdict.summary and f"> {itl * 1e3 * 0.5:g} ms" in verdict.summary


def test_a_latency_gate_with_no_bound_is_refused() -> None:
    with pytest.raises(ValidationError, match="no bound"):
        LatencyGate()


def test_no_latency_verdict_where_none_is_declared() -> None:
    """A record sealed before these gates existed is judged as it was: no new verdicts."""
    names = {v.gate for v in gates.judge(Gates(), _evidence(rows_of("tiny-cpu", 1)))}
    assert not names & {"stall", "latency"}


def test_one_slow_prompt_fails_the_prompt_floor_naming_it() -> None:
    rows = list(rows_of("tiny-cpu", 1))
    sealed = measure(rows, 32).conventional_median
    rows[2] = slower([rows[2]], 3.0)[0]
    gate = ThroughputGate(tokens=32, floor=0.25, prompt_floor=0.5)
    verdict = gates.throughput(gate, rows, sealed)
    assert verdict.status is VerdictStatus.FAIL
    assert f"1 of 5 prompt(s) below {0.5 * sealed:.2f}" in verdict.summary
    assert rows[2].prompt_id in verdict.summary
    assert list(verdict.details["prompts_below_tok_s"]) == [rows[2].prompt_id]
    median_only = ThroughputGate(tokens=32, floor=0.25)
    assert gates.throughput(median_only, rows, sealed).status is VerdictStatus.PASS


def test_an_absolute_floor_holds_a_replay_to_the_claimed_rate() -> None:
    rows = rows_of("tiny-cpu", 1)
    rate = measure(rows, 32).conventional_median
    claimed = ThroughputGate(tokens=32, floor=0.25, floor_tok_s=rate * 1.2)
    verdict = gates.throughput(claimed, rows, rate)
    assert verdict.status is VerdictStatus.FAIL
    assert f"< absolute floor {rate * 1.2:g} tok/s" in verdict.summary
    met = ThroughputGate(tokens=32, floor=0.25, floor_tok_s=rate * 0.8)
    assert gates.throughput(met, rows, rate).status is VerdictStatus.PASS


def test_a_second_start_thirty_percent_slower_fails_the_spread_gate() -> None:
    first = rows_of("tiny-cpu", 1)
    declared = Gates(
        fresh_starts=2,
        throughput=ThroughputGate(tokens=32, floor=0.25),
        fresh_start_throughput=FreshStartThroughputGate(relative_tolerance=0.2),
    )
    honest = _verdict(declared, _evidence(first, first), "fresh_start_throughput")
    assert honest.status is VerdictStatus.PASS
    slow = slower(first, 1 / 0.7)
    verdict = _verdict(declared, _evidence(first, slow), "fresh_start_throughput")
    assert verdict.status is VerdictStatus.FAIL
    assert "deviation 0.3000 > 0.2" in verdict.summary
